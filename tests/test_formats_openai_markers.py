from __future__ import annotations

import datetime
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic_ai import Citation, ContentCitationAnchor, DocumentCitationSource, WebCitationSource
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitationProblem
from pydantic_ai_citations.formats.openai_markers import (
    CITATION_INSTRUCTIONS,
    LineRange,
    Marker,
    MarkerScanner,
    citation_instructions,
    extract_markers,
    extract_markers_with_problems,
    render_source,
    render_source_block,
    resolve,
    strip_markers,
)

S, E, P = '\ue200', '\ue201', '\ue202'


def mk(*parts: str) -> str:
    return S + P.join(parts) + E


def esc(*parts: str) -> str:
    return '\\ue200' + '\\ue202'.join(parts) + '\\ue201'


def scan(chunks: list[str], **kwargs: object) -> tuple[list[Marker], list[CitationProblem]]:
    scanner = MarkerScanner(**kwargs)  # type: ignore[arg-type]
    markers: list[Marker] = []
    for chunk in chunks:
        markers += scanner.feed(chunk)
    return markers, scanner.close()


# --- extract_markers -------------------------------------------------------------------------------------------


def test_single_marker() -> None:
    text = f'Paris is the capital of France.{mk("cite", "turn0search1")} Next.'
    [marker] = extract_markers(text)
    assert marker == Marker(
        raw=mk('cite', 'turn0search1'),
        family='cite',
        source_ids=('turn0search1',),
        locator=None,
        start=31,
        end=31 + len(mk('cite', 'turn0search1')),
    )
    assert text[marker.start : marker.end] == marker.raw


def test_several_ids_and_locator() -> None:
    text = f'A.{mk("cite", "turn0file1", "turn2search5", "block5", "L8-L13")} B.{mk("cite", "x_y-z", "L3")}'
    first, second = extract_markers(text)
    assert first.source_ids == ('turn0file1', 'turn2search5', 'block5')
    assert first.locator == LineRange(8, 13)
    assert str(first.locator) == 'L8-L13'
    assert second.source_ids == ('x_y-z',)
    assert second.locator == LineRange(3, 3)
    assert str(second.locator) == 'L3'


@pytest.mark.parametrize(
    ('body', 'message'),
    [
        pytest.param(('cite', 'turn 0'), "invalid source id 'turn 0'", id='space-in-id'),
        pytest.param(('cite', 'turn0/file'), "invalid source id 'turn0/file'", id='slash-in-id'),
        pytest.param(('cite', 'tûrn0'), "invalid source id 'tûrn0'", id='non-ascii-id'),
        pytest.param(('cite', ''), 'marker cites no source id', id='empty-id'),
        pytest.param(('cite',), 'marker cites no source id', id='no-id'),
        pytest.param(('cite', 'L8'), 'marker cites no source id', id='only-locator'),
        pytest.param(('cite', 'a', 'L0'), "invalid line range 'L0'", id='line-zero'),
        pytest.param(('cite', 'a', 'L9-L3'), "invalid line range 'L9-L3'", id='reversed-range'),
        pytest.param(('cite', 'a', 'L2', 'b'), "line range 'L2' must be the last part", id='locator-not-last'),
        pytest.param(('', 'a'), "marker has no valid family name (got '')", id='no-family'),
        pytest.param(('navlist', 'a'), "unknown marker family 'navlist' (allowed: cite)", id='unknown-family'),
        pytest.param(('entity["city","Paris"]',), 'marker has no valid family name', id='json-body'),
    ],
)
def test_malformed_bodies_are_reported_not_guessed(body: tuple[str, ...], message: str) -> None:
    raw = mk(*body)
    text = f'Claim.{raw} After.'
    result = extract_markers_with_problems(text)
    assert result.markers == []
    [problem] = result.problems
    assert problem.code == 'malformed_marker'
    assert problem.message.startswith(message)
    assert (problem.start, problem.end) == (6, 6 + len(raw))
    assert problem.detail == raw


def test_other_families_when_allowed() -> None:
    text = f'A.{mk("cite", "a")} B.{mk("navlist", "b")}'
    assert [m.family for m in extract_markers(text, families=('cite', 'navlist'))] == ['cite', 'navlist']
    result = extract_markers_with_problems(text)
    assert [m.family for m in result.markers] == ['cite']
    assert [p.code for p in result.problems] == ['malformed_marker']


@pytest.mark.parametrize('families', ['cite', ('ci te',), ('1cite',)])
def test_bad_families_argument(families: object) -> None:
    with pytest.raises(UserError, match='famil'):
        extract_markers('x', families=families)  # type: ignore[arg-type]


def test_unterminated_markers() -> None:
    text = f'One {S}cite{P}a and then {mk("cite", "b")} end {S}cite{P}c'
    result = extract_markers_with_problems(text)
    assert [m.source_ids for m in result.markers] == [('b',)]
    first, last = result.problems
    assert first.code == last.code == 'unterminated_marker'
    assert (first.start, first.end) == (4, text.index(S, 5))
    assert (last.start, last.end) == (text.rindex(S), len(text))


def test_lone_closers_and_separators_cite_nothing_and_are_stripped() -> None:
    text = f'a {E} b {P} c'
    result = extract_markers_with_problems(text)
    assert result.markers == []
    assert result.problems == []
    # A reader never sees a private-use delimiter (formats.markup reports them as malformed markup).
    assert strip_markers(text) == 'a b c'


def test_escaped_form() -> None:
    text = f'Claim.{esc("cite", "turn0file1", "L2")} Other.{mk("cite", "b")} Mixed.\\uE200cite{P}c\\ue201'
    assert extract_markers(text) == [m for m in extract_markers(text) if m.source_ids == ('b',)]
    markers = extract_markers(text, escaped=True)
    assert [(m.source_ids, m.locator) for m in markers] == [
        (('turn0file1',), LineRange(2, 2)),
        (('b',), None),
        (('c',), None),
    ]
    for marker in markers:
        assert text[marker.start : marker.end] == marker.raw
    assert strip_markers(text, escaped=True) == 'Claim. Other. Mixed.'


def test_escaped_strip_does_not_join_pieces_into_a_marker() -> None:
    text = '\\u\\ue200e200cite\\ue202a' + mk('cite', 'x') + '\\ue201'
    stripped = strip_markers(text, escaped=True)
    assert extract_markers_with_problems(stripped, escaped=True) == extract_markers_with_problems('', escaped=True)
    assert '\\ue200' not in stripped


def test_escaped_unterminated() -> None:
    text = f'x {esc("cite", "a")[:-6]} y'
    result = extract_markers_with_problems(text, escaped=True)
    assert [p.code for p in result.problems] == ['unterminated_marker']


# --- MarkerScanner -----------------------------------------------------------------------------------------------

SAMPLE = (
    f'Paris is big.{mk("cite", "turn0search1", "turn2file3", "L8-L13")} Lyon too.{mk("cite", "block5")} Bye {S}cite'
)


@pytest.mark.parametrize(
    'cut',
    [
        pytest.param(SAMPLE.index(S) + 1, id='right-after-U+E200'),
        pytest.param(SAMPLE.index('turn0') + 3, id='mid-id'),
        pytest.param(SAMPLE.index('L8-') + 2, id='mid-locator'),
        pytest.param(SAMPLE.index(P), id='before-separator'),
        pytest.param(SAMPLE.index(E), id='before-U+E201'),
        pytest.param(SAMPLE.index(E) + 1, id='after-U+E201'),
    ],
)
def test_scanner_split_points(cut: int) -> None:
    expected = extract_markers_with_problems(SAMPLE)
    markers, problems = scan([SAMPLE[:cut], SAMPLE[cut:]])
    assert markers == expected.markers
    assert problems == expected.problems
    assert [p.code for p in problems] == ['unterminated_marker']


def test_scanner_returns_markers_when_completed() -> None:
    scanner = MarkerScanner()
    assert scanner.feed('Claim.' + S) == []
    assert scanner.feed('cite' + P + 'tu') == []
    [marker] = scanner.feed('rn0file1' + E + ' more')
    assert (marker.start, marker.source_ids) == (6, ('turn0file1',))
    assert scanner.feed(' text ' + S + 'cite') == []
    [problem] = scanner.close()
    assert problem.code == 'unterminated_marker'
    assert (problem.start, problem.end) == (len('Claim.') + len(marker.raw) + 11, len('Claim.') + len(marker.raw) + 16)
    assert scanner.close() == [problem]
    assert scanner.problems == [problem]


def test_scanner_after_close() -> None:
    scanner = MarkerScanner()
    scanner.close()
    with pytest.raises(UserError, match='after close'):
        scanner.feed('plain')
    with pytest.raises(UserError, match='after close'):
        scanner.feed(E)


def test_scanner_escaped_split() -> None:
    text = f'A.{esc("cite", "a")} B.{esc("cite", "b", "L1-L2")} C.\\'
    expected = extract_markers_with_problems(text, escaped=True)
    for cut in range(len(text) + 1):
        assert scan([text[:cut], text[cut:]], escaped=True) == (expected.markers, expected.problems)


# --- strip_markers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('text', 'expected'),
    [
        pytest.param(f'Paris is big.{mk("cite", "a")} Next.', 'Paris is big. Next.', id='after-punctuation'),
        pytest.param(f'Paris is big. {mk("cite", "a")} Next.', 'Paris is big. Next.', id='no-double-space'),
        pytest.param(f'Paris is big {mk("cite", "a")}.', 'Paris is big.', id='no-space-before-period'),
        pytest.param(f'Paris {mk("cite", "a")}, big', 'Paris, big', id='no-space-before-comma'),
        pytest.param(f'End. {mk("cite", "a")}', 'End.', id='no-trailing-space'),
        pytest.param(f'End. {mk("cite", "a")}\nNext', 'End.\nNext', id='no-space-before-newline'),
        pytest.param(f'A. {mk("cite", "a")} {mk("cite", "b")} B.', 'A. B.', id='two-markers'),
        pytest.param(f'A.{mk("cite", "a")}{mk("cite", "b")} B.', 'A. B.', id='adjacent-markers'),
        # The grammar's one spacing rule (`strip_markup`, and so what a stream shows): only a space before a marker
        # goes, so a marker alone on a line leaves the line empty, and one at the start the space after it.
        pytest.param(f'Para.\n{mk("cite", "a")}\nNext.', 'Para.\n\nNext.', id='marker-on-own-line'),
        pytest.param(f'{mk("cite", "a")} Start.', ' Start.', id='marker-at-start'),
        pytest.param(f'A.{mk("nav", "x")} B.', 'A. B.', id='unknown-family-removed-too'),
        pytest.param(f'A.{S}cite{P}broken B.', 'A. B.', id='unterminated-marker-removed-whole'),
        pytest.param(f'See {S}cite{P}turn9 and more', 'See and more', id='unterminated-leaves-nothing-behind'),
        pytest.param('No markers  here .', 'No markers  here .', id='untouched'),
    ],
)
def test_strip_markers(text: str, expected: str) -> None:
    assert strip_markers(text) == expected


def test_strip_given_markers_only() -> None:
    text = f'A.{mk("cite", "a")} B.{mk("cite", "b")} C.'
    markers = extract_markers(text)
    assert strip_markers(text, markers[1:]) == f'A.{mk("cite", "a")} B. C.'
    with pytest.raises(UserError, match='not at its offsets'):
        strip_markers('other text entirely, long enough', markers)
    with pytest.raises(UserError, match='overlaps'):
        strip_markers(text, [markers[0], markers[0]])


# --- resolve ----------------------------------------------------------------------------------------------

SOURCES: dict[str, WebCitationSource | DocumentCitationSource] = {
    'turn0search1': WebCitationSource('https://example.com/paris', title='Paris'),
    'turn0file2': DocumentCitationSource(document_id='file-2', title='Notes', excerpts=['old']),
}


def test_resolve_sentence_anchor() -> None:
    text = f'Intro line\nParis is big. It has {mk("cite", "turn0search1")} many parks.{mk("cite", "turn0file2")} Bye.'
    result = resolve(text, SOURCES)
    assert result.clean_text == 'Intro line\nParis is big. It has many parks. Bye.'
    first, second = result.citations
    assert first.anchor is not None
    assert second.anchor is not None
    assert result.clean_text[first.anchor.start : first.anchor.end] == 'It has'
    assert result.clean_text[second.anchor.start : second.anchor.end] == 'It has many parks.'
    assert first.sources == [WebCitationSource('https://example.com/paris', title='Paris')]
    assert first.sources[0] is not SOURCES['turn0search1']
    assert result.problems == []
    assert [m.source_ids for m in result.markers] == [('turn0search1',), ('turn0file2',)]


def test_resolve_line_start_and_bullets() -> None:
    text = f'# Title\n- First point.{mk("cite", "turn0search1")}\n- Second!{mk("cite", "turn0search1")}\n'
    result = resolve(text, SOURCES)
    assert [result.clean_text[c.anchor.start : c.anchor.end] for c in result.citations if c.anchor] == [
        'First point.',
        'Second!',
    ]


def test_resolve_two_ids_one_citation() -> None:
    result = resolve(f'Both agree.{mk("cite", "turn0search1", "turn0file2")}', SOURCES)
    [citation] = result.citations
    assert [type(s).__name__ for s in citation.sources] == ['WebCitationSource', 'DocumentCitationSource']
    assert citation.anchor == ContentCitationAnchor(start=0, end=11)


def test_resolve_unknown_id() -> None:
    text = f'Claim one.{mk("cite", "turn0search1", "turn9search9")} Claim two.{mk("cite", "nope")}'
    result = resolve(text, SOURCES)
    [citation] = result.citations
    assert len(citation.sources) == 1
    assert [(p.code, p.detail, p.start, p.end) for p in result.problems] == [
        ('unresolved_marker', 'turn9search9', 10, 10 + len(mk('cite', 'turn0search1', 'turn9search9'))),
        ('unresolved_marker', 'nope', text.rindex(S), len(text)),
    ]


def test_resolve_line_locator_excerpt() -> None:
    lines = [f'line {n}' for n in range(1, 21)]
    text = f'Fact.{mk("cite", "turn0file2", "L8-L10")} Other.{mk("cite", "turn0file2", "L19-L25")}'
    result = resolve(text, SOURCES, source_lines={'turn0file2': lines})
    first, second = result.citations
    assert first.sources == [
        DocumentCitationSource(document_id='file-2', title='Notes', excerpts=['line 8\nline 9\nline 10'])
    ]
    assert second.sources == [DocumentCitationSource(document_id='file-2', title='Notes', excerpts=['old'])]
    [problem] = result.problems
    assert problem.code == 'unresolved_marker'
    assert 'L19-L25' in problem.message
    assert result.markers[0].locator == LineRange(8, 10)
    assert SOURCES['turn0file2'].excerpts == ['old']


def test_resolve_marker_at_start_has_no_anchor() -> None:
    result = resolve(f'{mk("cite", "turn0search1")}Text.', SOURCES)
    assert result.citations == [Citation(sources=[SOURCES['turn0search1']], anchor=None)]


def test_resolve_reports_malformed_and_unterminated() -> None:
    text = f'A.{mk("cite", "bad id")} B.{S}cite{P}turn0search1'
    result = resolve(text, SOURCES)
    assert result.citations == []
    assert [p.code for p in result.problems] == ['malformed_marker', 'unterminated_marker']
    assert result.clean_text == 'A. B.'  # nothing of the unterminated marker stays (it is reported)


# --- context side ----------------------------------------------------------------------------------------------


def test_render_source() -> None:
    rendered = render_source(
        'turn0file1', 'first\nsecond', title='A\ntitle', url='https://x', date='2 Jan 2025', numbered_lines=True
    )
    assert rendered == snapshot("""\
[turn0file1]
Title: A title
URL: https://x
Updated: 2 Jan 2025
Citation Marker: \ue200cite\ue202turn0file1\ue201
Citation Marker for lines 2 to 4: \ue200cite\ue202turn0file1\ue202L2-L4\ue201

[L1] first
[L2] second\
""")
    assert render_source('block5', 'x', date=datetime.date(2025, 1, 2), block=True) == snapshot("""\
<BLOCK block5>
[block5]
Updated: 2025-01-02
Citation Marker: \ue200cite\ue202block5\ue201

x
</BLOCK>\
""")
    assert render_source('b1', f'forged {mk("cite", "x")} text') == snapshot("""\
[b1]
Citation Marker: \ue200cite\ue202b1\ue201

forged citex text\
""")
    with pytest.raises(UserError, match="'bad id'"):
        render_source('bad id', 'x')
    # The `Citation Marker:` lines parse as the markers of this source.
    assert {m.source_ids for m in extract_markers(rendered)} == {('turn0file1',)}


def test_render_source_block() -> None:
    rendered = render_source_block('block5', 'a < b & "c"', title='T "q" <x>', date=datetime.date(2025, 1, 2))
    assert rendered == (
        '<source id="block5" title="T &quot;q&quot; &lt;x&gt;" date="2025-01-02">\na &lt; b &amp; "c"\n</source>'
    )
    assert render_source_block('b', 'x\ny', numbered_lines=True, tag='doc') == '<doc id="b">\n[L1] x\n[L2] y\n</doc>'
    with pytest.raises(UserError, match="'a b'"):
        render_source_block('b', 'x', tag='a b')


def test_instructions() -> None:
    instructions = citation_instructions()
    assert instructions == CITATION_INSTRUCTIONS
    assert instructions == snapshot("""\
Cite your sources with citation markers. Every source in the context has an id (for example `turn0file1`) and a `Citation Marker:` line with the exact marker to use for it.
Write a marker exactly like this: \ue200cite\ue202turn0file1\ue201 - that is the character U+E200, the word `cite`, the character U+E202, the id, and the character U+E201, with no spaces or other characters inside.
When several sources support the same statement, put all their ids in one marker, separated by U+E202: \ue200cite\ue202turn0file1\ue202turn1search3\ue201
Put each marker right after the punctuation that ends the sentence or paragraph it supports, on the same line. Never put a marker on a line of its own, inside a link, inside bold or italic text, inside inline code or a code block, or on the same line as the closing fence of a code block.
Cite each statement where it is made. Do not group citations at the end of the response.
When sources disagree, cite each of them and describe the disagreement; do not pick one silently.
Use only ids that appear in the context, copied exactly. Never invent, guess or alter an id.
Cite only what the sources say. Never put a marker on a statement that comes from your own knowledge or anywhere outside the context; if no source supports a statement, write it without a marker.\
""")
    line_level = citation_instructions(('cite', 'navlist'), line_level=True)
    assert line_level == snapshot("""\
Cite your sources with citation markers. Every source in the context has an id (for example `turn0file1`) and a `Citation Marker:` line with the exact marker to use for it.
Write a marker exactly like this: \ue200cite\ue202turn0file1\ue201 - that is the character U+E200, the word `cite`, the character U+E202, the id, and the character U+E201, with no spaces or other characters inside.
When several sources support the same statement, put all their ids in one marker, separated by U+E202: \ue200cite\ue202turn0file1\ue202turn1search3\ue201
Sources shown with numbered lines ([L1], [L2], ...) can be cited by line: add the line range as the last part, \ue200cite\ue202turn0file1\ue202L8\ue201 for line 8 or \ue200cite\ue202turn0file1\ue202L8-L13\ue201 for lines 8 to 13. Use only line numbers shown in the source.
Markers may also use these words instead of `cite`, with the same syntax: `navlist`.
Put each marker right after the punctuation that ends the sentence or paragraph it supports, on the same line. Never put a marker on a line of its own, inside a link, inside bold or italic text, inside inline code or a code block, or on the same line as the closing fence of a code block.
Cite each statement where it is made. Do not group citations at the end of the response.
When sources disagree, cite each of them and describe the disagreement; do not pick one silently.
Use only ids that appear in the context, copied exactly. Never invent, guess or alter an id or a line range.
Cite only what the sources say. Never put a marker on a statement that comes from your own knowledge or anywhere outside the context; if no source supports a statement, write it without a marker.\
""")
    # The instructions' own examples parse as markers.
    assert {m.source_ids for m in extract_markers(line_level)} >= {('turn0file1',), ('turn0file1', 'turn1search3')}


# --- properties ------------------------------------------------------------------------------------------------

ALPHABET = [
    S,
    E,
    P,
    'cite',
    'nav',
    'turn0',
    'file1',
    'L8',
    '-L13',
    'L',
    '8',
    '-',
    '_',
    ' ',
    '.',
    ',',
    '\n',
    'x',
    'é',
    '\\ue200',
    '\\ue201',
    '\\ue202',
    '\\',
    'u',
    'e2',
    '0',
]

marker_texts = st.lists(st.sampled_from(ALPHABET), max_size=40).map(''.join)
any_texts = st.one_of(
    marker_texts, st.text(), st.text(alphabet=st.characters(min_codepoint=0xE1F0, max_codepoint=0xE210))
)


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(any_texts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(split_text(), st.booleans())
def test_scanner_equals_batch_for_any_split(case: tuple[str, list[str]], escaped: bool) -> None:
    text, chunks = case
    expected = extract_markers_with_problems(text, escaped=escaped)
    assert scan(chunks, escaped=escaped) == (expected.markers, expected.problems)


@settings(max_examples=300)
@given(any_texts, st.booleans())
def test_offsets_inside_text_and_no_crash(text: str, escaped: bool) -> None:
    result = extract_markers_with_problems(text, families=('cite', 'nav'), escaped=escaped)
    for marker in result.markers:
        assert 0 <= marker.start < marker.end <= len(text)
        assert text[marker.start : marker.end] == marker.raw
    for problem in result.problems:
        assert problem.start is not None
        assert problem.end is not None
        assert 0 <= problem.start < problem.end <= len(text)
    conversion = resolve(
        text, {'turn0': WebCitationSource('https://a'), 'file1': SOURCES['turn0file2']}, escaped=escaped
    )
    for citation in conversion.citations:
        if citation.anchor is not None:
            assert 0 <= citation.anchor.start < citation.anchor.end <= len(conversion.clean_text)
    for problem in conversion.problems:
        assert problem.start is not None
        assert problem.end is not None
        assert 0 <= problem.start < problem.end <= len(text)


@settings(max_examples=300)
@given(any_texts, st.booleans())
def test_strip_leaves_no_complete_marker(text: str, escaped: bool) -> None:
    stripped = strip_markers(text, escaped=escaped)
    families = ('cite', 'nav', 'x')
    result = extract_markers_with_problems(stripped, families=families, escaped=escaped)
    assert result.markers == []
    assert [p for p in result.problems if p.code == 'malformed_marker'] == []
    if not escaped:
        assert S not in stripped


def test_ids_with_capital_l_are_ids() -> None:
    [marker] = extract_markers(f'A.{mk("cite", "Lyon1", "L8x", "L3")}')
    assert marker.source_ids == ('Lyon1', 'L8x')
    assert marker.locator == LineRange(3, 3)


def test_many_distinct_markers_and_repeats() -> None:
    text = ''.join(f'S{n}.{mk("cite", f"turn0search{n}")} ' for n in range(5000))
    markers = extract_markers(text * 2)
    assert len(markers) == 10_000
    assert markers[4999].source_ids == ('turn0search4999',)
    assert markers[5000].start == len(text) + 3
    escaped = extract_markers(f'A.{esc("cite", "a")} B.{esc("cite", "a")}', escaped=True)
    assert [m.source_ids for m in escaped] == [('a',), ('a',)]


def test_strip_keeps_offsets_consistent_for_adjacent_markers() -> None:
    text = f'foo {mk("cite", "turn0search1")}{mk("cite", "turn0file2", "turn0file2")} bar.'
    result = resolve(text, SOURCES)
    assert result.clean_text == 'foo bar.'
    first, second = result.citations
    assert first.anchor == second.anchor == ContentCitationAnchor(start=0, end=3)
    assert len(second.sources) == 1


def test_sentence_anchor_skips_surrounding_whitespace() -> None:
    text = f'  Lead spaces.\n\n{mk("cite", "turn0search1")} After.'
    result = resolve(text, SOURCES)
    [citation] = result.citations
    assert citation.anchor is not None
    assert result.clean_text[citation.anchor.start : citation.anchor.end] == 'Lead spaces.'


def test_markers_are_frozen_values() -> None:
    import dataclasses

    [marker] = extract_markers(f'A.{mk("cite", "a")}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        marker.start = 3  # type: ignore[misc]
    assert marker == Marker(mk('cite', 'a'), 'cite', ('a',), None, 2, 2 + len(mk('cite', 'a')))
    assert hash(marker) == hash(Marker(mk('cite', 'a'), 'cite', ('a',), None, 2, 2 + len(mk('cite', 'a'))))
    assert repr(marker).startswith("Marker(raw='")


@pytest.mark.parametrize(
    'text',
    [
        pytest.param(f'See {S}cite{P}turn9 and more', id='real'),
        pytest.param('See \\ue200cite\\ue202turn9 and more', id='escaped'),
        pytest.param(f'See \\ue200cite{P}turn9 and more', id='mixed'),
    ],
)
def test_unterminated_marker_leaves_nothing_behind_and_is_reported(text: str) -> None:
    assert strip_markers(text, escaped=True) == 'See and more'
    conversion = resolve(text, SOURCES, escaped=True)
    assert conversion.clean_text == 'See and more'
    assert [p.code for p in conversion.problems] == ['unterminated_marker']


# --- tolerance as the reference helper's ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('text', 'ids'),
    [
        pytest.param('A.\ue200cite\ue202 turn0file0 \ue201', ('turn0file0',), id='spaces-around-id'),
        pytest.param('A.\ue200cite\ue202\ue202turn0file0\ue201', ('turn0file0',), id='doubled-delimiter'),
        pytest.param('A.\ue200 cite\ue202turn0\ue202 \ue202turn1\ue202L2\ue201', ('turn0', 'turn1'), id='both'),
    ],
)
def test_tolerant_like_the_reference_helper(text: str, ids: tuple[str, ...]):
    extraction = extract_markers_with_problems(text)
    assert [m.source_ids for m in extraction.markers] == [ids]
    assert extraction.problems == []
    assert strip_markers(text) == 'A.'


@pytest.mark.parametrize(
    'text',
    [
        pytest.param('A.\ue200cite\ue202 \ue201', id='only-spaces'),
        pytest.param('A.\ue200cite\ue202a b\ue201', id='space-inside-id'),
        pytest.param('A.\ue200\ue202turn0\ue201', id='no-family'),
    ],
)
def test_really_malformed_is_still_reported(text: str):
    extraction = extract_markers_with_problems(text)
    assert extraction.markers == []
    assert [p.code for p in extraction.problems] == ['malformed_marker']


def test_no_families_gives_no_markers():
    extraction = extract_markers_with_problems('A.\ue200cite\ue202turn0\ue201', families=())
    assert extraction.markers == []
    assert [p.code for p in extraction.problems] == ['malformed_marker']
    assert 'allowed: none' in extraction.problems[0].message


def test_own_id_pattern():
    text = 'A.\ue200cite\ue202block5\ue201 B.\ue200cite\ue202turn0file0\ue201'
    extraction = extract_markers_with_problems(text, id_pattern=r'block[0-9]+')
    assert [m.source_ids for m in extraction.markers] == [('block5',)]
    assert [(p.code, p.start) for p in extraction.problems] == [('malformed_marker', text.index('\ue200', 3))]
    sources = {'block5': WebCitationSource('https://e.com/5')}
    conversion = resolve(text, sources, id_pattern=re.compile(r'block[0-9]+'))
    assert len(conversion.citations) == 1
