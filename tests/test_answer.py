from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitationProblem, CitedAnswer
from pydantic_ai_citations._answer import answer_parts, cited_answer_ta

WEB_A = WebCitationSource('https://a.example/x', title='A')
WEB_B = WebCitationSource('https://b.example/y', title='B', excerpts=['bee'])


def _resp(*parts: object, **kw: object) -> ModelResponse:
    return ModelResponse(parts=list(parts), **kw)  # type: ignore[arg-type]


def test_joins_parts_and_shifts_anchors():
    response = _resp(
        TextPart('Alpha. ', citations=[Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=6))]),
        TextPart('Beta [1].', citations=[Citation([WEB_B], anchor=MarkerCitationAnchor(start=5, end=8))]),
        provider_name='prov',
        model_name='m',
    )
    answer = CitedAnswer.from_messages([ModelRequest.user_text_prompt('q'), response])
    assert answer.text == 'Alpha. Beta [1].'
    assert [(s.start, s.end, s.kind, s.sources) for s in answer.spans] == [
        (0, 6, 'content', [1]),
        (12, 15, 'marker', [2]),
    ]
    assert [answer.span_text(s) for s in answer.spans] == ['Alpha.', '[1]']
    assert [(s.start, s.end, s.part_index) for s in answer.segments] == [(0, 7, 0), (7, 16, 1)]
    assert answer.provider_name == 'prov'
    assert answer.model_name == 'm'
    assert answer.complete
    assert answer.problems == []


def test_text_after_last_native_tool_call_like_pydantic_ai():
    # Same rule as Pydantic AI's text output: parts after the last native tool call.
    response = _resp(
        TextPart('A1'),
        TextPart('B2'),
        NativeToolCallPart('web_search', args={}, tool_call_id='c1'),
        NativeToolReturnPart('web_search', content=[], tool_call_id='c1'),
        TextPart('C3', citations=[Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=2))]),
    )
    assert answer_parts(response) == [4]
    answer = CitedAnswer.from_messages([response])
    assert answer.text == 'C3'
    assert answer.spans[0].start == 0


def test_gemini_text_before_trailing_search_is_the_answer():
    response = _resp(
        TextPart('Grounded.', citations=[Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=9))]),
        NativeToolCallPart('web_search', args={}, tool_call_id='c1'),
        NativeToolReturnPart('web_search', content=[], tool_call_id='c1'),
    )
    assert CitedAnswer.from_messages([response]).text == 'Grounded.'


@pytest.mark.anyio
async def test_matches_agent_output_for_several_parts():
    def model(messages: list[object], info: AgentInfo) -> ModelResponse:
        return _resp(TextPart('one '), ThinkingPart('hmm'), TextPart('two'))

    result = await Agent(FunctionModel(model)).run('q')  # type: ignore[arg-type]
    assert CitedAnswer.from_result(result).text == result.output == 'one two'


def test_tool_calls_keep_current_run():
    response = _resp(TextPart('x'), NativeToolCallPart('s', tool_call_id='c'), ToolCallPart('f', {}))
    assert answer_parts(response) == []


def test_three_states_and_dedup():
    response = _resp(
        TextPart(
            'One. Two.',
            provider_name='anthropic',
            citations=[
                Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=4)),
                Citation([WEB_B, WebCitationSource('https://a.example/x', excerpts=['more'])]),
                Citation([DocumentCitationSource(document_id='file-1', title='Doc')]),
            ],
            provider_details={
                'citations': [
                    {'type': 'web_search_result_location', 'url': 'https://a.example/x'},
                    {'type': 'search_result_location', 'source': 'kb://7', 'search_result_index': 0},
                ]
            },
        )
    )
    answer = CitedAnswer.from_messages([response])
    assert [(s.number, s.url or s.document_id, s.excerpts) for s in answer.sources] == [
        (1, 'https://a.example/x', ['more']),
        (2, 'https://b.example/y', ['bee']),
        (3, 'file-1', []),
    ]
    assert [s.number for s in answer.unanchored] == [1, 2, 3]
    assert len(answer.spans) == 1
    assert answer.raw_only[0].data == {'type': 'search_result_location', 'source': 'kb://7', 'search_result_index': 0}
    assert answer.raw_only[0].reason == "'search_result_location' is not mapped to a citation by Pydantic AI"


def test_problems():
    response = _resp(
        TextPart(
            'short',
            citations=[
                Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=99)),
                Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=3)),
                Citation([WEB_A], anchor=ContentCitationAnchor(start=0, end=3)),
                Citation([WEB_B], anchor=ContentCitationAnchor(start=2, end=5)),
                Citation([WebCitationSource('  ')]),
            ],
            provider_details={'citations': 'not a list'},
        )
    )
    answer = CitedAnswer.from_messages([response], complete=False)
    assert [p.code for p in answer.problems] == snapshot(
        [
            'stream_incomplete',
            'anchor_out_of_range',
            'source_without_content',
            'unreadable_raw_data',
            'duplicate_citation',
            'overlapping_citations',
        ]
    )
    assert not answer.complete
    assert [s.number for s in answer.unanchored] == [1]  # the out-of-range citation keeps its source, unpinned


LINKED = 'K2 is 8,611 m tall ([wikipedia.org](https://en.wikipedia.org/wiki/K2)). It is in Asia.'
"""An OpenAI-style answer: its `url_citation` covers the `([domain](url))` marker the model wrote."""


@pytest.mark.parametrize(
    ('start', 'end'),
    [
        pytest.param(LINKED.index('(['), LINKED.index(')).') + 2, id='the-link-in-parentheses'),
        pytest.param(LINKED.index('[w'), LINKED.index(')).') + 1, id='the-link'),
        pytest.param(LINKED.index('https'), LINKED.index(')).'), id='the-link-target'),  # container file citations
    ],
)
def test_a_marker_anchor_on_a_marker_is_kept(start: int, end: int):
    part = TextPart(LINKED, citations=[Citation([WEB_A], anchor=MarkerCitationAnchor(start=start, end=end))])
    answer = CitedAnswer.from_messages([_resp(part, finish_reason='stop')])
    assert [(s.kind, s.start, s.end) for s in answer.spans] == [('marker', start, end)]
    assert answer.problems == []


@pytest.mark.parametrize(
    ('start', 'end'),
    [
        pytest.param(LINKED.index('(') + 4, LINKED.index(')).') + 6, id='offsets-four-too-high'),  # as UTF-16 counts
        pytest.param(0, 2, id='on-prose'),
        pytest.param(LINKED.index('(['), LINKED.index(']('), id='cut-inside-the-link'),
    ],
)
def test_a_marker_anchor_off_its_marker_is_reported_and_its_source_kept(start: int, end: int):
    """Renderers replace a marker's text with their mark: an anchor that does not cover one would delete prose."""
    part = TextPart(LINKED, citations=[Citation([WEB_A], anchor=MarkerCitationAnchor(start=start, end=end))])
    answer = CitedAnswer.from_messages([_resp(part, finish_reason='stop')])
    assert answer.spans == []
    assert [s.url for s in answer.unanchored] == [WEB_A.url]
    [problem] = answer.problems
    assert (problem.code, problem.start, problem.end, problem.citation_index) == ('anchor_not_on_marker', start, end, 0)
    assert repr(LINKED[start:end])[:20] in problem.message
    from pydantic_ai_citations import render_html, render_markdown

    for rendered in (render_markdown(answer), render_markdown(answer, 'footnotes'), render_html(answer)):
        assert 'It is in Asia.' in rendered and 'K2 is 8,611 m tall' in rendered  # no prose deleted


def test_junk_on_parts_is_reported_not_crashing():
    part = TextPart('abc')
    part.citations = ['junk']  # type: ignore[list-item]
    part.provider_details = {'citations': [object(), {'k': {1: 2}}]}
    answer = CitedAnswer.from_messages([_resp(part)])
    assert [p.code for p in answer.problems] == ['unreadable_raw_data', 'unreadable_raw_data', 'unreadable_raw_data']


def test_no_response_is_not_a_complete_answer():
    answer = CitedAnswer.from_messages([ModelRequest(parts=[UserPromptPart('q')])])
    assert answer.text == ''
    assert not answer.complete
    assert [(p.code, p.message) for p in answer.problems] == [
        ('stream_incomplete', 'No model response arrived; there is no answer.')
    ]


def test_json_round_trip():
    response = _resp(
        TextPart(
            'Hello.',
            citations=[Citation([WEB_B], anchor=ContentCitationAnchor(start=0, end=6))],
            provider_details={'citations': [{'type': 'x', 'n': 1.5, 'ok': True, 'none': None}]},
        )
    )
    answer = CitedAnswer.from_messages([response], complete=False)
    data = answer.to_json()
    assert CitedAnswer.from_json(data) == answer
    assert json.loads(data)['spans'][0] == snapshot(
        {
            'start': 0,
            'end': 6,
            'kind': 'content',
            'sources': [1],
            'message_index': 0,
            'part_index': 0,
            'citation_index': 0,
        }
    )
    assert cited_answer_ta.validate_python(cited_answer_ta.dump_python(answer)) == answer


def test_problem_codes_are_closed():
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(CitationProblem)
    with pytest.raises(ValidationError, match='literal_error'):
        adapter.validate_python({'code': 'nope', 'message': 'x'})


_sources = st.one_of(
    st.builds(WebCitationSource, st.text(max_size=20), title=st.none() | st.text(max_size=5)),
    st.builds(
        DocumentCitationSource,
        document_id=st.none() | st.text(max_size=5),
        title=st.just('t') | st.text(min_size=1, max_size=5),
        excerpts=st.lists(st.text(max_size=5), max_size=2),
    ),
)


@st.composite
def _anchors(draw: st.DrawFn) -> object:
    if draw(st.booleans()):
        return None
    start = draw(st.integers(0, 60))
    end = draw(st.integers(start + 1, 80))
    kind = draw(st.sampled_from([ContentCitationAnchor, MarkerCitationAnchor]))
    return kind(start=start, end=end)


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _parts(draw: st.DrawFn) -> TextPart:
    citations = draw(
        st.none()
        | st.lists(st.builds(Citation, st.lists(_sources, min_size=1, max_size=3), anchor=_anchors()), max_size=4)
    )
    details = draw(st.none() | st.dictionaries(st.sampled_from(['citations', 'other']), _junk, max_size=2))
    return TextPart(draw(st.text(max_size=40)), citations=citations, provider_details=details)


@settings(max_examples=200, deadline=None)
@given(st.lists(_parts(), max_size=5), st.booleans())
def test_arbitrary_parts_never_crash_and_spans_fit(parts: list[TextPart], complete: bool):
    answer = CitedAnswer.from_messages([_resp(*parts)], complete=complete)
    for span in answer.spans:
        assert 0 <= span.start < span.end <= len(answer.text)
        assert all(1 <= n <= len(answer.sources) for n in span.sources)
    assert [s.number for s in answer.sources] == list(range(1, len(answer.sources) + 1))
    assert CitedAnswer.from_json(answer.to_json()) == answer
