r"""The one citation-markup grammar: what counts as citation markup in a model's text, found and removed in one place.

Every module that scans or strips citation markup calls this one (`scan_markup`, `strip_markup`, `strip_joined`,
`StreamCleaner`), so they all agree on what is markup and what is prose. Text a reader sees as one (the consecutive text
parts of a response) is stripped as one text, whether whole (`strip_joined`) or as it streams (`StreamCleaner`), so
its part and chunk boundaries change nothing. The forms:

- **Cite tags** (Anthropic / Bedrock-Claude): `<cite index="0-1,0-2">supported text</cite>`, and the opening
  `(cite index="0-1">` form some models write. An opening tag is `<cite` or `(cite`, attributes written as
  `name="value"` (or `'value'`), then `>`; the `(cite` form needs at least one attribute, so prose such as
  `Always (cite sources) when the error rate is > 5%.` is not a tag. A closing tag is `</cite>`. Removing a
  tag keeps the text it wraps.
- **OpenAI private-use markers**: `U+E200 family (U+E202 id)+ (U+E202 L8[-L13])? U+E201`, e.g.
  `\ue200cite\ue202turn0search1\ue201`; as in OpenAI's reference helper, spaces and tabs around a part are trimmed
  and empty parts (a doubled `U+E202`) skipped. A family is ASCII letters, digits and `_`, starting with a letter; an
  id is ASCII letters, digits, `_`, `-`, `.` and `:` (`turn0.search1` is an id); a last part shaped like a
  line locator is the locator, never an id. Removed entirely.
- **Bracket markers** (Assistants / ChatGPT): `【4:0†source】`, `【turn0search1†title】`: `【`, an id of ASCII
  letters, digits, `_`, `-`, `.` and `:`, `†`, up to 200 characters without `【`, `】` or a line break, `】`.
  A `【` not followed by an id and `†` (ordinary CJK punctuation) is prose.
- **Numbered markers**, only when the caller asks (`numbered=True`, since `[1]` can be prose): `[1]`,
  `[1, 2]` as `formats.numbered` reads them (never in code, never a link), and xAI's inline form
  `[[1]](https://…)`.

What cannot be read as markup but is unmistakably meant as markup is an *issue* (`unterminated_marker` or
`malformed_marker`, with offsets): an opening without its closing, a stray closing, nested cite tags, a marker
whose body does not follow the grammar, a lone `U+E201` / `U+E202`. Stripping removes the markup characters of
issues too (a reader never sees a private-use character or half a cite tag) and reports them: an unterminated
OpenAI marker loses its opener and every character of its body (`\ue200cite\ue202turn9`), the text after it
stays; an unterminated cite tag loses its opening tag, the text after it stays.

An *incomplete* text (a stream cut before its end: `incomplete=True`) may end in the middle of markup: a trailing
possible opening (`(cite index="1-1`, `<ci`, `</cit`, `【turn0`; with `numbered=True` `[1` or `[[1]](https://ex`) is
then an `unterminated_marker` issue too, and removed. A complete text keeps such a tail: there it is prose.

All offsets are `str` indices into the text given. Scanning is linear in the text (every pattern is bounded).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass
from itertools import accumulate
from typing import Literal

from pydantic_ai.exceptions import UserError

from .numbered import extract_numbered

__all__ = (
    'IssueCode',
    'MARKER_START',
    'MARKER_END',
    'MARKER_SEPARATOR',
    'MarkupKind',
    'MarkupMatch',
    'MarkupIssue',
    'MarkupScan',
    'OpenAIBody',
    'StreamCleaner',
    'StrippedMarkup',
    'offset_shifter',
    'parse_openai_body',
    'remove_cuts',
    'remove_marker_spans',
    'scan_markup',
    'split_cuts',
    'strip_joined',
    'strip_markup',
)

MARKER_START = '\ue200'
"""Opens an OpenAI marker."""
MARKER_END = '\ue201'
"""Closes an OpenAI marker."""
MARKER_SEPARATOR = '\ue202'
"""Separates the family, the ids and the locator inside an OpenAI marker."""

MarkupKind = Literal['cite_tag', 'openai_marker', 'bracket_marker', 'numbered_marker', 'numbered_link']
r"""`'cite_tag'`: `<cite index="…">text</cite>`; `'openai_marker'`: `\ue200cite\ue202id\ue201`; `'bracket_marker'`:
`【4:0†source】`; `'numbered_marker'`: `[1]`, `[1, 2]`; `'numbered_link'`: xAI's `[[1]](https://…)`."""

IssueCode = Literal['malformed_marker', 'unterminated_marker']
"""What `MarkupIssue.code` says: an opening without its closing, or markup that does not follow the grammar."""

Cut = tuple[int, int]

# --- lexing -----------------------------------------------------------------------------------------------------------

_ATTR = r"""[A-Za-z_:][-\w:.]{0,40}\s{0,4}=\s{0,4}(?:"[^"\n<>]{0,300}"|'[^'\n<>]{0,300}')"""
_CITE_TOKEN_RE = re.compile(
    rf'(?P<open><cite(?:\s{{1,8}}{_ATTR}){{0,8}}\s{{0,8}}>|\(cite(?:\s{{1,8}}{_ATTR}){{1,8}}\s{{0,8}}>)|(?P<close></cite\s{{0,8}}>)'
)
_INDEX_ATTR_RE = re.compile(r'\bindex\s*=\s*["\']([^"\']*)["\']')
_FAMILY_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]*')
_ID_RE = re.compile(r'[A-Za-z0-9_.:-]+')
_IDS_RE = re.compile('[A-Za-z0-9_.:-]+(?:\ue202[A-Za-z0-9_.:-]+)*')
_GOOD_BODY_RE = re.compile(
    '([A-Za-z][A-Za-z0-9_]*)\ue202([A-KM-Za-z0-9_.:-][A-Za-z0-9_.:-]*(?:\ue202[A-KM-Za-z0-9_.:-][A-Za-z0-9_.:-]*)*)'
    '(?:\ue202L([0-9]{1,9})(?:-L([0-9]{1,9}))?)?'
)
# Digits are capped so `int()` never meets a huge number.
_LOCATOR_RE = re.compile(r'L([0-9]{1,9})(?:-L([0-9]{1,9}))?')
# An OpenAI candidate: the opener up to the first closer, or up to the next opener / the end (unterminated).
_OAI_CANDIDATE_RE = re.compile('\ue200[^\ue200\ue201]*\ue201?')
# What of an unterminated marker is marker: the opener, and then family / ids / locator characters and separators.
_OAI_PREFIX_RE = re.compile('\ue200[A-Za-z0-9_.:\\-\ue202]{0,500}')
_OAI_STRAY_RE = re.compile('[\ue201\ue202]')
# A malformed complete marker is removed whole when it is this short and on one line; otherwise only its delimiters
# and what reads as marker characters go, so a stray opener cannot swallow a paragraph.
_WHOLE_MAX = 200
_BRACKET_RE = re.compile(r'【([A-Za-z0-9_.:-]{1,64})†(?:([^【】\n]{0,200})】)?')
_BRACKET_TAIL_RE = re.compile(r'[^\s【】]{0,200}')
_NUMBERED_LINK_RE = re.compile(r'\[\[([0-9]{1,4})\]\]\((https?://[^\s()]{1,2000})\)')
# A possible opening of markup cut off at the end of an incomplete text (searched in a bounded window at the end).
_PARTIAL_ATTR = r"""[A-Za-z_:][-\w:.]{0,40}(?:\s{0,4}=\s{0,4}(?:"[^"\n<>]{0,300}|'[^'\n<>]{0,300})?)?"""
_TRAILING_RES: tuple[tuple[MarkupKind, re.Pattern[str]], ...] = (
    (
        'cite_tag',
        re.compile(rf'[<(](?:c(?:i(?:t(?:e(?:\s{{1,8}}{_ATTR}){{0,8}}(?:\s{{1,8}}{_PARTIAL_ATTR}|\s{{0,8}}))?)?)?)?\Z'),
    ),
    ('cite_tag', re.compile(r'</(?:c(?:i(?:t(?:e\s{0,8})?)?)?)?\Z')),
    ('bracket_marker', re.compile(r'【[A-Za-z0-9_.:-]{0,64}\Z')),
)
_NUMBERED_TRAILING_RES: tuple[tuple[MarkupKind, re.Pattern[str]], ...] = (
    ('numbered_marker', re.compile(r'\[[0-9][0-9, ]{0,160}\Z|\[\Z')),
    ('numbered_link', re.compile(r'\[\[(?:[0-9]{1,4}(?:\](?:\](?:\([^\s()]{0,2000})?)?)?)?\Z')),
)
_TRAILING_WINDOW = 3200
_TRAILING_REASON = 'possible citation markup cut off at the end of an incomplete text'
_CLOSING = frozenset('.,;:!?)]}…»”’')
_SENTENCE_END = frozenset('.,;:!?…')
_HSPACE = ' \t'


@dataclass(frozen=True)
class OpenAIBody:
    """The parsed body of a well-formed OpenAI marker."""

    family: str
    """The family after `U+E200`, e.g. `'cite'`."""
    source_ids: tuple[str, ...]
    """The cited ids, in the order written (at least one)."""
    locator: tuple[int, int] | None
    """The line range `(first, last)` written as the last part (1-based, both included), if any."""


def parse_openai_body(body: str, *, id_pattern: re.Pattern[str] | None = None) -> OpenAIBody | str:
    r"""Parse the body of an OpenAI marker (between `U+E200` and `U+E201`, real `U+E202` separators).

    As tolerant as OpenAI's reference helper: spaces and tabs around each part are trimmed and empty parts (a doubled
    `U+E202`) are skipped, so `\ue200cite\ue202 turn0file0 \ue201` cites `turn0file0`.

    Args:
        body: The marker's body.
        id_pattern: Ids must match this pattern in full (e.g. `re.compile(r'block[0-9]+')` for a system with its own
            ids); default: the grammar's ids (ASCII letters, digits, `_`, `-`, `.`, `:`).

    Returns the parsed body, or a message saying what is wrong with it.
    """
    good = _GOOD_BODY_RE.fullmatch(body)
    if good is not None:  # the usual shape, read by one regex (no id starts with `L`, so none looks like a locator)
        family, ids, first, last = good.groups()
        source_ids = tuple(ids.split(MARKER_SEPARATOR))
        if id_pattern is not None and (bad := next((i for i in source_ids if not id_pattern.fullmatch(i)), None)):
            return f'source id {bad[:40]!r} does not match the id pattern {id_pattern.pattern!r}'
        if first is None:
            return OpenAIBody(family, source_ids, None)
        if 0 < int(first) <= int(last or first):
            return OpenAIBody(family, source_ids, (int(first), int(last or first)))
    return _parse_tolerant(body, id_pattern)


def _parse_tolerant(body: str, id_pattern: re.Pattern[str] | None) -> OpenAIBody | str:
    parts = [part.strip(_HSPACE) for part in body.split(MARKER_SEPARATOR)]
    if len(parts) > 1:
        parts = [parts[0], *(part for part in parts[1:] if part)]
    body = MARKER_SEPARATOR.join(parts)  # offsets below are into the trimmed body
    family = parts[0]
    if not _FAMILY_RE.fullmatch(family):
        return f'marker has no valid family name (got {family[:40]!r})'
    count = len(parts)
    ids_end = len(body)
    locator: tuple[int, int] | None = None
    last = parts[-1]
    if count > 1 and last[:1] == 'L' and (m := _LOCATOR_RE.fullmatch(last)):
        first = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else first
        if first < 1 or end < first:
            return f'invalid line range {last!r}'
        locator = (first, end)
        count -= 1
        ids_end -= len(last) + 1
    if count < 2:
        return 'marker cites no source id'
    ids_start = len(family) + 1
    # One regex over all ids; the per-id loop only runs to name what is wrong.
    if not _IDS_RE.fullmatch(body, ids_start, ids_end) or body.find('L', ids_start, ids_end) >= 0:
        for source_id in parts[1:count]:
            if not _ID_RE.fullmatch(source_id):
                return f'invalid source id {source_id[:40]!r} (ids use letters, digits, `_`, `-`, `.` and `:`)'
            if _LOCATOR_RE.fullmatch(source_id):
                return f'line range {source_id!r} must be the last part of the marker'
    if id_pattern is not None and (bad := next((i for i in parts[1:count] if not id_pattern.fullmatch(i)), None)):
        return f'source id {bad[:40]!r} does not match the id pattern {id_pattern.pattern!r}'
    return OpenAIBody(family, tuple(parts[1:count]), locator)


# --- values -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarkupMatch:
    """One piece of well-formed citation markup in a text."""

    kind: MarkupKind
    """Which markup form."""
    start: int
    """Start offset of the markup."""
    end: int
    """End offset (exclusive); for a cite tag, the end of `</cite>`."""
    source_ids: tuple[str, ...]
    """The ids the markup names: cite-tag `index` values (`'0-1'`), OpenAI marker ids (`'turn0search1'`; a line
    locator is not an id), the bracket marker's `'4:0'`, a numbered marker's numbers (`'1'`)."""
    _: KW_ONLY
    kept_start: int = -1
    """Start of the text the markup wraps and that stays (cite tags); equal to `start` for markers."""
    kept_end: int = -1
    """End of the kept text; equal to `start` for markers."""
    family: str | None = None
    """The OpenAI marker's family (`'cite'`); `None` for other forms."""
    locator: tuple[int, int] | None = None
    """The OpenAI marker's line range `(first, last)`, if any."""
    url: str | None = None
    """The link target of a `'numbered_link'`."""

    def __post_init__(self) -> None:
        if self.kept_start < 0:
            object.__setattr__(self, 'kept_start', self.start)
            object.__setattr__(self, 'kept_end', self.start)

    @property
    def cuts(self) -> tuple[Cut, ...]:
        """The ranges stripping removes: the two tags of a cite tag, the whole of a marker."""
        if self.kind == 'cite_tag':
            return ((self.start, self.kept_start), (self.kept_end, self.end))
        return ((self.start, self.end),)


@dataclass(frozen=True)
class MarkupIssue:
    """Markup that cannot be read as well-formed markup: reported, and its markup characters are stripped."""

    code: IssueCode
    """`'unterminated_marker'`: an opening without its closing; `'malformed_marker'`: anything else (nesting, a
    stray closing, a marker whose contents do not follow the grammar)."""
    kind: MarkupKind
    """Which form it looks like."""
    start: int
    """Start offset of the region concerned."""
    end: int
    """End offset (exclusive) of the region concerned."""
    reason: str
    """What is wrong, for humans."""
    cuts: tuple[Cut, ...]
    """What stripping removes of it (inside `start`..`end`): delimiters and marker characters, never the prose."""


@dataclass(frozen=True)
class MarkupScan:
    """Everything `scan_markup` found in one text."""

    matches: tuple[MarkupMatch, ...] = ()
    """Well-formed markup, sorted by offset."""
    issues: tuple[MarkupIssue, ...] = ()
    """Markup that could not be read, sorted by offset."""

    @property
    def found(self) -> bool:
        """Whether any markup (well-formed or not) was found."""
        return bool(self.matches or self.issues)

    @property
    def cuts(self) -> tuple[Cut, ...]:
        """Every range stripping removes for this scan (without whitespace repair), sorted and merged."""
        return _merge([c for m in self.matches for c in m.cuts] + [c for i in self.issues for c in i.cuts])


@dataclass(frozen=True)
class StrippedMarkup:
    """A text with its citation markup removed, and what was removed."""

    text: str
    """The text without markup (cite tags keep the text they wrap)."""
    cuts: tuple[Cut, ...]
    """The ranges of the input that were removed: sorted, non-overlapping, non-adjacent. Shift an offset `p` of the
    input by the removed lengths before it to find it in `text`."""
    matches: tuple[MarkupMatch, ...] = ()
    """Well-formed markup removed, offsets into the input."""
    issues: tuple[MarkupIssue, ...] = ()
    """Markup that could not be read (removed too), offsets into the input."""

    @property
    def scan(self) -> MarkupScan:
        """`matches` and `issues` as a `MarkupScan`."""
        return MarkupScan(self.matches, self.issues)

    @property
    def changed(self) -> bool:
        """Whether anything was removed."""
        return bool(self.cuts)


# --- scanning ---------------------------------------------------------------------------------------------------------


def _scan_openai(text: str, matches: list[MarkupMatch], issues: list[MarkupIssue]) -> None:
    for m in _OAI_CANDIDATE_RE.finditer(text):
        start, end = m.span()
        if text[end - 1] != MARKER_END:
            prefix = _OAI_PREFIX_RE.match(text, start)
            assert prefix is not None
            reason = 'OpenAI citation marker without its closing U+E201'
            cut = (start, _before_punctuation(text, start + 1, prefix.end()))
            issues.append(MarkupIssue('unterminated_marker', 'openai_marker', start, end, reason, (cut,)))
            continue
        parsed = parse_openai_body(text[start + 1 : end - 1])
        if isinstance(parsed, str):
            if end - start <= _WHOLE_MAX and '\n' not in text[start:end]:
                cuts: tuple[Cut, ...] = ((start, end),)
            else:
                prefix = _OAI_PREFIX_RE.match(text, start, end - 1)
                assert prefix is not None
                cuts = (prefix.span(), (end - 1, end))
            issues.append(MarkupIssue('malformed_marker', 'openai_marker', start, end, parsed, cuts))
        else:
            matches.append(
                MarkupMatch(
                    'openai_marker', start, end, parsed.source_ids, family=parsed.family, locator=parsed.locator
                )
            )


def _scan_stray(text: str, taken: _Taken, issues: list[MarkupIssue]) -> None:
    """A `U+E201` / `U+E202` outside every OpenAI candidate."""
    for m in _OAI_STRAY_RE.finditer(text):
        if m.start() not in taken:
            reason = f'stray {m.group()!r} outside an OpenAI citation marker'
            issues.append(MarkupIssue('malformed_marker', 'openai_marker', m.start(), m.end(), reason, (m.span(),)))


def _scan_brackets(text: str, taken: _Taken, matches: list[MarkupMatch], issues: list[MarkupIssue]) -> None:
    for m in _BRACKET_RE.finditer(text):
        start = m.start()
        if start in taken:
            continue
        if m.group(2) is not None:
            matches.append(MarkupMatch('bracket_marker', start, m.end(), (m.group(1),)))
            continue
        tail = _BRACKET_TAIL_RE.match(text, m.end())
        assert tail is not None
        following = text.find('【', start + 1)
        limit = len(text) if following < 0 else following
        newline = text.find('\n', start, limit)  # bounded: never a search to the end per opener
        stop = limit if newline < 0 else newline
        reason = 'bracket citation marker without its closing 】'
        cut = (start, _before_punctuation(text, m.end(), tail.end()))
        issues.append(MarkupIssue('unterminated_marker', 'bracket_marker', start, stop, reason, (cut,)))


def _before_punctuation(text: str, floor: int, end: int) -> int:
    """`end`, moved back over the punctuation that ends an unterminated marker's run of marker characters.

    Only when whitespace or the end of the text follows it (`turn0search0. The` keeps its `. `): that punctuation is
    the sentence's, not the marker's (an id may hold `.` and `:`, a bracket marker's title any of them). Never moved
    before `floor`.
    """
    if end < len(text) and not text[end].isspace():
        return end
    while end > floor and text[end - 1] in _SENTENCE_END:
        end -= 1
    return end


def _cite_ids(open_tag: str) -> tuple[str, ...]:
    found = _INDEX_ATTR_RE.search(open_tag)
    if found is None:
        return ()
    return tuple(part.strip() for part in found.group(1).split(',') if part.strip())


def _scan_cites(text: str, taken: _Taken, matches: list[MarkupMatch], issues: list[MarkupIssue]) -> None:
    """Pair cite tags; every tag token is cut, nested and unpaired ones are issues."""
    # Open tags still waiting for their `</cite>`, each with how many tag tokens `nested` held when it opened: the
    # tokens closed inside an open tag are appended there once (not copied into each enclosing tag: deep nesting
    # stays n log n) and reported with the outermost tag, in order.
    stack: list[tuple[re.Match[str], int]] = []
    nested: list[Cut] = []
    for token in _CITE_TOKEN_RE.finditer(text):
        if token.start() in taken:
            continue  # inside another marker: not a tag of its own
        if token.group('open') is not None:
            stack.append((token, len(nested)))
            continue
        if not stack:
            reason = '</cite> without an opening tag'
            issues.append(MarkupIssue('malformed_marker', 'cite_tag', *token.span(), reason, (token.span(),)))
            continue
        opened, mark = stack.pop()
        if stack:
            nested += (opened.span(), token.span())  # reported once, as part of the outermost nesting
        elif len(nested) > mark:
            cuts = (opened.span(), *sorted(nested[mark:]), token.span())
            del nested[mark:]
            reason = 'cite tag nested in a cite tag'
            issues.append(MarkupIssue('malformed_marker', 'cite_tag', opened.start(), token.end(), reason, cuts))
        else:
            ids = _cite_ids(opened.group())
            matches.append(
                MarkupMatch(
                    'cite_tag', opened.start(), token.end(), ids, kept_start=opened.end(), kept_end=token.start()
                )
            )
    for k, (opened, mark) in enumerate(stack):
        reason = 'cite tag without its </cite>'
        upto = stack[k + 1][1] if k + 1 < len(stack) else len(nested)
        cuts = (opened.span(), *sorted(nested[mark:upto]))
        issues.append(MarkupIssue('unterminated_marker', 'cite_tag', opened.start(), len(text), reason, cuts))


def _scan_numbered(text: str, taken: _Taken, matches: list[MarkupMatch]) -> None:
    for m in _NUMBERED_LINK_RE.finditer(text):
        if m.start() not in taken:
            matches.append(MarkupMatch('numbered_link', m.start(), m.end(), (m.group(1),), url=m.group(2)))
    for marker in extract_numbered(text):
        if marker.start not in taken:
            ids = tuple(str(n) for n in marker.numbers)
            matches.append(MarkupMatch('numbered_marker', marker.start, marker.end, ids))


class _Taken:
    """Ranges already claimed by markup, for asking whether a later token sits inside one (by bisection)."""

    def __init__(self, ranges: Iterable[Cut]) -> None:
        merged = _merge(ranges)
        self._starts = [start for start, _ in merged]
        self._ends = [end for _, end in merged]

    def __contains__(self, position: int) -> bool:
        k = bisect_right(self._starts, position) - 1
        return k >= 0 and position < self._ends[k]


def _claimed(matches: list[MarkupMatch], issues: list[MarkupIssue]) -> _Taken:
    # What an issue removes is claimed, not its whole region: markup after an unterminated opener is still markup.
    return _Taken([(m.start, m.end) for m in matches] + [c for i in issues if i.kind != 'cite_tag' for c in i.cuts])


def _scan_trailing(text: str, numbered: bool, taken: _Taken, issues: list[MarkupIssue]) -> None:
    """A possible opening of markup cut off at the end of an incomplete text: the longest one, if any."""
    n = len(text)
    lo = max(0, n - _TRAILING_WINDOW)
    patterns = _TRAILING_RES + _NUMBERED_TRAILING_RES if numbered else _TRAILING_RES
    found: tuple[MarkupKind, int] | None = None
    for kind, pattern in patterns:
        m = pattern.search(text, lo)
        if m is not None and m.start() < n and m.start() not in taken and (found is None or m.start() < found[1]):
            found = (kind, m.start())
    if found is not None:
        kind, start = found
        issues.append(MarkupIssue('unterminated_marker', kind, start, n, _TRAILING_REASON, ((start, n),)))


def _may_end_in_markup(text: str, numbered: bool) -> bool:
    tail = text[-_TRAILING_WINDOW:]
    return '<' in tail or '(' in tail or '【' in tail or (numbered and '[' in tail)


def _may_hold_markup(text: str, numbered: bool) -> bool:
    return (
        MARKER_START in text
        or MARKER_END in text
        or MARKER_SEPARATOR in text
        or '【' in text
        or 'cite' in text
        or (numbered and '[' in text)
    )


def scan_markup(text: str, *, numbered: bool = False, incomplete: bool = False) -> MarkupScan:
    """Find the citation markup in `text`, with offsets; never raises (see the module docstring for the grammar).

    Args:
        text: Any text.
        numbered: Also find numbered markers (`[1]`, `[1, 2]`, xAI's `[[1]](url)`); off by default since `[1]` can
            be prose.
        incomplete: The text was cut off (a stream that did not complete): a possible opening of markup at its very
            end (`(cite index="1-1`) is an `unterminated_marker` issue. Default `False`: such a tail is prose.
    """
    trailing = incomplete and _may_end_in_markup(text, numbered)
    if not trailing and not _may_hold_markup(text, numbered):
        return MarkupScan()
    matches: list[MarkupMatch] = []
    issues: list[MarkupIssue] = []
    if MARKER_START in text:
        _scan_openai(text, matches, issues)
    if MARKER_END in text or MARKER_SEPARATOR in text:
        _scan_stray(text, _claimed(matches, issues), issues)
    if '【' in text:
        _scan_brackets(text, _claimed(matches, issues), matches, issues)
    if numbered and '[' in text:
        _scan_numbered(text, _claimed(matches, issues), matches)
    if 'cite' in text:
        _scan_cites(text, _claimed(matches, issues), matches, issues)
    if trailing:
        _scan_trailing(text, numbered, _claimed(matches, issues), issues)
    return MarkupScan(
        tuple(sorted(matches, key=lambda m: (m.start, -m.end))), tuple(sorted(issues, key=lambda i: (i.start, i.end)))
    )


# --- stripping --------------------------------------------------------------------------------------------------------


def _merge(cuts: Iterable[Cut]) -> tuple[Cut, ...]:
    out: list[Cut] = []
    for start, end in sorted(cuts):
        if start >= end:
            continue
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return tuple(out)


def _spacing_cuts(text: str, cuts: tuple[Cut, ...], markers: list[Cut]) -> list[Cut]:
    """One space before a removed marker, when it separated a word from whitespace, closing punctuation or the end."""
    extra: list[Cut] = []
    starts = [start for start, _ in cuts]
    n = len(text)
    for marker_start, _ in markers:
        # The merged cut holding the marker: markup removed right before and after it counts as the marker's.
        start, end = cuts[bisect_right(starts, marker_start) - 1]
        nxt = text[end] if end < n else ''
        if nxt and not nxt.isspace() and nxt not in _CLOSING:
            continue
        if start >= 2 and text[start - 1] == ' ' and not text[start - 2].isspace():
            extra.append((start - 1, start))
    return extra


def remove_marker_spans(text: str, spans: Sequence[Cut]) -> tuple[str, list[int]]:
    """`text` without the markers at `spans` (sorted, disjoint), spaced as `strip_markup` spaces it; where each was.

    The one space before a marker goes when it separated a word from whitespace, closing punctuation or the end of
    the text (`strip_markup`'s `spacing` rule, so a stream cleaned by `StreamCleaner` shows the same text). Returns the
    text and, for each span, its offset in that text.
    """
    cuts = _merge(spans)
    if not cuts:
        return text, []
    cuts = _merge([*cuts, *_spacing_cuts(text, cuts, list(spans))])
    starts = [start for start, _ in cuts]
    removed = list(accumulate((end - start for start, end in cuts), initial=0))
    positions: list[int] = []
    for start, _ in spans:
        k = bisect_right(starts, start) - 1  # the cut holding the span
        positions.append(cuts[k][0] - removed[k])
    return _apply(text, cuts), positions


def _apply(text: str, cuts: tuple[Cut, ...]) -> str:
    out: list[str] = []
    pos = 0
    for start, end in cuts:
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return ''.join(out)


def _one_pass(text: str, numbered: bool, spacing: bool, incomplete: bool) -> tuple[MarkupScan, tuple[Cut, ...]]:
    scan = scan_markup(text, numbered=numbered, incomplete=incomplete)
    if not scan.found:
        return scan, ()
    cuts = scan.cuts
    if spacing:
        markers = [(m.start, m.end) for m in scan.matches if m.kind != 'cite_tag']
        markers += [c for i in scan.issues if i.kind != 'cite_tag' or i.reason == _TRAILING_REASON for c in i.cuts]
        if markers:
            cuts = _merge([*cuts, *_spacing_cuts(text, cuts, sorted(markers))])
    return scan, cuts


_MAX_PASSES = 8


def strip_markup(
    text: str, *, numbered: bool = False, spacing: bool = True, incomplete: bool = False
) -> StrippedMarkup:
    r"""Remove citation markup from `text`: well-formed markup, and the markup characters of what could not be read.

    Cite tags keep the text they wrap; markers go whole. What could not be read is in `issues` (its markup is removed
    all the same, see the module docstring). Afterwards the text holds no `U+E200`-`U+E202` character and no cite tag:
    when removing markup joins the text around it into new markup (`<ci` + a tag + `te>`), that is removed too and
    reported as a `malformed_marker` issue.

    Args:
        text: Any text.
        numbered: Also remove numbered markers (`[1]`, `[1, 2]`, xAI's `[[1]](url)`); off by default since `[1]` can
            be prose.
        spacing: Also remove one space before a removed marker when it separated a word from whitespace, closing
            punctuation or the end of the text (`'big \ue200…\ue201.'` becomes `'big.'`); the removed space is in
            `cuts`. Nothing else about whitespace is touched.
        incomplete: The text was cut off (a stream that did not complete): a possible opening of markup at its very
            end is removed too and reported as `unterminated_marker` (see `scan_markup`). Default `False`.
    """
    scan, cuts = _one_pass(text, numbered, spacing, incomplete)
    if not cuts:
        return StrippedMarkup(text, (), scan.matches, scan.issues)
    out = _apply(text, cuts)
    if not scan_markup(out, numbered=numbered, incomplete=incomplete).found:
        return StrippedMarkup(out, cuts, scan.matches, scan.issues)
    return _strip_again(text, out, cuts, scan, (numbered, spacing, incomplete))


def strip_joined(
    pieces: Sequence[str], *, numbered: bool = False, incomplete: bool = False
) -> tuple[StrippedMarkup, list[tuple[Cut, ...]]]:
    """Strip consecutive pieces of one text (a response's text parts, a UI text message) as that one text.

    Returns `strip_markup` of the joined text, and its `cuts` split at the pieces' boundaries (`split_cuts`). Markup
    is found, and the spacing rule applied, on the text as a reader sees it, whatever the provider's part boundaries:
    a space that ends one part goes with the marker that opens the next (`'tall. '` + `'\ue200…\ue201 End'`), as
    `StreamCleaner` does with the same text streamed across the parts. Offsets in `matches` and `issues` are into
    the joined text.
    """
    stripped = strip_markup(''.join(pieces), numbered=numbered, incomplete=incomplete)
    return stripped, split_cuts(stripped.cuts, [len(piece) for piece in pieces])


def split_cuts(cuts: Sequence[Cut], lengths: Sequence[int]) -> list[tuple[Cut, ...]]:
    """The ranges `cuts` of a text joined from pieces of `lengths`, as ranges of each piece (offsets into it).

    `cuts` sorted and non-overlapping (as `StrippedMarkup.cuts`); a range across a boundary is split at it.
    """
    out: list[tuple[Cut, ...]] = []
    k = 0
    base = 0
    for length in lengths:
        limit = base + length
        mine: list[Cut] = []
        while k < len(cuts) and cuts[k][0] < limit:
            start, end = max(cuts[k][0], base), min(cuts[k][1], limit)
            if start < end:
                mine.append((start - base, end - base))
            if cuts[k][1] > limit:  # goes on into the next piece
                break
            k += 1
        out.append(tuple(mine))
        base = limit
    return out


def _strip_again(
    text: str, out: str, cuts: tuple[Cut, ...], scan: MarkupScan, flags: tuple[bool, bool, bool]
) -> StrippedMarkup:
    """Removing markup made new markup out of the text around it: remove that too (rare; bounded passes)."""
    # `kept[i]` is the input offset of `out[i]`.
    kept = [
        i
        for (a, b) in zip((0, *(e for _, e in cuts)), (*(s for s, _ in cuts), len(text)), strict=True)
        for i in range(a, b)
    ]
    issues = list(scan.issues)
    for _ in range(_MAX_PASSES):
        again, more = _one_pass(out, *flags)
        if not more:
            break
        start, end = kept[more[0][0]], kept[more[-1][1] - 1] + 1
        original = tuple((kept[s], kept[e - 1] + 1) for s, e in more)
        issues.append(
            MarkupIssue(
                'malformed_marker',
                (again.matches or again.issues)[0].kind,
                start,
                end,
                'markup formed by removing other markup around it',
                original,
            )
        )
        drop = {i for s, e in more for i in range(s, e)}
        kept = [k for i, k in enumerate(kept) if i not in drop]
        out = _apply(out, more)
    gone = sorted(set(range(len(text))) - set(kept))
    merged = _merge((i, i + 1) for i in gone)
    return StrippedMarkup(out, merged, scan.matches, tuple(sorted(issues, key=lambda i: (i.start, i.end))))


# --- streaming --------------------------------------------------------------------------------------------------------

# The longest text held back while it may still become markup (an opener waiting for its closer).
_HOLD_MAX = 600
# How far back an unterminated marker ended by more markup is held with it (with the markup removed with it): a chain
# of them longer than this is let go (each held-back scan reads this much).
_OPEN_RUN_MAX = 160
_OPEN_TAIL_RES = (
    re.compile('\ue200[^\ue200\ue201]*\\Z'),
    re.compile(r'【[A-Za-z0-9_.:-]{0,64}(?:†[^【】\n]{0,200})?\Z'),
    # What may still become an opening cite tag: `_CITE_TOKEN_RE`'s opening, cut anywhere (whitespace between its
    # attributes may hold newlines; a value may not).
    re.compile(
        r'[<(](?:c(?:i(?:t(?:e'
        rf'(?:\s{{1,8}}{_ATTR}){{0,8}}'
        r"""(?:\s{1,8}(?:[A-Za-z_:][-\w:.]{0,40}(?:\s{0,4}(?:=\s{0,4}(?:"[^"\n<>]{0,300}|'[^'\n<>]{0,300})?)?)?)?)?"""
        r')?)?)?)?\Z'
    ),
    re.compile(r'<(?:/(?:c(?:i(?:t(?:e\s{0,8})?)?)?)?)?\Z'),
)
# (A link's `(` and any start of its URL: `(`, `(h`, `(ht`, `(htt`, then `http…`.)
_NUMBERED_TAIL_RES = (re.compile(r'\[[\[ 0-9,\]]{0,160}(?:\((?:h(?:tt?)?|https?:?/{0,2}[^\s()]{0,2000})?)?\Z'),)
_SPACE_TAIL_RE = re.compile(r'[ \t]+\Z')
# The characters that can end markup that stripping removes (cite tags end in `>`).
_MARKUP_LAST = frozenset('\ue200\ue201\ue202】>')
_NUMBERED_MARKUP_LAST = _MARKUP_LAST | frozenset('])')
# Stands for removed markup as the context of the next piece: a non-space that neither opens nor closes anything.
_REMOVED_CONTEXT = 'x'


class StreamCleaner:
    r"""Strips citation markup from a text that arrives in pieces, giving back the text that is safe to show now.

    `feed(delta)` returns the clean text the delta makes safe to show; only a possible opening of markup at the end
    (an `U+E200` waiting for its `U+E201`, a `【4:0†…` waiting for `】`, a `<cit` that may become a tag; with
    `numbered=True` a `[1` that may become a marker), trailing spaces, markup that ends the text with a space
    before it (whether the space goes depends on the next character), and an unterminated marker that such an opening
    ends (how much of it goes depends on that opening) are held back, and never more than a few hundred characters.
    `close()` returns what is still held, cleaned, and ends the text; `issues` then lists everything that could not
    be read (offsets into the whole text fed), including a marker still open at the end.

    The joined output equals `strip_markup(whole_text).text` for text whose markup is split only inside the holding
    limits; cite tags opened in one piece and closed in a later one are paired (not reported).
    """

    def __init__(self, *, numbered: bool = False) -> None:
        """Create a cleaner.

        Args:
            numbered: Also remove numbered markers (see `strip_markup`).
        """
        self._numbered = numbered
        self._held = ''
        self._pos = 0  # input offset of `_held`
        self._open_tags: list[MarkupIssue] = []  # cite tags opened in a released piece, not yet closed
        self._issues: list[MarkupIssue] = []
        self._removed = 0
        self._last: str = ''  # the character before the held text, as the spacing rule sees it (see `_release`)
        self._open_run: tuple[tuple[int, int], int] | None = None  # the last `_before_open_run` answer, by offsets
        self._closed = False

    @property
    def issues(self) -> list[MarkupIssue]:
        """What could not be read so far, offsets into the whole text fed (complete after `close`)."""
        return sorted(self._issues, key=lambda i: (i.start, i.end))

    @property
    def removed(self) -> int:
        """How many characters of the input were removed so far."""
        return self._removed

    @property
    def held_length(self) -> int:
        """How many characters of the input are held back (the end of what was fed; not shown yet)."""
        return len(self._held)

    @property
    def holds_opening(self) -> bool:
        """Whether what is held back may open markup: `close()` would show it as prose, `close(incomplete=True)` not.

        A stream that cannot tell yet whether its text was cut off there waits for that before closing.
        """
        if not self._held:
            return False
        text = self._last + self._held
        return (
            strip_markup(text, numbered=self._numbered, incomplete=True).text
            != strip_markup(text, numbered=self._numbered).text
        )

    def feed(self, delta: str) -> str:
        """Add the next piece of text; return the clean text now safe to show (possibly `''`)."""
        if self._closed:
            raise UserError(f'StreamCleaner.feed({delta!r}) called after close(): create a new cleaner.')
        held = self._held + delta
        cut = self._hold_from(held)
        self._held = held[cut:]
        return self._release(held[:cut])

    def close(self, *, incomplete: bool = False) -> str:
        """End the text; return the rest of the clean text.

        Args:
            incomplete: The text was cut off (a stream that did not complete): what is still held because it may
                open markup (`(cite index="1-1`) is removed and reported as `unterminated_marker`, as
                `strip_markup(..., incomplete=True)` does. Default `False`: a complete text's tail is prose.
        """
        if self._closed:
            return ''
        out = self._release(self._held, incomplete=incomplete)
        self._held = ''
        self._issues.extend(self._open_tags)
        self._open_tags = []
        self._closed = True
        return out

    def _hold_from(self, held: str) -> int:
        n = len(held)
        cut = n
        patterns = self._patterns()
        lo = max(0, n - _HOLD_MAX)
        for pattern in patterns:
            m = pattern.search(held, lo)
            if m is not None:
                cut = min(cut, m.start())
        space = _SPACE_TAIL_RE.search(held, max(0, cut - 64), cut)
        if space is not None and space.end() == cut:
            cut = space.start()
        return self._before_spaced_markup(held, self._before_open_run(held, cut))

    def _before_open_run(self, held: str, cut: int) -> int:
        """`cut`, or where an unterminated marker ending `held[:cut]` starts, so it is held back with what follows.

        Such a marker ends where more markup opens (`held[cut]`, itself held back), and how much of it goes depends on
        that character: the sentence punctuation that ends its run of marker characters goes when no whitespace follows
        (`_before_punctuation`), and the space before it goes when nothing but whitespace or closing punctuation follows
        the markup removed around it (the spacing rule). Stripped alone, the piece would end the text and keep both.
        """
        if cut == len(held) or held[cut].isspace():
            return cut
        lo = max(0, cut - _OPEN_RUN_MAX)
        if MARKER_START not in held[lo:cut] and '【' not in held[lo:cut]:
            return cut
        # While the opening at `cut` grows delta by delta, `held[lo:cut]` stays the same text: scanned once.
        key = (self._pos + lo, self._pos + cut)
        if self._open_run is not None and self._open_run[0] == key:
            return self._open_run[1] - self._pos
        found = cut
        scan = scan_markup(held[lo:cut], numbered=self._numbered)
        for issue in scan.issues:
            if (
                issue.code == 'unterminated_marker'
                and issue.kind != 'cite_tag'
                and all(c in _SENTENCE_END for c in held[lo + issue.cuts[-1][1] : cut])
            ):
                # From the start of the markup removed with it (the spacing rule looks before that), and its space.
                merged = scan.cuts
                start = lo + merged[bisect_right([a for a, _ in merged], issue.cuts[0][0]) - 1][0]
                found = start - 1 if start > lo and held[start - 1] == ' ' else start
                break
        self._open_run = (key, self._pos + found)
        return found

    def _before_spaced_markup(self, held: str, cut: int) -> int:
        """`cut`, or the space before the markup that ends `held[:cut]`, so that both are held back.

        Whether that space goes depends on the character after the markup (`strip_markup`'s spacing rule): `held[cut]`,
        itself held back, or one yet to come.
        """
        if not cut or held[cut - 1] not in (_NUMBERED_MARKUP_LAST if self._numbered else _MARKUP_LAST):
            return cut
        lo = max(0, cut - _HOLD_MAX)
        cuts = scan_markup(held[lo:cut], numbered=self._numbered).cuts
        if not cuts or cuts[-1][1] != cut - lo:
            return cut
        start = lo + cuts[-1][0]
        return start - 1 if start > lo and held[start - 1] == ' ' else cut

    def _patterns(self) -> tuple[re.Pattern[str], ...]:
        return _OPEN_TAIL_RES + _NUMBERED_TAIL_RES if self._numbered else _OPEN_TAIL_RES

    def _release(self, piece: str, *, incomplete: bool = False) -> str:
        base = self._pos
        self._pos += len(piece)
        if not piece:
            return ''
        # The character before the piece goes first, as context for the spacing rule (a space before a marker goes
        # only when a non-space precedes it, in the text as written); it is clean text, and it is not shown again.
        context = self._last
        stripped = strip_markup(context + piece, numbered=self._numbered, incomplete=incomplete)
        self._removed += sum(end - start for start, end in stripped.cuts)
        for issue in stripped.issues:
            self._track(_shifted(issue, base - len(context)))
        text = stripped.text[len(context) :] if stripped.text.startswith(context) else stripped.text
        if stripped.cuts and stripped.cuts[-1][1] == len(context) + len(piece):
            # The piece ends in removed markup: the written character before what follows is not a space, whatever
            # was shown last (`'K2\n' + marker + ' ' + marker` loses that space, as in the whole text).
            self._last = _REMOVED_CONTEXT
        elif text:
            self._last = text[-1]
        return text

    def _track(self, issue: MarkupIssue) -> None:
        if issue.kind == 'cite_tag' and issue.code == 'unterminated_marker' and len(issue.cuts) == 1:
            self._open_tags.append(issue)
        elif issue.kind == 'cite_tag' and issue.reason.startswith('</cite>') and self._open_tags:
            self._open_tags.pop()  # closes a tag opened in an earlier piece: a pair after all
        else:
            self._issues.append(issue)


def _shifted(issue: MarkupIssue, base: int) -> MarkupIssue:
    cuts = tuple((start + base, end + base) for start, end in issue.cuts)
    return MarkupIssue(issue.code, issue.kind, issue.start + base, issue.end + base, issue.reason, cuts)


# --- using cuts -------------------------------------------------------------------------------------------------------


def remove_cuts(text: str, cuts: Sequence[Cut]) -> str:
    """`text` without the given ranges (sorted, non-overlapping, as `StrippedMarkup.cuts`)."""
    return _apply(text, tuple(cuts))


def offset_shifter(cuts: Sequence[Cut]) -> Callable[[int], int]:
    """A function that moves an offset of the input onto the text without `cuts` (sorted, non-overlapping ranges).

    An offset inside a removed range lands where the range was. Each call costs `O(log len(cuts))`.
    """
    starts = [start for start, _ in cuts]
    removed_before: list[int] = []  # total length removed by the cuts before each one
    total = 0
    for start, end in cuts:
        removed_before.append(total)
        total += end - start

    def shift(offset: int) -> int:
        k = bisect_right(starts, offset) - 1
        if k < 0:
            return offset
        start, end = cuts[k]
        return offset - removed_before[k] - (min(offset, end) - start)

    return shift
