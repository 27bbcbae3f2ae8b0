"""Editing cited text and finding stale citations: pure functions over Pydantic AI's message values.

- `edit_text(part, new_text)` edits a cited `TextPart` and realigns its citations: the old and new texts are
  diffed, a citation whose anchored words are unchanged is shifted, one whose words changed is dropped (and
  reported). `provider_details['citations']` is kept in step, `id` cleared (OpenAI Responses would otherwise use its
  stored copy of the item), `provider_name` kept (Anthropic only replays citations of its own parts).
  `edit_response(response, part_index, new_text)` does the same to one part of a response and refreshes the
  response's fingerprints; the conversation store edits through it.
- Fingerprints catch edits made *without* `edit_text` (a UI storing edited text, a JSON file edited by hand):
  `fingerprint_response` records, in `ModelResponse.metadata` (never sent to a model, kept by
  `ModelMessagesTypeAdapter`), a short hash of each cited part's text and of each anchored span. `find_stale`
  compares them with the text as it is now, in one plain pass (no cache: a pass over a 10,000-message history costs
  a few percent of serialising it).
- `strip_citation_markers(part)` removes raw citation markup (through the one grammar, `formats.markup`) and shifts
  the citations by the removed lengths: the removed ranges are known, so no diff is needed.

`CleanStaleCitations` (in `_history`) wires these into agent runs.

Fingerprints are the first 16 hex digits of a SHA-256 (anchors also get two 61-bit polynomial hashes). Like `ModelResponse.history_digest`, a plain hash lets
someone holding the stored history test guesses at text redacted from it later: clear
`metadata['pydantic_ai_citations']` together with the text you redact.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, NamedTuple, TypeVar, cast

from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelResponse,
    TextPart,
)
from pydantic_ai.exceptions import UserError

from ._checks import require, require_messages
from ._diff import block_mapper, diff_blocks
from ._problems import CitationProblem
from .formats.markup import StrippedMarkup, strip_markup
from .formats.numbered import is_numbered_marker

__all__ = (
    'METADATA_KEY',
    'edit_response',
    'edit_text',
    'edit_text_with_problems',
    'find_stale',
    'fingerprint_response',
    'joined_fingerprint',
    'moved_raw_offsets',
    'strip_citation_markers',
)

METADATA_KEY = 'pydantic_ai_citations'
"""Key of this package's data in `ModelResponse.metadata`: `{'fingerprints': {part_index: hash}, 'anchors': {...}}`."""

_MAX_LOCATE_WORK = 2_000_000
"""Characters hashed per part, at most, when a repair searches an edited part for anchored text whose fingerprint
has no head hashes (fingerprints written before they were stored)."""

_CANDIDATES_PER_CHAR = 4
"""Candidate positions checked per character of an edited part, at most, when a repair locates anchored text."""

_HEAD = 8
"""How many first characters of an anchored text its head hash covers (see `_Locator`)."""

_Scheme = tuple[int, int]
"""`(base, modulus)` of the polynomial hashes in an anchor print: `sum(ord(c) * base ** k) mod modulus` over the
anchored text's characters, first highest."""

_FIRST: _Scheme = (1_000_003, (1 << 61) - 1)
"""Polynomial hashes of prints in the first form (four fields), written by earlier versions: read, no longer written."""

_SCHEME = 2
_SECOND: _Scheme = (1 << 8, (1 << 61) - 2373)
"""Polynomial hashes of prints marked `_SCHEME` (five fields), modulo a safe prime in which 2**8 has order
(modulus - 1) / 2 (no short period). With base 2**8 an ASCII text's hash is its bytes read as one integer: C-level
calls instead of a multiplication per character (see `_rolling`)."""

_MODULUS = _SECOND[1]

Range = tuple[int, int]


def _hash(text: str) -> str:
    try:
        data = text.encode()
    except UnicodeEncodeError:  # lone surrogates, e.g. from JSON escapes
        data = text.encode('utf-8', 'surrogatepass')
    return hashlib.sha256(data).hexdigest()[:16]


# --- mapping old ranges onto new text -------------------------------------------------------------------------------


def _diff_mapper(old: str, new: str) -> Callable[[int, int], Range | None]:
    """Maps a range of `old` to where its text is in `new`, or `None` when that text did not survive unchanged."""
    return block_mapper(diff_blocks(old, new), len(old))


def _cut_mapper(cuts: Sequence[Range]) -> Callable[[int, int], Range | None]:
    """Maps a range across the removal of `cuts` (sorted, disjoint): shifted by what was removed before it.

    A range that overlaps a cut did not survive unchanged (`None`).
    """
    starts = [start for start, _ in cuts]
    removed_before = [0, *itertools.accumulate(end - start for start, end in cuts)]

    def move(start: int, end: int) -> Range | None:
        k = bisect.bisect_right(starts, start)  # cuts starting at or before `start`
        if k and cuts[k - 1][1] > start:
            return None  # starts inside a cut
        if k < len(cuts) and cuts[k][0] < end:
            return None  # a cut starts inside the range
        shift = removed_before[k]
        return (start, end) if not shift else (start - shift, end - shift)

    return move


# --- edit_text ------------------------------------------------------------------------------------------------------


def edit_text(part: TextPart, new_text: str) -> TextPart:
    """A copy of `part` with `new_text` as its content and its citations realigned to it.

    A citation whose anchored text is unchanged by the edit is shifted to where that text now is; one whose text
    changed is dropped. Citations without an anchor are kept. `provider_details['citations']` is kept in step
    (entries of dropped citations removed, positions shifted), or removed when it cannot be. `id` is cleared (OpenAI
    Responses uses its stored copy of an item sent with its id, whatever the text), `provider_name` is kept.

    Use `edit_text_with_problems` to learn what was dropped, and `edit_response` to edit a part of a response and keep
    its fingerprints true.
    """
    return edit_text_with_problems(part, new_text)[0]


def edit_text_with_problems(part: TextPart, new_text: str) -> tuple[TextPart, list[CitationProblem]]:
    """`edit_text`, also returning a `citation_dropped_after_edit` problem for each citation (or raw data) dropped.

    Problems carry `citation_index` (into the *old* part's citations) and the old anchor's offsets.

    Raises:
        UserError: `part` is not a `TextPart` or `new_text` is not a `str`.
    """
    if not isinstance(part, TextPart):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UserError(f'`edit_text` edits a `TextPart`, got {part!r}.')
    if not isinstance(new_text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UserError(f'`new_text` must be a `str`, got {new_text!r}.')
    move = _diff_mapper(part.content, new_text)
    return _realign(
        part,
        new_text,
        lambda _index, start, end: move(start, end),
        reason='the edit changed the words it anchors (or its anchor did not fit the old text)',
        move_raw=move,
        text_changed=new_text != part.content,
    )


def edit_response(
    response: ModelResponse, part_index: int, new_text: str
) -> tuple[ModelResponse, list[CitationProblem]]:
    """A copy of `response` whose text part `part_index` is edited with `edit_text`, and what the edit dropped.

    The copy is fingerprinted afresh (a hash of each cited part's text and anchors in `ModelResponse.metadata`), so
    `find_stale` vouches for the edited text and catches later edits made without `edit_text`. Problems carry
    `part_index`; `response` is not changed.

    Raises:
        UserError: `response` is not a `ModelResponse`, `part_index` does not name a `TextPart` of it, or `new_text`
            is not a `str`.
    """
    require('edit_response', 'response', response, ModelResponse, 'a `ModelResponse` (`edit_text` edits a `TextPart`)')
    parts = response.parts
    index = cast(object, part_index)
    in_range = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(parts)
    part = parts[part_index] if in_range else None
    if not isinstance(part, TextPart):
        raise UserError(f'`part_index` {part_index!r} does not name a `TextPart` of the response.')
    new_part, problems = edit_text_with_problems(part, new_text)
    problems = [replace(p, part_index=part_index) for p in problems]
    return replace_parts(response, {part_index: new_part}), problems


def replace_parts(response: ModelResponse, parts: Mapping[int, TextPart]) -> ModelResponse:
    """A copy of `response` with `parts` (by index) replaced and fingerprinted afresh.

    The other parts keep the fingerprints they had (a fresh one would vouch for text edited outside `edit_text`
    since); a response never fingerprinted is fingerprinted whole.
    """
    new_parts = list(response.parts)
    for index, part in parts.items():
        new_parts[index] = part
    metadata = copy.deepcopy(response.metadata)
    old = metadata.pop(METADATA_KEY, None) if metadata else None
    new_response = replace(response, parts=new_parts, metadata=metadata or None)
    fingerprint_response(new_response)
    if isinstance(old, dict) and isinstance(cast('dict[str, Any]', old).get('fingerprints'), dict):
        _keep_prints(cast('dict[str, Any]', old), response, new_response, set(parts))
    return new_response


def _keep_prints(old: dict[str, Any], before: ModelResponse, response: ModelResponse, replaced: set[int]) -> None:
    """Put back, in `response`'s fresh fingerprint, the old text and anchor prints of every part not in `replaced`.

    Each under the index its part has now (`_matched_prints` on `before`, the response the old prints are of: a part
    may have moved), and a print on no part (gone) under its own, unless a part holds that index now. Markup ranges
    and anchors out of range are only read for text its (old) print vouches for, so the fresh ones, found in that
    same text, stand.
    """
    if response.metadata is None:
        response.metadata = {}
    ours: dict[str, Any] = response.metadata.setdefault(METADATA_KEY, {'fingerprints': {}, 'anchors': {}, 'markup': {}})
    prints: dict[str, Any] = old['fingerprints']
    keys = _matched_prints(before, prints)[0]
    placed = {i: key for i, key in keys.items() if key is not None and i not in replaced}
    taken = {str(i) for i in keys} | set(keys.values())  # (indexes held by parts, and prints on a part)
    gone = [key for key in prints if key not in taken]
    untold = [i for i, key in keys.items() if key is None and i not in replaced]
    for section in ('fingerprints', 'anchors'):
        kept: Any = old.get(section)
        after: dict[str, Any] = ours.setdefault(section, {})
        for i in untold:  # a fresh print would vouch for text that may have changed since its citations were made
            after.pop(str(i), None)
        for i, key in placed.items():
            after.pop(str(i), None)
            if isinstance(kept, dict) and key in kept:
                after[str(i)] = kept[key]
        for key in gone:
            if isinstance(kept, dict) and key in kept:
                after[key] = kept[key]


_Mover = Callable[[int, int, int], Range | None]
"""`(citation index, old start, old end) -> new range`, or `None` to drop the citation."""


def _realign(
    part: TextPart,
    new_text: str,
    move: _Mover,
    *,
    reason: str,
    move_raw: Callable[[int, int], Range | None] | None = None,
    text_changed: bool = True,
    report: bool = True,
) -> tuple[TextPart, list[CitationProblem]]:
    """Rebuild `part` on `new_text`, each anchored citation moved by `move` (or dropped and reported).

    Raw ranges in `provider_details['citations']` go with the citation at the same range; others are moved by
    `move_raw` (or, without it, removed), whatever the part's citations are: each removed entry is reported.
    `report=False` builds no problem for a dropped citation (for a caller that reports the whole change itself).
    """
    problems: list[CitationProblem] = []
    old_citations = _citations(part)
    kept: list[Citation] = []
    moved: dict[Range, Range | None] = {}
    dropped = False
    for index, citation in enumerate(old_citations):
        anchor = citation.anchor
        if anchor is None:
            kept.append(citation)
            continue
        start, end = _anchor_range(anchor)
        new_range = move(index, start, end) if start is not None and end is not None else None
        if new_range is None or start is None or end is None:
            if start is not None and end is not None:
                moved.setdefault((start, end), None)  # its raw entry goes with it (the citation is reported)
            dropped = True
            if report:
                problems.append(
                    CitationProblem(
                        'citation_dropped_after_edit',
                        f'Citation {index} was dropped: {reason}.',
                        citation_index=index,
                        start=start,
                        end=end,
                    )
                )
            continue
        moved[(start, end)] = new_range
        if new_range == (start, end):
            kept.append(citation)  # unchanged: shared, as values are never changed in place here
            continue
        anchor_type = MarkerCitationAnchor if isinstance(anchor, MarkerCitationAnchor) else ContentCitationAnchor
        kept.append(copy_with(citation, anchor=anchor_type(start=new_range[0], end=new_range[1])))
    changed = dropped or any(old != new for old, new in moved.items())
    raw_step = _RawStep(len(old_citations), len(kept) == len(old_citations), moved, move_raw or _nowhere, changed)
    details = _details_in_step(part, raw_step, text_changed or changed, problems)
    new_part = copy_with(part, content=new_text, id=None, citations=kept or None, provider_details=details)
    return new_part, problems


_T = TypeVar('_T')


def copy_with(value: _T, **changes: object) -> _T:
    """A shallow copy of the dataclass instance `value` with `changes` set.

    `dataclasses.replace` without running `__init__` again: faster, and every field is kept (also fields a later
    Pydantic AI adds).
    """
    try:
        new = object.__new__(value.__class__)
        fields = value.__dict__.copy()
        fields.update(changes)
        new.__dict__ = fields  # (a new dict is set faster than a key-sharing one is filled)
    except (AttributeError, TypeError):  # no instance `__dict__` (slots)
        new = copy.copy(value)
        for name, field_value in changes.items():
            setattr(new, name, field_value)
    return new


def _nowhere(start: int, end: int) -> Range | None:
    """No way to move a range that no citation shares (a repair: the old text is gone)."""
    return None


class _RawStep(NamedTuple):
    """What `_raw_in_step` needs to keep raw citation data in step with the realigned citations."""

    n_citations: int
    all_kept: bool
    moved: dict[Range, Range | None]
    """Each anchored citation's old range -> its new range (`None`: dropped, and reported)."""
    move_raw: Callable[[int, int], Range | None]
    """Moves a raw range that no citation shares."""
    citations_changed: bool
    """Whether a citation was dropped or moved."""


def _details_in_step(
    part: TextPart, step: _RawStep, changed: bool, problems: list[CitationProblem]
) -> dict[str, Any] | None:
    """`part.provider_details` with its raw citations kept in step with the realigned citations and the new text."""
    details = dict(part.provider_details) if part.provider_details is not None else None
    if details is None or 'citations' not in details or not changed:
        return details or None
    raw = _raw_in_step(details['citations'], step, problems)
    if raw is None:
        del details['citations']
        problems.append(
            CitationProblem(
                'citation_dropped_after_edit',
                "The raw provider citation data (`provider_details['citations']`) could not be kept in step "
                'with the edited text and was removed.',
                detail="provider_details['citations']",
            )
        )
    elif raw:
        details['citations'] = raw
    else:
        del details['citations']  # every entry was dropped, each reported
    return details or None


def _citations(part: TextPart) -> list[Citation]:
    citations = cast(object, part.citations)
    if isinstance(citations, list):
        return [c for c in cast('list[object]', citations) if isinstance(c, Citation)]
    return []


def _anchor_range(anchor: Any) -> tuple[int | None, int | None]:
    if anchor.__class__ is MarkerCitationAnchor or anchor.__class__ is ContentCitationAnchor:
        start, end = anchor.start, anchor.end
        if start.__class__ is int and end.__class__ is int and 0 <= start < end:
            return start, end
    start = getattr(anchor, 'start', None)
    end = getattr(anchor, 'end', None)
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end:
        return start, end
    return None, None


def _range_holder(entry: object) -> dict[str, object] | None:
    """The dict holding `start_index`/`end_index` (character offsets) of a raw entry, if any.

    OpenAI Responses and xAI keep them at the top level, OpenAI Chat under `url_citation`. Google's `segment`
    offsets are UTF-8 bytes and are deliberately not read here.
    """
    if entry.__class__ is dict:  # the common case first: offsets at the top level of a plain dict
        top: Any = entry
        if isinstance(top.get('start_index'), int) and isinstance(top.get('end_index'), int):
            return top
    if not isinstance(entry, dict):
        return None
    entry = cast('dict[str, object]', entry)
    for holder in (entry, entry.get('url_citation')):
        if isinstance(holder, dict):
            holder = cast('dict[str, object]', holder)
            if isinstance(holder.get('start_index'), int) and isinstance(holder.get('end_index'), int):
                return holder
    return None


def _with_range(entry: object, holder: dict[str, object], start: int, end: int) -> dict[str, object]:
    """`entry` (whose `_range_holder` is `holder`) with that range moved to `start`/`end`."""
    moved = {**holder, 'start_index': start, 'end_index': end}
    return moved if holder is entry else {**cast('dict[str, object]', entry), 'url_citation': moved}


def moved_raw_offsets(raw: object, move: Callable[[int], int]) -> object:
    """`raw` (a part's `provider_details['citations']`) with each entry's offsets into the part's text moved by `move`.

    The offsets are the character ranges OpenAI and xAI keep (`start_index`/`end_index`, under `url_citation` for
    OpenAI Chat; see `_range_holder`) and an OpenAI file citation's `index`: Pydantic AI replays OpenAI's annotations
    from them, while they still cover what they cite. Google's `segment` offsets (UTF-8 bytes, never replayed) and
    positions in cited documents are left as they are, and so is anything that is not a list.
    """
    if not isinstance(raw, list):
        return raw
    out: list[object] = []
    for entry in cast('list[object]', raw):
        holder: Any = _range_holder(entry)
        if holder is not None:
            out.append(_with_range(entry, holder, move(holder['start_index']), move(holder['end_index'])))
            continue
        found = cast('dict[str, object]', entry) if isinstance(entry, dict) else None
        index = found.get('index') if found is not None else None
        if found is not None and found.get('type') == 'file_citation' and isinstance(index, int):
            out.append({**found, 'index': move(index)})
        else:
            out.append(cast(object, entry))
    return out


def _raw_in_step(raw: object, step: _RawStep, problems: list[CitationProblem]) -> list[object] | None:
    """The raw citation list kept in step with the realigned citations, or `None` if that cannot be done.

    An entry with character offsets moves with the citation at its range, or by itself (`step.move_raw`); one that
    cannot is removed and reported (unless its citation was dropped, which is reported already).
    """
    if not isinstance(raw, list):
        return None
    entries = cast('list[object]', raw)
    holders: list[Any] = [_range_holder(e) for e in entries]
    if all(h is not None for h in holders):
        out: list[object] = []
        moved = step.moved
        for i, (item, holder) in enumerate(zip(entries, holders, strict=True)):
            old: Range = (holder['start_index'], holder['end_index'])
            new = moved[old] if old in moved else step.move_raw(*old)
            if new is None:
                if old not in moved:
                    problems.append(_raw_dropped(i, old))
                continue
            out.append(_with_range(item, holder, *new))
        return out
    if step.moved and not step.citations_changed:
        # Offsets not read here (Google's are UTF-8 bytes) are still true where every anchored citation stayed put.
        return list(entries)
    if step.n_citations == 1 and not any(_unread_offsets(e) for e in entries):
        # Anthropic and Bedrock: one citation per block, every raw entry belongs to it (and holds no text offsets).
        return list(entries) if step.all_kept else []
    return None


def _unread_offsets(entry: object) -> bool:
    """Whether a raw entry holds offsets `_range_holder` does not read (Google's `segment`, in UTF-8 bytes).

    They do not follow the text, so the entry cannot be kept once the text moved.
    """
    if not isinstance(entry, dict):
        return False
    values = cast('dict[str, object]', entry).values()
    return any(isinstance(v, dict) and ('start_index' in v or 'end_index' in v) for v in values)


def _raw_dropped(index: int, old: Range) -> CitationProblem:
    return CitationProblem(
        'citation_dropped_after_edit',
        f"Raw provider citation entry {index} (`provider_details['citations'][{index}]`) was removed: the text "
        'at its range did not survive the edit unchanged.',
        start=old[0],
        end=old[1],
        detail=f"provider_details['citations'][{index}]",
    )


# --- fingerprints ---------------------------------------------------------------------------------------------------


def _is_cited(part: object) -> bool:
    if not isinstance(part, TextPart):
        return False
    return bool(part.citations) or bool(part.provider_details and 'citations' in part.provider_details)


def _rolling(text: str) -> int:
    """The `_SECOND` polynomial hash of `text`, computed by `int.from_bytes`.

    In base 2**8, an ASCII text's hash is its bytes as one big-endian integer; a wider text's is the sum of its
    UTF-32 code points' three low byte planes, each read as one integer, shifted by 0, 8 and 16 bits.
    """
    modulus = _SECOND[1]
    if text.isascii():  # O(1) on CPython's compact strings
        return int.from_bytes(text.encode(), 'big') % modulus
    data = text.encode('utf-32-be', 'surrogatepass')
    low, middle, high = data[3::4], data[2::4], data[1::4]  # code points are below 2**21: the top byte is zero
    return (
        int.from_bytes(low, 'big') + (int.from_bytes(middle, 'big') << 8) + (int.from_bytes(high, 'big') << 16)
    ) % modulus


def _anchor_print(anchored: str, digest: str | None) -> list[str | int]:
    """`[hash, length, head hash, whole hash, _SCHEME]` of an anchored text (see `fingerprint_response`).

    `digest`: `_hash(anchored)` when the caller has it (an anchor over a whole part).
    """
    whole = _rolling(anchored)
    return [
        _hash(anchored) if digest is None else digest,
        len(anchored),
        f'{whole if len(anchored) <= _HEAD else _rolling(anchored[:_HEAD]):x}',
        f'{whole:x}',
        _SCHEME,
    ]


def _anchor_prints(part: TextPart, digest: str) -> list[list[str | int] | None]:
    """The anchor prints of `part`'s citations, in order; `digest` is `_hash(part.content)`."""
    content = part.content
    size = len(content)
    prints: list[list[str | int] | None] = []
    made: dict[Range, list[str | int]] = {}  # citations often share an anchor
    for citation in _citations(part):
        start, end = _anchor_range(citation.anchor) if citation.anchor is not None else (None, None)
        if start is None or end is None or end > size:
            prints.append(None)
            continue
        print_ = made.get((start, end))
        if print_ is None:
            whole = digest if start == 0 and end == size else None
            print_ = made[start, end] = _anchor_print(content[start:end], whole)
        prints.append(list(print_))
    return prints


def _plain_anchor_prints(
    content: str, data: bytes, digest: str, citations: object
) -> list[list[str | int] | None] | None:
    """`_anchor_prints` for the usual part: a list of `Citation`s, each unanchored or anchored inside the text.

    `data` is the text's UTF-8 (its length is the text's when it is ASCII) and `digest` its hash; `None` for any
    other part, which `_anchor_prints` handles. (No `cast()` in the loop: it is a call, and this runs on every citation.)
    """
    if type(citations) is not list:
        return None
    items = cast('list[Citation]', citations)  # each item's type is checked below
    size = len(items)
    length = len(content)
    prints: list[list[str | int] | None] = []
    made: dict[Range, list[str | int]] | None = {} if size > 1 else None  # citations often share an anchor
    for citation in items:
        if type(citation) is not Citation:
            return None
        anchor = citation.anchor
        if anchor is None:
            prints.append(None)
            continue
        if type(anchor) is not ContentCitationAnchor and type(anchor) is not MarkerCitationAnchor:
            return None
        start, end = anchor.start, anchor.end
        if not (type(start) is int and type(end) is int and 0 <= start < end <= length):
            return None
        if made is not None and (print_ := made.get((start, end))) is not None:
            prints.append(list(print_))
            continue
        if start or end != length:
            print_ = _anchor_print(content[start:end], None)
        elif len(data) == length:  # the whole text, ASCII: `_rolling` on the bytes at hand
            whole = '%x' % (int.from_bytes(data, 'big') % _MODULUS)
            head = whole if length <= _HEAD else '%x' % (int.from_bytes(data[:_HEAD], 'big') % _MODULUS)
            print_ = [digest, length, head, whole, _SCHEME]
        else:
            print_ = _anchor_print(content, digest)
        if made is not None:
            made[start, end] = print_
        prints.append(print_)
    return prints


def fingerprint_response(response: ModelResponse) -> None:
    """Record, in place, a fingerprint of each cited text part of `response` in `response.metadata`.

    Stored under `metadata['pydantic_ai_citations']` as `{'fingerprints': {'<part index>': '<hash>'}, 'anchors':
    {'<part index>': [[<hash of anchored text>, <length>, <head hash>, <whole hash>, 2] | None, ...]}}` (two short
    polynomial hashes, in hex, that let a repair find moved anchored text in one pass, then their scheme, `_SCHEME`;
    prints of four fields, written by earlier versions in the `_FIRST` scheme, are still read), plus `'out_of_range': {'<part index>':
    [[<citation index>, <start>, <end>], ...]}` when an anchor does not fit its text, and `'markup': {'<part index>':
    [[<start>, <end>], ...]}`, the ranges of raw citation markup that `strip_citation_markers` removes (so that text
    its fingerprint vouches for is cleaned later without reading it again; parts not listed hold none): JSON-safe,
    kept by `ModelMessagesTypeAdapter` round trips, and never sent to a model (`ModelResponse.metadata` is not).
    Parts without citations are not fingerprinted. Mutates `response.metadata` in place when it is a dict, so a dict shared with a
    `StreamedResponse` carries the fingerprint into `run_stream` history too.
    """
    prints: dict[str, str] = {}
    anchors: dict[str, list[list[str | int] | None]] = {}
    out_of_range: dict[str, list[list[int | None]]] = {}
    markup: dict[str, list[list[int]]] = {}
    # One pass, its calls inlined: this runs on every response of every run with `CleanStaleCitations`.
    for index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        citations = part.citations
        if not citations and not ((details := part.provider_details) and 'citations' in details):
            continue
        content = part.content
        key = _KEYS[index] if index < 64 else str(index)
        try:  # `_hash`, inlined: the bytes are used again below
            data = content.encode()
        except UnicodeEncodeError:  # lone surrogates, e.g. from JSON escapes
            data = content.encode('utf-8', 'surrogatepass')
        prints[key] = digest = _sha256(data).hexdigest()[:16]
        if (
            (not content.isascii() or 'cite' in content or '[' in content)
            and _may_have_markup(content, citations)
            and (cuts := _markup(part).cuts)
        ):
            markup[key] = [[start, end] for start, end in cuts]
        found = _plain_anchor_prints(content, data, digest, citations)
        if found is None:  # not a plain list of citations anchored inside the text: the general path
            anchors[key] = found = _anchor_prints(part, digest)
            cited = cast(object, citations)
            printed = isinstance(cited, list) and len(cast('list[object]', cited)) == len(found) and None not in found
            if not printed and (bad := _anchor_findings(citations, len(content))):
                out_of_range[key] = [[ci, start, end] for _, ci, start, end in bad]
        else:  # every citation printed or unanchored: none is out of range
            anchors[key] = found
    if not prints:
        return
    if response.metadata is None:
        response.metadata = {}
    ours: dict[str, object] = {'fingerprints': prints, 'anchors': anchors, 'markup': markup}
    if out_of_range:
        ours['out_of_range'] = out_of_range
    response.metadata[METADATA_KEY] = ours


def joined_fingerprint(
    response: ModelResponse, rebuilt: ModelResponse, joins: Mapping[int, Sequence[int]]
) -> dict[str, object] | None:
    """The fingerprint data (`metadata['pydantic_ai_citations']`) for `response` rebuilt with text parts joined.

    `rebuilt` is `response` as a UI's `dump_messages` and `load_messages` make it, consecutive text parts joined:
    `rebuilt.parts[j]` holds the text of `response`'s parts `joins[j]`, in order. A joined part is fingerprinted
    afresh (as `fingerprint_response` does) only when the parts it joins are as they were fingerprinted, every cited
    one among them included. When one of them was edited since, it keeps that part's fingerprint, which its text does
    not match, and the anchor prints of all its parts' citations in order: `find_stale` reports it and a repair
    realigns its citations by them (all are dropped, and reported, if the rebuilt part lost one of them). A part joining none that was fingerprinted gets none (as before), and a fingerprinted part that is gone
    stays reported as gone. `None` when `response` was never fingerprinted.
    """
    prints, _ = _read_ours(response.metadata, False)
    if prints is None:
        return None
    stale = {part_index for _, part_index, _, _ in survey([response], anchors=False)}
    fresh = replace(rebuilt, metadata=None)
    fingerprint_response(fresh)
    new: dict[str, dict[str, object]] = (fresh.metadata or {}).get(METADATA_KEY, {})
    ours: dict[str, dict[str, object]] = {'fingerprints': {}, 'anchors': {}, 'markup': {}}
    placed: set[int] = set()
    keys = _matched_prints(response, prints)[0]  # (once for every part: see `print_key`)
    for index, joined in joins.items():
        printed = [i for i in joined if str(i) in prints]
        placed.update(printed)
        key = str(index)
        edited = [i for i in printed if i in stale]
        if edited:
            ours['fingerprints'][key] = prints[str(edited[0])]
            ours['anchors'][key] = [a for i in joined for a in _anchors_or_none(response, i, keys)]
        elif printed and all(str(i) in prints or not _is_cited(response.parts[i]) for i in joined):
            for section, values in new.items():
                if key in values:
                    ours.setdefault(section, {})[key] = values[key]
    # A fingerprinted part that is gone, or stale and not in `rebuilt`: a print on no part, reported as gone.
    lost = [name for name in prints if (i := _print_index(name)) is None or (i in stale and i not in placed)]
    for n, name in enumerate(lost):
        ours['fingerprints'][str(len(rebuilt.parts) + n)] = prints[name]
    return cast('dict[str, object]', ours) if ours['fingerprints'] else None


def _anchors_or_none(response: ModelResponse, part_index: int, keys: PrintKeys | None = None) -> list[object]:
    """The stored anchor prints of a part's citations, or `None` for each when none are stored.

    `keys`: `print_keys(response)`, when asked for many parts.
    """
    part = response.parts[part_index]
    try:
        stored = _stored_anchors(response, part_index, keys)
    except _Untold:
        stored = None
    count = len(_citations(part)) if isinstance(part, TextPart) else 0
    return stored if stored is not None and len(stored) == count else [None] * count


def _stored_anchors(response: ModelResponse, part_index: int, keys: PrintKeys | None = None) -> list[object] | None:
    """The anchor prints of the fingerprint of part `part_index` (`print_key`), `None` when none are stored.

    Raises:
        _Untold: The response was fingerprinted, but which print is this part's cannot be told (`_matched_prints`).
    """
    metadata = cast('dict[str, object]', response.metadata or {})
    ours = metadata.get(METADATA_KEY)
    if not isinstance(ours, dict):
        return None
    anchors = cast('dict[str, object]', ours).get('anchors')
    if not isinstance(anchors, dict):
        return None
    key = print_key(response, part_index, keys)
    found = cast('dict[str, object]', anchors).get(key) if key is not None else None
    return cast('list[object]', found) if isinstance(found, list) else None


class _Untold(Exception):
    """A fingerprinted part whose print cannot be told apart from the others' (see `_matched_prints`)."""


PrintKeys = Mapping[int, 'str | None']
"""Each fingerprinted text part's print key (`_matched_prints`), worked out once for the parts of one response."""


def print_keys(response: ModelResponse) -> PrintKeys | None:
    """`_matched_prints` of `response`, for callers that ask `print_key` about many of its parts; `None` if none."""
    prints, _ = _read_ours(response.metadata, False)
    return None if prints is None else _matched_prints(response, prints)[0]


def print_key(response: ModelResponse, part_index: int, keys: PrintKeys | None = None) -> str | None:
    """The key of the fingerprint that is part `part_index`'s (its own index, unless the parts moved), or `None`.

    `keys`: `print_keys(response)`, when the caller asks about many parts (each would match all the parts again).

    Raises:
        _Untold: The part may be one of several fingerprinted parts that moved and changed: no print is surely its.
    """
    prints, _ = _read_ours(response.metadata, False)
    if prints is None:
        return None
    own = str(part_index)
    if keys is None:
        if own in prints and _vouched(cast(TextPart, response.parts[part_index]).content, prints[own]):
            return own  # (the common case: in place and unchanged)
        keys = _matched_prints(response, prints)[0]
    if part_index in keys and keys[part_index] is None:
        raise _Untold(part_index)
    return keys.get(part_index, own if own in prints else None)


def _print_index(name: object) -> int | None:
    """The index of the part a print is keyed by (`'3'`), `None` for a key that names no part (damaged metadata)."""
    return int(name) if isinstance(name, str) and name.isascii() and name.isdigit() else None


def _matched_prints(response: ModelResponse, prints: Mapping[str, object]) -> tuple[dict[int, str | None], set[int]]:
    """Which fingerprint is each text part's, when parts may have moved: (part index -> print key, parts vouched for).

    Prints are keyed by part index, and removing a part before them (a `ThinkingPart` dropped before a hand-off to
    another provider) moves the text parts after it. A part is the print's its text hashes to (its own index's first,
    then any other: the part moved unchanged). Of the parts left (edited, and maybe moved too), one whose own index
    has a print left takes it (edited in place); the others and the prints left are paired in order, parts keeping
    their order, when there are as many of each, and otherwise map to `None`: fingerprinted, but no print is surely
    theirs. With no print left, they were never fingerprinted, and so are the parts not in the mapping. The prints
    left unpaired are gone.
    """
    parts = response.parts
    texts = {
        i: part for i, part in enumerate(parts) if isinstance(part, TextPart) and (str(i) in prints or _is_cited(part))
    }
    free = dict.fromkeys(prints)  # prints on no part yet
    keys: dict[int, str | None] = {}
    hashes = {
        i: _hash(part.content) if isinstance(cast(object, part.content), str) else None for i, part in texts.items()
    }
    for i in texts:
        own = str(i)
        if own in free and prints[own] == hashes[i]:
            keys[i] = own
            del free[own]
    by_print: dict[object, list[str]] = {}
    for name in reversed(free):  # (each list in key order, taken from its end: each name is looked at once)
        if isinstance(value := prints[name], str):  # (a hash; anything else, damaged metadata, matches no part)
            by_print.setdefault(value, []).append(name)
    for i in texts:
        if i in keys:
            continue
        names = by_print.get(hashes[i], [])
        while names and names[-1] not in free:
            names.pop()
        if names:
            keys[i] = name = names.pop()
            del free[name]
    vouched = set(keys)
    left = [i for i in texts if i not in keys]
    for i in left:  # edited in place: its own print
        if str(i) in free:
            keys[i] = str(i)
            del free[str(i)]
    left = [i for i in left if i not in keys]
    names = sorted(free, key=lambda name: -1 if (i := _print_index(name)) is None else i)
    if not names:  # no print left: the parts left were never fingerprinted (added since)
        return keys, vouched
    if len(left) == len(names) and all(_print_index(name) is not None for name in names):
        keys.update(zip(left, names, strict=True))
    else:
        keys.update(dict.fromkeys(left))
    return keys, vouched


# --- find_stale -----------------------------------------------------------------------------------------------------

_Finding = tuple[Literal['stale_after_edit', 'anchor_out_of_range'], int | None, int | None, int | None]
"""(code, citation index, start, end) for one part; message and part indexes are added by the caller."""

_STALE: tuple[_Finding, ...] = (('stale_after_edit', None, None, None),)

Found = tuple[int, int, TextPart | None, tuple[_Finding, ...]]
"""(message index, part index, the part or `None` if it is gone, findings) for a part with findings."""

Marked = list[tuple[int, ModelResponse, int, TextPart, object]]
"""(message index, response, part index, part, its markup ranges as fingerprinted or `None`) for each text part that
may hold raw citation markup."""


def _anchor_findings(citations: object, size: int) -> tuple[_Finding, ...]:
    findings: list[_Finding] = []
    for index, citation in enumerate(cast('list[object]', citations) if isinstance(citations, list) else []):
        anchor = cast(object, getattr(citation, 'anchor', None))
        if anchor is None:
            continue
        start = cast(object, getattr(anchor, 'start', None))
        end = cast(object, getattr(anchor, 'end', None))
        if isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= size:
            continue
        findings.append(
            (
                'anchor_out_of_range',
                index,
                start if isinstance(start, int) else None,
                end if isinstance(end, int) else None,
            )
        )
    return tuple(findings)


def _may_have_markup(content: object, citations: object) -> bool:
    """Whether `strip_citation_markers` might change a part with this text and these citations (cheap tests first)."""
    if not isinstance(content, str):
        return False
    # `isascii()` is O(1) on CPython's compact strings: private-use and `【` markers are not ASCII.
    # Every non-ASCII form of the grammar holds one of these; its ASCII forms hold `cite` or `[`.
    if not content.isascii() and ('\ue200' in content or '\ue201' in content or '\ue202' in content or '【' in content):
        return True
    return 'cite' in content or (bool(citations) and '[' in content and _numbered_anchor(citations, content))


_NOTHING: tuple[Any, Any] = (None, None)


def _read_ours(metadata: Any, with_markup: bool) -> tuple[Any, Any]:
    """(fingerprints, parts that may hold markup) from a response's metadata, if readable; the second only if asked.

    Untyped JSON data, read through `Any` on the hot path (`cast()` is a call).
    """
    try:
        ours = metadata[METADATA_KEY]
        prints = ours['fingerprints']
        # Without `with_markup`, a dict's `get` is skipped (it cannot fail); anything else is still asked.
        markup = ours.get('markup') if with_markup or ours.__class__ is not dict else None
    except (KeyError, TypeError, AttributeError, IndexError):
        return _NOTHING
    return (prints if prints.__class__ is dict and prints else None, markup if markup.__class__ is dict else None)


def _vouched(content: Any, value: object) -> bool:
    """Whether `content` is the text fingerprinted as `value`."""
    try:
        return value == hashlib.sha256(content.encode()).hexdigest()[:16]
    except UnicodeEncodeError:  # lone surrogates, e.g. from JSON escapes
        return value == _hash(content)
    except AttributeError:  # not text at all
        return False


_sha256 = hashlib.sha256
_KEYS = tuple(str(i) for i in range(64))


def _survey_response(
    message_index: int, response: ModelResponse, found: list[Found], marked: Marked | None, anchors: bool
) -> None:
    """Check one fingerprinted response's text parts against its fingerprints; note parts that may hold markup.

    The hot path of `find_stale` and `CleanStaleCitations`: one hash per fingerprinted part, and one look at each
    anchor (citations changed in place since the fingerprint are seen: nothing is remembered between passes). On a
    long history this pass is bound by memory reads, not by Python: it reads nothing it does not need (the markup
    ranges only when `marked` is asked for, the anchors only with `anchors`).
    """
    prints, markup = _read_ours(response.metadata, marked is not None)
    if prints is None:  # metadata, but no fingerprints of ours
        _survey_unprinted(message_index, response, found, marked, anchors)
        return
    seen = 0
    before = (len(found), len(marked) if marked is not None else 0)
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        key = _KEYS[part_index] if part_index < 64 else str(part_index)
        value = prints.get(key)
        if value is None:  # never fingerprinted: only its anchors can be checked
            if _is_cited(part):  # unless it is a fingerprinted part that moved: the slow way
                _survey_again(message_index, response, prints, markup, found, marked, anchors, before)
                return
            _survey_unprinted_part(message_index, response, part_index, part, found, marked, anchors)
            continue
        seen += 1
        content = part.content
        try:  # `_vouched`, inlined for its common case: this loop runs over every part of a long history
            vouched = value == _sha256(content.encode()).hexdigest()[:16]
        except (UnicodeEncodeError, AttributeError):
            vouched = _vouched(content, value)
        if not vouched:  # edited, or another part moved here: told apart the slow way
            _survey_again(message_index, response, prints, markup, found, marked, anchors, before)
            return
        elif (
            anchors
            and (citations := part.citations)
            and not _all_before(citations, len(content))
            and (findings := _anchor_findings(citations, len(content)))
        ):
            found.append((message_index, part_index, part, findings))
        if marked is None:
            continue
        if vouched and markup is not None:
            if key in markup:  # as fingerprinted: the text is the one its markup was found in
                marked.append((message_index, response, part_index, part, markup[key]))
        elif _may_have_markup(content, part.citations):
            marked.append((message_index, response, part_index, part, None))
    if seen < len(prints):  # a fingerprinted part is gone, or moved
        _survey_again(message_index, response, prints, markup, found, marked, anchors, before)


def _survey_again(
    message_index: int,
    response: ModelResponse,
    prints: Any,
    markup: Any,
    found: list[Found],
    marked: Marked | None,
    anchors: bool,
    before: tuple[int, int],
) -> None:
    """`_survey_response` for a response whose parts do not line up with its prints, what it noted undone (`before`).

    Each part is checked against the print that is its (`_matched_prints`), so a part that moved is not taken for
    one never fingerprinted (and its citations resent unchecked) when a part before it was removed.
    """
    del found[before[0] :]
    if marked is not None:
        del marked[before[1] :]
    keys, vouched = _matched_prints(response, prints)
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        if part_index not in keys:  # never fingerprinted
            _survey_unprinted_part(message_index, response, part_index, part, found, marked, anchors)
            continue
        content, key = part.content, keys[part_index]
        if part_index not in vouched:
            found.append((message_index, part_index, part, _STALE))
        elif anchors and (citations := part.citations) and (findings := _anchor_findings(citations, len(content))):
            found.append((message_index, part_index, part, findings))
        if marked is None:
            continue
        if part_index in vouched and markup is not None:
            if key in markup:  # as fingerprinted: the text is the one its markup was found in
                marked.append((message_index, response, part_index, part, markup[key]))
        elif _may_have_markup(content, part.citations):
            marked.append((message_index, response, part_index, part, None))
    placed = set(keys.values())
    for name in prints:
        if name not in placed:  # a fingerprinted part that is gone
            found.append((message_index, -1 if (i := _print_index(name)) is None else i, None, _STALE))


def _survey_unprinted(
    message_index: int, response: ModelResponse, found: list[Found], marked: Marked | None, anchors: bool
) -> None:
    """`_survey_response` for a response without fingerprints: only anchors and markup can be checked."""
    for part_index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            _survey_unprinted_part(message_index, response, part_index, part, found, marked, anchors)


def _survey_unprinted_part(
    message_index: int,
    response: ModelResponse,
    part_index: int,
    part: TextPart,
    found: list[Found],
    marked: Marked | None,
    anchors: bool,
) -> None:
    content, citations = part.content, part.citations
    if anchors and citations and (findings := _anchor_findings(citations, len(content))):
        found.append((message_index, part_index, part, findings))
    if marked is not None and _may_have_markup(content, citations):
        marked.append((message_index, response, part_index, part, None))


def survey(messages: Sequence[ModelMessage], marked: Marked | None = None, *, anchors: bool = True) -> list[Found]:
    """One pass over a history: the parts with findings; with `marked`, also appends the parts that may hold markup.

    `anchors=False` looks for stale parts only (no `anchor_out_of_range` findings), for callers that act on nothing
    else: the check of each anchor is a third of the pass.
    """
    found: list[Found] = []
    look = anchors or marked is not None  # at responses without fingerprints
    for message_index, message in enumerate(messages):
        if not isinstance(message, ModelResponse):
            continue
        if message.metadata:
            _survey_response(message_index, message, found, marked, anchors)
        elif look:
            _survey_unprinted(message_index, message, found, marked, anchors)
    return found


_MESSAGES = {
    'stale_after_edit': 'The text of this cited part changed since its citations were made (fingerprint mismatch); '
    'its anchors and raw citation data may point at the wrong words.',
    'anchor_out_of_range': 'A citation anchor does not fit the text of its part.',
}


def find_stale(messages: Sequence[ModelMessage]) -> list[CitationProblem]:
    """Check a history for cited parts whose text changed since their citations were made.

    Reports `stale_after_edit` for a fingerprinted part (one `CleanStaleCitations` or `edit_response` saw) whose text
    no longer matches its fingerprint (or that is gone), and `anchor_out_of_range` for an anchor that does not fit its
    part's text. Parts that were never fingerprinted (a history made without `CleanStaleCitations`, `edit_response` or
    `SQLiteConversationStore.edit_answer`) are only checked for anchors out of range: nothing records what their text
    was.
    One pass over the history, nothing cached and nothing changed.
    """
    require_messages(messages, where='find_stale')
    return [
        CitationProblem(
            code,
            _MESSAGES[code],
            message_index=message_index,
            part_index=part_index,
            citation_index=citation_index,
            start=start,
            end=end,
        )
        for message_index, part_index, _part, findings in survey(messages)
        for code, citation_index, start, end in findings
    ]


# --- repairing edited parts (no old text) -------------------------------------------------------------------------


class _Locator:
    """Finds, in an edited text, the unique range whose text an anchor fingerprint describes; linear in the text.

    A fingerprint `[hash, length, head, poly, scheme]` carries two polynomial hashes (of the anchored text's first
    `_HEAD` characters and of all of it, in the scheme's base and modulus): one pass over the text indexes every
    window of `_HEAD` characters (or fewer, for short anchors) by its head hash, and each candidate is checked in
    constant time against the whole text's polynomial hash (from prefix hashes), then against the SHA-256 print.
    Candidates checked per part are capped in proportion to the text, so a text built to make every position a
    candidate stays linear too. Fingerprints of the first form (`[hash, length, head, poly]`, `_FIRST` scheme) are
    read the same way.

    A fingerprint from before heads were stored (`[hash, length]`) is searched by hashing every window, within a
    fixed budget of characters hashed per part; past it, anchors are not searched (and their citations dropped).
    """

    def __init__(self, text: str, prints: Sequence[object]) -> None:
        self.text = text
        self._prefix: dict[_Scheme, list[int]] = {}
        self._powers: dict[tuple[_Scheme, int], int] = {}
        self._heads: dict[tuple[_Scheme, int], dict[int, list[int]]] = {}  # -> head hash -> window starts
        self._wanted: dict[tuple[_Scheme, int], set[int]] = {}  # the head hashes of the fingerprints given
        for print_ in prints:
            parsed = _parse_print(print_, len(text))
            if parsed is not None and parsed[2] is not None:
                self._wanted.setdefault((parsed[2][2], min(parsed[1], _HEAD)), set()).add(parsed[2][0])
        self._candidates = _CANDIDATES_PER_CHAR * (len(text) + 1)
        self._legacy_work = _MAX_LOCATE_WORK

    def find(self, print_: object) -> Range | None:
        """The unique range of the text whose anchored text has fingerprint `print_`, if any."""
        parsed = _parse_print(print_, len(self.text))
        if parsed is None:
            return None
        digest, length, rolling = parsed
        if rolling is None:
            return self._find_legacy(digest, length)
        head, poly, scheme = rolling
        modulus = scheme[1]
        prefix = self._prefix_hashes(scheme)
        power = self._power(scheme, length)
        found: Range | None = None
        for start in self._starts(scheme, min(length, _HEAD)).get(head, ()):
            end = start + length
            if end > len(self.text):
                continue
            self._candidates -= 1
            if self._candidates < 0:
                return None
            if (prefix[end] - prefix[start] * power) % modulus == poly and _hash(self.text[start:end]) == digest:
                if found is not None:
                    return None  # not unique
                found = (start, end)
        return found

    def _find_legacy(self, digest: str, length: int) -> Range | None:
        text = self.text
        self._legacy_work -= len(text) * length
        if self._legacy_work < 0:
            return None
        found: Range | None = None
        for start in range(len(text) - length + 1):
            if _hash(text[start : start + length]) == digest:
                if found is not None:
                    return None  # not unique
                found = (start, start + length)
        return found

    def _prefix_hashes(self, scheme: _Scheme) -> list[int]:
        prefix = self._prefix.get(scheme)
        if prefix is None:
            base, modulus = scheme
            prefix = self._prefix[scheme] = [0]
            h = 0
            for code in map(ord, self.text):
                h = (h * base + code) % modulus
                prefix.append(h)
        return prefix

    def _power(self, scheme: _Scheme, length: int) -> int:
        power = self._powers.get((scheme, length))
        if power is None:
            power = self._powers[scheme, length] = pow(scheme[0], length, scheme[1])
        return power

    def _starts(self, scheme: _Scheme, width: int) -> dict[int, list[int]]:
        index = self._heads.get((scheme, width))
        if index is None:
            prefix = self._prefix_hashes(scheme)
            power = self._power(scheme, width)
            modulus = scheme[1]
            wanted = self._wanted.get((scheme, width), set())
            index = self._heads[scheme, width] = {}
            for start in [
                p
                for p in range(len(self.text) - width + 1)
                if (prefix[p + width] - prefix[p] * power) % modulus in wanted
            ]:
                index.setdefault((prefix[start + width] - prefix[start] * power) % modulus, []).append(start)
        return index


def _parse_print(print_: object, size: int) -> tuple[str, int, tuple[int, int, _Scheme] | None] | None:
    """`(hash, length, (head hash, whole hash, scheme))` of a stored anchor fingerprint, if well-formed.

    The heads are `None` in the form without them; a print in a scheme this version does not know is not read.
    """
    if not isinstance(print_, list) or len(cast('list[object]', print_)) not in (2, 4, 5):
        return None
    fields = cast('list[object]', print_)
    digest, length = fields[0], fields[1]
    if not isinstance(digest, str) or not isinstance(length, int) or length <= 0 or length > size:
        return None
    if len(fields) == 2:
        return digest, length, None
    if len(fields) == 5 and (fields[4] != _SCHEME or fields[4].__class__ is not int):
        return None  # a scheme this version does not know
    head, poly = fields[2], fields[3]
    if not (isinstance(head, str) and isinstance(poly, str) and _is_hex(head) and _is_hex(poly)):
        return None
    return digest, length, (int(head, 16), int(poly, 16), _SECOND if len(fields) == 5 else _FIRST)


def _is_hex(value: str) -> bool:
    return 0 < len(value) <= 16 and all(c in '0123456789abcdef' for c in value)


def shown_realigned(
    response: ModelResponse, part_index: int, part: TextPart, keys: PrintKeys | None = None
) -> tuple[TextPart, int]:
    """`part`, edited since its citations were made, as a reader is shown it, and how many citations lost their place.

    Its citations are realigned on the text as it is now by their anchor prints, as `CleanStaleCitations` realigns
    them before the next request; one whose words are no longer found once is kept as a source without a position
    (never dropped). The history itself is not changed. `keys`: `print_keys(response)`, for many parts.
    """
    repaired, dropped = repair_part(response, part_index, part, 'realign', keys)
    lost = sorted({p.citation_index for p in dropped if p.citation_index is not None})
    # Numbered as `repair_part` numbers them (a hand-built part may hold anything).
    old = [c for c in cast('list[object]', part.citations or []) if isinstance(c, Citation)]
    citations = [*(repaired.citations or []), *(replace(old[i], anchor=None) for i in lost if i < len(old))]
    return replace(part, citations=citations or None), len(lost)


def edited_parts(response: ModelResponse) -> set[int]:
    """The indexes of `response`'s parts whose text changed since they were fingerprinted (not those that are gone)."""
    return {part_index for _, part_index, part, _ in survey([response], anchors=False) if part is not None}


def shown_response(response: ModelResponse) -> ModelResponse:
    """`response` with each part edited since it was fingerprinted as a reader is shown it (`shown_realigned`)."""
    stale = edited_parts(response)
    if not stale:
        return response
    keys = print_keys(response)
    parts = [
        shown_realigned(response, i, part, keys)[0] if i in stale and isinstance(part, TextPart) else part
        for i, part in enumerate(response.parts)
    ]
    return replace(response, parts=parts)


def repair_part(
    response: ModelResponse,
    part_index: int,
    part: TextPart,
    on_edit: Literal['realign', 'clear'],
    keys: PrintKeys | None = None,
) -> tuple[TextPart, list[CitationProblem]]:
    """`part`, edited without `edit_text`, with its citations cleared or realigned by their anchor fingerprints.

    `keys`: `print_keys(response)`, when many of its parts are repaired.
    """
    if on_edit == 'clear':
        details = dict(part.provider_details) if part.provider_details else {}
        details.pop('citations', None)
        return copy_with(part, id=None, citations=None, provider_details=details or None), []
    try:
        stored = _stored_anchors(response, part_index, keys) or []
        untold = False
    except _Untold:  # fingerprinted, but which print is its is not known: nothing vouches for any anchor
        stored, untold = [], True
    text = part.content
    citations = _citations(part)
    locator = _Locator(text, stored)
    # One print per citation, in order: the citations are the ones fingerprinted. Fewer or more (`edit_text` dropped
    # some, and the response kept the prints of before): each citation still on the words of a print is that print's,
    # in order (a citation only matches a print after the one the citation before it matched); the rest have none.
    prints = stored if len(stored) == len(citations) else _in_place_prints(text, citations, stored)

    def move(index: int, start: int, end: int) -> Range | None:
        fits = end <= len(text)
        if untold:
            return None
        if not stored:
            # No anchor fingerprints (history from before this package, or written by hand): nothing says the
            # anchors are stale, so keep those that fit the text.
            return (start, end) if fits else None
        print_ = prints[index] if index < len(prints) else None
        if not isinstance(print_, list) or not print_:
            return None
        if fits and _hash(text[start:end]) == cast('list[object]', print_)[0]:
            return start, end  # still in place and unchanged
        return locator.find(cast(object, print_))

    return _realign(part, text, move, reason='its anchored text could not be found exactly once in the edited text')


def _in_place_prints(text: str, citations: list[Citation], stored: list[object]) -> list[object]:
    """Per citation, the print of `stored` (in order) whose text its anchor is still on, or `None` (`repair_part`).

    Each citation takes the first print after the previous citation's whose hash is its anchored text's, found by
    bisection among the prints of that hash: linear in the citations and prints.
    """
    at: dict[object, list[int]] = {}
    for m, print_ in enumerate(stored):
        if isinstance(print_, list) and print_ and isinstance(digest := cast('list[object]', print_)[0], str):
            at.setdefault(digest, []).append(m)
    found: list[object] = []
    after = 0  # prints before this one are taken, or skipped
    for citation in citations:
        start, end = _anchor_range(citation.anchor) if citation.anchor is not None else (None, None)
        places = at.get(_hash(text[start:end])) if start is not None and end is not None and end <= len(text) else None
        k = bisect.bisect_left(places, after) if places else 0
        if places and k < len(places):
            found.append(stored[places[k]])
            after = places[k] + 1
        else:
            found.append(None)
    return found


def repair_history(
    messages: Sequence[ModelMessage], on_edit: Literal['realign', 'clear'], marked: Marked | None = None
) -> tuple[dict[int, ModelResponse], list[CitationProblem]]:
    """New responses (by message index) with edited cited parts repaired, and what was found.

    An anchor the provider got wrong (`anchor_out_of_range`) is not changed. With `marked`, the parts that may hold
    raw citation markup are appended to it (see `survey`).
    """
    grouped: dict[int, list[tuple[int, TextPart | None]]] = {}
    for message_index, part_index, part, _findings in survey(messages, marked, anchors=False):
        grouped.setdefault(message_index, []).append((part_index, part))
    replaced: dict[int, ModelResponse] = {}
    problems: list[CitationProblem] = []
    action = 'cleared' if on_edit == 'clear' else 'realigned'
    for message_index, items in grouped.items():
        response = messages[message_index]
        assert isinstance(response, ModelResponse)
        new_parts: dict[int, TextPart] = {}
        keys = print_keys(response) if on_edit == 'realign' else None  # (once for the response's parts)
        for part_index, part in items:
            problems.append(
                CitationProblem(
                    'stale_after_edit',
                    f'{_MESSAGES["stale_after_edit"]} Its citations were {action} before the next request.',
                    message_index=message_index,
                    part_index=part_index,
                )
            )
            if part is not None:
                new_parts[part_index], dropped = repair_part(response, part_index, part, on_edit, keys)
                problems.extend(replace(p, message_index=message_index, part_index=part_index) for p in dropped)
        replaced[message_index] = replace_parts(response, new_parts)
    return replaced, problems


# --- raw citation markup --------------------------------------------------------------------------------------------


def _numbered_anchor(citations: object, text: str) -> bool:
    """Whether a citation is marker-anchored on a numbered marker's shape (`[1]`, `[1, 2]`, xAI's `[[1]](url)`).

    Then the part's provider writes numbered markers, and the grammar is asked to remove them.
    """
    for citation in cast('list[object]', citations) if isinstance(citations, list) else []:
        anchor = cast(object, getattr(citation, 'anchor', None))
        if isinstance(anchor, MarkerCitationAnchor):
            start, end = _anchor_range(anchor)
            if (
                start is not None
                and end is not None
                and text.startswith('[', start)
                and (is_numbered_marker(text, start, end) or (text.startswith('[[', start) and text[end - 1] == ')'))
            ):
                return True
    return False


def _markup(part: TextPart) -> StrippedMarkup:
    return strip_markup(part.content, numbered=_numbered_anchor(part.citations, part.content))


def _known_cuts(found: Any, size: int) -> list[Range] | None:
    """Markup ranges as `fingerprint_response` stored them (untyped JSON), if well-formed for a text of `size`."""
    cuts: list[Range] = []
    last = -1
    try:
        for start, end in found:
            if not (start.__class__ is int and end.__class__ is int and last < start < end <= size):
                return None
            cuts.append((start, end))
            last = end
    except (TypeError, ValueError):
        return None
    return cuts or None


def strip_citation_markers(part: TextPart, markup: object = None) -> tuple[TextPart, list[Range]]:
    """A copy of `part` without raw citation markup, and the removed ranges (offsets into the old text).

    Removes what the package's one markup grammar (`formats.markup.strip_markup`) removes: OpenAI private-use markers
    (`\\ue200…\\ue201`, also unterminated or malformed ones), `【…†…】` markers, Anthropic-style cite tags
    (`<cite …>` or `(cite …>` and `</cite>`; the cited words stay), and one space before a removed marker where it
    separated a word from punctuation. Numbered markers (`[1]`, `[1, 2]`, xAI's `[[1]](url)`) are removed from a part
    with a citation marker-anchored on one (its provider writes numbered markers, as Perplexity and xAI do); in other
    parts `[1]` may be prose and stays. Citations are shifted by the removed lengths; one anchored on removed markup is
    dropped. Returns `part` itself when nothing was found.

    `markup`: the ranges `fingerprint_response` found in this very text (vouched for by its fingerprint); used
    instead of scanning again when well-formed.
    """
    text = part.content
    cuts = _known_cuts(markup, len(text)) if markup is not None else None
    if cuts is None:
        stripped = _markup(part)
        cuts, new_text = list(stripped.cuts), stripped.text
    else:
        new_text = _cut(text, cuts)
    if not cuts:
        return part, []
    citations, details = part.citations, part.provider_details
    kept = _kept_or_cut(citations, cuts)
    if kept is not None and (raw := _raw_kept_or_cut(details, cuts, dropped=len(kept) < len(citations or ())))[0]:
        # Markers after the cited words, the common case: nothing moves. Citations anchored on the markup itself
        # (xAI's `[[1]](url)`) go with it, and their raw entries too, as `_realign` would have it.
        return copy_with(part, content=new_text, id=None, citations=kept or None, provider_details=raw[1]), cuts
    move = _cut_mapper(cuts)
    new_part, _ = _realign(
        part,
        new_text,
        lambda _index, start, end: move(start, end),
        reason='its markup was removed',
        move_raw=move,
        report=False,  # the caller reports the cuts
    )
    return new_part, cuts


def _in_cut(start: Any, end: Any, cuts: list[Range], starts: list[int]) -> bool:
    """Whether `start`/`end` are a valid range inside one of `cuts` (removed with it); `starts`: the cuts' starts.

    The cut that may hold it is the last one starting at or before `start` (cuts are sorted and disjoint): one
    bisection, so a part with a citation per marker costs n log n, not a scan of every cut per citation.
    """
    if not (start.__class__ is int and end.__class__ is int and 0 <= start < end):
        return False
    k = bisect.bisect_right(starts, start) - 1
    return k >= 0 and end <= cuts[k][1]


def _kept_or_cut(citations: Any, cuts: list[Range]) -> list[Citation] | None:
    """The citations left across `cuts`, or `None` when one would have to move (left to `_realign`).

    Each citation must be unanchored or anchored before the first cut (kept), or anchored inside a cut (dropped).
    """
    if citations is None:
        return []
    if citations.__class__ is not list:
        return None
    first = cuts[0][0]
    starts = [start for start, _ in cuts]
    kept: list[Citation] = []
    for citation in citations:
        if citation.__class__ is not Citation:
            return None
        anchor = citation.anchor
        if anchor is None or _all_before((citation,), first):
            kept.append(citation)
        elif not _in_cut(getattr(anchor, 'start', None), getattr(anchor, 'end', None), cuts, starts):
            return None
    return kept


def _raw_kept_or_cut(details: Any, cuts: list[Range], *, dropped: bool) -> tuple[bool, dict[str, Any] | None]:
    """`(True, a copy of provider_details)` without the raw entries inside a cut, or `(False, None)` (left to `_realign`).

    Entries with character offsets must lie before the first cut (kept) or inside a cut (removed). An entry without
    offsets stays while every citation stays (nothing moved it); with `dropped` (a citation went with the markup)
    `_realign` decides whether it belongs to that citation.
    """
    if details is None:
        return True, None
    if details.__class__ is not dict:
        return False, None
    raw = details.get('citations')
    if not raw:
        return True, dict(details)
    if raw.__class__ is not list:
        return False, None
    first = cuts[0][0]
    starts = [start for start, _ in cuts]
    entries: list[object] = []
    for entry in raw:
        holder: Any = _range_holder(entry)
        if holder is None:
            if dropped:
                return False, None
            entries.append(entry)
        elif holder['end_index'] <= first:
            entries.append(entry)
        elif not _in_cut(holder['start_index'], holder['end_index'], cuts, starts):
            return False, None
    new = dict(details)
    if len(entries) == len(raw):
        return True, new
    if entries:
        new['citations'] = entries
    else:
        del new['citations']
    return True, new or None


def _cut(text: str, cuts: list[Range]) -> str:
    """`text` without the ranges `cuts` (sorted, disjoint, inside `text`)."""
    if len(cuts) == 1 and text.__class__ is str:
        start, end = cuts[0]
        return text[:start] + text[end:]
    bounds = [0, *itertools.chain.from_iterable(cuts), len(text)]
    return ''.join([text[bounds[k] : bounds[k + 1]] for k in range(0, len(bounds), 2)])


def _all_before(citations: Any, position: int) -> bool:
    """Whether every citation is unanchored or anchored (validly) before `position`: removing text after it changes none.

    Also the survey's check that every anchor fits its text (`position` its length): integer comparisons only.
    """
    try:
        for citation in citations or ():
            anchor = citation.anchor
            if anchor is not None:
                start, end = anchor.start, anchor.end
                if not (start.__class__ is int and end.__class__ is int and 0 <= start < end <= position):
                    return False
    except AttributeError:
        return False
    return True
