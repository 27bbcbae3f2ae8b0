"""Keeping citations true to the text they were made for, when history is edited or sent to another provider.

Three tools:

- `edit_text(part, new_text)` edits a cited `TextPart` and realigns its citations: the old and new texts are
  diffed, a citation whose anchored words are unchanged is shifted, one whose words changed is dropped (and
  reported). `provider_details['citations']` is kept in step, `id` cleared (OpenAI Responses would otherwise use its
  stored copy of the item), `provider_name` kept (Anthropic only replays citations of its own parts).
- Fingerprints catch edits made *without* `edit_text` (a UI storing edited text, a JSON file edited by hand):
  `fingerprint_response` records, in `ModelResponse.metadata` (never sent to a model, kept by
  `ModelMessagesTypeAdapter`), a short hash of each cited part's text and of each anchored span. `find_stale`
  compares them with the text as it is now.
- `CleanStaleCitations` does both inside agent runs: it fingerprints each answer, repairs edited parts in the stored
  history before each request, and removes raw citation markers from parts produced by another provider from what
  is sent to the model serving each attempt (the stored history keeps them).

Fingerprints are the first 16 hex digits of a SHA-256. Like `ModelResponse.history_digest`, a plain hash lets
someone holding the stored history test guesses at text redacted from it later: clear
`metadata['pydantic_ai_citations']` together with the text you redact.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import itertools
import operator
import re
import weakref
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Literal, cast

from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT, RunContext

from ._ledger import entry, record_problems
from ._problems import CitationProblem
from ._wrappers import StreamWatch
from .formats.numbered import is_numbered_marker

__all__ = (
    'METADATA_KEY',
    'CleanStaleCitations',
    'edit_text',
    'edit_text_with_report',
    'find_stale',
    'fingerprint_response',
    'strip_citation_markers',
)

METADATA_KEY = 'pydantic_ai_citations'
"""Key of this package's data in `ModelResponse.metadata`: `{'fingerprints': {part_index: hash}, 'anchors': {...}}`."""

LEDGER_KEY = 'clean_stale_citations'
"""Key of `CleanStaleCitations` records in the run ledger's `extras`."""

_MAX_DIFF_WORK = 50_000_000
"""Above this `len(old) * len(new)` of the changed middle, the middle counts as rewritten (no diff is run)."""

_MAX_LOCATE_WORK = 20_000_000
"""Above this `len(text) * len(anchored text)`, `realign` does not search an edited part for an anchored span."""


# --- hashing ----------------------------------------------------------------------------------------------------


def _hash(text: str) -> str:
    try:
        data = text.encode()
    except UnicodeEncodeError:  # lone surrogates, e.g. from JSON escapes
        data = text.encode('utf-8', 'surrogatepass')
    return hashlib.sha256(data).hexdigest()[:16]


# --- edit_text ------------------------------------------------------------------------------------------------------


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


class _Diff:
    """Maps ranges of the old text onto the new one, through the blocks the two texts share."""

    def __init__(self, old: str, new: str) -> None:
        n_old, n_new = len(old), len(new)
        limit = min(n_old, n_new)
        prefix = _common_length(lambda k: old[:k] == new[:k], limit)
        suffix = _common_length(lambda k: old[n_old - k :] == new[n_new - k :], limit - prefix)
        blocks: list[tuple[int, int, int]] = []
        if prefix:
            blocks.append((0, 0, prefix))
        a, b = old[prefix : n_old - suffix], new[prefix : n_new - suffix]
        if a and b and len(a) * len(b) <= _MAX_DIFF_WORK:
            matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
            for i, j, size in matcher.get_matching_blocks():
                if size:
                    blocks.append((prefix + i, prefix + j, size))
        if suffix:
            blocks.append((n_old - suffix, n_new - suffix, suffix))
        merged: list[tuple[int, int, int]] = []
        for block in blocks:
            if merged:
                i, j, size = merged[-1]
                if i + size == block[0] and j + size == block[1]:
                    merged[-1] = (i, j, size + block[2])
                    continue
            merged.append(block)
        self.blocks = merged
        self.identity = n_old == n_new and merged == [(0, 0, n_old)] or (n_old == n_new == 0)

    def map(self, start: int, end: int) -> tuple[int, int] | None:
        """The new range of the old range `start..end`, or `None` when its text did not survive unchanged."""
        for i, j, size in self.blocks:
            if i <= start and end <= i + size:
                return j + start - i, j + end - i
        return None


def edit_text(part: TextPart, new_text: str) -> TextPart:
    """A copy of `part` with `new_text` as its content and its citations realigned to it.

    A citation whose anchored text is unchanged by the edit is shifted to where that text now is; one whose text
    changed is dropped. Citations without an anchor are kept. `provider_details['citations']` is kept in step
    (entries of dropped citations removed, positions shifted), or removed when it cannot be. `id` is cleared (OpenAI
    Responses uses its stored copy of an item sent with its id, whatever the text), `provider_name` is kept.

    Use `edit_text_with_report` to learn what was dropped.
    """
    return edit_text_with_report(part, new_text)[0]


def edit_text_with_report(part: TextPart, new_text: str) -> tuple[TextPart, list[CitationProblem]]:
    """`edit_text`, also returning a `citation_dropped_after_edit` problem for each citation (or raw data) dropped.

    Problems carry `citation_index` (into the *old* part's citations) and the old anchor's offsets.

    Raises:
        UserError: `part` is not a `TextPart` or `new_text` is not a `str`.
    """
    if not isinstance(part, TextPart):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UserError(f'`edit_text` edits a `TextPart`, got {part!r}.')
    if not isinstance(new_text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UserError(f'`new_text` must be a `str`, got {new_text!r}.')
    old_text = part.content
    diff = _Diff(old_text, new_text)

    def mapper(start: int, end: int) -> tuple[int, int] | None:
        if not (0 <= start < end <= len(old_text)):
            return None
        return diff.map(start, end)

    return _realign(
        part,
        new_text,
        mapper,
        identity=diff.identity,
        reason='the edit changed the words it anchors (or its anchor did not fit the old text)',
    )


def _realign(
    part: TextPart,
    new_text: str,
    mapper: Callable[[int, int], tuple[int, int] | None],
    *,
    identity: bool,
    reason: str,
    locate: Callable[[int], tuple[int, int] | None] | None = None,
) -> tuple[TextPart, list[CitationProblem]]:
    """Rebuild `part` on `new_text`: `mapper` maps an old anchor range to its new one (`None`: drop the citation).

    `locate(citation_index)`, when given, is used instead of `mapper` for anchored citations.
    """
    problems: list[CitationProblem] = []
    old_citations = _citations(part)
    kept: list[Citation] = []
    dropped_ranges: list[tuple[int, int]] = []
    moved: dict[tuple[int, int], tuple[int, int]] = {}
    shifted = False
    for index, citation in enumerate(old_citations):
        anchor = citation.anchor
        if anchor is None:
            kept.append(citation)
            continue
        start, end = _anchor_range(anchor)
        new_range = (
            locate(index)
            if locate is not None
            else (mapper(start, end) if start is not None and end is not None else None)
        )
        if new_range is None or start is None or end is None:
            problems.append(
                CitationProblem(
                    'citation_dropped_after_edit',
                    f'Citation {index} was dropped: {reason}.',
                    citation_index=index,
                    start=start,
                    end=end,
                )
            )
            if start is not None and end is not None:
                dropped_ranges.append((start, end))
            continue
        moved[(start, end)] = new_range
        if new_range != (start, end):
            shifted = True
        anchor_type = MarkerCitationAnchor if isinstance(anchor, MarkerCitationAnchor) else ContentCitationAnchor
        kept.append(replace(citation, anchor=anchor_type(start=new_range[0], end=new_range[1])))

    details = dict(part.provider_details) if part.provider_details is not None else None
    changed = shifted or bool(problems) or (not identity and locate is None and len(kept) != len(old_citations))
    if details is not None and 'citations' in details and changed:
        raw = _raw_in_step(details['citations'], len(old_citations), len(kept) == len(old_citations), moved)
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
            del details['citations']  # every entry belonged to a dropped citation, each reported above
    new_part = replace(
        part,
        content=new_text,
        id=None,
        citations=kept or None,
        provider_details=details or None,
    )
    return new_part, problems


def _citations(part: TextPart) -> list[Citation]:
    citations = cast(object, part.citations)
    if isinstance(citations, list):
        return [c for c in cast(list[object], citations) if isinstance(c, Citation)]
    return []


def _anchor_range(anchor: object) -> tuple[int | None, int | None]:
    start = cast(object, getattr(anchor, 'start', None))
    end = cast(object, getattr(anchor, 'end', None))
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end:
        return start, end
    return None, None


def _range_holder(entry: object) -> dict[str, object] | None:
    """The dict holding `start_index`/`end_index` (character offsets) of a raw entry, if any.

    OpenAI Responses and xAI keep them at the top level, OpenAI Chat under `url_citation`. Google's `segment`
    offsets are UTF-8 bytes and are deliberately not read here.
    """
    if not isinstance(entry, dict):
        return None
    entry = cast(dict[str, object], entry)
    for holder in (entry, entry.get('url_citation')):
        if isinstance(holder, dict):
            holder = cast(dict[str, object], holder)
            if isinstance(holder.get('start_index'), int) and isinstance(holder.get('end_index'), int):
                return holder
    return None


def _has_ranges(raw: object) -> bool:
    return isinstance(raw, list) and all(_range_holder(e) is not None for e in cast(list[object], raw))


def _raw_in_step(
    raw: object, n_citations: int, all_kept: bool, moved: dict[tuple[int, int], tuple[int, int]]
) -> list[object] | None:
    """The raw citation list kept in step with the realigned citations, or `None` if that cannot be done."""
    if not isinstance(raw, list):
        return None
    entries = cast(list[object], raw)
    if _has_ranges(entries):
        out: list[object] = []
        for item in entries:
            holder = _range_holder(item)
            assert holder is not None
            old = (cast(int, holder['start_index']), cast(int, holder['end_index']))
            new = moved.get(old)
            if new is None:
                continue  # the citation at this range was dropped (or never mapped): its raw entry goes too
            new_holder = {**holder, 'start_index': new[0], 'end_index': new[1]}
            if holder is item:
                out.append(new_holder)
            else:
                out.append({**cast(dict[str, object], item), 'url_citation': new_holder})
        return out
    if n_citations == 1:
        # Anthropic and Bedrock: one citation per block, every raw entry belongs to it.
        return list(entries) if all_kept and moved else []
    return None


# --- fingerprints ---------------------------------------------------------------------------------------------------


def _is_cited(part: object) -> bool:
    if not isinstance(part, TextPart):
        return False
    return bool(part.citations) or bool(part.provider_details and 'citations' in part.provider_details)


def _anchor_prints(part: TextPart) -> list[list[str | int] | None]:
    prints: list[list[str | int] | None] = []
    for citation in _citations(part):
        start, end = _anchor_range(citation.anchor) if citation.anchor is not None else (None, None)
        if start is None or end is None or end > len(part.content):
            prints.append(None)
        else:
            prints.append([_hash(part.content[start:end]), end - start])
    return prints


def fingerprint_response(response: ModelResponse) -> None:
    """Record, in place, a fingerprint of each cited text part of `response` in `response.metadata`.

    Stored under `metadata['pydantic_ai_citations']` as `{'fingerprints': {'<part index>': '<hash>'}, 'anchors':
    {'<part index>': [[<hash of anchored text>, <length>] | None, ...]}}`, plus `'out_of_range': {'<part index>':
    [[<citation index>, <start>, <end>], ...]}` when an anchor does not fit its text, and `'markers': ['<part
    index>', ...]`, the parts whose text may hold raw citation markers (so that a history checked later need not
    look for markers in text its fingerprint vouches for): JSON-safe, kept by `ModelMessagesTypeAdapter` round
    trips, and never sent to a model (`ModelResponse.metadata` is not). Parts without citations are not
    fingerprinted. Mutates `response.metadata` in place when it is a dict, so a dict shared with a
    `StreamedResponse` carries the fingerprint into `run_stream` history too.
    """
    prints: dict[str, str] = {}
    anchors: dict[str, list[list[str | int] | None]] = {}
    out_of_range: dict[str, list[list[int | None]]] = {}
    markers: list[str] = []
    for index, part in enumerate(response.parts):
        if _is_cited(part):
            assert isinstance(part, TextPart)
            prints[str(index)] = _hash(part.content)
            if _text_may_have_markers(part.content):
                markers.append(str(index))
            anchors[str(index)] = _anchor_prints(part)
            bad = _anchor_findings(part.citations, len(part.content))
            if bad:
                out_of_range[str(index)] = [[ci, start, end] for _, ci, start, end in bad]
    if not prints:
        return
    if response.metadata is None:
        response.metadata = {}
    ours: dict[str, object] = {'fingerprints': prints, 'anchors': anchors, 'markers': markers}
    if out_of_range:
        ours['out_of_range'] = out_of_range
    response.metadata[METADATA_KEY] = ours


def _stored_anchors(response: ModelResponse, part_index: int) -> list[object] | None:
    metadata = cast(dict[str, object], response.metadata or {})
    ours = metadata.get(METADATA_KEY)
    if not isinstance(ours, dict):
        return None
    anchors = cast(dict[str, object], ours).get('anchors')
    if not isinstance(anchors, dict):
        return None
    found = cast(dict[str, object], anchors).get(str(part_index))
    return cast(list[object], found) if isinstance(found, list) else None


# --- find_stale -----------------------------------------------------------------------------------------------------

_Finding = tuple[Literal['stale_after_edit', 'anchor_out_of_range'], int | None, int | None, int | None]
"""(code, citation index, start, end) for one part; message and part indexes are added by the caller."""


class _IdentityCache:
    """Results of checking a part, keyed by the part's identity and the identity of what was checked.

    Strings are immutable, so while `part.content` is the same `str` object (and the citations list and the
    fingerprint the same objects or equal), the part cannot have changed in a way that matters: no re-hashing.
    The part is held by a weak reference, so a cached id is never mistaken for a new object's. Bounded: the oldest
    entries are evicted beyond `max_size`. Races between threads only cost repeated work (dict operations are atomic).
    """

    def __init__(self, max_size: int = 200_000) -> None:
        self.max_size = max_size
        self.data: dict[int, tuple[Any, ...]] = {}
        """id(part) -> (weak reference to the part, its content, its citations, *cached values)."""

    def put(self, part: TextPart, *values: object) -> None:
        self.data[id(part)] = (weakref.ref(part), part.content, part.citations, *values)
        if len(self.data) > self.max_size:
            self.trim()

    def trim(self) -> None:
        """Evict the oldest entries down to `max_size`."""
        data = self.data
        with contextlib.suppress(KeyError, StopIteration, RuntimeError):  # another thread got there first
            while len(data) > self.max_size:
                del data[next(iter(data))]

    def clear(self) -> None:
        self.data.clear()


_cache = _IdentityCache()
_STALE: tuple[_Finding, ...] = (('stale_after_edit', None, None, None),)


def _anchor_findings(citations: object, size: int) -> tuple[_Finding, ...]:
    if not citations:
        return ()
    items: Any = citations
    try:  # fast path: well-formed citations, every anchor in range
        for citation in items:
            anchor = citation.anchor
            if anchor is not None and not (0 <= anchor.start < anchor.end <= size):
                break
        else:
            return ()
    except (AttributeError, TypeError):
        pass
    findings: list[_Finding] = []
    for index, citation in enumerate(items):
        anchor: Any = getattr(citation, 'anchor', None)
        if anchor is None:
            continue
        start: Any = getattr(anchor, 'start', None)
        end: Any = getattr(anchor, 'end', None)
        if start.__class__ is int and end.__class__ is int and 0 <= start < end <= size:
            continue
        findings.append(
            (
                'anchor_out_of_range',
                index,
                start if start.__class__ is int else None,
                end if end.__class__ is int else None,
            )
        )
    return tuple(findings)


def _stored_findings(out_of_range: object, key: str) -> tuple[_Finding, ...]:
    found = cast(dict[str, object], out_of_range).get(key) if isinstance(out_of_range, dict) else None
    findings: list[_Finding] = []
    for item in cast(list[object], found) if isinstance(found, list) else []:
        if isinstance(item, list) and len(cast(list[object], item)) == 3:
            ci, start, end = cast(list[object], item)
            findings.append(
                (
                    'anchor_out_of_range',
                    ci if isinstance(ci, int) else None,
                    start if isinstance(start, int) else None,
                    end if isinstance(end, int) else None,
                )
            )
    return tuple(findings)


_KEYS = tuple(str(i) for i in range(256))
# A superset of numbered markers (`[1]`, `[ 1, 2]`): only a hint that one may be there.
_MARKER_HINT = re.compile('\\[ {0,2}[0-9]')


def _may_have_markers(content: str, citations: object) -> bool:
    # `isascii()` is O(1) on CPython's compact strings: the private-use and CJK-bracket markers are not ASCII.
    # A `[N]` only counts when a citation is marker-anchored on it, so the regex runs only on cited text.
    # `'<' in` is a `memchr`, where `'<cite' in` is a substring search: the cheap tests come first.
    return (
        ('<' in content and ('<cite' in content or '</cite>' in content))
        or (not content.isascii() and ('\ue200' in content or '【' in content))
        or (bool(citations) and '[' in content and _MARKER_HINT.search(content) is not None)
    )


"""Anything `strip_citation_markers` might remove (a `[N]` only counts when a citation is anchored on it)."""


def _text_may_have_markers(content: str) -> bool:
    """`_may_have_markers` whatever the citations: true for any text `strip_citation_markers` might change."""
    return _may_have_markers(content, True)


_Survey = list[tuple[int, int, TextPart | None, tuple[_Finding, ...]]]
_Marked = list[tuple[int, ModelResponse, int, TextPart]]


@dataclass
class _Snapshot:
    """What a survey saw, so the next survey of the same history (grown or not) can skip what did not change.

    `valid()` checks, with C-level `map` passes instead of a Python loop, that every text part the survey looked
    at is still in its message, with the same `content`, `citations` and message `metadata` objects.
    """

    messages: list[ModelMessage]
    markers: bool
    found: _Survey
    marked: _Marked
    responses: list[ModelResponse] = field(default_factory=list[ModelResponse])
    """Every response surveyed, with its `parts` list, its length and its `metadata`."""
    part_lists: list[list[object]] = field(default_factory=list[list[object]])
    part_counts: list[int] = field(default_factory=list[int])
    metadata: list[object] = field(default_factory=list[object])
    all_parts: list[object] = field(default_factory=list[object])
    """Every part of those responses, in order."""
    text_parts: list[TextPart] = field(default_factory=list[TextPart])
    """Every text part, with its `content` and `citations`."""
    contents: list[object] = field(default_factory=list[object])
    citations: list[object] = field(default_factory=list[object])
    prints: list[object] = field(default_factory=list[object])
    """For each text part, its fingerprint, what was found (`None`: not checked, uncited) and whether it may hold
    markers (`None`: not looked for): `_cache` entries to be, so that no part costs a cache entry (a weak reference
    and a tuple, tracked by the garbage collector) unless a survey of another history may need it."""
    findings: list[object] = field(default_factory=list[object])
    hints: list[object] = field(default_factory=list[object])
    cached: int = 0
    """How many text parts are in `_cache` already."""

    def to_cache(self) -> None:
        """Put what this survey checked into `_cache`, for surveys of other histories holding the same parts."""
        n = len(self.text_parts)
        if self.cached < n:
            data = _cache.data
            ref = weakref.ref
            for part, content, citations, value, findings, markers in itertools.islice(
                zip(
                    self.text_parts, self.contents, self.citations, self.prints, self.findings, self.hints, strict=True
                ),
                self.cached,
                None,
            ):
                if findings is not None:
                    data[id(part)] = (ref(part), content, citations, value, findings, markers)
            self.cached = n
            if len(data) > _cache.max_size:
                _cache.trim()

    def valid(self) -> bool:
        try:
            return (
                all(map(operator.is_, map(_get_parts, self.responses), self.part_lists))
                and list(map(len, self.part_lists)) == self.part_counts
                and all(map(operator.is_, itertools.chain.from_iterable(self.part_lists), self.all_parts))
                and all(map(operator.is_, map(_get_metadata, self.responses), self.metadata))
                and all(map(operator.is_, map(_get_content, self.text_parts), self.contents))
                and all(map(operator.is_, map(_get_citations, self.text_parts), self.citations))
            )
        except (TypeError, AttributeError):
            return False


_get_parts = operator.attrgetter('parts')
_get_content = operator.attrgetter('content')
_get_citations = operator.attrgetter('citations')
_get_metadata = operator.attrgetter('metadata')
_snapshots: list[_Snapshot] = []
_MAX_SNAPSHOTS = 8
"""Histories remembered (most recent first); each holds its messages alive until replaced."""


def _prior(messages: Sequence[ModelMessage], markers: bool) -> _Snapshot | None:
    """The snapshot of an earlier survey of `messages` (or of a prefix of it) that is still true, if any."""
    if not messages:
        return None
    first = messages[0]
    for snap in list(_snapshots):
        n = len(snap.messages)
        if (
            snap.messages[0] is first
            and n <= len(messages)
            and (snap.markers or not markers)
            and all(map(operator.is_, itertools.islice(messages, n), snap.messages))
            and snap.valid()
        ):
            return snap
    return None


def _survey(messages: Sequence[ModelMessage], marked: _Marked | None = None) -> _Survey:
    """One pass over a history: (message index, part index, part or `None` if gone, findings) for parts with findings.

    With `marked`, also appends the text parts that may hold raw citation markers. This is the hot path of
    `find_stale` and `CleanStaleCitations`, written for speed. A history surveyed before (the same message objects,
    possibly with more after them) is checked with C-level identity passes (`_Snapshot.valid`) and only its new
    messages are looked at. Otherwise each text part costs one cache lookup and a few identity checks when it was
    checked before (no hashing, no reading its citations: a long history is memory-bound), and one hash when it is
    new. What a survey checks is kept in its snapshot, and goes into `_cache` (`_Snapshot.to_cache`) only when a
    survey of another history may use it: a first pass makes no cache entries. Values read from metadata are
    untyped JSON data (`Any`) here.
    """
    want_markers = marked is not None
    prior = _prior(messages, want_markers)
    if prior is not None and len(prior.messages) == len(messages):
        # Nothing new and nothing changed since the last survey of this history.
        if marked is not None:
            marked.extend(prior.marked)
        return list(prior.found)
    if prior is not None:
        start = len(prior.messages)
        snap = _Snapshot(
            list(messages),
            want_markers,
            list(prior.found),
            list(prior.marked) if want_markers else [],
            list(prior.responses),
            list(prior.part_lists),
            list(prior.part_counts),
            list(prior.metadata),
            list(prior.all_parts),
            list(prior.text_parts),
            list(prior.contents),
            list(prior.citations),
            list(prior.prints),
            list(prior.findings),
            list(prior.hints),
            prior.cached,
        )
    else:
        start = 0
        snap = _Snapshot(list(messages), want_markers, [], [])
        # A history not surveyed before (or changed since): what earlier surveys checked may apply to its parts.
        for other in list(_snapshots):
            other.to_cache()
    # Only the new messages are looked at: what other histories' surveys checked goes into `_cache` at the first miss.
    absorb = prior is not None and len(_snapshots) > 1
    found = snap.found
    snap_marked = snap.marked
    t_responses, t_lists, t_counts = snap.responses.append, snap.part_lists.append, snap.part_counts.append
    t_metadata, t_all = snap.metadata.append, snap.all_parts.extend
    t_texts, t_contents, t_citations = snap.text_parts.append, snap.contents.append, snap.citations.append
    t_prints, t_findings, t_markers = snap.prints.append, snap.findings.append, snap.hints.append
    cached = _cache.data.get
    put = _cache.data.__setitem__
    numbered = _MARKER_HINT.search
    key_name = METADATA_KEY
    keys = _KEYS
    sha256 = hashlib.sha256
    text_type = TextPart
    response_type = ModelResponse
    request_type = ModelRequest
    message_index = start - 1
    response: Any  # the loop reads typed objects through `Any`: `cast()` is a call, and this loop is hot
    for response in itertools.islice(messages, start, None):
        message_index += 1
        message_type = response.__class__
        if message_type is not response_type and (
            message_type is request_type or not isinstance(response, ModelResponse)
        ):
            continue
        metadata: Any = response.metadata
        response_parts: Any = response.parts
        # Recorded while the objects are in the CPU cache: a second pass over memory costs as much as the first.
        t_responses(response)
        t_lists(response_parts)
        t_counts(len(response_parts))
        t_metadata(metadata)
        t_all(response_parts)
        prints: Any = None
        out_of_range: Any = None
        marker_keys: Any = None
        if metadata:
            try:
                ours: Any = metadata[key_name]
                prints = ours['fingerprints']
                out_of_range = ours.get('out_of_range')
                if want_markers:
                    marker_keys = ours.get('markers')
            except (KeyError, TypeError, IndexError, AttributeError):
                prints = None
            if prints.__class__ is not dict:
                prints = None
            if marker_keys.__class__ is not list:
                marker_keys = None  # fingerprinted before `'markers'` was recorded, or not readable: look
        seen = 0
        part_index = -1
        text_part: Any
        for text_part in response_parts:
            part_index += 1
            if text_part.__class__ is not text_type and not isinstance(text_part, TextPart):
                continue
            content: Any = text_part.content
            citations: Any = text_part.citations
            t_texts(text_part)
            t_contents(content)
            t_citations(citations)
            value: Any = None
            name: Any = None
            if prints:
                name = keys[part_index] if part_index < 256 else str(part_index)
                value = prints.get(name)
                if value is not None:
                    seen += 1
            if value is None and not citations:
                # Uncited and never fingerprinted: nothing can be stale. Only a marker check (a few C-level `in`
                # tests, no regex without citations) when wanted; not worth a cache entry.
                if (
                    want_markers
                    and content.__class__ is str
                    and (
                        ('<' in content and ('<cite' in content or '</cite>' in content))
                        or (not content.isascii() and ('\ue200' in content or '【' in content))
                    )
                ):
                    snap_marked.append((message_index, response, part_index, text_part))
                t_prints(None)
                t_findings(None)
                t_markers(None)
                continue
            key = id(text_part)
            hit = cached(key)
            if hit is None and absorb:
                absorb = False
                for other in list(_snapshots):
                    if other is not prior:
                        other.to_cache()
                hit = cached(key)
            if (
                hit is not None
                and hit[1] is content
                and hit[2] is citations
                and hit[3] == value
                and hit[0]() is text_part
            ):
                findings: Any = hit[4]
                markers: Any = hit[5]
                if markers is None and want_markers:
                    markers = content.__class__ is str and _may_have_markers(content, citations)
                    put(key, (hit[0], content, citations, value, findings, markers))
            else:
                vouched = False
                if value is not None:
                    if content.__class__ is not str:
                        findings = _STALE
                    else:
                        try:
                            digest = sha256(content.encode()).hexdigest()[:16]
                        except UnicodeEncodeError:
                            digest = _hash(content)
                        vouched = value == digest
                        findings = () if vouched else _STALE
                    if vouched and out_of_range:
                        # The text is the one its citations were made for, and their anchors were checked when it
                        # was fingerprinted: the citations need not be read again.
                        findings = _stored_findings(out_of_range, name)
                elif citations:
                    findings = _anchor_findings(citations, len(content)) if content.__class__ is str else ()
                else:
                    findings = ()
                if want_markers and vouched and marker_keys is not None and name not in marker_keys:
                    # The text is the one fingerprinted, and `fingerprint_response` found nothing that
                    # `strip_citation_markers` could remove in it, whatever its citations.
                    markers = False
                elif want_markers:  # `_may_have_markers`, inlined (a call costs more than its cheap tests)
                    markers = content.__class__ is str and (
                        ('<' in content and ('<cite' in content or '</cite>' in content))
                        or (not content.isascii() and ('\ue200' in content or '【' in content))
                        or (bool(citations) and '[' in content and numbered(content) is not None)
                    )
                else:
                    markers = None
            t_prints(value)
            t_findings(findings)
            t_markers(markers)
            if findings:
                found.append((message_index, part_index, text_part, findings))
            if markers:
                snap_marked.append((message_index, response, part_index, text_part))
        if prints and seen < len(prints):
            # A fingerprinted part that is gone, or is no longer a text part.
            parts = response.parts
            for name in prints:
                try:
                    index = int(name)
                except (TypeError, ValueError):
                    continue
                if not (0 <= index < len(parts) and isinstance(parts[index], TextPart)):
                    found.append((message_index, index, None, _STALE))
    if prior is not None:
        with contextlib.suppress(ValueError):
            _snapshots.remove(prior)
    _snapshots.insert(0, snap)
    for old in _snapshots[_MAX_SNAPSHOTS:]:
        old.to_cache()  # what it checked outlives it, as when every part had its cache entry at once
    del _snapshots[_MAX_SNAPSHOTS:]
    if marked is not None:
        marked.extend(snap_marked)
    return list(found)


_MESSAGES = {
    'stale_after_edit': 'The text of this cited part changed since its citations were made (fingerprint mismatch); '
    'its anchors and raw citation data may point at the wrong words.',
    'anchor_out_of_range': 'A citation anchor does not fit the text of its part.',
}


def find_stale(messages: Sequence[ModelMessage]) -> list[CitationProblem]:
    """Check a history for cited parts whose text changed since their citations were made.

    Reports `stale_after_edit` for a fingerprinted part (see `fingerprint_response`) whose text no longer matches
    its fingerprint (or that is gone), and `anchor_out_of_range` for an anchor that does not fit its part's text.
    Results are cached per part (by identity, and the identity of its text and citations), so checking a growing
    conversation again only pays for the parts not checked before. Nothing is changed.
    """
    problems: list[CitationProblem] = []
    for message_index, part_index, _part, findings in _survey(messages):
        for code, citation_index, start, end in findings:
            problems.append(
                CitationProblem(
                    code,
                    _MESSAGES[code],
                    message_index=message_index,
                    part_index=part_index,
                    citation_index=citation_index,
                    start=start,
                    end=end,
                )
            )
    return problems


# --- repairing edited parts (no old text) -------------------------------------------------------------------------


def _locate(text: str, print_: object) -> tuple[int, int] | None:
    """The unique range of `text` whose hash is the stored anchor fingerprint `[hash, length]`, if any."""
    if not isinstance(print_, list) or len(cast(list[object], print_)) != 2:
        return None
    digest, length = cast(list[object], print_)
    if not isinstance(digest, str) or not isinstance(length, int) or length <= 0 or length > len(text):
        return None
    if len(text) * length > _MAX_LOCATE_WORK:
        return None
    found: tuple[int, int] | None = None
    for start in range(len(text) - length + 1):
        if _hash(text[start : start + length]) == digest:
            if found is not None:
                return None  # not unique
            found = (start, start + length)
    return found


def _repair(
    response: ModelResponse, part_index: int, part: TextPart, on_edit: Literal['realign', 'clear']
) -> tuple[TextPart, list[CitationProblem]]:
    if on_edit == 'clear':
        details = dict(part.provider_details) if part.provider_details else {}
        details.pop('citations', None)
        return replace(part, id=None, citations=None, provider_details=details or None), []
    stored = _stored_anchors(response, part_index) or []
    text = part.content
    citations = _citations(part)

    def locate(index: int) -> tuple[int, int] | None:
        # Still in place and unchanged?
        start, end = _anchor_range(citations[index].anchor)
        if not stored:
            # No anchor fingerprints (history from before this package, or written by hand): nothing says the
            # anchors are stale, so keep those that fit the text.
            return (start, end) if start is not None and end is not None and end <= len(text) else None
        print_ = stored[index] if index < len(stored) and len(stored) == len(citations) else None
        if print_ is None:
            return None
        digest = cast(list[object], print_)[0] if isinstance(print_, list) and print_ else None
        if start is not None and end is not None and end <= len(text) and _hash(text[start:end]) == digest:
            return start, end
        return _locate(text, cast(object, print_))

    return _realign(
        part,
        text,
        lambda s, e: None,
        identity=False,
        reason='its anchored text could not be found exactly once in the edited text',
        locate=locate,
    )


def _clean_history(
    messages: list[ModelMessage], on_edit: Literal['realign', 'clear'], marked: _Marked | None = None
) -> tuple[dict[int, ModelResponse], list[CitationProblem]]:
    """New responses (by message index) with edited cited parts repaired, and what was found.

    With `marked`, the parts that may hold raw citation markers are appended to it (see `_survey`).
    """
    replaced: dict[int, ModelResponse] = {}
    problems: list[CitationProblem] = []
    grouped: dict[int, list[tuple[int, TextPart | None, tuple[_Finding, ...]]]] = {}
    for message_index, part_index, part, findings in _survey(messages, marked):
        if findings[0][0] == 'stale_after_edit':  # an anchor the provider got wrong is reported, not changed
            grouped.setdefault(message_index, []).append((part_index, part, findings))
    for message_index, items in grouped.items():
        response = messages[message_index]
        assert isinstance(response, ModelResponse)
        parts = list(response.parts)
        for part_index, part, findings in items:
            code = findings[0][0]
            action = 'cleared' if on_edit == 'clear' else 'realigned'
            problems.append(
                CitationProblem(
                    code,
                    f'{_MESSAGES[code]} Its citations were {action} before the next request.',
                    message_index=message_index,
                    part_index=part_index,
                    citation_index=findings[0][1],
                    start=findings[0][2],
                    end=findings[0][3],
                )
            )
            if part is None:
                continue
            new_part, dropped = _repair(response, part_index, part, on_edit)
            problems.extend(replace(p, message_index=message_index, part_index=part_index) for p in dropped)
            parts[part_index] = new_part
        new_response = replace(response, parts=parts, metadata=copy.deepcopy(response.metadata))
        ours = cast(dict[str, object], (new_response.metadata or {})).pop(METADATA_KEY, None)
        del ours
        if new_response.metadata == {}:
            new_response.metadata = None
        fingerprint_response(new_response)
        replaced[message_index] = new_response
    return replaced, problems


# --- provider markers ---------------------------------------------------------------------------------------------

_RAW_MARKERS = re.compile('\ue200[^\ue201]{0,500}\ue201|【[^】†]{0,200}†[^】]{0,200}】|<cite\\b[^>]{0,500}>|</cite>')
_QUICK = re.compile('\ue200|【|<cite|</cite>')


def strip_citation_markers(part: TextPart) -> tuple[TextPart, list[tuple[int, int]]]:
    """A copy of `part` without raw citation markers, and the removed ranges (offsets into the old text).

    Removes OpenAI's private-use markers (`\\ue200…\\ue201`), `【…†…】` markers, Anthropic `<cite …>`/`</cite>` tags
    (the cited words stay), and `[N]` markers where one of the part's citations is marker-anchored exactly on them
    (Perplexity style). Citations are realigned with `edit_text`. Returns `part` itself when nothing was found.
    """
    text = part.content
    ranges = [(m.start(), m.end()) for m in _RAW_MARKERS.finditer(text)]
    ranges.extend(_numbered_markers(part))
    if not ranges:
        return part, []
    ranges.sort()
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    pieces: list[str] = []
    last = 0
    for start, end in merged:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return edit_text(part, ''.join(pieces)), merged


_marker_cache = _IdentityCache()


def _numbered_markers(part: TextPart) -> Iterator[tuple[int, int]]:
    """Where citations of `part` are marker-anchored on a numbered marker (`[1]`, `[1, 2]`)."""
    for citation in _citations(part):
        anchor = citation.anchor
        if isinstance(anchor, MarkerCitationAnchor):
            start, end = _anchor_range(anchor)
            if start is not None and end is not None and is_numbered_marker(part.content, start, end):
                yield start, end


def _numbered(part: TextPart) -> bool:
    """Whether a citation of `part` is marker-anchored on a numbered marker."""
    return next(_numbered_markers(part), None) is not None


def _stripped(part: TextPart) -> tuple[TextPart, list[tuple[int, int]]] | None:
    """`strip_citation_markers(part)` when it removes something, else `None`; cached per part identity."""
    hit = _marker_cache.data.get(id(part))
    if hit is not None and hit[0]() is part and hit[1] is part.content and hit[2] is part.citations:
        return cast('tuple[TextPart, list[tuple[int, int]]] | None', hit[4])
    content = cast(object, part.content)
    result: tuple[TextPart, list[tuple[int, int]]] | None = None
    if isinstance(content, str) and (_QUICK.search(content) is not None or ('[' in content and _numbered(part))):
        stripped, removed = strip_citation_markers(part)
        result = (stripped, removed) if removed else None
    _marker_cache.put(part, None, result)
    return result


def _candidates(messages: Sequence[ModelMessage], marked: _Marked | None) -> _Marked:
    """The parts of `messages` that may hold markers.

    That is `marked` (from this step's survey) while it still describes `messages`, else a fresh survey.
    """
    if marked is not None:
        n = len(messages)
        if all(i < n and messages[i] is m and m.parts[j] is p for i, m, j, p in marked):
            return marked
    fresh: _Marked = []
    _survey(messages, fresh)
    return fresh


def _strip_for(
    model: Model, messages: Sequence[ModelMessage], marked: _Marked | None = None
) -> tuple[list[ModelMessage] | None, list[CitationProblem]]:
    """`messages` with markers stripped from parts `model` does not accept as its own, or `None` if none had any."""
    out: list[ModelMessage] | None = None
    problems: list[CitationProblem] = []
    new_parts: dict[int, list[object]] = {}
    for message_index, message, part_index, part in _candidates(messages, marked):
        if model.accepts_stateless_artifacts(message, part):
            continue  # the same provider: sent exactly as Pydantic AI would send it
        found = _stripped(part)
        if found is None:
            continue
        stripped, removed = found
        new_parts.setdefault(message_index, list(message.parts))[part_index] = stripped
        problems.append(
            CitationProblem(
                'markers_stripped_for_provider',
                f'{len(removed)} raw citation marker(s) of provider {part.provider_name!r} were removed from '
                f'what is sent to {model.system!r} ({model.model_name}); the stored history keeps them.',
                message_index=message_index,
                part_index=part_index,
                start=removed[0][0],
                end=removed[0][1],
            )
        )
    if new_parts:
        out = list(messages)
        for message_index, parts in new_parts.items():
            message = out[message_index]
            assert isinstance(message, ModelResponse)
            out[message_index] = replace(message, parts=cast(list[TextPart], parts))
    return out, problems


# --- the capability -------------------------------------------------------------------------------------------------


@dataclass
class CleanStaleCitations(AbstractCapability[AgentDepsT]):
    """Keep citations in history true to their text: repair edited parts, and clean what goes to other providers.

    - After each model response, each cited text part is fingerprinted in `ModelResponse.metadata` (never sent to a
      model; see `fingerprint_response`), in `run`, `iter`, `run_stream_events` and `run_stream` alike.
    - Before each model request, parts whose text no longer matches their fingerprint (edited outside `edit_text`)
      are repaired in the stored history (`ctx.messages`, like Pydantic AI's `ProcessHistory`), as `on_edit` says,
      and reported as `stale_after_edit` in the run ledger.
    - For each attempt (also each model of a `FallbackModel`, and each candidate of `ModelFallback`), raw citation
      markers in parts another provider produced are removed from what is sent, as `on_provider_switch` says, and
      reported as `markers_stripped_for_provider`. The stored history keeps them. Parts of the provider serving the
      attempt are sent exactly as Pydantic AI sends them (Anthropic web-search citations, OpenAI Responses
      annotations with their item id).
    """

    _: KW_ONLY
    on_edit: Literal['realign', 'clear'] = 'realign'
    """What to do with the citations of an edited part. Default `'realign'`: keep each citation whose anchored text
    still appears exactly once in the edited text (moved there), drop the others. `'clear'`: drop them all."""
    on_provider_switch: Literal['strip_markers', 'keep'] = 'strip_markers'
    """What to do with raw citation markers in parts from another provider. Default `'strip_markers'`: remove them
    from what is sent (OpenAI `\\ue200…\\ue201` and `【…†…】` markers, Anthropic `<cite>` tags, marker-anchored
    `[N]`). `'keep'`: send the text as stored."""
    _state: _RunState = field(default_factory=lambda: _RunState(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.on_edit not in ('realign', 'clear'):
            raise UserError(f"`on_edit` must be 'realign' or 'clear', got {self.on_edit!r}.")
        if self.on_provider_switch not in ('strip_markers', 'keep'):
            raise UserError(f"`on_provider_switch` must be 'strip_markers' or 'keep', got {self.on_provider_switch!r}.")

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> CleanStaleCitations[AgentDepsT]:
        return CleanStaleCitations(on_edit=self.on_edit, on_provider_switch=self.on_provider_switch)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._state.run_id = ctx.run_id
        stored = ctx.messages
        marked: _Marked | None = [] if self.on_provider_switch == 'strip_markers' else None
        replaced, problems = _clean_history(stored, self.on_edit, marked)
        # One pass serves both hooks: `prepare_model_request` reuses the marked parts while they still describe
        # the messages it is given (checked by identity), and surveys again otherwise.
        self._state.marked = (len(stored), marked) if marked is not None and not replaced else None
        if not replaced:
            return request_context
        by_identity: dict[int, ModelResponse] = {}
        for index, response in replaced.items():
            by_identity[id(stored[index])] = response
            stored[index] = response  # in the stored history, like `ProcessHistory`
        request_context.messages = [
            by_identity.get(id(m), m) if isinstance(m, ModelResponse) else m for m in request_context.messages
        ]
        if ctx.run_id is not None:
            record_problems(ctx, problems)
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._state.run_id = ctx.run_id
        self._state.ctx = ctx
        model = request_context.model
        if self.on_provider_switch == 'keep' or isinstance(model, FallbackModel):
            return request_context  # a `FallbackModel`'s models are each cleaned by `get_wrapper_model`
        messages, problems = _strip_for(
            model, request_context.messages, self._state.marked_for(request_context.messages)
        )
        if messages is not None:
            request_context.messages = messages  # a copy: the stored history keeps the markers
            if ctx.run_id is not None:
                _record(ctx, problems, request_context.attempt, model)
        return request_context

    def get_wrapper_model(self, model: Model) -> Model | None:
        inner = model
        if self.on_provider_switch == 'strip_markers' and isinstance(model, FallbackModel):
            # `FallbackModel` tries its models inside one attempt, so `prepare_model_request` never sees them:
            # clean for each of them where it sends the request.
            clone = copy.copy(model)
            clone.models = [_CleanForProvider(m, self._state) for m in model.models]
            inner = clone
        return StreamWatch(inner, self._state.streams.append)

    async def after_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        streams = self._state.streams
        stream = None
        if response.metadata is not None:
            stream = next((s for s in streams if s.metadata is response.metadata), None)
        if stream is not None:
            streams.remove(stream)
        fingerprint_response(response)
        if stream is not None and response.metadata == {}:
            # The slot opened for a streamed response that needed no fingerprint: leave no trace.
            stream.metadata = None
            response.metadata = None
        return response


@dataclass
class _RunState:
    """What one run's `CleanStaleCitations` shares with the model wrappers it returns."""

    run_id: str | None = None
    ctx: RunContext[Any] | None = None
    """The run's context, so problems found by the model wrappers reach the run's `TrackCitations`."""
    streams: list[StreamedResponse] = field(default_factory=list[StreamedResponse])
    marked: tuple[int, _Marked] | None = None
    """This step's survey of parts that may hold markers: (length of the history surveyed, parts)."""

    def marked_for(self, messages: Sequence[ModelMessage]) -> _Marked | None:
        if self.marked is None or self.marked[0] != len(messages):
            return None
        return self.marked[1]


def _record(ctx: RunContext[Any] | str, problems: list[CitationProblem], attempt: int, model: Model) -> None:
    record_problems(ctx, problems)  # a run context also hands them to the run's `TrackCitations`
    run = entry(ctx if isinstance(ctx, str) else ctx.run_id or '')
    with run.lock:
        log = cast(list[dict[str, object]], run.extras.setdefault(LEDGER_KEY, []))
        log.append({'attempt': attempt, 'model': model.model_name, 'system': model.system, 'stripped': len(problems)})


class _CleanForProvider(WrapperModel):
    """One model of a `FallbackModel`: strips other providers' markers from what it is sent."""

    def __init__(self, wrapped: Model, state: _RunState) -> None:
        super().__init__(wrapped)
        self._state = state

    def _clean(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        cleaned, problems = _strip_for(self.wrapped, messages, self._state.marked_for(messages))
        if cleaned is None:
            return messages
        if self._state.run_id is not None:
            _record(self._state.ctx or self._state.run_id, problems, 0, self.wrapped)
        return cleaned

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await self.wrapped.request(self._clean(messages), model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with self.wrapped.request_stream(
            self._clean(messages), model_settings, model_request_parameters, run_context
        ) as stream:
            yield stream
