from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Citation, DocumentCitationSource, MarkerCitationAnchor, WebCitationSource
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations.formats.numbered import (
    NumberedMarker,
    NumberedScanner,
    extract_numbered,
    is_numbered_marker,
    resolve,
    resolve_markers,
)


def found(text: str) -> list[str]:
    return [m.raw for m in extract_numbered(text)]


def scan(chunks: list[str]) -> list[NumberedMarker]:
    scanner = NumberedScanner()
    out: list[NumberedMarker] = []
    for chunk in chunks:
        out += scanner.feed(chunk)
    return out + scanner.close()


@pytest.mark.parametrize(
    ('text', 'expected'),
    [
        pytest.param('Paris is big [1].', ['[1]'], id='single'),
        pytest.param('Paris is big[1][2].', ['[1]', '[2]'], id='chain'),
        pytest.param('Paris is big [1, 2] and [3,4].', ['[1, 2]', '[3,4]'], id='comma-list'),
        pytest.param('Ranges [1-3] are text.', [], id='range-not-a-marker'),
        pytest.param('Footnote[^1] is text.', [], id='footnote'),
        pytest.param('[1](https://x) and [[2]](https://y) are links.', [], id='links'),
        pytest.param('[[3]] is a marker in brackets.', ['[3]'], id='double-brackets-no-link'),
        pytest.param('See [the docs][4] here.', [], id='reference-link'),
        pytest.param('[5]: https://example.com', [], id='reference-definition'),
        pytest.param('  [5]: https://example.com', [], id='indented-definition'),
        pytest.param('Text [5]: explanation', ['[5]'], id='colon-mid-line-is-marker'),
        pytest.param('Use `a[6]` in code.', [], id='code-span'),
        pytest.param('Use ``a ` [6]`` and [7].', ['[7]'], id='double-backtick-span'),
        pytest.param('Odd ` tick [8]\nnext [9]', ['[9]'], id='unclosed-span-ends-at-line'),
        pytest.param('```python\nx = a[1]\n```\nAfter [2].', ['[2]'], id='fenced'),
        pytest.param('~~~\n[1]\n~~~~\n[2]', ['[2]'], id='tilde-fence'),
        pytest.param('````\n```\n[1]\n````\n[2]', ['[2]'], id='longer-fence-needs-longer-close'),
        pytest.param('```\nnever closed [1]', [], id='unclosed-fence'),
        pytest.param('Escaped \\[1] is text, [2] is not.', ['[2]'], id='escaped-bracket'),
        pytest.param('Big [12345] number.', [], id='too-many-digits'),
        pytest.param('Spaced [ 1 ] marker.', ['[ 1 ]'], id='inner-spaces'),
        pytest.param('Array [1, two] text.', [], id='not-numbers'),
    ],
)
def test_extract_numbered(text: str, expected: list[str]) -> None:
    assert found(text) == expected
    for marker in extract_numbered(text):
        assert text[marker.start : marker.end] == marker.raw


def test_marker_fields() -> None:
    assert extract_numbered('A [1, 12] b') == [NumberedMarker('[1, 12]', (1, 12), 2, 9)]


@pytest.mark.parametrize(
    'chunks',
    [
        pytest.param(['Claim [1', '2] done.'], id='mid-number'),
        pytest.param(['Claim [', '12] done.'], id='after-bracket'),
        pytest.param(['Claim [12', '] done.'], id='before-close'),
        pytest.param(['Claim [12]', ' done.'], id='before-lookahead'),
        pytest.param(['Claim [12]', '(http://x) done.'], id='becomes-link'),
        pytest.param(['``', '`\n[1]\n``', '`\n[2]'], id='fence-split'),
        pytest.param(['a `', '` [3]`` [4]'], id='code-run-split'),
        pytest.param(['a \\', '[5] [6]'], id='escape-split'),
    ],
)
def test_scanner_splits(chunks: list[str]) -> None:
    assert scan(chunks) == extract_numbered(''.join(chunks))


def test_scanner_returns_markers_as_soon_as_decided() -> None:
    scanner = NumberedScanner()
    assert scanner.feed('Claim [1') == []
    assert scanner.feed('2]') == []  # a `(` next would make it a link
    assert scanner.feed(' more [3]') == [NumberedMarker('[12]', (12,), 6, 10)]
    assert scanner.close() == [NumberedMarker('[3]', (3,), 16, 19)]
    assert scanner.close() == []
    with pytest.raises(UserError, match='after close'):
        scanner.feed('x')


SOURCES = [
    WebCitationSource('https://a.example', title='A'),
    WebCitationSource('https://b.example', title='B'),
    DocumentCitationSource(document_id='doc-c', excerpts=['c']),
]


def test_resolve_list_one_based() -> None:
    text = 'One [1]. Both [1, 3]. Chain [2][3].'
    result = resolve(text, SOURCES)
    assert result.problems == []
    assert result.citations == [
        Citation(sources=[SOURCES[0]], anchor=MarkerCitationAnchor(start=4, end=7)),
        Citation(sources=[SOURCES[0], SOURCES[2]], anchor=MarkerCitationAnchor(start=14, end=20)),
        Citation(sources=[SOURCES[1]], anchor=MarkerCitationAnchor(start=28, end=31)),
        Citation(sources=[SOURCES[2]], anchor=MarkerCitationAnchor(start=31, end=34)),
    ]
    assert result.citations[0].sources[0] is not SOURCES[0]
    assert [m.raw for m in result.markers] == ['[1]', '[1, 3]', '[2]', '[3]']


def test_resolve_out_of_range_is_never_nearest() -> None:
    text = 'Zero [0]. Four [4]. Mixed [2, 9].'
    result = resolve(text, SOURCES)
    assert [c.sources for c in result.citations] == [[SOURCES[1]]]
    assert [(p.code, p.detail, p.start, p.end) for p in result.problems] == [
        ('unresolved_marker', '[0]', 5, 8),
        ('unresolved_marker', '[4]', 15, 18),
        ('unresolved_marker', '[2, 9]', 26, 32),
    ]
    assert 'numbered from 1' in result.problems[0].message


def test_resolve_zero_based() -> None:
    result = resolve('First [0], last [2].', SOURCES, base=0)
    assert [c.sources for c in result.citations] == [[SOURCES[0]], [SOURCES[2]]]


def test_resolve_mapping_by_id() -> None:
    by_id = {7: SOURCES[0], 42: SOURCES[1]}
    result = resolve('A [42]. B [7][8]. C [43].', by_id)
    assert [c.sources for c in result.citations] == [[SOURCES[1]], [SOURCES[0]]]
    assert [(p.detail, p.message) for p in result.problems] == [
        ('[8]', 'marker cites [8] but no source has this id'),
        ('[43]', 'marker cites [43] but no source has this id'),
    ]


def test_resolve_markers_found_once() -> None:
    text = 'A [1]. B [2, 9][3]. C `[1]` [4].'
    markers = extract_numbered(text)
    assert [m.raw for m in markers] == ['[1]', '[2, 9]', '[3]', '[4]']
    by_list = resolve_markers(markers, SOURCES)
    assert by_list == resolve(text, SOURCES)
    assert [c.sources for c in by_list.citations] == [[SOURCES[0]], [SOURCES[1]], [SOURCES[2]]]
    assert [m.raw for m in by_list.markers] == ['[1]', '[2, 9]', '[3]']
    assert [(p.code, p.detail, p.start, p.end) for p in by_list.problems] == [
        ('unresolved_marker', '[2, 9]', 9, 15),
        ('unresolved_marker', '[4]', 28, 31),
    ]
    by_id = {2: SOURCES[1], 4: SOURCES[0], 9: SOURCES[2]}
    by_map = resolve_markers(markers, by_id)
    assert by_map == resolve(text, by_id)
    assert by_map.citations == [
        Citation(sources=[SOURCES[1], SOURCES[2]], anchor=MarkerCitationAnchor(start=9, end=15)),
        Citation(sources=[SOURCES[0]], anchor=MarkerCitationAnchor(start=28, end=31)),
    ]
    assert [(p.detail, p.message) for p in by_map.problems] == [
        ('[1]', 'marker cites [1] but no source has this id'),
        ('[3]', 'marker cites [3] but no source has this id'),
    ]
    # the markers are only read: resolving them again gives the same result
    assert resolve_markers(markers, by_id) == by_map
    assert resolve_markers(iter(markers), SOURCES, base=0).citations == resolve(text, SOURCES, base=0).citations


def test_resolve_misuse() -> None:
    with pytest.raises(UserError, match="'abc'"):
        resolve('x', 'abc')  # type: ignore[arg-type]
    with pytest.raises(UserError, match='base=0'):
        resolve('x', {1: SOURCES[0]}, base=0)
    with pytest.raises(UserError, match='-1'):
        resolve('x', SOURCES, base=-1)
    with pytest.raises(UserError, match="'abc'"):
        resolve_markers([], 'abc')  # type: ignore[arg-type]
    with pytest.raises(UserError, match='base=2'):
        resolve_markers(extract_numbered('[1]'), {1: SOURCES[0]}, base=2)


def test_duplicate_numbers_cite_once() -> None:
    [citation] = resolve('Twice [1, 1].', SOURCES).citations
    assert citation.sources == [SOURCES[0]]


# --- properties ------------------------------------------------------------------------------------------------

PIECES = ['[', ']', '(', ')', ':', ',', ' ', '1', '2', '12', '\n', '`', '```', '~~~', '\\', 'a', 'x', '^', '-', '!']
texts = st.one_of(st.lists(st.sampled_from(PIECES), max_size=50).map(''.join), st.text())


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(texts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=500)
@given(split_text())
def test_scanner_equals_batch_for_any_split(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert scan(chunks) == extract_numbered(text)


@settings(max_examples=300)
@given(texts)
def test_offsets_inside_text(text: str) -> None:
    for marker in extract_numbered(text):
        assert 0 <= marker.start < marker.end <= len(text)
        assert text[marker.start : marker.end] == marker.raw
    result = resolve(text, SOURCES)
    for citation in result.citations:
        assert citation.anchor is not None
        assert 0 <= citation.anchor.start < citation.anchor.end <= len(text)
    for problem in result.problems:
        assert problem.start is not None
        assert problem.end is not None
        assert 0 <= problem.start < problem.end <= len(text)


def test_scanner_linear_on_long_line() -> None:
    # One long line fed in small deltas: the held text stays small (no rescans of the whole line).
    scanner = NumberedScanner()
    text = 'word [1] ' * 20_000
    count = 0
    for i in range(0, len(text), 7):
        count += len(scanner.feed(text[i : i + 7]))
        assert len(scanner._buf) < 16  # pyright: ignore[reportPrivateUsage]
    count += len(scanner.close())
    assert count == 20_000


def test_indented_fence_lines() -> None:
    assert found('```\n    ```\n[1]\n```\n[2]') == ['[2]']
    assert scan(['```\n    ``', '`\n[1]\n```\n[2]']) == extract_numbered('```\n    ```\n[1]\n```\n[2]')


def test_is_numbered_marker() -> None:
    assert is_numbered_marker('[1]')
    assert is_numbered_marker('[ 1, 22 ]')
    assert is_numbered_marker('See [3].', 4, 7)
    assert not is_numbered_marker('See [3].', 4, 6)
    assert not is_numbered_marker('[1-3]')
    assert not is_numbered_marker('[^1]')
    assert not is_numbered_marker('[12345]')
    assert not is_numbered_marker('[1][2]')


@pytest.mark.parametrize(
    ('sources', 'base', 'message'),
    [
        (['https://a.com'], 1, r'`sources\[0\]` must be a `WebCitationSource` or `DocumentCitationSource`.*wrap it'),
        ([{'url': 'https://a.com'}], 1, r'`sources\[0\]` must be a `WebCitationSource`'),
        ({1: 'https://a.com'}, 1, r'`sources\[1\]` must be'),
        ({'1': WebCitationSource('https://a.com')}, 1, r'keys of a `sources` mapping are the numbers'),
        (None, 1, r'`sources` must be a list or a mapping'),
        (5, 1, r'`sources` must be a list or a mapping'),
        ([WebCitationSource('https://a.com')], '1', r'`base` must be an int of 0 or more'),
        ([WebCitationSource('https://a.com')], 1.5, r'`base` must be an int of 0 or more'),
        ([WebCitationSource('https://a.com')], None, r'`base` must be an int of 0 or more'),
    ],
)
def test_resolve_refuses_what_is_not_sources_naming_what_it_expects(sources: Any, base: Any, message: str):
    # They raised `AttributeError` / `TypeError`, or (`base=1.5`) resolved nothing without a word.
    for call in (lambda: resolve('A [1].', sources, base=base), lambda: resolve_markers([], sources, base=base)):
        with pytest.raises(UserError, match=message):
            call()
