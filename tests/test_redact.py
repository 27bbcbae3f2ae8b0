from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import JsonValue
from pydantic_ai import Agent, Citation, DocumentCitationSource, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitedAnswer, redact, render_html, render_markdown
from pydantic_ai_citations._redact import placeholder
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

SECRET = 'Patient 4711 was prescribed 20 mg daily.'
WEB_EXCERPT = 'K2 is the second-highest mountain.'


def _answer() -> CitedAnswer:
    text = 'The dose is 20 mg. K2 is high.'
    citations = [
        ScriptedCitation(
            'The dose is 20 mg.', [DocumentCitationSource(document_id='file_9', title='chart.pdf', excerpts=[SECRET])]
        ),
        ScriptedCitation('K2 is high.', [WebCitationSource('https://k2.example/', title='K2', excerpts=[WEB_EXCERPT])]),
    ]
    return CitedAnswer.from_result(asyncio.run(Agent(CitingModel(text, citations, style='anthropic')).run('q')))


def _raw_answer() -> CitedAnswer:
    """Raw-only provider data (kept for audit): one document-like entry, one web entry."""
    part = TextPart(
        'Answer.',
        citations=[Citation([WebCitationSource('https://a.example/')])],
        provider_name='anthropic',
        provider_details={
            'citations': [
                {'type': 'page_location', 'cited_text': SECRET, 'document_title': 'chart.pdf', 'start_page_number': 1},
                {'type': 'web_search_result_location', 'url': 'https://b.example/', 'cited_text': WEB_EXCERPT},
                {'unknown': {'text': SECRET}},
            ]
        },
    )
    return CitedAnswer.from_messages([ModelResponse(parts=[part])])


def test_documents_redacted_by_default_urls_and_titles_kept():
    answer = _answer()
    redacted = redact(answer)
    assert redacted.text == answer.text
    assert redacted.spans == answer.spans
    assert [(s.kind, s.url, s.document_id, s.title, s.excerpts) for s in redacted.sources] == snapshot(
        [
            ('document', None, 'file_9', 'chart.pdf', ['[redacted: 40 chars]']),
            ('web', 'https://k2.example/', None, 'K2', ['K2 is the second-highest mountain.']),
        ]
    )
    assert answer.sources[0].excerpts == [SECRET]  # the input is not modified
    assert SECRET not in redacted.to_json().decode()


def test_web_too():
    redacted = redact(_answer(), web=True)
    assert [s.excerpts for s in redacted.sources] == [['[redacted: 40 chars]'], ['[redacted: 34 chars]']]
    assert redact(_answer(), documents=False) == _answer()


def test_raw_only_redacted():
    answer = _raw_answer()
    assert len(answer.raw_only) == 3
    redacted = redact(answer)
    assert [r.data for r in redacted.raw_only] == snapshot(
        [
            {
                'type': 'page_location',
                'cited_text': '[redacted: 40 chars]',
                'document_title': 'chart.pdf',
                'start_page_number': 1,
            },
            {'type': 'web_search_result_location', 'url': 'https://b.example/', 'cited_text': WEB_EXCERPT},
            {'unknown': {'text': '[redacted: 40 chars]'}},
        ]
    )
    everything = redact(answer, web=True)
    assert SECRET not in everything.to_json().decode()
    assert WEB_EXCERPT not in everything.to_json().decode()


def test_problem_details_redacted():
    part = TextPart('x', citations=['not a citation ' + SECRET], provider_name='p')  # pyright: ignore[reportArgumentType]
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert SECRET in (answer.problems[0].detail or '')
    assert SECRET not in (redact(answer).problems[0].detail or '')


def test_rendering_for_logs():
    answer = _answer()
    assert SECRET in render_markdown(answer)
    assert SECRET not in render_markdown(answer, redact=True)
    assert SECRET not in render_html(answer, redact=True)
    assert 'chart.pdf' in render_html(answer, redact=True)


def test_misuse():
    with pytest.raises(UserError, match="'nope'"):
        redact('nope')  # pyright: ignore[reportArgumentType]


def test_round_trip_after_redaction():
    redacted = redact(_raw_answer(), web=True)
    assert CitedAnswer.from_json(redacted.to_json()) == redacted


@settings(max_examples=60, deadline=None)
@given(excerpts=st.lists(st.text(min_size=1), min_size=1, max_size=4), title=st.text())
def test_hypothesis_no_excerpt_survives(excerpts: list[str], title: str):
    source = DocumentCitationSource(document_id='d', title=title or None, excerpts=excerpts)
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart('t', citations=[Citation([source])])])])
    redacted = redact(answer)
    assert redacted.sources[0].excerpts == [placeholder(e) for e in answer.sources[0].excerpts]
    assert redacted.sources[0].title == answer.sources[0].title


def test_raw_shapes():
    """Odd raw shapes: non-dict entries, `uri` keys, nested text fields, lists, deep nesting."""
    deep: object = 'deep secret'
    for _ in range(60):
        deep = {'nested': deep}
    raw = [
        ['a list entry', {'text': SECRET}],
        {'uri': 'https://web.example/', 'text': WEB_EXCERPT},
        {'web': {'uri': 'https://web.example/'}, 'text': WEB_EXCERPT},
        {'content': {'inner': SECRET}, 'excerpts': [SECRET, 3]},
        deep,
    ]
    part = TextPart('Answer.', provider_name='p', provider_details={'citations': raw})
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    redacted = redact(answer)
    assert [r.data for r in redacted.raw_only] == snapshot(
        [
            ['a list entry', {'text': '[redacted: 40 chars]'}],
            {'uri': 'https://web.example/', 'text': 'K2 is the second-highest mountain.'},
            {'web': {'uri': 'https://web.example/'}, 'text': 'K2 is the second-highest mountain.'},
            {'content': {'inner': '[redacted: 40 chars]'}, 'excerpts': ['[redacted: 40 chars]', 3]},
        ]
    )
    # Too deep to read: reported as a problem whose detail (a repr of the data) is redacted.
    assert [p.code for p in redacted.problems] == ['unreadable_raw_data']
    assert answer.problems[0].detail
    assert (redacted.problems[0].detail or '').startswith('[redacted: ')


def test_hand_built_raw_data_too_deep_is_redacted_whole_and_other_problems_kept():
    from pydantic_ai_citations import CitationProblem, RawCitation

    deep: JsonValue = {'text': SECRET}
    for _ in range(55):
        deep = {'nested': deep}
    kept = CitationProblem('unresolved_marker', 'marker [3] has no search result', detail='[3]')
    answer = CitedAnswer(
        'Answer.',
        raw_only=[RawCitation(deep, 'no position', message_index=0, raw_index=0)],
        problems=[kept],
    )
    redacted = redact(answer)
    assert SECRET not in json.dumps(redacted.raw_only[0].data)
    assert '[redacted]' in json.dumps(redacted.raw_only[0].data)
    assert redacted.problems == [kept]
