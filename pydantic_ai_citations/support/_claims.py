"""What each citation of a `CitedAnswer` claims.

- A content anchor marks the supported words: the claim is that text (`'anchored'`).
- A marker anchor marks a marker the model wrote (`[1]`, a Markdown link): the claim is the sentence the
  marker closes (`'marker_sentence'`), i.e. the text back to the previous sentence end, with every marker
  of the answer blanked out so `[2]` never becomes a term.
- A source cited without a position (`answer.unanchored`) can only be checked against the whole answer
  (`'whole_answer'`): labelled so, because its score is naturally lower.

Claims shorter than `DEFAULT_MIN_CLAIM_WORDS` words are not compared with pages (`check_support` reports them as
`'too_short'`): a few words found on a page say little about whether the page states them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from pydantic import TypeAdapter

from .._answer import CitedAnswer, CitedSpan

__all__ = ('DEFAULT_MIN_CLAIM_WORDS', 'Claim', 'ClaimKind', 'claims_for', 'claims_ta')

ClaimKind = Literal['anchored', 'marker_sentence', 'whole_answer']

DEFAULT_MIN_CLAIM_WORDS = 8
"""Claims shorter than this many words are not compared with a page: `check_support` reports them `'too_short'`."""

_TERMINATORS = '.!?…。！？'
_CLOSERS = '"\'”’»)]'


@dataclass(frozen=True)
class Claim:
    """The text one cited source is supposed to back."""

    source: int
    """`SourceRef.number` of the cited source."""
    text: str
    """The claimed text, markers removed, whitespace folded."""
    kind: ClaimKind
    """How the claim was found: `'anchored'`, `'marker_sentence'` or `'whole_answer'`."""
    start: int | None = None
    """Start offset of the claim in `CitedAnswer.text` (`None` for `'whole_answer'`)."""
    end: int | None = None
    """End offset of the claim in `CitedAnswer.text` (`None` for `'whole_answer'`)."""
    span_index: int | None = None
    """Index of the span in `CitedAnswer.spans` the claim comes from (`None` for `'whole_answer'`)."""

    @property
    def word_count(self) -> int:
        """Number of whitespace-separated words in `text` (what `min_claim_words` of `check_support` counts)."""
        return len(self.text.split())


claims_ta: TypeAdapter[list[Claim]] = TypeAdapter(list[Claim])
"""JSON round trip for lists of claims."""


class _Markers:
    """The answer's marker ranges (sorted), looked up by position: each claim reads only the markers near it."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges
        self.starts = [start for start, _ in ranges]
        self.reach = list(accumulate((end for _, end in ranges), max))  # the furthest end of the markers so far
        self.start_at = {end: start for start, end in ranges}  # (a later marker ending at the same place wins)

    def around(self, start: int, end: int) -> list[tuple[int, int]]:
        """The markers that may overlap `[start, end)`, in order: from the first whose reach passes `start`."""
        first = bisect_right(self.reach, start)
        return self.ranges[first : bisect_left(self.starts, end, lo=first)]


def _without_markers(text: str, start: int, end: int, markers: _Markers) -> str:
    """`text[start:end]` with marker ranges blanked out and whitespace folded."""
    pieces: list[str] = []
    pos = start
    for m_start, m_end in markers.around(start, end):
        if m_end <= pos or m_start >= end:
            continue
        pieces.append(text[pos : max(m_start, pos)])
        if text[m_end : m_end + 1] not in ('.', ',', ';', ':', '!', '?'):
            pieces.append(' ')
        pos = max(pos, m_end)
    pieces.append(text[pos:end])
    folded = ' '.join(''.join(pieces).split())
    for mark in '.,;:!?':  # `France [1].` -> `France.`
        folded = folded.replace(' ' + mark, mark)
    return folded


def _is_sentence_end(text: str, i: int) -> bool:
    """Whether `text[i]` ends a sentence: a terminator followed by space/end (closing quotes allowed), or a newline."""
    ch = text[i]
    if ch == '\n':
        return True
    if ch not in _TERMINATORS:
        return False
    j = i + 1
    while j < len(text) and text[j] in _CLOSERS:
        j += 1
    # A marker glued to the terminator (`people.[2] Next`) still ends the sentence.
    return j >= len(text) or text[j].isspace() or text[j] == '[' or ch in '。！？'


def _marker_sentence(text: str, span: CitedSpan, markers: _Markers) -> tuple[int, int]:
    """The range of the sentence a marker closes (markers inside it are removed later)."""
    ends = markers.start_at
    # The claim ends where the marker (and any markers right before it, as in `[1][2]`) starts.
    end = min(max(span.start, 0), len(text))
    while True:
        j = end
        while j > 0 and text[j - 1] in ' \t':
            j -= 1
        if j in ends and ends[j] < j:
            end = ends[j]
            continue
        break
    # Skip the sentence's own terminator ("France.[1]"), then walk back to the previous sentence end.
    k = end
    while k > 0 and (text[k - 1].isspace() or text[k - 1] in _TERMINATORS + _CLOSERS):
        k -= 1
    start = k
    while start > 0 and not _is_sentence_end(text, start - 1):
        start -= 1
    if text[start:end].strip():
        return start, end
    # A marker opening a sentence ("[1] Paris is ..."): claim the sentence that follows it.
    begin = min(max(span.end, 0), len(text))
    stop = begin
    while stop < len(text) and not _is_sentence_end(text, stop):
        stop += 1
    return begin, min(stop + 1, len(text))


def claims_for(answer: CitedAnswer) -> list[Claim]:
    """One claim per (span, source) pair in span order, then one `'whole_answer'` claim per unanchored source."""
    text = answer.text
    markers = _Markers(sorted((s.start, s.end) for s in answer.spans if s.kind == 'marker'))
    out: list[Claim] = []
    for span_index, span in enumerate(answer.spans):
        if span.kind == 'content':
            start = min(max(span.start, 0), len(text))
            end = min(max(span.end, start), len(text))
            kind: ClaimKind = 'anchored'
        else:
            start, end = _marker_sentence(text, span, markers)
            kind = 'marker_sentence'
        claim_text = _without_markers(text, start, end, markers)
        for number in span.sources:
            out.append(Claim(number, claim_text, kind, start, end, span_index))
    if answer.unanchored:
        whole = _without_markers(text, 0, len(text), markers)
        for source in answer.unanchored:
            out.append(Claim(source.number, whole, 'whole_answer'))
    return out
