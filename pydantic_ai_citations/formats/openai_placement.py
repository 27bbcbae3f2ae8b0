r"""Where OpenAI citation markers may stand: the placement rules of OpenAI's file-search and retrieval guidance.

The guidance asks the model to put each marker (`\ue200cite\ue202turn0file0\ue201`) right after the punctuation
that ends the statement it supports, never inside Markdown bold, italics, inline code or a code fence, never on the
line of a closing code fence, not all grouped at the end of the response, and only with ids that were given.
`check_marker_placement` reports each breach as a `CitationProblem` with offsets into the text; so does an id written
without the marker characters (`turn0file0` as plain text), which a reader would otherwise see as noise.

Markers are found by the package's one grammar (`formats.markup.scan_markup`). The check reads the text once per
rule; each rule costs time linear in the text (up to a logarithm), also on text written to defeat it (thousands of
markers in a row, or of `**` and backtick runs that never close). It never changes the text.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection, Sequence

from .._problems import CitationProblem, ProblemCode, shorten
from .markup import MarkupMatch, scan_markup

__all__ = ('PLACEMENT_CODES', 'check_marker_placement')

PLACEMENT_CODES: frozenset[ProblemCode] = frozenset(
    {
        'marker_not_after_punctuation',
        'marker_in_emphasis',
        'marker_in_code',
        'marker_on_fence_line',
        'markers_grouped_at_end',
        'bare_marker_id',
    }
)
"""The problem codes `check_marker_placement` gives for where markers stand (`unknown_source_id` aside)."""

# Characters after which a marker sits correctly: the end of a sentence or clause, or what closes one.
_AFTER = frozenset('.!?;:,)]}"\'…”’»')
_FENCE_RE = re.compile(r'^[ \t]{0,3}(`{3,}|~{3,})', re.MULTILINE)
_BACKTICKS_RE = re.compile(r'`+')
_NEWLINE_RE = re.compile(r'\n')
# Emphasis: `**…**` and `__…__` (on one line, not opened before or closed after whitespace), `*…*` and `_…_` (neither
# delimiter doubled or touching a word outside). Found by `_emphasis`, which reads the text as
# `re.finditer(_STRONG_STAR + '|' + _STRONG_UNDERSCORE + '|' + _ITALIC_STAR + '|' + _ITALIC_UNDERSCORE)` would, in
# linear time: the lazy `[^\n]*?` of a strong opener that never closes would read to the end of its line once per
# opener. The italic forms cannot read past their own delimiter, so each is matched as written.
_ITALIC = {
    '*': re.compile(r'(?<![*\w])\*(?![\s*])[^*\n]*?(?<![\s*])\*(?![*\w])'),
    '_': re.compile(r'(?<![_\w])_(?![\s_])[^_\n]*?(?<![\s_])_(?![_\w])'),
}
_STRONG_CLOSERS = {'*': re.compile(r'(?<!\s)(?=\*\*)'), '_': re.compile(r'(?<!\s)(?=__)')}
"""Where a strong delimiter may close: a doubled `*` or `_` not after whitespace."""
_DELIMITER_RE = re.compile(r'[*_]')
_WHITESPACE_RE = re.compile(r'\s')
# An id as OpenAI's tools name sources (`turn0file0`, `turn2search11`), written as plain text.
_BARE_ID_RE = re.compile(r'(?<![\w\ue202])turn[0-9]{1,4}[a-z]{2,20}[0-9]{1,6}(?![\w\ue201\ue202])')
_WORD_RE = re.compile(r'\w')


class _Regions:
    """Sorted, non-overlapping `(start, end)` ranges of the text, asked by bisection whether they hold a position."""

    def __init__(self, regions: Sequence[tuple[int, int]]) -> None:
        self.starts = [start for start, _ in regions]
        self.ends = [end for _, end in regions]

    def holds(self, position: int) -> bool:
        """Whether `position` is strictly inside one of the ranges (after its start, before its end)."""
        k = bisect_left(self.starts, position) - 1
        return k >= 0 and position < self.ends[k]


def check_marker_placement(
    text: str, *, source_ids: Collection[str] | None = None, part_index: int | None = None
) -> list[CitationProblem]:
    r"""Check where the OpenAI citation markers in `text` stand, against OpenAI's placement guidance.

    ```python
    from pydantic_ai_citations.formats.openai_placement import check_marker_placement

    text = 'Paris is **big\ue200cite\ue202turn0file0\ue201** and old.'
    [problem] = check_marker_placement(text)
    assert problem.code == 'marker_in_emphasis'
    ```

    Args:
        text: The model's text, markers still in it.
        source_ids: The ids given to the model (e.g. the keys of `TrackCitations.marker_sources`); a marker naming
            another id is reported as `unknown_source_id`. Default `None`: ids are not checked.
        part_index: Set on every problem (the `TextPart` the text comes from), if known.

    Returns:
        One problem per breach, in text order, offsets into `text`: `marker_not_after_punctuation` (a marker not
        right after the punctuation that ends a statement), `marker_in_emphasis` (inside `**bold**`, `*italics*`,
        `__…__`, `_…_`), `marker_in_code` (inside inline code or a fenced code block), `marker_on_fence_line` (on the
        line of a closing code fence), `markers_grouped_at_end` (every marker of a multi-sentence answer piled up at
        its end), `unknown_source_id` (an id that was not given) and `bare_marker_id` (`turn0file0` written without
        the marker characters).
    """
    markers = [m for m in scan_markup(text).matches if m.kind == 'openai_marker']
    found: list[tuple[ProblemCode, int, int, str]] = []
    if markers:
        fences, closing_lines = _fences(text)
        code = (fences, _Regions(_code_spans(text)))
        emphasis = _Regions(_emphasis(text))
        for marker, before in zip(markers, _befores(text, markers), strict=True):
            found += _placement(marker, before, code, closing_lines, emphasis)
            found += _unknown_ids(marker, source_ids)
        found += _grouped_at_end(text, markers)
    taken = _Regions([(m.start - 1, m.end) for m in markers])
    for m in _BARE_ID_RE.finditer(text):
        if not taken.holds(m.start()):
            message = f'source id {m.group()!r} written without the marker characters'
            found.append(('bare_marker_id', m.start(), m.end(), message))
    return [
        CitationProblem(code, message, part_index=part_index, start=start, end=end, detail=shorten(text[start:end]))
        for code, start, end, message in sorted(found, key=lambda f: (f[1], f[2]))
    ]


def _placement(
    marker: MarkupMatch,
    before: str,
    code: tuple[_Regions, _Regions],
    closing_lines: _Regions,
    emphasis: _Regions,
) -> list[tuple[ProblemCode, int, int, str]]:
    span = (marker.start, marker.end)
    if code[0].holds(marker.start) or code[1].holds(marker.start):
        return [('marker_in_code', *span, 'citation marker inside code, where it is shown as it stands')]
    if closing_lines.holds(marker.start + 1):
        return [('marker_on_fence_line', *span, 'citation marker on the line of a closing code fence')]
    if emphasis.holds(marker.start):
        return [('marker_in_emphasis', *span, 'citation marker inside bold or italic text')]
    if before and before not in _AFTER and before != '\n':
        message = 'citation marker not right after the punctuation that ends the statement it supports'
        return [('marker_not_after_punctuation', *span, message)]
    return []


def _befores(text: str, markers: list[MarkupMatch]) -> list[str]:
    """For each marker, the character it follows, skipping spaces and the markers right before it (`''` at the start).

    A marker right after another (spaces between) follows what that one follows: each is found once, in text order.
    """
    after_marker = {m.end: index for index, m in enumerate(markers)}
    befores: list[str] = []
    for marker in markers:
        position = marker.start
        before = ''
        while position > 0:
            if position in after_marker:
                before = befores[after_marker[position]]
                break
            if text[position - 1] not in ' \t':
                before = text[position - 1]
                break
            position -= 1
        befores.append(before)
    return befores


def _unknown_ids(marker: MarkupMatch, source_ids: Collection[str] | None) -> list[tuple[ProblemCode, int, int, str]]:
    if source_ids is None:
        return []
    return [
        ('unknown_source_id', marker.start, marker.end, f'citation marker names {source_id!r}, which was not given')
        for source_id in marker.source_ids
        if source_id not in source_ids
    ]


def _grouped_at_end(text: str, markers: list[MarkupMatch]) -> list[tuple[ProblemCode, int, int, str]]:
    """Every marker after the last word of an answer of more than one sentence, when there are several."""
    if len(markers) < 2:
        return []
    first = markers[0].start
    rest = (
        ''.join(text[a.end : b.start] for a, b in zip(markers, [*markers[1:], None], strict=True) if b)
        + text[markers[-1].end :]
    )
    body = text[:first].strip()
    sentences = len(re.findall(r'[.!?](?:\s|$)', body))
    if _WORD_RE.search(rest) or sentences < 2:
        return []
    message = f'all {len(markers)} citation markers are grouped at the end instead of after the statements they support'
    return [('markers_grouped_at_end', first, len(text), message)]


def _fences(text: str) -> tuple[_Regions, _Regions]:
    """Fenced code blocks (opening line to closing line) and the closing fence lines."""
    blocks: list[tuple[int, int]] = []
    closing: list[tuple[int, int]] = []
    opened: tuple[str, int] | None = None
    for m in _FENCE_RE.finditer(text):
        fence = m.group(1)
        if opened is None:
            opened = (fence, m.start())
        elif fence[0] == opened[0][0] and len(fence) >= len(opened[0]):
            line_end = text.find('\n', m.end())
            line_end = len(text) if line_end < 0 else line_end
            blocks.append((opened[1], m.start()))
            closing.append((m.start(), line_end))
            opened = None
    if opened is not None:
        blocks.append((opened[1], len(text) + 1))
    return _Regions(blocks), _Regions(closing)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Inline code spans, as `re.finditer(r'(`+)(?!`)[^\\n]*?(?<!`)\\1(?!`)', text)` finds them, in linear time.

    A span opens at a backtick run (or the rest of one, from any backtick in it) and closes at the next run of exactly
    its length on the same line; the regular expression would read to the end of the line again for every backtick
    that never closes. Here each run is looked up by (line, length): the runs are listed once, then each opener costs a
    bisection.
    """
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text)]
    if len(runs) < 2:
        return []
    newlines = [m.start() for m in _NEWLINE_RE.finditer(text)]
    lines = [bisect_left(newlines, start) for start, _ in runs]
    later: defaultdict[tuple[int, int], list[int]] = defaultdict(list)  # (line, length) -> runs, in order
    for index, (start, end) in enumerate(runs):
        later[lines[index], end - start].append(index)
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(runs):
        start, end = runs[index]
        following = index + 1
        for opener in range(start, end):  # the whole run first, then what is left of it from each next backtick
            closers = later.get((lines[index], end - opener))
            k = bisect_left(closers, following) if closers else 0
            if closers and k < len(closers):
                closer = closers[k]
                spans.append((opener, runs[closer][1]))
                following = closer + 1
                break
        index = following
    return spans


def _emphasis(text: str) -> list[tuple[int, int]]:
    """Bold and italic spans (see `_ITALIC`), in text order, in linear time (a bisection per doubled delimiter)."""
    closers = {c: [m.start() for m in pattern.finditer(text)] for c, pattern in _STRONG_CLOSERS.items()}
    newlines = [m.start() for m in _NEWLINE_RE.finditer(text)]
    spans: list[tuple[int, int]] = []
    position = 0
    while (found := _DELIMITER_RE.search(text, position)) is not None:
        start = found.start()
        delimiter = text[start]
        end = _strong_end(text, start, delimiter, closers[delimiter], newlines)
        if end is None and (italic := _ITALIC[delimiter].match(text, start)) is not None:
            end = italic.end()
        if end is None:
            position = start + 1
        else:
            spans.append((start, end))
            position = end
    return spans


def _strong_end(text: str, start: int, delimiter: str, closers: list[int], newlines: list[int]) -> int | None:
    """The end of `**…**` (or `__…__`) opening at `start`: the first closer after the opener, on its line."""
    inner = start + 2
    if text[start + 1 : inner] != delimiter or inner >= len(text) or _WHITESPACE_RE.match(text, inner):
        return None
    k = bisect_left(closers, inner)
    if k == len(closers):
        return None
    close = closers[k]
    line = bisect_left(newlines, inner)
    if line < len(newlines) and newlines[line] < close:
        return None
    return close + 2
