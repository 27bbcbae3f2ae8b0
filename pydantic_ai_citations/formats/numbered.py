"""Generic numbered citation markers (`[1]`, `[1][2]`, `[1, 2]`) resolved against a list or an id map of sources.

What counts as a marker (decided here, so every caller reads answers the same way):

- `[N]` with `N` 1 to 4 ASCII digits, and `[N, M, …]` (up to 16 numbers, commas, optional spaces): one
  marker citing each number. `[1][2]` is two markers.
- Not markers, left as text: ranges like `[1-3]` (no provider writes them and expanding them would be a
  guess), footnotes `[^1]`, anything with other characters inside.
- Markdown links are not markers: `[1](url)` is a link whose text is `1`, and `[[1]](url)` (a marker made
  into a link) is a link too; the link target, not a source list, says what it points to. A reference
  definition `[1]: url` at a line start and a reference link `[text][1]` are not markers either. A chain
  `[1][2]` is not mistaken for a reference link: `[2]` follows a numbered group, not link text.
- Nothing inside code: fenced blocks (```` ``` ```` or `~~~` lines, up to 3 spaces indented) and inline code
  spans are skipped. Simplification: an inline code span ends at a backtick run of the same length or at
  the end of the line; indented (4-space) code blocks are not recognised.
- A backslash-escaped bracket (`\\[1]`) is text.

`NumberedScanner` finds exactly what `extract_numbered` finds on the joined text, whatever the split, in
one pass. Because `[1]` followed by `(` is a link, a marker at the very end of a delta is returned once the
next delta (or `close()`) shows the character after it.

`resolve` turns a text's markers into citations against a list or an id map of sources;
`resolve_markers` does the same for markers already found (a scan kept while a text streams in).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from pydantic_ai import Citation, DocumentCitationSource, MarkerCitationAnchor, WebCitationSource
from pydantic_ai.exceptions import UserError

from .._checks import shown
from .._problems import CitationProblem

__all__ = (
    'NumberedMarker',
    'NumberedResolution',
    'NumberedScanner',
    'extract_numbered',
    'is_numbered_marker',
    'resolve_markers',
    'resolve',
)

Source = WebCitationSource | DocumentCitationSource

_NUM_RE = re.compile(r'\[ {0,2}([0-9]{1,4}(?: {0,2}, {0,2}[0-9]{1,4}){0,15}) {0,2}\]')
# Could still become a `_NUM_RE` match when more text arrives (over-approximate, bounded).
_NUM_PREFIX_RE = re.compile(r'\[[ 0-9,]{0,160}\Z')
_INLINE_EVENT_RE = re.compile(r'[\n`\\\[]')
_CODE_EVENT_RE = re.compile(r'\n|`+')
_BACKTICKS_RE = re.compile(r'`+')
_FENCE_OPEN_RE = re.compile(r' {0,3}(`{3,}|~{3,})')
_MAYBE_FENCE_RE = re.compile(r' {0,3}(?:`*|~*)\Z')
_ESCAPABLE = frozenset('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~')


@dataclass(frozen=True)
class NumberedMarker:
    """One numbered marker found in a text."""

    raw: str
    """The marker exactly as written (`text[start:end]`), e.g. `'[1, 2]'`."""
    numbers: tuple[int, ...]
    """The numbers it cites, in the order written."""
    start: int
    """Offset of `[`."""
    end: int
    """Offset just after `]`."""


@dataclass(frozen=True)
class NumberedResolution:
    """What `resolve` / `resolve_markers` made of a text's markers."""

    citations: list[Citation]
    """One citation per marker with at least one resolvable number, anchored on the marker."""
    problems: list[CitationProblem]
    """`unresolved_marker` for each number with no source (offsets of its marker)."""
    markers: list[NumberedMarker]
    """`markers[i]` is the marker behind `citations[i]`."""


class NumberedScanner:
    """Finds numbered markers in a text that arrives in pieces, in one pass over the text.

    `feed` returns the markers that the text so far decides (offsets into the whole text); `close` ends
    the text and returns the rest. Text is held only while a decision is pending (a bracket group still
    open, a backtick run that may grow, a line start that may be a code fence), so the work per character
    is constant.
    """

    __slots__ = (
        '_buf',
        '_pos',
        '_prev',
        '_bol',
        '_line_blank',
        '_col',
        '_code',
        '_fence',
        '_last_group_end',
        '_closed',
        '_run_length',
        '_lead',
    )

    def __init__(self) -> None:
        self._buf = ''
        self._pos = 0
        self._prev = ''
        self._bol = True
        self._line_blank = True
        self._col = 0
        self._code = 0
        self._fence: tuple[str, int] | None = None
        self._last_group_end = -1
        self._closed = False
        self._run_length = 0  # a backtick run that ended the text so far, taken but not decided (see `_backticks`)
        self._lead: tuple[int, str, int] | None = None  # a line start that may open a fence (see `_line_start`)

    def feed(self, delta: str) -> list[NumberedMarker]:
        """Add the next piece of text; return the markers now decided."""
        if self._closed:
            raise UserError(f'NumberedScanner.feed({delta!r}) called after close(): create a new scanner.')
        self._buf += delta
        return self._run(final=False)

    def close(self) -> list[NumberedMarker]:
        """End the text; return the markers still pending."""
        if self._closed:
            return []
        out = self._run(final=True)
        self._closed = True
        return out

    def _run(self, final: bool) -> list[NumberedMarker]:
        """Scan the held text as far as it is decided; keep the rest (from `cut`) for the next piece."""
        s = self._buf
        n = len(s)
        out: list[NumberedMarker] = []
        i = 0
        while i < n:
            if self._fence is not None:
                step = self._fenced_line(s, i, final)
            elif self._bol:
                step = self._line_start(s, i, final)
            elif self._code:
                step = self._code_span(s, i, final)
            elif self._run_length:  # an opening run taken at the end of the last piece
                step = self._open_run(s, i, final)
            else:
                step = self._inline(s, i, final, out)
            if step is None:  # undecided from `i` on: keep it for later
                break
            i = step
        cut = min(i, n)
        if cut > 0:
            self._prev = s[cut - 1]
        self._buf = s[cut:]
        self._pos += cut
        return out

    def _fenced_line(self, s: str, i: int, final: bool) -> int | None:
        """Inside a fenced block: skip to the next line, closing the fence on its closing line."""
        fence = self._fence
        assert fence is not None
        nl = s.find('\n', i)
        if self._bol:
            line = s[i:] if nl < 0 else s[i:nl]
            stripped = line.strip(' \t')
            closes = (
                len(line) - len(line.lstrip(' ')) <= 3
                and len(stripped) >= fence[1]
                and stripped == fence[0] * len(stripped)
            )
            if nl < 0 and not final and (closes or _could_close(line, fence)):
                return None
            if closes:
                self._fence = None
        self._bol = nl >= 0
        return len(s) if nl < 0 else nl + 1

    def _line_start(self, s: str, i: int, final: bool) -> int | None:
        """At a line start: a fence may open here (undecided while the line start is all that arrived).

        Up to three spaces and a run of backticks or tildes reaching the end of the text so far may still open a
        fence: the run is taken (`_lead`: spaces, character, length) rather than held, so a long one arriving a
        character at a time is read once.
        """
        if self._lead is not None:
            return self._lead_goes_on(s, i, final)
        if not final and _MAYBE_FENCE_RE.match(s, i):
            spaces = len(s) - len(s[i:].lstrip(' ')) - i
            if i + spaces == len(s):
                return None  # up to three spaces: held
            self._lead = (spaces, s[i + spaces], len(s) - i - spaces)
            return len(s)
        self._bol, self._line_blank, self._col, self._code = False, True, 0, 0
        m = _FENCE_OPEN_RE.match(s, i)
        if m is None:
            return i
        run = m.group(1)
        self._fence = (run[0], len(run))
        return m.end()

    def _backticks(self, s: str, j: int, final: bool) -> tuple[int, int] | None:
        """The backtick run at `s[j]` (its end and whole length), `None` while it may still grow.

        A run that reaches the end of the text so far is taken (`_run_length`) rather than held, so a long run
        arriving a character at a time is read once, not again with each piece.
        """
        run = _BACKTICKS_RE.match(s, j)
        end = j if run is None else run.end()
        length = self._run_length + end - j
        if end == len(s) and not final:
            self._run_length = length
            return None
        self._run_length = 0
        return end, length

    def _lead_goes_on(self, s: str, i: int, final: bool) -> int:
        """The run of a line start taken before (`_line_start`): longer, or decided here."""
        assert self._lead is not None
        spaces, char, length = self._lead
        k = len(s) - len(s[i:].lstrip(char)) - i
        if i + k == len(s) and not final:
            self._lead = (spaces, char, length + k)
            return len(s)
        self._lead = None
        length += k
        self._bol, self._line_blank, self._col, self._code = False, True, spaces, 0
        if length >= 3:
            self._fence = (char, length)
        else:  # no fence: what ordinary text makes of the run (a code span opening, or tildes)
            self._line_blank = False
            self._col += length
            if char == '`':
                self._code = length
        return i + k

    def _code_span(self, s: str, i: int, final: bool) -> int | None:
        """Inside an inline code span: find its closing backtick run (or the end of the line)."""
        if self._run_length:  # a run taken at the end of the last piece: it may go on here
            return self._close_run(s, i, final)
        m = _CODE_EVENT_RE.search(s, i)
        if m is None:
            self._col += len(s) - i
            return len(s)
        if m.group() == '\n':
            self._bol = True
            return m.end()
        self._col += m.start() - i
        return self._close_run(s, m.start(), final)

    def _close_run(self, s: str, j: int, final: bool) -> int:
        """A backtick run in a code span: it closes the span if as long as the one that opened it."""
        found = self._backticks(s, j, final)
        if found is None:
            self._col += len(s) - j
            return len(s)
        end, length = found
        if length == self._code:
            self._code = 0
        self._col += end - j
        return end

    def _inline(self, s: str, i: int, final: bool, out: list[NumberedMarker]) -> int | None:
        """Ordinary text: skip to the next line break, backtick, backslash or `[` and handle it."""
        n = len(s)
        m = _INLINE_EVENT_RE.search(s, i)
        j = n if m is None else m.start()
        if self._line_blank and j > i and s[i:j].strip(' '):
            self._line_blank = False
        self._col += j - i
        if m is None:
            return n
        if j > i:
            return j  # handle the event on the next step, so an undecided one keeps only itself
        c = s[j]
        if c == '\n':
            self._bol = True
            return j + 1
        if c == '`':
            return self._open_run(s, j, final)
        if c == '\\':
            if j + 1 == n and not final:
                return None
            step = 2 if j + 1 < n and s[j + 1] in _ESCAPABLE else 1
            self._line_blank = False
            self._col += step
            return j + step
        return self._bracket(s, j, final, out)

    def _open_run(self, s: str, j: int, final: bool) -> int:
        """A backtick run in ordinary text: it opens a code span that a run as long closes."""
        self._line_blank = False
        found = self._backticks(s, j, final)
        if found is None:
            self._col += len(s) - j
            return len(s)
        end, self._code = found
        self._col += end - j
        return end

    def _bracket(self, s: str, j: int, final: bool, out: list[NumberedMarker]) -> int | None:
        """At `[`: a numbered group is a marker unless it is a link, a reference definition or a reference."""
        n = len(s)
        group = _NUM_RE.match(s, j)
        if group is None:
            if not final and _NUM_PREFIX_RE.match(s, j):
                return None
            self._line_blank = False
            self._col += 1
            return j + 1
        e = group.end()
        if not final and (e == n or (e + 1 == n and s[e] == ']')):
            return None  # the next character decides whether this is a link
        nxt = s[e] if e < n else ''
        before = s[j - 1] if j > 0 else self._prev
        is_link = nxt == '(' or (before == '[' and s.startswith('](', e))
        is_definition = nxt == ':' and self._line_blank and self._col <= 3
        is_reference = before == ']' and self._pos + j != self._last_group_end
        self._last_group_end = self._pos + e
        if not (is_link or is_definition or is_reference):
            numbers = tuple(int(x) for x in group.group(1).replace(' ', '').split(','))
            out.append(NumberedMarker(group.group(), numbers, self._pos + j, self._pos + e))
        self._line_blank = False
        self._col += e - j
        return e


def _could_close(line: str, fence: tuple[str, int]) -> bool:
    """Whether a partial line inside a fence may still turn out to be its closing fence."""
    body = line.lstrip(' ')
    if len(line) - len(body) > 3:
        return False
    run = body.rstrip(' \t')
    return run == fence[0] * len(run)


def is_numbered_marker(text: str, start: int = 0, end: int | None = None) -> bool:
    """Whether `text[start:end]` is, as a whole, one numbered marker by its shape (`[1]`, `[1, 2]`).

    Only the shape: where it stands (code, a link) is not looked at. For text a citation is already anchored on.
    """
    return _NUM_RE.fullmatch(text, start, len(text) if end is None else end) is not None


def extract_numbered(text: str) -> list[NumberedMarker]:
    """Find the numbered markers in `text` (see the module docstring for what counts), in text order."""
    scanner = NumberedScanner()
    return scanner.feed(text) + scanner.close()


def resolve(text: str, sources: Sequence[Source] | Mapping[int, Source], *, base: int = 1) -> NumberedResolution:
    """Find the numbered markers in `text` and turn them into citations anchored on the markers.

    The same as `resolve_markers(extract_numbered(text), sources, base=base)`.

    Args:
        text: The model's text.
        sources: Either a list, where `[N]` is the item at position `N - base` (Sonar's `search_results`), or a
            mapping from number to source, where `N` is an id, not a position (the Perplexity Agent API's
            search result `id`). A number with no source is reported as `unresolved_marker`; it is never
            mapped to a nearby source.
        base: The number of the first item of a list (1 by default). Only for lists.

    Returns:
        One `Citation` per marker (`[1, 2]` gives one citation with two sources; `[1][2]` two citations),
        each with a `MarkerCitationAnchor` over the marker and copies of the sources, plus the problems.

    Raises:
        UserError: If `sources` is a string, or `base` is given with a mapping or is negative.
    """
    _check_sources(sources, base)
    return resolve_markers(extract_numbered(text), sources, base=base)


def resolve_markers(
    markers: Iterable[NumberedMarker], sources: Sequence[Source] | Mapping[int, Source], *, base: int = 1
) -> NumberedResolution:
    """Turn markers already found (by `extract_numbered` or a `NumberedScanner`) into citations.

    For a caller that scans a text once (for example incrementally, while it streams) and resolves its markers
    later, possibly more than once as sources arrive. Offsets are the markers' own, so the citations are anchored
    on whatever text the markers were found in.

    Args:
        markers: The markers, in text order.
        sources: A list (`[N]` is the item at position `N - base`) or a mapping from number to source (`N` is an
            id); see `resolve`. A number with no source is reported as `unresolved_marker`.
        base: The number of the first item of a list (1 by default). Only for lists.

    Returns:
        One `Citation` per marker with at least one resolvable number, anchored on the marker, with copies of the
        sources (a number repeated inside one marker is cited once), plus one `unresolved_marker` problem per
        number with no source (offsets of its marker, `detail` the marker as written).

    Raises:
        UserError: If `sources` is a string, or `base` is given with a mapping or is negative.
    """
    _check_sources(sources, base)
    by_id: Mapping[int, Source] | None = None
    listed: Sequence[Source] = ()
    if isinstance(sources, Mapping):
        by_id = sources
    else:
        listed = sources
    citations: list[Citation] = []
    problems: list[CitationProblem] = []
    cited_markers: list[NumberedMarker] = []
    for marker in markers:
        cited: list[Source] = []
        seen: set[int] = set()
        for number in marker.numbers:
            if number in seen:
                continue
            seen.add(number)
            if by_id is not None:
                source = by_id.get(number)
            else:
                index = number - base
                source = listed[index] if 0 <= index < len(listed) else None
            if source is None:
                where = 'no source has this id' if by_id is not None else f'{len(listed)} sources, numbered from {base}'
                problems.append(
                    CitationProblem(
                        'unresolved_marker',
                        f'marker cites [{number}] but {where}',
                        start=marker.start,
                        end=marker.end,
                        detail=marker.raw,
                    )
                )
                continue
            cited.append(replace(source, excerpts=list(source.excerpts)))
        if cited:
            citations.append(Citation(sources=cited, anchor=MarkerCitationAnchor(start=marker.start, end=marker.end)))
            cited_markers.append(marker)
    return NumberedResolution(citations, problems, cited_markers)


def _check_sources(sources: object, base: object) -> None:
    """Raise `UserError` unless `sources` is a list or mapping of citation sources and `base` an int of 0 or more."""
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise UserError(f'`base` must be an int of 0 or more, got {shown(base)}.')
    if isinstance(sources, (str, bytes)) or not isinstance(sources, (Sequence, Mapping)):
        raise UserError(
            f'`sources` must be a list or a mapping of citation sources (`WebCitationSource` / '
            f'`DocumentCitationSource`), got {shown(sources)}.'
        )
    items: Iterable[tuple[object, object]] = (
        cast('Mapping[object, object]', sources).items()
        if isinstance(sources, Mapping)
        else enumerate(cast('Sequence[object]', sources))
    )
    for key, source in items:
        if not isinstance(source, (WebCitationSource, DocumentCitationSource)):
            hint = (
                " (a URL: wrap it, `WebCitationSource(url)`; Sonar's `citations` list is URLs)"
                if isinstance(source, str)
                else ''
            )
            raise UserError(
                f'`sources[{key!r}]` must be a `WebCitationSource` or `DocumentCitationSource`, got '
                f'{shown(source)}{hint}.'
            )
        if isinstance(sources, Mapping) and (isinstance(key, bool) or not isinstance(key, int)):
            raise UserError(f'The keys of a `sources` mapping are the numbers `[N]` names (ints), got {shown(key)}.')
    if isinstance(sources, Mapping) and base != 1:
        raise UserError(f'`base={base!r}` applies to a list of sources; with a mapping, N is the key.')
