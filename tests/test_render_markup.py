"""Readers never see raw citation markup: `render_markdown`, `render_html` and `redact` clean any answer's text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot

from pydantic_ai_citations import CitedAnswer, CitedSpan, SourceRef, redact, render_html, render_markdown
from pydantic_ai_citations._redact import clean_markup

OAI = '\ue200cite\ue202turn0search0\ue201'
TEXT = f'Paris is big {OAI}. It is old (cite index="0-1">since Roman times</cite>. Lyon 【4:0†source】 too \ue200cite\ue202t9'
RAW = re.compile('[\ue200-\ue202]|[<(]cite[^>]*>|</cite>|【[^】]*†')


def _answer(text: str, *, marker: tuple[int, int] | None = None) -> CitedAnswer:
    """Built by hand, as a stored or hand-made answer may be: nothing cleaned it."""
    start = text.index('It is old') if marker is None else marker[0]
    end = start + 9 if marker is None else marker[1]
    kind = 'content' if marker is None else 'marker'
    return CitedAnswer(
        text,
        spans=[CitedSpan(start, end, kind, [1], message_index=0, part_index=0, citation_index=0)],
        sources=[SourceRef(1, 'web', url='https://a.example/p', title='A')],
    )


@pytest.mark.parametrize('how', ['hand-built', 'from-json'])
def test_rendered_text_holds_no_markup(how: str):
    answer = _answer(TEXT)
    if how == 'from-json':
        answer = CitedAnswer.from_json(answer.to_json())
    markdown = render_markdown(answer)
    html = render_html(answer)
    assert RAW.search(markdown) is None
    assert RAW.search(html) is None
    assert markdown == snapshot("""\
Paris is big. It is old[[1]](https://a.example/p) since Roman times. Lyon too

*Note: 4 piece(s) of citation markup the model left in the text was removed and recorded as problems.*
""")
    assert 'cited-answer-markup-removed' in html


def test_clean_markup_reports_each_removal_and_moves_offsets():
    answer = _answer(TEXT)
    cleaned = clean_markup(answer)
    assert cleaned.text == 'Paris is big. It is old since Roman times. Lyon too'
    [span] = cleaned.spans
    assert cleaned.text[span.start : span.end] == 'It is old'
    assert [(p.code, p.detail) for p in cleaned.problems] == [
        ('markup_in_output', OAI),
        ('markup_in_output', '(cite index="0-1">since Roman times</cite>'),
        ('markup_in_output', '【4:0†source】'),
        ('unterminated_marker', '\ue200cite\ue202t9'),
    ]
    for p in cleaned.problems:
        assert p.start is not None and 0 <= p.start <= len(cleaned.text)
    assert clean_markup(cleaned) is cleaned


def test_redact_cleans_markup_too():
    redacted = redact(_answer(TEXT), documents=False)
    assert RAW.search(redacted.text) is None
    assert [p.code for p in redacted.problems].count('markup_in_output') == 3


def test_markup_a_citation_is_anchored_on_stays_for_the_renderer_to_replace():
    text = 'Lyon is big【4:0†source】.'
    start = text.index('【')
    answer = _answer(text, marker=(start, start + 12))
    assert clean_markup(answer) is answer
    assert render_markdown(answer) == snapshot('Lyon is big[[1]](https://a.example/p).\n')


PIECES = st.sampled_from(
    [
        'a',
        ' ',
        '.',
        '\n',
        'It is old',
        OAI,
        '\ue200cite\ue202t',
        '\ue201',
        '(cite index="1">',
        '</cite>',
        '【1†s】',
        '【',
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=25).map(''.join), st.data())
def test_clean_markup_on_any_text(text: str, data: st.DataObject):
    start = data.draw(st.integers(0, max(0, len(text) - 1)))
    end = data.draw(st.integers(start, len(text)))
    answer = CitedAnswer(
        text,
        spans=[CitedSpan(start, end, 'content', [1], message_index=0, part_index=0, citation_index=0)],
        sources=[SourceRef(1, 'web', url='https://a.example/p')],
    )
    cleaned = clean_markup(answer)
    assert RAW.search(cleaned.text) is None
    for span in cleaned.spans:
        assert 0 <= span.start <= span.end <= len(cleaned.text)
    for problem in cleaned.problems:
        assert problem.start is None or 0 <= problem.start <= len(cleaned.text)
    assert RAW.search(render_html(answer)) is None


def test_anchored_marker_stays_while_other_markup_goes_and_problem_offsets_move():
    from pydantic_ai_citations import CitationProblem

    text = f'Paris {OAI}is big. Lyon is big【4:0†source】.'
    start = text.index('【')
    answer = _answer(text, marker=(start, start + 12))
    answer = CitedAnswer(
        answer.text,
        spans=answer.spans,
        sources=answer.sources,
        problems=[
            CitationProblem('unresolved_marker', 'marker at the end', start=len(text) - 1),
            CitationProblem('stream_incomplete', 'no offsets'),
        ],
    )
    cleaned = clean_markup(answer)
    assert cleaned.text == 'Paris is big. Lyon is big【4:0†source】.'
    [span] = cleaned.spans
    assert cleaned.text[span.start : span.end] == '【4:0†source】'
    assert [(p.code, p.start, p.end) for p in cleaned.problems] == [
        ('unresolved_marker', len(cleaned.text) - 1, None),
        ('stream_incomplete', None, None),
        ('markup_in_output', 6, 6),
    ]
    assert render_markdown(cleaned).startswith('Paris is big. Lyon is big[[1]](https://a.example/p).')
