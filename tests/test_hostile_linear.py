"""Issue 15 point 5: the paths an attacker can reach run in time linear in their input.

The benchmarks (`benchmarks/bench_linear.py`) are the measure: they double the input and bound the time ratio. Here,
each path is checked at a modest size for the same answers as the whole-text reading (a split never changes what is
found) and for a growth ratio loose enough for a busy machine and coverage tracing, but far below what quadratic
code shows at these sizes (four times the input costs sixteen times as much).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Citation, ContentCitationAnchor, MarkerCitationAnchor, ModelResponse, TextPart
from pydantic_ai import WebCitationSource as Web

from pydantic_ai_citations import CitedAnswer, render_html, render_markdown
from pydantic_ai_citations._edit import _Locator, fingerprint_response, repair_part  # pyright: ignore[reportPrivateUsage]
from pydantic_ai_citations.formats._sse import SseDecoder, sse_data
from pydantic_ai_citations.formats.numbered import extract_numbered
from pydantic_ai_citations.formats.openai_markers import MarkerScanner, extract_markers_with_problems
from pydantic_ai_citations.formats.perplexity import AgentStreamCollector


def cost(run: Callable[[], object]) -> float:
    best = float('inf')
    for _ in range(3):  # best of three: the machine may be busy
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def assert_linear(make: Callable[[int], Callable[[], object]], small: int) -> None:
    """Four times the input costs at most 8x as much (quadratic code: 16x); the floor absorbs timer noise."""
    cost(make(small))  # warm up
    small_cost = cost(make(small))
    large_cost = cost(make(4 * small))
    assert large_cost <= 8 * small_cost + 0.05, (small_cost, large_cost)


# --- SSE decoder ------------------------------------------------------------------------------------------------------


def sse_body(n: int) -> bytes:
    return b''.join(b'event: e\ndata: {"n": %d}\n\n' % i for i in range(n))


def test_sse_many_events_in_one_chunk_is_linear():
    def make(n: int) -> Callable[[], object]:
        body = sse_body(n)
        return lambda: sse_data(body)

    assert len(sse_data(sse_body(1000))) == 1000
    assert_linear(make, 5000)


def test_sse_one_long_line_in_many_chunks_is_linear():
    def make(n: int) -> Callable[[], object]:
        def run() -> list[str]:
            decoder = SseDecoder()
            out = decoder.feed(b'data: ')
            for _ in range(n):
                out += decoder.feed(b'x' * 50)
            return out + decoder.feed(b'\n\n') + decoder.flush()

        return run

    assert make(10)() == ['x' * 500]
    assert_linear(make, 5000)


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=30), st.booleans())
def test_sse_any_split_gives_the_whole_body_events(cuts: list[int], crlf: bool):
    body = b'data: a\n\n: comment\ndata: b\ndata:c\n\nid: 1\ndata: [DONE]\n\ndata: tail'
    if crlf:
        body = body.replace(b'\n', b'\r\n')
    decoder = SseDecoder()
    out: list[str] = []
    pos = 0
    for cut in cuts:
        out += decoder.feed(body[pos : pos + cut])
        pos += cut
    out += decoder.feed(body[pos:]) + decoder.flush()
    assert out == sse_data(body) == ['a', 'b\nc', 'tail']


# --- MarkerScanner(escaped=True) ---------------------------------------------------------------------------------------


def test_escaped_scanner_with_one_unclosed_opener_is_linear():
    def make(n: int) -> Callable[[], object]:
        def run() -> object:
            scanner = MarkerScanner(escaped=True)
            scanner.feed('See \\ue200cite')
            for _ in range(n):
                scanner.feed('word1 ')
            return scanner.close()

        return run

    scanner = MarkerScanner(escaped=True)
    scanner.feed('See \\ue200cite')
    scanner.feed('word1 ')
    assert [p.code for p in scanner.close()] == ['unterminated_marker']
    assert_linear(make, 4000)


ESCAPED_PIECES = [
    '\\ue200',
    '\\uE201',
    '\\ue202',
    '\ue200',
    '\ue201',
    '\ue202',
    'cite',
    'turn0search1',
    ' 1 ',
    '\\',
    'u',
    'e20',
]


@given(st.lists(st.sampled_from(ESCAPED_PIECES), max_size=30), st.lists(st.integers(min_value=1, max_value=9)))
def test_escaped_scanner_any_split_finds_what_the_whole_text_holds(pieces: list[str], cuts: list[int]):
    text = ''.join(pieces)
    whole = extract_markers_with_problems(text, escaped=True)
    scanner = MarkerScanner(escaped=True)
    markers: list[Any] = []
    pos = 0
    for cut in cuts:
        markers += scanner.feed(text[pos : pos + cut])
        pos += cut
    markers += scanner.feed(text[pos:])
    assert (markers, scanner.close()) == (whole.markers, whole.problems)


# --- AgentStreamCollector ------------------------------------------------------------------------------------------------


def delta(text: str) -> dict[str, Any]:
    return {'type': 'response.output_text.delta', 'item_id': 'msg_1', 'content_index': 0, 'delta': text}


COMPLETED: dict[str, Any] = {'type': 'response.completed', 'response': {'id': 'resp_1', 'output': []}}


def test_collector_text_after_completed_is_linear():
    def make(n: int) -> Callable[[], object]:
        def run() -> object:
            collector = AgentStreamCollector()
            collector.feed_event(delta('Intro [1]'))
            collector.feed_event(COMPLETED)
            for _ in range(n):
                collector.feed_event(delta(' more [1]'))
            return collector.markers

        return run

    assert len(make(3)()) == 4  # pyright: ignore[reportArgumentType]
    assert_linear(make, 1000)


@given(st.lists(st.sampled_from(['[1]', '[2', ']', '(', 'x', ' ', '`', '\n', '```', '[1](https://a.b)']), max_size=20))
def test_collector_text_after_the_end_reads_as_the_whole_text(pieces: list[str]):
    collector = AgentStreamCollector()
    collector.feed_event(delta('A [1]'))
    collector.feed_event(COMPLETED)
    for piece in pieces:
        collector.feed_event(delta(piece))
    text = 'A [1]' + ''.join(pieces)
    assert collector.text == text
    assert collector.markers == extract_numbered(text)


# --- renderers ---------------------------------------------------------------------------------------------------------


def many_spans(n: int) -> CitedAnswer:
    text = 'word ' * n
    citations = [
        Citation(
            [Web(f'https://s{i}.example/p', title=f'T{i}')], anchor=ContentCitationAnchor(start=5 * i, end=5 * i + 4)
        )
        for i in range(n)
    ]
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations)])])


def test_renderers_with_many_spans_are_linear():
    def make(n: int) -> Callable[[], object]:
        answer = many_spans(n)
        return lambda: (render_html(answer), render_markdown(answer), render_markdown(answer, style='footnotes'))

    assert_linear(make, 300)


def test_content_anchor_ending_where_two_markers_touch_joins_the_first():
    text = 'Fact[1][2] more.'
    citations = [
        Citation([Web('https://a.example/')], anchor=MarkerCitationAnchor(start=4, end=7)),
        Citation([Web('https://b.example/')], anchor=MarkerCitationAnchor(start=7, end=10)),
        Citation([Web('https://c.example/')], anchor=ContentCitationAnchor(start=0, end=7)),
        Citation([Web('https://d.example/')], anchor=ContentCitationAnchor(start=11, end=15)),
    ]
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations)])])
    assert render_markdown(answer, style='footnotes').splitlines()[0] == 'Fact[^1][^3][^2] more[^4].'


# --- repairing an edited part ---------------------------------------------------------------------------------------------


def long_cited(n: int, k: int) -> tuple[ModelResponse, TextPart]:
    rng = random.Random(n)
    text = ' '.join(f'w{rng.randrange(100_000)}' for _ in range(n // 4))[:n]
    step = n // k
    citations = [
        Citation([Web(f'https://s{i}.example/')], anchor=ContentCitationAnchor(start=step * i, end=step * i + 30))
        for i in range(k)
    ]
    response = ModelResponse(parts=[TextPart(text, citations=citations)])
    fingerprint_response(response)
    return response, TextPart('Note: ' + text, citations=citations)


def test_repairing_a_long_edited_part_is_linear():
    def make(n: int) -> Callable[[], object]:
        response, edited = long_cited(n, n // 2000)
        return lambda: repair_part(response, 0, edited, 'realign')

    response, edited = long_cited(20_000, 10)
    repaired, problems = repair_part(response, 0, edited, 'realign')
    assert problems == []
    assert [(c.anchor.start, c.anchor.end) for c in repaired.citations or [] if c.anchor] == [
        (2000 * i + 6, 2000 * i + 36) for i in range(10)
    ]
    assert_linear(make, 20_000)


def test_locator_needs_a_unique_well_formed_print():
    response = ModelResponse(
        parts=[
            TextPart(
                'abc abc xyz',
                citations=[Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=3))],
            )
        ]
    )
    fingerprint_response(response)
    assert response.metadata is not None
    print_ = response.metadata['pydantic_ai_citations']['anchors']['0'][0]
    assert _Locator('abc abc', [print_]).find(print_) is None  # twice: not unique
    assert _Locator('-- abc', [print_]).find(print_) == (3, 6)
    assert _Locator('-- ab', [print_]).find(print_) is None  # longer than the text
    assert _Locator('-- abc', []).find(print_) is None  # a head nobody asked for is not indexed
    long = ModelResponse(
        parts=[
            TextPart(
                'abcdefghij',
                citations=[Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=10))],
            )
        ]
    )
    fingerprint_response(long)
    assert long.metadata is not None
    long_print = long.metadata['pydantic_ai_citations']['anchors']['0'][0]
    assert _Locator('xxx abcdefgh', [long_print]).find(long_print) is None  # the head fits, the whole does not
    for bad in (
        [print_[0], 3, 'XYZ', print_[3]],
        [print_[0], 3, print_[2], 5],
        [1, 3, 'a', 'b'],
        [print_[0], 0],
        'abc',
        [print_[0], 3, 'a'],
        [*print_[:4], 3],  # a scheme this version does not know
        [*print_[:4], 2.0],
    ):
        assert _Locator('-- abc', [bad]).find(bad) is None


@pytest.mark.parametrize('anchored', ['naïve café', 'Straße 𝔘 ok', 'a\ud800b'], ids=['latin-1', 'astral', 'surrogate'])
def test_locator_finds_wide_characters(anchored: str) -> None:
    text = f'{anchored} tail'
    response = ModelResponse(
        parts=[
            TextPart(
                text,
                citations=[
                    Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=len(anchored)))
                ],
            )
        ]
    )
    fingerprint_response(response)
    assert response.metadata is not None
    print_ = response.metadata['pydantic_ai_citations']['anchors']['0'][0]
    assert _Locator(f'-- é {text}', [print_]).find(print_) == (5, 5 + len(anchored))


def test_locator_reads_prints_from_before_heads_within_a_budget():
    response, edited = long_cited(20_000, 10)
    assert response.metadata is not None
    prints = [p[:2] for p in response.metadata['pydantic_ai_citations']['anchors']['0']]
    locator = _Locator(edited.content, prints)
    assert locator.find(prints[0]) == (6, 36)
    # 2,000,000 characters hashed per part at most: 20,006 * 30 per search, so the budget lasts three searches.
    assert [locator.find(p) for p in prints[1:4]] == [(2006, 2036), (4006, 4036), None]
    assert _Locator('abc abc', [['x', 3]]).find([_legacy_print('abc'), 3]) is None  # not unique


def _legacy_print(text: str) -> str:
    from pydantic_ai_citations._edit import _hash  # pyright: ignore[reportPrivateUsage]

    return _hash(text)


def test_locator_stops_after_checking_too_many_candidates():
    text = 'a' * 1000
    response = ModelResponse(
        parts=[
            TextPart(
                'a' * 20 + 'b',
                citations=[Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=21))],
            )
        ]
    )
    fingerprint_response(response)
    assert response.metadata is not None
    print_ = response.metadata['pydantic_ai_citations']['anchors']['0'][0]
    locator = _Locator(text, [print_])
    # Every position is a head candidate and none matches; 980 candidates per search, 4,004 for the part.
    assert [locator.find(print_) for _ in range(5)] == [None] * 5
    assert locator._candidates < 0  # pyright: ignore[reportPrivateUsage]


# --- a response citing many sources, or one source many times -------------------------------------------------------


def _many(kind: str, n: int) -> ModelResponse:
    if kind == 'excerpts':  # one source cited n times, each time with another excerpt
        citations = [Citation([Web('https://a.example/', excerpts=[f'excerpt {i}'])]) for i in range(n)]
    elif kind == 'unanchored':  # n sources, none with a position
        citations = [Citation([Web(f'https://s{i}.example/')]) for i in range(n)]
    else:  # one citation naming n sources
        citations = [
            Citation([Web(f'https://s{i}.example/') for i in range(n)], anchor=ContentCitationAnchor(start=0, end=2))
        ]
    return ModelResponse(parts=[TextPart('Hi there.', citations=citations)])


@pytest.mark.parametrize('kind', ['excerpts', 'unanchored', 'sources'])
def test_many_citations_build_in_linear_time(kind: str):
    # Each was quadratic: a source's excerpts copied at every citation of it, list membership for sources seen.
    answer = CitedAnswer.from_messages([_many(kind, 300)])
    if kind == 'excerpts':
        assert [len(s.excerpts) for s in answer.sources] == [300]
    else:
        assert len(answer.sources) == 300

    def make(n: int) -> Callable[[], object]:
        response = _many(kind, n)
        return lambda: CitedAnswer.from_messages([response])

    assert_linear(make, 2000)


def test_retrieved_sources_with_many_excerpts_of_one_source_is_linear():
    from pydantic_ai_citations._evidence import retrieved_sources

    def make(n: int) -> Callable[[], object]:
        messages = [_many('excerpts', n)]
        return lambda: retrieved_sources(messages)

    (source,) = retrieved_sources([_many('excerpts', 300)]).values()
    assert len(source.texts) == 300
    assert_linear(make, 2000)


def test_a_run_taking_many_problems_is_linear():
    from pydantic_ai_citations import CitationProblem, TrackCitations
    from pydantic_ai_citations._observation import RunRecord

    def make(n: int) -> Callable[[], object]:
        problems = [CitationProblem('unresolved_marker', f'marker {i}', start=i) for i in range(n)]

        def run() -> object:
            track = TrackCitations()
            track._runs.add('r', RunRecord('r'))  # pyright: ignore[reportPrivateUsage]
            return track.add_run_problems('r', problems) + track.add_run_problems('r', problems[: n // 2])

        return run

    assert make(10)() == 10
    assert_linear(make, 2000)


def _overlapping(kind: str, n: int) -> ModelResponse:
    text = 'w' * (2 * n + 2)
    # Nested: every anchor starts at 0. A staircase: each anchor overlaps the next one partially.
    ranges = [(0, i + 1) for i in range(n)] if kind == 'nested' else [(i, i + n) for i in range(n)]
    citations = [
        Citation([Web(f'https://s{i}.example/')], anchor=ContentCitationAnchor(start=a, end=b))
        for i, (a, b) in enumerate(ranges)
    ]
    return ModelResponse(parts=[TextPart(text, citations=citations)])


@pytest.mark.parametrize('kind', ['nested', 'staircase'])
def test_overlapping_anchors_are_checked_in_n_log_n(kind: str):
    # The check compared every pair (2,000 nested anchors: 8 s) and reported every partially overlapping pair.
    problems = [
        p for p in CitedAnswer.from_messages([_overlapping(kind, 300)]).problems if p.code == 'overlapping_citations'
    ]
    assert len(problems) == (0 if kind == 'nested' else 299)  # one per anchor an earlier one ends inside

    def make(n: int) -> Callable[[], object]:
        response = _overlapping(kind, n)
        return lambda: CitedAnswer.from_messages([response])

    assert_linear(make, 1000)


def test_many_moved_parts_with_one_text_are_matched_in_linear_time():
    from pydantic_ai import ThinkingPart

    from pydantic_ai_citations import find_stale

    def make(n: int) -> Callable[[], object]:
        cite = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=3))
        parts: list[Any] = [p for _ in range(n) for p in (ThinkingPart('hmm'), TextPart('Yes.', citations=[cite]))]
        response = ModelResponse(parts=parts)
        fingerprint_response(response)
        moved = ModelResponse(parts=[p for p in parts if isinstance(p, TextPart)], metadata=response.metadata)
        return lambda: find_stale([moved])

    assert make(50)() == []  # every moved part is vouched for by a print of its text
    assert_linear(make, 1000)


def test_many_edited_parts_of_one_response_are_repaired_in_linear_time():
    # Each part's print was matched anew for every part repaired (all the response's parts hashed each time).
    from pydantic_ai_citations._edit import repair_history

    def make(n: int) -> Callable[[], tuple[list[str], list[str]]]:
        cite = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=5))
        response = ModelResponse(parts=[TextPart(f'Fact {i} holds.', citations=[cite]) for i in range(n)])
        fingerprint_response(response)
        edited = ModelResponse(
            parts=[TextPart(f'Fact {i} fails.', citations=[cite]) for i in range(n)], metadata=response.metadata
        )

        def run() -> tuple[list[str], list[str]]:
            repaired = [p.code for p in repair_history([edited], 'realign')[1]]
            return repaired, [p.code for p in CitedAnswer.from_messages([edited]).problems]

        return run

    repaired, shown = make(3)()
    assert repaired.count('stale_after_edit') == shown.count('stale_after_edit') == 3
    assert_linear(make, 300)


def test_stripping_a_marker_per_citation_for_a_hand_off_is_linear():
    """xAI writes `[[n]](url)` with a citation anchored on each: stripping them for another provider looks each anchor
    up among the cuts by bisection (a scan of every cut per citation was quadratic: 4,000 markers took 1.2 s)."""
    from pydantic_ai_citations._edit import strip_citation_markers

    def part(n: int) -> TextPart:
        text, citations = '', list[Citation]()
        for i in range(1, n + 1):
            text += f'Claim {i} holds. '
            marker = f'[[{i}]](https://x.example/{i})'
            citations.append(
                Citation(
                    [Web(f'https://x.example/{i}')],
                    anchor=MarkerCitationAnchor(start=len(text), end=len(text) + len(marker)),
                )
            )
            text += marker + ' '
        return TextPart(text, provider_name='xai', citations=citations)

    stripped, cuts = strip_citation_markers(part(50))
    assert len(cuts) == 50 and stripped.citations is None and '[[' not in stripped.content

    def make(n: int) -> Callable[[], object]:
        p = part(n)
        return lambda: strip_citation_markers(p)

    assert_linear(make, 2000)


def test_deeply_nested_cite_tags_are_stripped_in_linear_time():
    """Each closing tag of a nesting copied every tag inside it into the enclosing one (n = 16,000 levels: 3.7 s)."""
    from pydantic_ai_citations.formats.markup import strip_markup

    def text(n: int) -> str:
        return '(cite index="1">' * n + 'x' + '</cite>' * n

    stripped = strip_markup(text(50))
    assert stripped.text == 'x'
    assert [i.reason for i in stripped.issues] == ['cite tag nested in a cite tag']
    assert len(stripped.issues[0].cuts) == 100
    unclosed = strip_markup('(cite index="1">a(cite index="2">b</cite>(cite index="3">c(cite index="4">d</cite>')
    assert unclosed.text == 'abcd'
    assert [len(i.cuts) for i in unclosed.issues] == [3, 3]  # each open tag with the tags closed inside it

    def make(n: int) -> Callable[[], object]:
        t = text(n)
        return lambda: strip_markup(t)

    assert_linear(make, 4000)


@pytest.mark.parametrize('char', ['`', '~'])
@pytest.mark.parametrize('where', ['line-start', 'inline', 'in-code'])
def test_numbered_scanner_reads_a_long_run_arriving_a_character_at_a_time_once(char: str, where: str):
    """A backtick or tilde run that may still grow was held and read again with every piece (80,000: 2.5 s)."""
    from pydantic_ai_citations.formats.numbered import NumberedMarker, NumberedScanner, extract_numbered

    head = {'line-start': '', 'inline': 'See [1] and ', 'in-code': 'See `code '}[where]

    def scan(n: int) -> list[NumberedMarker]:
        scanner = NumberedScanner()
        found = scanner.feed(head)
        for _ in range(n):
            found += scanner.feed(char)
        found += scanner.feed(' [2] after')
        return found + scanner.close()

    text = head + char * 50 + ' [2] after'
    assert [(m.start, m.end) for m in scan(50)] == [(m.start, m.end) for m in extract_numbered(text)]

    def make(n: int) -> Callable[[], object]:
        return lambda: scan(n)

    assert_linear(make, 10_000)


@given(st.text(alphabet=' >\t\u00a0a', max_size=12))
def test_quote_markers_are_read_as_the_loop_read_them(line: str):
    from pydantic_ai_citations.support._passages import _QUOTE_MARKERS_RE  # pyright: ignore[reportPrivateUsage]

    quoted, content = False, line
    while content.lstrip().startswith('>'):  # the definition: strip white space, then one `>`, while there is one
        quoted, content = True, content.lstrip()[1:]
    found = _QUOTE_MARKERS_RE.match(line)
    assert (found is not None, line if found is None else line[found.end() :]) == (quoted, content)


def test_a_line_of_many_quote_markers_is_split_in_linear_time():
    """A Markdown line of nested `>` quote markers: each marker copied the rest of the line (200,000: 0.6 s)."""
    from pydantic_ai_citations.support import split_passages

    assert [p.text for p in split_passages('> > > Pydantic validates data with type hints.', kind='markdown')] == [
        'Pydantic validates data with type hints.'
    ]

    def make(n: int) -> Callable[[], object]:
        text = '> ' * n + 'Pydantic validates data with type hints.'
        return lambda: split_passages(text, kind='markdown')

    assert_linear(make, 25_000)


@pytest.mark.parametrize('unit', ['<div>x ', '<ul><li>x ', '<section><p>x '])
def test_deeply_nested_html_is_split_in_linear_time(unit: str):
    """The HTML parser's work per start tag grows with the depth (40,000 nested `div`s: 5 s): elements deeper than
    `MAX_HTML_DEPTH` are read as their parent's text, as browsers cap nesting. No word is lost."""
    from pydantic_ai_citations.support import split_passages
    from pydantic_ai_citations.support._passages import MAX_HTML_DEPTH, _shallow  # pyright: ignore[reportPrivateUsage]

    page = '<html><body>' + unit * (2 * MAX_HTML_DEPTH)
    words = sum(p.word_count for p in split_passages(page, min_words=1))
    assert words == 2 * MAX_HTML_DEPTH
    shallow = '<html><body>' + '<p>x<br><img src=a></p>' * 3000 + '<div><div>deep enough</div></div>'
    assert _shallow(shallow) == shallow  # many void and sibling-closed tags: read as they are

    def make(n: int) -> Callable[[], object]:
        text = '<html><body>' + unit * n
        return lambda: split_passages(text)

    assert_linear(make, 5_000)
