"""OpenAI private-use citation markers: `U+E200 family U+E202 id (U+E202 id)* (U+E202 L8[-L13])? U+E201`.

Grammar, as this module reads it:

- A *candidate* starts at `U+E200` and runs to the first `U+E201` (a complete candidate) or up to the next
  `U+E200` or the end of the text (an unterminated one, reported as `unterminated_marker`).
- The body of a complete candidate is split on `U+E202`. The first part is the family (`cite` by default;
  the caller says which families are allowed); a family that is not allowed is reported as
  `malformed_marker` ("unknown family"). The remaining parts are source ids (ASCII letters, digits, `_`,
  `-`). When the *last* part has the shape of a line locator (`L8` or `L8-L13`) it is the locator, never an
  id, and at least one id must precede it (a part shaped like a locator anywhere else is an error,
  not an id). Spaces and tabs around a part are trimmed and empty parts (a doubled `U+E202`) skipped, as OpenAI's
  reference helper does; `id_pattern` narrows the ids for systems with their own (`block5`). A body that does not
  fit is reported as `malformed_marker`:
  nothing is guessed from it.
- A lone `U+E201` or `U+E202` outside a candidate is not a marker. It is left in the text and not reported.
- With `escaped=True` each of the three delimiters may also be written as its literal escape text
  (`\\ue200`, `\\ue201`, `\\ue202`, six ASCII characters, `e` in either case), mixed freely with the real
  characters, as some models and logs print them.

All offsets are `str` indices into the text given. `MarkerScanner` gives exactly the markers and problems
`extract_markers_with_problems` gives on the joined text, whatever the split, in one pass over the text.
"""

from __future__ import annotations

import datetime
import html
import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from pydantic_ai import Citation, ContentCitationAnchor, DocumentCitationSource, WebCitationSource
from pydantic_ai.exceptions import UserError

from .._problems import CitationProblem, shorten
from .markup import MARKER_END, MARKER_SEPARATOR, MARKER_START, parse_openai_body, remove_marker_spans, scan_markup

__all__ = (
    'MARKER_START',
    'MARKER_END',
    'MARKER_SEPARATOR',
    'CITATION_INSTRUCTIONS',
    'LineRange',
    'Marker',
    'MarkerExtraction',
    'MarkerConversion',
    'MarkerScanner',
    'extract_markers',
    'extract_markers_with_problems',
    'strip_markers',
    'resolve',
    'render_source',
    'render_source_block',
    'citation_instructions',
)

_S = MARKER_START
_E = MARKER_END
_SEP = MARKER_SEPARATOR
_DELIMITERS = (_S, _E, _SEP)

_FAMILY_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]*')
# Ids this module *writes* (`render_source`): stricter than what the grammar reads (`formats.markup`).
_ID_RE = re.compile(r'[A-Za-z0-9_-]+')
_TAG_RE = re.compile(r'[A-Za-z][A-Za-z0-9_-]*')

# Escaped form: real characters or their `\ue20N` escape text.
_ESC_CANDIDATE_RE = re.compile(r'(?:\ue200|\\u[eE]200)(?:(?!\\u[eE]20[01])[^\ue200\ue201])*(?:\ue201|\\u[eE]201)?')
_ESC_SEP_RE = re.compile(r'\ue202|\\u[eE]202')
_ESC_CLOSE_RE = re.compile(r'(?:\ue201|\\u[eE]201)\Z')
# What follows an escaped opener and is still marker: family / id / locator characters and separators.
_ESC_BODY_RE = re.compile(r'(?:[A-Za-z0-9_.:-]|\ue202|\\u[eE]202){0,500}')
# What ends an open escaped candidate: any delimiter but a separator, real or escape text.
_ESC_STOP_RE = re.compile(r'[\ue200\ue201]|\\u[eE]20[01]')
_ESC_OPENER_RE = re.compile(r'\ue200|\\u[eE]200')
_ESC_PARTIAL_TAIL_RE = re.compile(r'\\(?:u(?:[eE](?:2(?:0)?)?)?)?\Z')

_DETAIL_MAX = 80
_CACHE_MAX = 4096


@dataclass(frozen=True)
class LineRange:
    """A line locator: lines `start` to `end` of the cited source, counting from 1, both included."""

    start: int
    """First cited line (1-based)."""
    end: int
    """Last cited line (1-based, included); equal to `start` for `L8`."""

    def __str__(self) -> str:
        return f'L{self.start}' if self.start == self.end else f'L{self.start}-L{self.end}'


@dataclass(frozen=True)
class Marker:
    """One well-formed marker found in a text."""

    raw: str
    """The marker exactly as written (`text[start:end]`)."""
    family: str
    """The family after `U+E200`, e.g. `'cite'`."""
    source_ids: tuple[str, ...]
    """The cited source ids, in the order written (at least one)."""
    locator: LineRange | None
    """The line range written as the last part, if any."""
    start: int
    """Offset of the opening delimiter."""
    end: int
    """Offset just after the closing delimiter."""


@dataclass(frozen=True)
class MarkerExtraction:
    """What `extract_markers_with_problems` found: the markers, and what it could not read as one."""

    markers: list[Marker]
    """Well-formed markers of an allowed family, in text order."""
    problems: list[CitationProblem]
    """`unterminated_marker` and `malformed_marker` problems (bad bodies, unknown families), in text order."""


@dataclass(frozen=True)
class MarkerConversion:
    """What `resolve` made of a text."""

    clean_text: str
    """The text with every marker removed, spaced as `strip_markers` (and a stream of it) spaces it."""
    citations: list[Citation]
    """One citation per marker with at least one known id, anchored on the sentence it closes in `clean_text`."""
    problems: list[CitationProblem]
    """Everything that could not become (part of) a citation; offsets are into the *original* text."""
    markers: list[Marker]
    """`markers[i]` is the marker behind `citations[i]` (keeps the raw ids and the line locator)."""


# --- parsing -------------------------------------------------------------------------------------------------

# A parsed marker: (family, ids, locator) for a good marker, or a message for a malformed one.
_Parsed = tuple[str, tuple[str, ...], LineRange | None] | str


def _check_families(families: Sequence[str], *, allow_empty: bool = False) -> frozenset[str]:
    if isinstance(families, str) or not (families or allow_empty):
        raise UserError(f'`families` must be a non-empty sequence of family names, got {families!r}.')
    for family in families:
        if not _FAMILY_RE.fullmatch(family):
            raise UserError(f'Invalid marker family {family!r}: use letters, digits and `_`, starting with a letter.')
    return frozenset(families)


def _parse_body(body: str, families: frozenset[str], id_pattern: re.Pattern[str] | None = None) -> _Parsed:
    """Parse a marker body written with real `U+E202` separators (the grammar is `formats.markup`'s).

    An unknown family is named before anything else wrong with the body.
    """
    parsed = parse_openai_body(body, id_pattern=id_pattern)
    if isinstance(parsed, str):
        family = body.split(_SEP, 1)[0].strip(' \t')
        return _unknown_family(family, families) if family not in families and _FAMILY_RE.fullmatch(family) else parsed
    if parsed.family not in families:  # (a parsed body's family is a valid name)
        return _unknown_family(parsed.family, families)
    locator = None if parsed.locator is None else LineRange(*parsed.locator)
    return parsed.family, parsed.source_ids, locator


def _unknown_family(family: str, families: frozenset[str]) -> str:
    return f'unknown marker family {family!r} (allowed: {", ".join(sorted(families)) or "none"})'


def _parse_raw(raw: str, families: frozenset[str], id_pattern: re.Pattern[str] | None) -> _Parsed:
    """Parse a complete candidate whose delimiters may be escape text."""
    body_start = 1 if raw[0] == _S else 6
    body_end = len(raw) - (1 if raw[-1] == _E else 6)
    body = raw[body_start:body_end]
    return _parse_body(_ESC_SEP_RE.sub(_SEP, body) if '\\' in body else body, families, id_pattern)


def _compile_ids(id_pattern: str | re.Pattern[str] | None) -> re.Pattern[str] | None:
    return re.compile(id_pattern) if isinstance(id_pattern, str) else id_pattern


def _detail(raw: str) -> str:
    return shorten(raw, _DETAIL_MAX)


def _unterminated(raw: str, start: int, end: int) -> CitationProblem:
    return CitationProblem(
        'unterminated_marker',
        'citation marker opened but never closed; it cites nothing',
        start=start,
        end=end,
        detail=_detail(raw),
    )


def _malformed(message: str, raw: str, start: int) -> CitationProblem:
    return CitationProblem('malformed_marker', message, start=start, end=start + len(raw), detail=_detail(raw))


class MarkerScanner:
    """Finds markers in a text that arrives in pieces (stream deltas), in one pass over the text.

    `feed` returns the markers the delta completed, with offsets into the whole text so far; a marker split
    across deltas (anywhere, even right after `U+E200`) is kept until it completes. `close` ends the text
    and returns every problem found (the same list `extract_markers_with_problems` gives on the joined text,
    which is this scanner fed the whole text at once), including an `unterminated_marker` for a marker
    still open at the end. `problems` gives the problems found so far.

    Text is held only since the last piece holding a closer (no marker completes without one), and from there
    only from an opener still open, so the work per character is constant. Each distinct marker text is parsed
    once per scanner.
    """

    def __init__(
        self,
        families: Sequence[str] = ('cite',),
        *,
        escaped: bool = False,
        id_pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Create a scanner.

        Args:
            families: Marker families to accept (`'cite'` by default); `()` accepts none (every marker is then
                reported as an unknown family).
            escaped: Also accept delimiters written as escape text (`\\ue200`…).
            id_pattern: Source ids must match this pattern in full, for systems with their own ids
                (`r'block[0-9]+'`); a marker with another id is `malformed_marker`. Default: the grammar's ids.
        """
        self._families = _check_families(families, allow_empty=True)
        self._id_pattern = _compile_ids(id_pattern)
        self._escaped = escaped
        self._cache: dict[str, _Parsed] = {}
        self._pending: list[str] = []  # text not scanned yet, from an opener still open or the last closer on
        self._pos = 0  # offset of the pending text in the whole text
        self._keep = self._pending.append  # `_pending` is only ever cleared, never replaced
        self._problems: list[CitationProblem] = []
        self._closed = False
        self._plain = not escaped  # real delimiters only, and not closed: the common case, checked first
        # With escape text, while a candidate is open: its last characters (a delimiter may be split across deltas).
        self._open: str | None = None

    @property
    def problems(self) -> list[CitationProblem]:
        """Problems found so far, in text order (complete only after `close`)."""
        return list(self._problems)

    def feed(self, delta: str) -> list[Marker]:
        """Add the next piece of text; return the markers it completed."""
        if self._plain:
            if _E in delta:  # a marker completes only with a closer
                self._keep(delta)
                return self._scan(final=False)
            if self._pending or _S in delta:  # text is kept only from an opener on
                self._keep(delta)
            else:
                self._pos += len(delta)
            return []
        if self._closed:
            raise UserError(f'MarkerScanner.feed({delta!r}) called after close(): create a new scanner.')
        if self._open is not None:
            # A candidate is open: only a delimiter in the new text (or one completed by it) can end it, so the text
            # held since its opener is not scanned again (rescanning it per delta made one unclosed opener quadratic).
            window = self._open + delta
            self._keep(delta)
            if _ESC_STOP_RE.search(window) is None:
                self._open = window[-5:]
                return []
            self._open = None
        else:
            self._keep(delta)
        # With escape text a closer may also be `\\ue201`, ending in `1`.
        return self._scan_escaped_pending(final=False) if _E in delta or '1' in delta else []

    def close(self) -> list[CitationProblem]:
        """End the text; return all problems found, in text order."""
        if not self._closed:
            self._closed = True
            self._plain = False
            if self._escaped:
                self._scan_escaped_pending(final=True)
            else:
                self._scan(final=True)
        return list(self._problems)

    def _scan(self, final: bool) -> list[Marker]:
        """Scan the pending text (real delimiters); keep its unfinished tail (from an opener still open)."""
        pending = self._pending
        if not pending:
            return []
        text = pending[0] if len(pending) == 1 else ''.join(pending)
        pending.clear()
        pos = self._pos
        markers: list[Marker] = []
        i = text.find(_S)
        closer = text.find(_E, i + 1) if i >= 0 else -1
        while i >= 0:
            if 0 <= closer <= i:
                closer = text.find(_E, i + 1)
            following = text.find(_S, i + 1)
            if closer >= 0 and (following < 0 or closer < following):
                raw = text[i : closer + 1]
                parsed = self._cache.get(raw) or self._parse(raw)
                if isinstance(parsed, str):
                    self._problems.append(_malformed(parsed, raw, pos + i))
                else:
                    markers.append(Marker(raw, parsed[0], parsed[1], parsed[2], pos + i, pos + closer + 1))
            elif following >= 0 or final:
                end = following if following >= 0 else len(text)
                self._problems.append(_unterminated(text[i:end], pos + i, pos + end))
            else:  # open at the end: keep it for the next piece
                pending.append(text[i:])
                self._pos = pos + i
                return markers
            i = following
        self._pos = pos + len(text)
        return markers

    def _scan_escaped_pending(self, final: bool) -> list[Marker]:
        pending = self._pending
        text = ''.join(pending)
        pending.clear()
        markers: list[Marker] = []
        cut = self._scan_escaped(text, final, markers)
        if cut < len(text):
            held = text[cut:]
            pending.append(held)
            if opener := _ESC_OPENER_RE.match(held):  # an open candidate: held until a delimiter ends it
                self._open = held[opener.end() :][-5:]
        self._pos += cut
        return markers

    def _scan_escaped(self, text: str, final: bool, markers: list[Marker]) -> int:
        """Scan `text` accepting escape text too; return where the unfinished tail starts (`len(text)` if none)."""
        n = len(text)
        for m in _ESC_CANDIDATE_RE.finditer(text):
            raw = m.group()
            start = m.start()
            if _ESC_CLOSE_RE.search(raw) and len(raw) > (1 if raw[0] == _S else 6):
                self._emit(raw, self._pos + start, markers)
            elif m.end() < n or final:
                self._problems.append(_unterminated(raw, self._pos + start, self._pos + m.end()))
            else:
                return start
        if not final and (tail := _ESC_PARTIAL_TAIL_RE.search(text, max(0, n - 5))):
            return tail.start()
        return n

    def _parse(self, raw: str) -> _Parsed:
        """Parse a complete candidate, once per distinct text."""
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        parsed = self._cache[raw] = _parse_raw(raw, self._families, self._id_pattern)
        return parsed

    def _emit(self, raw: str, start: int, markers: list[Marker]) -> None:
        parsed = self._cache.get(raw) or self._parse(raw)
        if isinstance(parsed, str):
            self._problems.append(_malformed(parsed, raw, start))
        else:
            markers.append(Marker(raw, parsed[0], parsed[1], parsed[2], start, start + len(raw)))


def extract_markers_with_problems(
    text: str,
    families: Sequence[str] = ('cite',),
    *,
    escaped: bool = False,
    id_pattern: str | re.Pattern[str] | None = None,
) -> MarkerExtraction:
    """Find every marker in `text`, and report what looked like a marker but could not be read as one.

    Args:
        text: The model's text.
        families: Marker families to accept (`'cite'` by default); others are reported as `malformed_marker`.
        escaped: Also accept delimiters written as escape text (`\\ue200`…).
        id_pattern: Source ids must match this pattern in full (see `MarkerScanner`).

    Returns:
        The well-formed markers and the `unterminated_marker` / `malformed_marker` problems, in text order.
    """
    scanner = MarkerScanner(families, escaped=escaped, id_pattern=id_pattern)
    markers = scanner.feed(text)
    return MarkerExtraction(markers, scanner.close())


def extract_markers(
    text: str,
    families: Sequence[str] = ('cite',),
    *,
    escaped: bool = False,
    id_pattern: str | re.Pattern[str] | None = None,
) -> list[Marker]:
    """Find every well-formed marker of an allowed family in `text`.

    Use `extract_markers_with_problems` to also learn what could not be read.

    Args:
        text: The model's text.
        families: Marker families to accept (`'cite'` by default).
        escaped: Also accept delimiters written as escape text (`\\ue200`…).
        id_pattern: Source ids must match this pattern in full (see `MarkerScanner`).
    """
    return extract_markers_with_problems(text, families, escaped=escaped, id_pattern=id_pattern).markers


# --- stripping -----------------------------------------------------------------------------------------------


def _candidate_spans(text: str, escaped: bool) -> list[tuple[int, int, bool]]:
    """What to remove, as `(start, end, complete)`: whole markers, and the markup of what could not be read.

    The grammar (`formats.markup`) decides for real delimiters: an unterminated marker loses its opener and its
    marker characters (`U+E200 cite U+E202 turn9`), a lone `U+E201` / `U+E202` goes too. With escape text, a
    complete candidate goes whole and an unterminated one loses its opener and its marker characters.
    """
    if not escaped:
        scan = scan_markup(text)
        found = [(m.start, m.end, True) for m in scan.matches if m.kind == 'openai_marker']
        found += [(a, b, False) for i in scan.issues if i.kind == 'openai_marker' for a, b in i.cuts]
        return sorted(found)
    spans: list[tuple[int, int, bool]] = []
    for m in _ESC_CANDIDATE_RE.finditer(text):
        raw = m.group()
        opener = 1 if raw[0] == _S else 6
        complete = len(raw) > opener and bool(_ESC_CLOSE_RE.search(raw))
        body = None if complete else _ESC_BODY_RE.match(text, m.start() + opener)
        end = m.end() if body is None else body.end()
        spans.append((m.start(), end, complete))
    return spans


def strip_markers(text: str, markers: Sequence[Marker] | None = None, *, escaped: bool = False) -> str:
    """Remove markers from `text`, spaced as `formats.markup.strip_markup` spaces it (what a stream shows).

    With `markers=None`, every complete candidate is removed, whatever its family or body (all of it is
    markup a reader must not see); of an unterminated one, the opener and the family, ids and separators after it
    (`U+E200 cite U+E202 turn9`; the text after that is kept: it may be the answer's own words); and every lone
    `U+E201` / `U+E202`. Afterwards no delimiter character is left (with `escaped=True`, no complete marker).
    What was removed is not reported here: `resolve` reports it as problems, and `formats.markup.strip_markup`
    says what it removed for every form of citation markup. The one space before a marker goes when it separated a
    word from whitespace, closing punctuation or the end of the text (`'big \ue200…\ue201.'` becomes `'big.'`);
    nothing else about whitespace is touched.

    Args:
        text: The model's text.
        markers: Remove exactly these markers (as found in this `text`) instead.
        escaped: Also treat delimiters written as escape text as markup (only with `markers=None`).

    Raises:
        UserError: If a given marker is not at its offsets in `text`, or markers overlap.
    """
    spans: list[tuple[int, int]] = []
    if markers is None:
        while candidates := _candidate_spans(text, escaped):
            text = remove_marker_spans(text, [(start, end) for start, end, _ in candidates])[0]
            if not escaped:
                break  # no opener is left; with escape text, removal can join pieces into a new one
        return text
    else:
        for marker in sorted(markers, key=lambda m: m.start):
            if text[marker.start : marker.end] != marker.raw or marker.start >= marker.end:
                raise UserError(
                    f'Marker {marker!r} is not at its offsets in the text: pass markers found in this text.'
                )
            if spans and marker.start < spans[-1][1]:
                raise UserError(f'Marker {marker!r} overlaps another marker.')
            spans.append((marker.start, marker.end))
    return remove_marker_spans(text, spans)[0]


# --- conversion to Pydantic AI citations ---------------------------------------------------------------------

# Where a sentence can start: after `.!?` (and closing quotes/brackets) plus spaces, or after a line break.
_SENTENCE_BREAK_RE = re.compile(r'[.!?]["\')\]\u201d\u2019]*[ \t]+|\n[ \t\r\n]*')
_LINE_PREFIX_RE = re.compile(r'(?:[-*+>]|[0-9]{1,9}[.)]|#{1,6})[ \t]+')

Source = WebCitationSource | DocumentCitationSource


def _sentence_starts(clean: str) -> list[int]:
    starts = [0]
    starts.extend(m.end() for m in _SENTENCE_BREAK_RE.finditer(clean))
    return starts


def _sentence_anchor(clean: str, starts: list[int], position: int) -> ContentCitationAnchor | None:
    end = position
    while end > 0 and clean[end - 1].isspace():
        end -= 1
    if end == 0:
        return None
    start = starts[bisect_left(starts, end) - 1]
    while start < end and clean[start].isspace():
        start += 1
    # Leave a list bullet or heading mark at a line start out of the anchored sentence.
    at_line_start = start == 0 or clean[start - 1] == '\n'
    if at_line_start and (m := _LINE_PREFIX_RE.match(clean, start, end)) and m.end() < end:
        start = m.end()
    return ContentCitationAnchor(start=start, end=end) if start < end else None


def _cited_source(
    source_id: str,
    source: Source,
    locator: LineRange | None,
    source_lines: Mapping[str, Sequence[str]] | None,
    marker: Marker,
    problems: list[CitationProblem],
) -> Source:
    lines = source_lines.get(source_id) if source_lines is not None and locator is not None else None
    if locator is not None and lines is not None:
        if locator.end <= len(lines):
            return replace(source, excerpts=['\n'.join(lines[locator.start - 1 : locator.end])])
        problems.append(
            CitationProblem(
                'unresolved_marker',
                f'line range {locator} is outside source {source_id!r} ({len(lines)} lines); '
                'the source is cited without a line excerpt',
                start=marker.start,
                end=marker.end,
                detail=_detail(marker.raw),
            )
        )
    return replace(source, excerpts=list(source.excerpts))


def resolve(
    text: str,
    sources: Mapping[str, Source],
    *,
    source_lines: Mapping[str, Sequence[str]] | None = None,
    families: Sequence[str] = ('cite',),
    escaped: bool = False,
    id_pattern: str | re.Pattern[str] | None = None,
) -> MarkerConversion:
    """Turn the markers in `text` into Pydantic AI citations on the text without markers.

    Each marker becomes one `Citation` with one source per known id (a copy of `sources[id]`), anchored by a
    `ContentCitationAnchor` over the sentence the marker closes in `clean_text`: from the previous `.`, `!`
    or `?` followed by a space, or the start of the line, up to where the marker stood (a marker at the
    very start of the text closes nothing and gets `anchor=None`). A line locator is kept two ways: the
    marker is in `MarkerConversion.markers`, and when `source_lines[id]` has the source's lines (line 1
    first, as `text.splitlines()` gives them) the cited lines, joined by newlines, become the only excerpt
    of that source's copy.

    Unknown ids are reported as `unresolved_marker` (offsets into the original `text`) and cite nothing; a
    marker whose ids are all unknown gives no citation. Unterminated and malformed markers are reported too.

    Args:
        text: The model's text, with markers.
        sources: The context's sources by id.
        source_lines: Lines of sources, by id, to turn line locators into excerpts.
        families: Marker families to accept (`'cite'` by default).
        escaped: Also accept delimiters written as escape text.
        id_pattern: Source ids must match this pattern in full (see `MarkerScanner`).
    """
    extraction = extract_markers_with_problems(text, families, escaped=escaped, id_pattern=id_pattern)
    spans = _candidate_spans(text, escaped)
    clean, positions = remove_marker_spans(text, [(start, end) for start, end, _ in spans])
    position_of = {start: positions[k] for k, (start, _, complete) in enumerate(spans) if complete}
    starts = _sentence_starts(clean)
    problems = list(extraction.problems)
    citations: list[Citation] = []
    cited_markers: list[Marker] = []
    for marker in extraction.markers:
        cited: list[Source] = []
        seen: set[str] = set()
        for source_id in marker.source_ids:
            if source_id in seen:
                continue
            seen.add(source_id)
            source = sources.get(source_id)
            if source is None:
                problems.append(
                    CitationProblem(
                        'unresolved_marker',
                        f'marker cites unknown source id {source_id!r}',
                        start=marker.start,
                        end=marker.end,
                        detail=source_id,
                    )
                )
                continue
            cited.append(_cited_source(source_id, source, marker.locator, source_lines, marker, problems))
        if cited:
            anchor = _sentence_anchor(clean, starts, position_of[marker.start])
            citations.append(Citation(sources=list(cited), anchor=anchor))
            cited_markers.append(marker)
    problems.sort(key=lambda p: p.start if p.start is not None else -1)
    return MarkerConversion(clean, citations, problems, cited_markers)


# --- context side --------------------------------------------------------------------------------------------


def _check_id(source_id: str) -> None:
    if not _ID_RE.fullmatch(source_id):
        raise UserError(f'Invalid source id {source_id!r}: use ASCII letters, digits, `_` and `-` (e.g. `turn0file1`).')


def _clean_value(value: str) -> str:
    for ch in _DELIMITERS:
        value = value.replace(ch, '')
    return ' '.join(value.split())


def _clean_text(text: str) -> str:
    for ch in _DELIMITERS:
        text = text.replace(ch, '')
    return text


def _date_str(date: str | datetime.date | None) -> str | None:
    if date is None:
        return None
    return date.isoformat() if isinstance(date, datetime.date) else date


def _marker(source_id: str, family: str, locator: str | None = None) -> str:
    parts = [family, source_id] if locator is None else [family, source_id, locator]
    return _S + _SEP.join(parts) + _E


def _body(text: str, numbered_lines: bool) -> str:
    text = _clean_text(text)
    if not numbered_lines:
        return text
    return '\n'.join(f'[L{n}] {line}' for n, line in enumerate(text.splitlines(), start=1))


def render_source(
    source_id: str,
    text: str,
    *,
    title: str | None = None,
    url: str | None = None,
    date: str | datetime.date | None = None,
    numbered_lines: bool = False,
    family: str = 'cite',
    block: bool = False,
) -> str:
    r"""Render one citable source for the model's context, in the shape OpenAI documents for file search.

    ```text
    [turn0file1]
    Title: K2
    URL: https://example.com/k2
    Updated: 2025-01-02
    Citation Marker: \ue200cite\ue202turn0file1\ue201

    [L1] K2 is 8,611 m tall.
    ```

    The `Citation Marker:` line carries the exact marker to write for this source. The delimiter characters are
    removed from the text and metadata so a source cannot forge a marker.

    Args:
        source_id: The source's id (ASCII letters, digits, `_`, `-`), e.g. `turn0file1`.
        text: The source's text.
        title: Shown as `Title:`, if given.
        url: Shown as `URL:`, if given.
        date: When the source was last updated, shown as `Updated:`: a string exactly as given, a `date` in ISO
            form. Default `None`: no `Updated:` line.
        numbered_lines: Prefix each line of `text` (as `text.splitlines()` gives them) with `[L1] `, `[L2] `…, and
            show the marker for a line range too; give the same lines to `resolve` as `source_lines` to get the
            cited lines back as excerpts. Default `False`.
        family: The marker family to write (`'cite'` by default).
        block: Wrap the source as `<BLOCK id>` … `</BLOCK>`, as OpenAI's block-citing layout does. Default `False`.

    Raises:
        UserError: If `source_id` or `family` does not fit the marker grammar.
    """
    _check_id(source_id)
    _check_families((family,))
    lines = [f'[{source_id}]']
    for label, value in (('Title', title), ('URL', url), ('Updated', _date_str(date))):
        if value is not None:
            lines.append(f'{label}: {_clean_value(value)}')
    lines.append(f'Citation Marker: {_marker(source_id, family)}')
    if numbered_lines:
        lines.append(f'Citation Marker for lines 2 to 4: {_marker(source_id, family, "L2-L4")}')
    rendered = '\n'.join(lines) + '\n\n' + _body(text, numbered_lines)
    return f'<BLOCK {source_id}>\n{rendered}\n</BLOCK>' if block else rendered


def render_source_block(
    source_id: str,
    text: str,
    *,
    title: str | None = None,
    url: str | None = None,
    date: str | datetime.date | None = None,
    numbered_lines: bool = False,
    tag: str = 'source',
) -> str:
    """Render one citable source as an XML-like element: `<source id="turn0file1" title="…">text</source>`.

    Attribute values and text are escaped (`&`, `<`, `>`, quotes), so the text cannot close the element or
    forge another; the delimiter characters are removed as in `render_source`.

    Raises:
        UserError: If `source_id` does not fit the marker grammar or `tag` is not a simple element name.
    """
    _check_id(source_id)
    if not _TAG_RE.fullmatch(tag):
        raise UserError(f'Invalid tag {tag!r}: use letters, digits, `_` and `-`, starting with a letter.')
    attrs = [('id', source_id), ('title', title), ('url', url), ('date', _date_str(date))]
    rendered = ''.join(f' {name}="{html.escape(_clean_value(value), quote=True)}"' for name, value in attrs if value)
    body = html.escape(_body(text, numbered_lines), quote=False)
    return f'<{tag}{rendered}>\n{body}\n</{tag}>'


def citation_instructions(families: Sequence[str] = ('cite',), line_level: bool = False) -> str:
    """Instructions telling the model the exact marker syntax and every rule of OpenAI's citation guidance.

    The rules: the exact syntax; several ids in one marker; markers right after the punctuation that ends the
    statement, on its line; never inside bold, italics, code or a code fence, never on a closing fence's line, never
    on a line of their own; not grouped at the end; conflicting sources are all cited and the disagreement described;
    only ids from the context, copied exactly; never a citation for outside knowledge. `check_marker_placement`
    (`formats.openai_placement`) checks the placement rules on the answer.

    Args:
        families: Allowed marker families; the first is the one to use for citing.
        line_level: Also explain line ranges (use with sources rendered with `numbered_lines=True`).
    """
    _check_families(families)
    fams = list(families)
    family = fams[0]
    example = _marker('turn0file1', family)
    two = _S + _SEP.join([family, 'turn0file1', 'turn1search3']) + _E
    text = [
        'Cite your sources with citation markers. Every source in the context has an id (for example `turn0file1`) '
        'and a `Citation Marker:` line with the exact marker to use for it.',
        f'Write a marker exactly like this: {example} - that is the character U+E200, the word `{family}`, the '
        'character U+E202, the id, and the character U+E201, with no spaces or other characters inside.',
        f'When several sources support the same statement, put all their ids in one marker, separated by U+E202: {two}',
    ]
    if line_level:
        one_line = _marker('turn0file1', family, 'L8')
        lines = _marker('turn0file1', family, 'L8-L13')
        text.append(
            'Sources shown with numbered lines ([L1], [L2], ...) can be cited by line: add the line range as the '
            f'last part, {one_line} for line 8 or {lines} for lines 8 to 13. Use only line numbers shown in the '
            'source.'
        )
    if len(fams) > 1:
        others = ', '.join(f'`{f}`' for f in fams[1:])
        text.append(f'Markers may also use these words instead of `{family}`, with the same syntax: {others}.')
    text += [
        'Put each marker right after the punctuation that ends the sentence or paragraph it supports, on the same '
        'line. Never put a marker on a line of its own, inside a link, inside bold or italic text, inside inline code '
        'or a code block, or on the same line as the closing fence of a code block.',
        'Cite each statement where it is made. Do not group citations at the end of the response.',
        'When sources disagree, cite each of them and describe the disagreement; do not pick one silently.',
        'Use only ids that appear in the context, copied exactly. Never invent, guess or alter an id'
        + (' or a line range' if line_level else '')
        + '.',
        'Cite only what the sources say. Never put a marker on a statement that comes from your own knowledge or '
        'anywhere outside the context; if no source supports a statement, write it without a marker.',
    ]
    return '\n'.join(text)


CITATION_INSTRUCTIONS = citation_instructions()
"""`citation_instructions()` for the `cite` family, block-level citing."""
