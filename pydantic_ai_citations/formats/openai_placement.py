r"""Where OpenAI citation markers may stand: the placement rules of OpenAI's file-search and retrieval guidance.

The guidance asks the model to put each marker (`\ue200cite\ue202turn0file0\ue201`) right after the punctuation
that ends the statement it supports, never inside Markdown bold, italics, inline code or a code fence, never on the
line of a closing code fence, not all grouped at the end of the response, and only with ids that were given.
`check_marker_placement` reports each breach as a `CitationProblem` with offsets into the text; so does an id written
without the marker characters (`turn0file0` as plain text), which a reader would otherwise see as noise.

Markers are found by the package's one grammar (`formats.markup.scan_markup`). The check reads the text once per
rule (linear); it never changes the text.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Collection
from dataclasses import dataclass

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
_INLINE_CODE_RE = re.compile(r'(`+)(?!`)[^\n]*?(?<!`)\1(?!`)')
_EMPHASIS_RE = re.compile(
    r'\*\*(?!\s)[^\n]*?(?<!\s)\*\*|__(?!\s)[^\n]*?(?<!\s)__'
    r'|(?<![*\w])\*(?![\s*])[^*\n]*?(?<![\s*])\*(?![*\w])|(?<![_\w])_(?![\s_])[^_\n]*?(?<![\s_])_(?![_\w])'
)
# An id as OpenAI's tools name sources (`turn0file0`, `turn2search11`), written as plain text.
_BARE_ID_RE = re.compile(r'(?<![\w\ue202])turn[0-9]{1,4}[a-z]{2,20}[0-9]{1,6}(?![\w\ue201\ue202])')
_WORD_RE = re.compile(r'\w')


@dataclass(frozen=True)
class _Region:
    start: int
    end: int


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
        spans = _EMPHASIS_RE.finditer(text)
        emphasis = [_Region(m.start(), m.end()) for m in spans]
        inline = [_Region(m.start(), m.end()) for m in _INLINE_CODE_RE.finditer(text)]
        for marker in markers:
            found += _placement(text, marker, markers, (fences, inline), closing_lines, emphasis)
            found += _unknown_ids(marker, source_ids)
        found += _grouped_at_end(text, markers)
    taken = [_Region(m.start - 1, m.end) for m in markers]
    for m in _BARE_ID_RE.finditer(text):
        if not _inside(taken, m.start()):
            message = f'source id {m.group()!r} written without the marker characters'
            found.append(('bare_marker_id', m.start(), m.end(), message))
    return [
        CitationProblem(code, message, part_index=part_index, start=start, end=end, detail=shorten(text[start:end]))
        for code, start, end, message in sorted(found, key=lambda f: (f[1], f[2]))
    ]


def _inside(regions: list[_Region], position: int) -> bool:
    """Whether `position` is strictly inside one of `regions` (sorted, non-overlapping), by bisection."""
    k = bisect_left([r.start for r in regions], position) - 1
    return k >= 0 and position < regions[k].end


def _placement(
    text: str,
    marker: MarkupMatch,
    markers: list[MarkupMatch],
    code: tuple[list[_Region], list[_Region]],
    closing_lines: list[_Region],
    emphasis: list[_Region],
) -> list[tuple[ProblemCode, int, int, str]]:
    span = (marker.start, marker.end)
    if _inside(code[0], marker.start) or _inside(code[1], marker.start):
        return [('marker_in_code', *span, 'citation marker inside code, where it is shown as it stands')]
    if _inside(closing_lines, marker.start + 1):
        return [('marker_on_fence_line', *span, 'citation marker on the line of a closing code fence')]
    if _inside(emphasis, marker.start):
        return [('marker_in_emphasis', *span, 'citation marker inside bold or italic text')]
    before = _before(text, marker, markers)
    if before and before not in _AFTER and before != '\n':
        message = 'citation marker not right after the punctuation that ends the statement it supports'
        return [('marker_not_after_punctuation', *span, message)]
    return []


def _before(text: str, marker: MarkupMatch, markers: list[MarkupMatch]) -> str:
    """The character the marker follows, skipping spaces and the markers right before it (`''` at the start)."""
    ends = {m.end: m.start for m in markers}
    position = marker.start
    while position > 0:
        if position in ends:
            position = ends[position]
        elif text[position - 1] in ' \t':
            position -= 1
        else:
            return text[position - 1]
    return ''


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


def _fences(text: str) -> tuple[list[_Region], list[_Region]]:
    """Fenced code blocks (opening line to closing line) and the closing fence lines."""
    blocks: list[_Region] = []
    closing: list[_Region] = []
    opened: tuple[str, int] | None = None
    for m in _FENCE_RE.finditer(text):
        fence = m.group(1)
        if opened is None:
            opened = (fence, m.start())
        elif fence[0] == opened[0][0] and len(fence) >= len(opened[0]):
            line_end = text.find('\n', m.end())
            line_end = len(text) if line_end < 0 else line_end
            blocks.append(_Region(opened[1], m.start()))
            closing.append(_Region(m.start(), line_end))
            opened = None
    if opened is not None:
        blocks.append(_Region(opened[1], len(text) + 1))
    return blocks, closing
