from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, Citation, ContentCitationAnchor, MarkerCitationAnchor, TextPart, WebCitationSource
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import (
    THRESHOLDS,
    Judge,
    LexicalJudge,
    LLMJudge,
    PageSnapshot,
    Passage,
    PassageIndex,
    SnapshotStore,
    best_passage,
    check_support,
    check_support_sync,
    claims_for,
    detect_language,
    split_passages,
    support_report_ta,
    terms,
)
from pydantic_ai_citations.support._passages import looks_like_html
from pydantic_ai_citations.support._score import coverage

PAGES = Path(__file__).parent / 'pages'
TRAPS = (PAGES / 'traps.html').read_text(encoding='utf-8')


def texts(passages: list[Passage]) -> list[str]:
    return [p.text for p in passages]


def count_in(sentence: str, passages: list[Passage]) -> int:
    return sum(sentence in p.text for p in passages)


# --- passages -------------------------------------------------------------------------------------------------------

VISIBLE_SENTENCES = [
    'President visits Walter Reed hospital',
    'The president made an unscheduled trip to Walter Reed hospital on Saturday',
    'no new health problems were found during the two-hour examination.',
    'Text written straight into a div, outside any paragraph, still counts once for the support check.',
    'An inner paragraph nested three layers deep inside layout divs is its own passage.',
    'Trailing loose words after the inner block belong to a passage of their own here.',
    'First list item states that the exam lasted about two hours in total.',
    'A nested list item says the labs were sent away for routine analysis.',
    'Another nested item: results are expected back within a couple of weeks.',
    "Tail of the first item after the nested list, mentioning the physician's memo.",
    'Second list item with a table inside it follows here now:',
    'Cell one says blood pressure was normal for a man his age.',
    'Cell two says the heart rate was steady through the whole exam.',
    'A quoted statement from the press secretary: the president is healthy and ready to work.',
    'Line one of a poem about the hospital continues on line two after a single break.',
    'Paragraph A written with breaks in a div, about the weather in Washington.',
    'Paragraph B after a double break, about traffic on the way to the hospital.',
    'More about Walter Reed hospital, the president, health exams and labs',
]


def test_traps_every_visible_sentence_in_exactly_one_passage():
    passages = split_passages(TRAPS, min_words=1)
    for sentence in VISIBLE_SENTENCES:
        assert count_in(sentence, passages) == 1, sentence
    # A passage is never the concatenation of two blocks (a div's whole text would be).
    assert not any('Text written straight' in t and 'inner paragraph' in t for t in texts(passages))
    assert not any('First list item' in t and 'nested list item' in t for t in texts(passages))
    assert not any('second list item' in t.lower() and 'Cell one' in t for t in texts(passages))


def test_traps_dropped_content():
    joined = '\n'.join(texts(split_passages(TRAPS, min_words=1)))
    for hidden in ('Head title', 'color: red', 'var claim', 'document.write', 'enable JavaScript', 'svg drawing'):
        assert hidden not in joined
    assert 'Template paragraph' not in joined
    assert 'Hidden paragraph' not in joined


def test_traps_entities_whitespace_and_minimum():
    passages = split_passages(TRAPS)
    joined = texts(passages)
    assert 'Entities & accents: café naïve “quoted” text unescaped properly in this sentence.' in joined
    assert all('  ' not in t and t == t.strip() for t in joined)
    # Buttons and footer links fall below the default minimum of 5 words; the crumb `Home › Politics › Health` has
    # five whitespace-separated words and is kept.
    assert not any(t.startswith(('Subscribe', 'Sign in', 'About us')) for t in joined)
    assert 'Home › Politics › Health' in joined
    assert [p.index for p in passages] == list(range(len(passages)))
    positions = [p.position for p in passages]
    assert positions == sorted(positions)
    assert all(0 <= x <= 1 for x in positions)
    assert all(p.word_count == len(p.text.split()) >= 5 for p in passages)


def test_broken_html():
    html = '<p>one two three four five six<p>seven eight nine ten eleven twelve<li>item a b c d e<table><td>cell a b c d e<td>cell f g h i j'
    assert texts(split_passages(html, min_words=1)) == [
        'one two three four five six',
        'seven eight nine ten eleven twelve',
        'item a b c d e',
        'cell a b c d e',
        'cell f g h i j',
    ]


def test_body_only_and_frameset():
    assert split_passages('<html><head><title>Only a title with many words in it</title></head></html>') == []
    assert split_passages('<frameset><frame src="x"></frameset>') == []
    assert split_passages('') == []
    assert split_passages('   \n ') == []


def test_deep_nesting_does_not_recurse():
    html = '<div>' * 5_000 + 'deep words here in the middle of it all' + '</div>' * 5_000
    assert texts(split_passages(html)) == ['deep words here in the middle of it all']


def test_markdown_blocks():
    md = (PAGES / 'article.md').read_text(encoding='utf-8')
    assert not looks_like_html(md)
    got = texts(split_passages(md, min_words=1))
    assert got == [
        'Solar panels on the school roof',
        'The school installed 120 solar panels in March. They cover the roof of the sports hall and the new library wing.',
        'Why it matters',
        'The panels produce about 40 percent of the electricity the school uses in a year.',
        'Savings go to the library fund.',
        'Maintenance is done by a local firm.',
        'Students measure the output every week.',
        'We expected less, to be honest, and the numbers surprised everyone.',
        'Month',
        'Output',
        'March',
        '3.1 MWh',
        'Code blocks stay together as one passage',
    ]


def test_plain_text_paragraphs_and_positions():
    text = 'First paragraph of plain text.\nStill the first one.\n\nSecond paragraph here.\n'
    passages = split_passages(text, min_words=1)
    assert texts(passages) == ['First paragraph of plain text. Still the first one.', 'Second paragraph here.']
    assert passages[0].position == 0
    assert passages[1].position == pytest.approx(text.index('Second') / len(text))


def test_kind_forced_and_misuse():
    assert texts(split_passages('<p>a b</p>', kind='text', min_words=1)) == ['<p>a b</p>']
    assert texts(split_passages('# not a heading', kind='html', min_words=1)) == ['# not a heading']
    assert looks_like_html('Text with a <b>bold</b> word and a <p>paragraph</p>')
    assert not looks_like_html('a < b and c > d')
    with pytest.raises(UserError, match='`min_words` must be an int of at least 1, got 0'):
        split_passages('x', min_words=0)
    with pytest.raises(UserError, match="'pdf'"):
        split_passages('x', kind='pdf')  # pyright: ignore[reportArgumentType]


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=8))
def test_split_never_crashes_on_text(text: str, min_words: int):
    for passage in split_passages(text, min_words=min_words):
        assert passage.text.strip()
        assert passage.word_count >= min_words
        assert 0 <= passage.position <= 1


HTML_BITS = st.sampled_from(
    ['<p>', '</p>', '<div>', '</div>', '<li>', '<ul>', '</ul>', '<table>', '<td>', '<tr>', '<br>', '<script>',
     '</script>', '<!--', '-->', '&amp;', '&#0;', '&#xD800;', '<svg>', '<h1>', '</h1>', '<b>', '<', '>', '"', ' ',
     'word', 'слово', '\x00', '\ufeff', '<template>', '<noscript>', '<html>', '<body>', '<head>', '<![CDATA[',
     '<div hidden>', '<p hidden>', '<br hidden>', '<body hidden>']
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(HTML_BITS, st.text(max_size=5)), max_size=60))
def test_split_never_crashes_on_html_soup(bits: list[str]):
    html = '<html>' + ''.join(bits)
    for i, passage in enumerate(split_passages(html, min_words=1)):
        assert passage.index == i
        assert passage.text.strip()
        assert 0 <= passage.position <= 1


BLOCK_TAGS = ['p', 'li', 'h2', 'td', 'blockquote', 'div', 'section', 'ul', 'span', 'b', 'a', 'table', 'tr', 'article']


@st.composite
def html_tree(draw: st.DrawFn) -> tuple[str, int]:
    """Nested HTML where every word is unique: `w0 w1 ...`, returned with the word count."""
    counter = [0]

    def words() -> str:
        n = draw(st.integers(1, 3))
        out = ' '.join(f'w{counter[0] + i}x' for i in range(n))
        counter[0] += n
        return out

    def node(depth: int) -> str:
        if depth > 3 or draw(st.booleans()):
            return words()
        tag = draw(st.sampled_from(BLOCK_TAGS))
        children = [node(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        close = draw(st.booleans()) or tag not in ('p', 'li', 'td')  # sometimes leave p/li/td unclosed
        return f'<{tag}>' + ' '.join(children) + (f'</{tag}>' if close else ' ')

    html = '<body>' + ' '.join(node(0) for _ in range(draw(st.integers(1, 4)))) + '</body>'
    return html, counter[0]


@settings(max_examples=150, deadline=None)
@given(html_tree())
def test_every_word_lands_in_exactly_one_passage(tree: tuple[str, int]):
    html, n = tree
    # Tokens are found by pattern: the parser may glue foster-parented table text to its neighbour.
    words = re.findall(r'w\d+x', ' '.join(texts(split_passages(html, min_words=1))))
    assert sorted(words) == sorted(f'w{i}x' for i in range(n))


# --- terms and scoring ----------------------------------------------------------------------------------------------


def test_terms_english_and_russian():
    assert terms('The visits of the President were routine') == {'visit', 'presid', 'routin'}
    assert terms('Президент посетил больницу в субботу') == {'президент', 'посет', 'больниц', 'суббот'}
    assert terms('президента посетили больницы') == {'президент', 'посет', 'больниц'}
    assert terms('и в на the of') == frozenset()
    assert terms('Ёлка') == terms('елка')
    assert detect_language('Президент посетил больницу') == 'ru'
    assert detect_language('The president visited') == 'en'
    assert detect_language('') == 'en'
    assert terms('Häuser Bücher', language='german') == terms('Haus Buch', language='de' if False else 'german')
    with pytest.raises(UserError, match="'klingon'"):
        terms('x', language='klingon')


def test_claim_is_the_denominator():
    """A heading that shares topic words beats the real paragraph if the passage is the denominator."""
    passages = split_passages(TRAPS, min_words=1)
    claim = 'The president made an unscheduled trip to Walter Reed hospital for a quick exam and labs.'
    match = best_passage(claim, passages)
    assert match is not None
    assert match.passage.text.startswith('The president made an unscheduled trip')
    assert match.score == 1.0
    assert match.position == match.passage.position
    # Normalising by the passage would pick the heading (or the footer, which shares topic words) instead.
    claim_terms = terms(claim)
    by_passage = max(passages, key=lambda p: len(claim_terms & terms(p.text)) / len(terms(p.text)))
    assert by_passage.text == 'President visits Walter Reed hospital'
    heading = next(p for p in passages if p.text == 'President visits Walter Reed hospital')
    footer = next(p for p in passages if p.text.startswith('More about Walter Reed'))
    assert coverage(claim_terms, terms(heading.text)) < match.score
    assert coverage(claim_terms, terms(footer.text)) < match.score


def test_best_passage_russian():
    page = (PAGES / 'russian.html').read_text(encoding='utf-8')
    passages = split_passages(page)
    match = best_passage('Президент посетил госпиталь Уолтера Рида для ежегодного медосмотра', passages)
    assert match is not None
    assert match.passage.text.startswith('В субботу президент посетил госпиталь')
    assert match.score == 1.0
    assert best_passage('совершенно другая тема про кошек', passages) is None


def test_best_passage_edge_cases():
    assert best_passage('anything at all', []) is None
    assert best_passage('the of and', split_passages(TRAPS)) is None
    tie = [Passage('alpha beta gamma', 0, 0.0, 3), Passage('alpha beta gamma delta', 1, 0.5, 4)]
    match = best_passage('alpha beta', tie)
    assert match is not None
    assert match.passage.index == 0  # ties go to the earliest passage
    index = PassageIndex(tie)
    assert [m.passage.index for m in index.ranked('delta alpha')] == [1, 0]
    assert index.ranked('the') == []


# --- claims ---------------------------------------------------------------------------------------------------------


def span(start: int, end: int, kind: str, sources: list[int]) -> CitedSpan:
    return CitedSpan(start, end, kind, sources, message_index=1, part_index=0, citation_index=0)  # pyright: ignore[reportArgumentType]


def web(number: int, url: str, *, excerpts: list[str] | None = None, title: str | None = None) -> SourceRef:
    return SourceRef(number, 'web', url=url, title=title, excerpts=excerpts or [])


def test_claims_for_each_anchor_kind():
    text = '[4] Rome is old. Paris is the capital of France [1]. It has two million people.[2][3] Berlin is big.'
    m1 = text.index('[1]')
    m2 = text.index('[2]')
    m3 = text.index('[3]')
    m4 = text.index('[4]')
    answer = CitedAnswer(
        text,
        spans=[
            span(m1, m1 + 3, 'marker', [1]),
            span(m2, m2 + 3, 'marker', [2]),
            span(m3, m3 + 3, 'marker', [3]),
            span(text.index('Paris'), text.index('Paris') + 5, 'content', [1, 2]),
            span(m4, m4 + 3, 'marker', [4]),
        ],
        unanchored=[web(5, 'https://e.test/5')],
        sources=[web(i, f'https://e.test/{i}') for i in range(1, 6)],
    )
    claims = [(c.source, c.kind, c.text) for c in claims_for(answer)]
    assert claims == [
        (1, 'marker_sentence', 'Paris is the capital of France'),
        (2, 'marker_sentence', 'It has two million people.'),
        (3, 'marker_sentence', 'It has two million people.'),
        (1, 'anchored', 'Paris'),
        (2, 'anchored', 'Paris'),
        (4, 'marker_sentence', 'Rome is old.'),  # a marker opening the text claims the sentence after it
        (5, 'whole_answer', 'Rome is old. Paris is the capital of France. It has two million people. Berlin is big.'),
    ]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.lists(st.tuples(st.integers(-5, 70), st.integers(-5, 70), st.booleans()), max_size=5))
def test_claims_never_crash_and_offsets_inside(text: str, raw: list[tuple[int, int, bool]]):
    spans = [span(a, b, 'marker' if m else 'content', [1]) for a, b, m in raw]
    answer = CitedAnswer(text, spans=spans, sources=[web(1, 'https://e.test/')])
    for claim in claims_for(answer):
        assert claim.start is not None
        assert claim.end is not None
        assert 0 <= claim.start <= claim.end <= len(text)


# --- check_support_sync --------------------------------------------------------------------------------------------------

CLAIM_OK = 'The president made an unscheduled trip to Walter Reed hospital for a quick exam and labs.'
CLAIM_WEAK = 'Doctors found the visit routine but ordered surgery and a long hospital stay with rest.'
CLAIM_NO = 'The stock market fell sharply after the earnings report on Tuesday.'


def make_answer(
    *, extra_sources: list[SourceRef] | None = None, unanchored: list[SourceRef] | None = None
) -> CitedAnswer:
    parts = [CLAIM_OK, CLAIM_WEAK, CLAIM_NO]
    text = ' '.join(parts)
    spans: list[CitedSpan] = []
    offset = 0
    for part in parts:
        spans.append(span(offset, offset + len(part), 'content', [1]))
        offset += len(part) + 1
    extra = extra_sources or []
    for source in extra:
        spans.append(span(0, len(CLAIM_OK), 'content', [source.number]))
    return CitedAnswer(
        text,
        spans=spans,
        unanchored=unanchored or [],
        sources=[web(1, 'https://news.test/a'), *extra, *(unanchored or [])],
    )


def test_check_support_verdicts_and_summary():
    answer = make_answer()
    report = check_support_sync(answer, {'https://news.test/a': TRAPS})
    assert [(c.verdict, c.claim_kind, c.basis) for c in report.checks] == [
        ('supported', 'anchored', 'page'),
        ('weak', 'anchored', 'page'),
        ('unsupported', 'anchored', 'page'),
    ]
    ok = report.checks[0]
    assert ok.score == 1.0
    assert ok.passage is not None
    assert ok.passage.text.startswith('The president made')
    assert ok.position == ok.passage.position
    assert ok.reason == 'score 1.00 (supported at 0.6, weak at 0.3)'
    s = report.summary
    assert s.verdicts['supported'] == 1
    assert s.verdicts['weak'] == 1
    assert s.verdicts['unsupported'] == 1
    assert [p.threshold for p in s.threshold_curve] == list(THRESHOLDS)
    shares = [p.supported_share for p in s.threshold_curve]
    assert shares == sorted(shares, reverse=True)
    assert s.median_passages_per_page == len(split_passages(TRAPS))
    assert s.position_thirds is not None
    assert sum(s.position_thirds) == pytest.approx(1)
    assert s.matched_length_quartiles is not None
    assert support_report_ta.validate_json(support_report_ta.dump_json(report)) == report


def test_check_support_thresholds():
    answer = make_answer()
    strict = check_support_sync(answer, {'https://news.test/a': TRAPS}, threshold=0.95, weak_threshold=0.9)
    assert [c.verdict for c in strict.checks] == ['supported', 'unsupported', 'unsupported']
    with pytest.raises(UserError, match='threshold must be in'):
        check_support_sync(answer, {}, threshold=0)
    with pytest.raises(UserError, match='weak_threshold'):
        check_support_sync(answer, {}, threshold=0.5, weak_threshold=0.7)


def test_check_support_without_pages():
    excerpt = web(
        2, 'https://news.test/b', excerpts=['The president made an unscheduled trip to Walter Reed hospital.']
    )
    bare = web(3, 'https://news.test/c')
    answer = make_answer(extra_sources=[excerpt, bare])
    report = check_support_sync(answer, {'https://news.test/a': TRAPS})
    by_source = {c.source: c for c in report.checks}
    assert by_source[2].verdict == 'excerpt_only'
    assert by_source[2].basis == 'excerpt'
    assert by_source[2].score is not None
    assert by_source[2].score > 0.5
    assert by_source[2].position is None
    assert 'provider excerpt' in by_source[2].reason
    assert by_source[3].verdict == 'no_snapshot'
    assert by_source[3].score is None


def test_check_support_unreachable_unreadable_empty():
    now = PageSnapshot.from_text('x', '').captured_at
    dead = PageSnapshot(
        url='https://news.test/d',
        final_url='https://news.test/d',
        status=404,
        liveness='not_found',
        captured_at=now,
        reason='HTTP 404',
    )
    sources = [web(2, 'https://news.test/d'), web(3, 'https://news.test/pdf'), web(4, 'https://news.test/empty'),
               web(5, 'https://news.test/dead-with-excerpt', excerpts=['an unscheduled trip to Walter Reed hospital'])]  # fmt: skip
    answer = make_answer(extra_sources=sources)
    pages: dict[str, PageSnapshot | str | bytes] = {
        'https://news.test/a': TRAPS,
        'https://news.test/d': dead,
        'https://news.test/pdf': b'%PDF-1.7\n\x00\x01binary',
        'https://news.test/empty': '<html><body><script>only script</script></body></html>',
        'https://news.test/dead-with-excerpt': dead,
    }
    report = check_support_sync(answer, pages)
    by_source = {c.source: c for c in report.checks}
    assert (by_source[2].verdict, by_source[2].liveness, by_source[2].reason) == (
        'unreachable',
        'not_found',
        'HTTP 404',
    )
    assert by_source[3].verdict == 'unreadable'
    assert 'binary' in by_source[3].reason
    assert by_source[4].verdict == 'unsupported'
    assert by_source[4].reason == 'the page has no passages of at least 5 words'
    assert by_source[5].verdict == 'unreachable'
    assert by_source[5].basis == 'excerpt'
    assert by_source[5].score is not None
    assert report.summary.dead_links == [
        'https://news.test/d (not_found)',
        'https://news.test/dead-with-excerpt (not_found)',
    ]


def test_check_support_bad_encodings_and_huge_pages():
    russian = (PAGES / 'russian.html').read_text(encoding='utf-8')
    claim = 'Президент посетил госпиталь Уолтера Рида для ежегодного медосмотра'
    answer = CitedAnswer(claim, spans=[span(0, len(claim), 'content', [1])], sources=[web(1, 'https://ru.test/')])
    cp1251_meta = russian.encode('cp1251')  # the page declares windows-1251 in a <meta>
    no_meta = russian.replace('<meta charset="windows-1251">', '').encode('cp1251')
    koi8 = PageSnapshot(
        url='https://ru.test/', final_url='https://ru.test/', status=200, liveness='ok', captured_at=PageSnapshot.from_text('x', '').captured_at,
        body=russian.replace('<meta charset="windows-1251">', '').encode('koi8_r'), content_type='text/html; charset=koi8-r',
    )  # fmt: skip
    for page in (cp1251_meta, no_meta, koi8):
        (check,) = check_support_sync(answer, {'https://ru.test/': page}).checks
        assert check.verdict == 'supported', (page if isinstance(page, bytes) else page.content_type, check.reason)
    huge = '<p>' + 'filler words here. ' * 600_000 + '</p><p>' + CLAIM_OK + '</p>'
    assert len(huge) > 10_000_000
    ans = CitedAnswer(CLAIM_OK, spans=[span(0, len(CLAIM_OK), 'content', [1])], sources=[web(1, 'https://big.test/')])
    (check,) = check_support_sync(ans, {'https://big.test/': huge}).checks
    assert check.verdict == 'unsupported'
    assert 'page cut at 5000000 characters' in check.reason
    (check,) = check_support_sync(ans, {'https://big.test/': huge.encode()}).checks
    assert 'page cut at 5000000 bytes' in check.reason


def test_check_support_with_snapshot_store(tmp_path: Path):
    store = SnapshotStore(tmp_path)
    store.put(PageSnapshot.from_text('https://news.test/a', TRAPS))
    report = check_support_sync(make_answer(), store)
    assert [c.verdict for c in report.checks] == ['supported', 'weak', 'unsupported']
    assert all(c.liveness == 'ok' for c in report.checks)


def test_check_support_unanchored_and_unknown_sources():
    whole = web(2, 'https://news.test/a')
    answer = CitedAnswer(
        CLAIM_OK + ' [9]',
        spans=[span(len(CLAIM_OK) + 1, len(CLAIM_OK) + 4, 'marker', [9]), span(0, 3, 'content', [1])],
        unanchored=[whole],
        sources=[web(1, 'https://news.test/a'), whole],
    )
    checks = check_support_sync(answer, {'https://news.test/a': TRAPS}).checks
    assert [(c.source, c.claim_kind, c.verdict) for c in checks] == [
        (9, 'marker_sentence', 'no_snapshot'),
        (1, 'anchored', 'too_short'),  # 'The': one word
        (2, 'whole_answer', 'supported'),
    ]
    assert checks[0].reason == 'source number 9 is not in the answer'
    assert checks[1].reason == 'the claim has 1 word(s): claims shorter than 8 words are not compared'
    compared = check_support_sync(answer, {'https://news.test/a': TRAPS}, min_claim_words=1).checks[1]
    assert (compared.verdict, compared.reason) == ('unsupported', 'the claim has no content words to check')


@pytest.mark.anyio
async def test_check_support_from_agent_run():
    """The public path: a model cites with marker anchors, `CitedAnswer.from_result`, then the check."""
    text = f'{CLAIM_OK} [1] {CLAIM_NO} [2]'
    m1 = text.index('[1]')
    m2 = text.index('[2]')

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        citations = [
            Citation([WebCitationSource('https://news.test/a', title='News')], anchor=MarkerCitationAnchor(start=m1, end=m1 + 3)),
            Citation([WebCitationSource('https://news.test/a', title='News')], anchor=MarkerCitationAnchor(start=m2, end=m2 + 3)),
            Citation([WebCitationSource('https://other.test/', excerpts=['stock market fell'])], anchor=ContentCitationAnchor(start=m1 + 4, end=m2)),
        ]  # fmt: skip
        return ModelResponse(parts=[TextPart(text, citations=citations)], provider_name='function')

    result = await Agent(FunctionModel(respond)).run('go')
    answer = CitedAnswer.from_result(result)
    report = check_support_sync(answer, {'https://news.test/a': TRAPS})
    got = [(c.source, c.claim_kind, c.verdict) for c in report.checks]
    assert got == [
        (1, 'marker_sentence', 'supported'),
        (2, 'anchored', 'excerpt_only'),
        (1, 'marker_sentence', 'unsupported'),
    ]
    assert report.checks[0].claim == CLAIM_OK


# --- judges ---------------------------------------------------------------------------------------------------------


def llm_model(verdict: str, passage_number: int | None, quote: str) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool = info.output_tools[0]
        args = {'verdict': verdict, 'passage_number': passage_number, 'quote': quote, 'reason': 'the passage says so'}
        return ModelResponse(parts=[ToolCallPart(tool.name, args)])

    return FunctionModel(respond)


def test_judges_share_one_protocol():
    assert isinstance(LexicalJudge(), Judge)
    assert isinstance(LLMJudge(llm_model('supported', 1, 'x')), Judge)


def test_llm_judge_quotes_the_passage():
    judge = LLMJudge(llm_model('supported', 1, 'unscheduled trip to Walter Reed hospital'))
    report = check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=judge)
    first = report.checks[0]
    assert (first.verdict, first.judge, first.quote) == ('supported', 'llm', 'unscheduled trip to Walter Reed hospital')
    assert first.reason == 'the passage says so'
    assert first.passage is not None
    assert first.passage.text.startswith('The president made')
    assert first.score == 1.0


def test_llm_judge_untrusted_quote_and_missing_passage():
    invented = LLMJudge(llm_model('supported', 1, 'words that are nowhere on the page'))
    check = check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=invented).checks[0]
    assert check.verdict == 'unsupported'
    assert check.reason == "the model said 'supported' but its quote is not in the passage"
    nowhere = LLMJudge(llm_model('weak', 99, 'x'))
    check = check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=nowhere).checks[0]
    assert check.verdict == 'unsupported'
    assert 'named no passage' in check.reason
    says_no = LLMJudge(llm_model('unsupported', None, ''))
    check = check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=says_no).checks[0]
    assert (check.verdict, check.passage) == ('unsupported', None)
    empty = check_support_sync(make_answer(), {'https://news.test/a': '<p>tiny</p>'}, judge=says_no).checks[0]
    assert (empty.verdict, empty.reason) == ('unsupported', 'the page has no passages of at least 5 words')


@pytest.mark.anyio
async def test_llm_judge_async_and_sync_in_loop():
    judge = LLMJudge(llm_model('weak', 1, 'Walter Reed hospital'))
    report = await check_support(make_answer(), {'https://news.test/a': TRAPS}, judge=judge)
    assert report.checks[0].verdict == 'weak'
    with pytest.raises(UserError, match='check_support'):
        check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=judge)
    # The lexical judge needs no loop, so it works here too.
    assert (
        check_support_sync(make_answer(), {'https://news.test/a': TRAPS}, judge=LexicalJudge()).checks[0].verdict
        == 'supported'
    )
    assert asyncio.get_running_loop() is not None


def test_empty_containers_do_not_split_a_sentence():
    html = '<body><div>The rescue took place <div class="ad-slot"></div><span> in broad daylight</span> on Monday.</div><div>Next block of loose text here.</div></body>'
    assert texts(split_passages(html, min_words=1)) == [
        'The rescue took place in broad daylight on Monday.',
        'Next block of loose text here.',
    ]


def test_hidden_elements_are_left_out_however_nested():
    """`hidden` content is dropped, nested or not (inner ones first: the page's tree is pruned); a hidden `br` still
    breaks a line; a hidden body has no passages."""
    html = (
        '<body><p>Visible words before <span hidden>gone <b hidden>also gone</b> too</span>the end.</p>'
        '<div hidden><p>Hidden paragraph <span hidden>nested</span> inside.</p></div>'
        '<div>First line of a poem<br><br hidden>second line of a poem</div></body>'
    )
    assert texts(split_passages(html, min_words=1)) == [
        'Visible words before the end.',
        'First line of a poem',
        'second line of a poem',
    ]
    assert split_passages('<body hidden><p>Nothing here is shown to a reader.</p></body>', kind='html') == []


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch):
    import importlib
    import importlib.util

    from pydantic_ai_citations.support import _requires

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'httpx2' else real(name, *a))  # pyright: ignore[reportUnknownLambdaType,reportUnknownArgumentType]
    with pytest.raises(
        ImportError, match=r'needs httpx2: install the extra with `pip install "pydantic-ai-citations\[support\]"`'
    ):
        importlib.reload(_requires)


def test_public_names():
    from pydantic_ai_citations import support

    public = sorted(name for name in dir(support) if name.isidentifier() and not name.startswith('_'))
    assert sorted(support.__all__) == public
    assert {
        'split_passages',
        'best_passage',
        'check_support_sync',
        'SnapshotStore',
        'capture_answer',
        'LLMJudge',
    } <= set(support.__all__)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.text(max_size=400), st.integers(0, 220), st.integers(0, 220))
def test_check_support_never_crashes(answer_text: str, page: str, a: int, b: int):
    answer = CitedAnswer(
        answer_text,
        spans=[span(min(a, b), max(a, b) + 1, 'content', [1]), span(a, a + 1, 'marker', [1])],
        unanchored=[web(1, 'u')],
        sources=[web(1, 'u')],
    )
    report = check_support_sync(answer, {'u': page})
    for check in report.checks:
        assert check.reason
        assert check.score is None or 0 <= check.score <= 1
        assert check.position is None or 0 <= check.position <= 1


@given(
    st.text(alphabet='ab .,[]1', min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8)), max_size=8),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_claims_blank_the_markers_near_them_as_they_blanked_all(
    text: str, marks: list[tuple[int, int]], a: int, b: int
) -> None:
    """A claim looks only at the markers that may overlap it (found by bisection), with the same result."""
    from pydantic_ai_citations.support._claims import _Markers, _without_markers  # pyright: ignore[reportPrivateUsage]

    class Every(_Markers):  # the definition: every marker of the answer looked at, in order
        def around(self, start: int, end: int) -> list[tuple[int, int]]:
            return self.ranges

    markers = sorted((min(s, len(text)), min(s + w, len(text))) for s, w in marks)
    start, end = min(a, b, len(text)), min(max(a, b), len(text))
    assert _without_markers(text, start, end, _Markers(markers)) == _without_markers(text, start, end, Every(markers))


def test_claims_of_many_markers_are_found_in_linear_time() -> None:
    """One marker per sentence: each claim rebuilt the map of every marker, and looked at all of them (8,000
    markers: 13 s)."""
    import time

    def answer(n: int) -> CitedAnswer:
        text, spans = '', list[CitedSpan]()
        for i in range(n):
            text += f'Sentence {i} says the river flows north past town. '
            spans.append(
                CitedSpan(len(text), len(text) + 3, 'marker', [1], message_index=0, part_index=0, citation_index=i)
            )
            text += '[1] '
        return CitedAnswer(text, spans=spans, sources=[SourceRef(1, 'web', url='https://x.test/')])

    assert claims_for(answer(3))[1].text == 'Sentence 1 says the river flows north past town.'

    def cost(n: int) -> float:
        a = answer(n)
        start = time.process_time()
        claims_for(a)
        return time.process_time() - start

    cost(500)
    assert cost(8000) <= 8 * cost(2000) + 0.05
