"""Where the text of an old string is in a new one: the blocks two versions of an answer share, in linear time.

`edit_text` keeps a citation when the words it is anchored on are still there, unchanged, in the same order as the
rest: it maps each anchor through the blocks `diff_blocks` finds. The texts' common prefix and suffix are compared at
C speed; the changed middle is compared word by word with the *patience* method (as `git diff --patience`): tokens
that occur once in each side pair up, the longest run of those pairs in the same order on both sides is kept, and the
gaps between them are compared the same way, each by what is unique within it. Gaps of a few tokens left without a
unique token are compared with `difflib` (bounded work each). Matched tokens are then widened character by character
into the unmatched text around them, so a word changed only at one end keeps its unchanged letters.

Every step reads each token a bounded number of times, and the whole comparison has a budget of work proportional to
the texts: an edit of a long answer costs time linear in it (`difflib` on the characters, as before, was quadratic:
4 s for a 7,000-character rewrite). Past the budget the gaps left are taken as rewritten (their citations are dropped
and reported, never moved onto other words).
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections import Counter
from collections.abc import Callable

__all__ = ('block_mapper', 'diff_blocks')

Block = tuple[int, int, int]
"""`(old start, new start, size)`: `size` characters equal in both texts at those offsets."""

_TOKEN_RE = re.compile(r'\w+|\s+|.', re.DOTALL)
"""A text as tokens that cover it: runs of word characters, runs of white space, and each other character alone."""
_SMALL_GAP = 32
"""Tokens per side up to which a gap without a unique token is compared with `difflib` (at most `32 * 32` steps)."""
_WIDEST = 16
"""Runs of up to this many tokens are tried as anchors where no single token is unique (a text of few distinct words)."""
_WORK_PER_TOKEN = 64
"""The comparison's budget: this many token visits per token of the two texts (a few are needed in practice)."""


def diff_blocks(old: str, new: str) -> list[Block]:
    """The blocks the two texts share, in order in both and disjoint: common prefix and suffix, the middle compared."""
    n_old, n_new = len(old), len(new)
    limit = min(n_old, n_new)
    prefix = _common_length(lambda k: old[:k] == new[:k], limit)
    suffix = _common_length(lambda k: old[n_old - k :] == new[n_new - k :], limit - prefix)
    blocks: list[Block] = [(0, 0, prefix)] if prefix else []
    a, b = old[prefix : n_old - suffix], new[prefix : n_new - suffix]
    if a and b:
        blocks.extend((prefix + i, prefix + j, size) for i, j, size in _middle_blocks(a, b))
    if suffix:
        blocks.append((n_old - suffix, n_new - suffix, suffix))
    merged: list[Block] = []
    for i, j, size in blocks:
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + size)
        else:
            merged.append((i, j, size))
    return merged


def block_mapper(blocks: list[Block], old_size: int) -> Callable[[int, int], tuple[int, int] | None]:
    """Maps a range of the old text to where its text is in the new one, `None` when it is not there unchanged."""
    starts = [i for i, _, _ in blocks]

    def move(start: int, end: int) -> tuple[int, int] | None:
        if end > old_size:
            return None
        k = bisect.bisect_right(starts, start) - 1  # the block that may hold `start` (blocks are disjoint, in order)
        if k < 0:
            return None
        i, j, size = blocks[k]
        return (j + start - i, j + end - i) if end <= i + size else None

    return move


def _common_length(same: Callable[[int], bool], limit: int) -> int:
    """The largest `k <= limit` with `same(k)` (monotone), by bisection: slice comparisons run at C speed."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _middle_blocks(a: str, b: str) -> list[Block]:
    """The blocks of two texts that differ at both ends: tokens paired (`_pairs`), widened into the text between."""
    a_tokens, a_starts = _tokens(a)
    b_tokens, b_starts = _tokens(b)
    runs: list[list[int]] = []  # [old start, new start, size] in characters, one per run of paired tokens
    for i, j in _pairs(a_tokens, b_tokens):
        start_a, start_b = a_starts[i], b_starts[j]
        size = len(a_tokens[i])
        if runs and runs[-1][0] + runs[-1][2] == start_a and runs[-1][1] + runs[-1][2] == start_b:
            runs[-1][2] += size
        else:
            runs.append([start_a, start_b, size])
    # Widen each run into the unmatched text around it, within the gap it shares with its neighbours.
    for k, run in enumerate(runs):
        low_a, low_b = (runs[k - 1][0] + runs[k - 1][2], runs[k - 1][1] + runs[k - 1][2]) if k else (0, 0)
        while run[0] > low_a and run[1] > low_b and a[run[0] - 1] == b[run[1] - 1]:
            run[0] -= 1
            run[1] -= 1
            run[2] += 1
        high_a, high_b = (runs[k + 1][0], runs[k + 1][1]) if k + 1 < len(runs) else (len(a), len(b))
        while run[0] + run[2] < high_a and run[1] + run[2] < high_b and a[run[0] + run[2]] == b[run[1] + run[2]]:
            run[2] += 1
    return [(i, j, size) for i, j, size in runs]


def _tokens(text: str) -> tuple[list[str], list[int]]:
    tokens: list[str] = []
    starts: list[int] = []
    for found in _TOKEN_RE.finditer(text):
        tokens.append(found[0])
        starts.append(found.start())
    return tokens, starts


def _pairs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Indexes `(i, j)` of equal tokens `a[i] == b[j]`, increasing in both (the patience method; module docstring)."""
    pairs: list[tuple[int, int]] = []
    budget = _WORK_PER_TOKEN * (len(a) + len(b))
    todo = [(0, len(a), 0, len(b))]
    while todo and budget > 0:
        a_lo, a_hi, b_lo, b_hi = todo.pop()
        while a_lo < a_hi and b_lo < b_hi and a[a_lo] == b[b_lo]:
            pairs.append((a_lo, b_lo))
            a_lo += 1
            b_lo += 1
        while a_lo < a_hi and b_lo < b_hi and a[a_hi - 1] == b[b_hi - 1]:
            a_hi -= 1
            b_hi -= 1
            pairs.append((a_hi, b_hi))
        if a_lo == a_hi or b_lo == b_hi:
            continue
        widest = min(_WIDEST, a_hi - a_lo, b_hi - b_lo)
        width = 1
        while True:  # single tokens, then runs of 2, 4, ... tokens, until some are unique
            budget -= width * ((a_hi - a_lo) + (b_hi - b_lo))
            anchors = _unique_runs(a, a_lo, a_hi, b, b_lo, b_hi, width)
            if anchors or 2 * width > widest:
                break
            width *= 2
        if not anchors:
            if a_hi - a_lo <= _SMALL_GAP and b_hi - b_lo <= _SMALL_GAP:
                matcher = difflib.SequenceMatcher(None, a[a_lo:a_hi], b[b_lo:b_hi], autojunk=False)
                for i, j, size in matcher.get_matching_blocks():
                    pairs.extend((a_lo + i + d, b_lo + j + d) for d in range(size))
            continue
        previous = (a_lo, b_lo)
        for i, j in anchors:
            pairs.extend((i + d, j + d) for d in range(width))
            todo.append((previous[0], i, previous[1], j))
            previous = (i + width, j + width)
        todo.append((previous[0], a_hi, previous[1], b_hi))
    pairs.sort()
    return pairs


def _unique_runs(
    a: list[str], a_lo: int, a_hi: int, b: list[str], b_lo: int, b_hi: int, width: int
) -> list[tuple[int, int]]:
    """Starts `(i, j)` of runs of `width` tokens unique in both ranges, in the same order on both sides.

    The longest such chain, its runs not overlapping (`i` and `j` increase by at least `width`).
    """
    a_keys = _keys(a, a_lo, a_hi, width)
    b_keys = _keys(b, b_lo, b_hi, width)
    in_a = Counter(a_keys)
    in_b = Counter(b_keys)
    at_b = {key: b_lo + n for n, key in enumerate(b_keys) if in_b[key] == 1 and in_a[key] == 1}
    candidates = [(a_lo + n, at_b[key]) for n, key in enumerate(a_keys) if key in at_b]
    # The longest run increasing in `j` (patience sorting: the top of each pile, and each card's predecessor).
    tops: list[int] = []  # j of the top card of each pile
    top_index: list[int] = []  # its index in `candidates`
    before: list[int] = []  # per candidate, the candidate under it in the chain (-1: none)
    for n, (_, j) in enumerate(candidates):
        pile = bisect.bisect_left(tops, j)
        before.append(top_index[pile - 1] if pile else -1)
        if pile == len(tops):
            tops.append(j)
            top_index.append(n)
        else:
            tops[pile] = j
            top_index[pile] = n
    chain: list[tuple[int, int]] = []
    n = top_index[-1] if top_index else -1
    while n >= 0:
        chain.append(candidates[n])
        n = before[n]
    chain.reverse()
    if width == 1:
        return chain
    kept: list[tuple[int, int]] = []
    for i, j in chain:
        if not kept or (i >= kept[-1][0] + width and j >= kept[-1][1] + width):
            kept.append((i, j))
    return kept


def _keys(tokens: list[str], lo: int, hi: int, width: int) -> list[object]:
    """The runs of `width` tokens starting at each position of `tokens[lo:hi]` that fits one."""
    if width == 1:
        return list(tokens[lo:hi])
    return [tuple(tokens[n : n + width]) for n in range(lo, hi - width + 1)]
