from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import JsonValue
from pydantic_ai import Agent
from pydantic_ai.messages import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from pydantic_ai_citations.formats import anthropic_search_results
from pydantic_ai_citations.formats.unmapped import (
    RawOnlyCitation,
    Recovery,
    recover,
    recover_cohere_from_body,
    recover_container_files,
    recover_search_result_locations,
    recover_search_result_locations_from_body,
    recover_xai_tool_output,
)


def json_client(body: dict[str, Any]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': 'application/json'}, json=body)

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


# -- OpenAI container_file_citation ---------------------------------------------------------------------------

PLOT_TEXT = 'Here is the plot: [y = x^2](sandbox:/mnt/data/plot.png).'
CONTAINER_BODY: dict[str, Any] = {
    'id': 'resp_c1',
    'object': 'response',
    'created_at': 1796000000,
    'status': 'completed',
    'model': 'gpt-5',
    'output': [
        {
            'type': 'message',
            'id': 'msg_c1',
            'status': 'completed',
            'role': 'assistant',
            'content': [
                {
                    'type': 'output_text',
                    'text': PLOT_TEXT,
                    'annotations': [
                        {
                            'type': 'container_file_citation',
                            'container_id': 'cntr_1',
                            'file_id': 'cfile_a',
                            'filename': 'cfile_a.png',
                            'start_index': 0,
                            'end_index': 0,
                        },
                        {
                            'type': 'container_file_citation',
                            'container_id': 'cntr_1',
                            'file_id': 'cfile_b',
                            'filename': 'plot.png',
                            'start_index': 28,
                            'end_index': 54,
                        },
                    ],
                }
            ],
        }
    ],
    'usage': {'input_tokens': 1, 'output_tokens': 1, 'total_tokens': 2},
}


@pytest.mark.anyio
@pytest.mark.parametrize('raw_annotations', [True, False])
async def test_container_file_citation_through_openai_responses(raw_annotations: bool):
    provider = OpenAIProvider(api_key='x', http_client=json_client(CONTAINER_BODY))
    agent = Agent(
        OpenAIResponsesModel('gpt-5', provider=provider),
        model_settings=OpenAIResponsesModelSettings(openai_include_raw_annotations=raw_annotations),
    )
    response = (await agent.run('plot')).response
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert part.citations is None  # Pydantic AI 2.68 does not map container_file_citation
    recovery = recover_container_files(response)
    if not raw_annotations:
        assert recovery == Recovery()  # nothing survives without the setting
        return
    assert recovery.citations == {
        0: [
            Citation(
                [DocumentCitationSource(document_id='cfile_b', title='plot.png')],
                anchor=MarkerCitationAnchor(start=28, end=54),
            )
        ]
    }
    assert PLOT_TEXT[28:54] == 'sandbox:/mnt/data/plot.png'
    assert [(r.kind, r.part_index) for r in recovery.raw_only] == [('container_file_citation', 0)]
    assert 'start_index=0, end_index=0' in recovery.raw_only[0].reason
    assert recover(response).citations == recovery.citations


def test_container_file_citation_bad_data():
    response = ModelResponse(
        parts=[
            TextPart('abc', provider_details={'annotations': 'nope'}),
            TextPart(
                'abc',
                provider_details={
                    'annotations': [{'type': 'container_file_citation', 'start_index': 0, 'end_index': 2}]
                },
            ),
            TextPart('abc', provider_details={'annotations': [{'type': 'url_citation'}]}),
        ]
    )
    recovery = recover_container_files(response)
    assert [p.code for p in recovery.problems] == ['unreadable_raw_data']
    assert [r.reason for r in recovery.raw_only] == ['no file id or filename']
    assert recovery.citations == {}


def test_container_file_citation_real_recording_annotations(corpus: Path):
    path = (
        corpus
        / 'pydantic-ai-cassettes/tests/models/cassettes/test_openai_responses'
        / 'test_openai_responses_code_execution_return_image_stream.yaml'
    )
    body = yaml.safe_load(path.read_text())['interactions'][0]['response']['body']['string']
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith('data: ')]
    done = next(e for e in events if e['type'] == 'response.output_text.done')
    annotations = [e['annotation'] for e in events if e['type'] == 'response.output_text.annotation.added']
    response = ModelResponse(parts=[TextPart(done['text'], provider_details={'annotations': annotations})])
    recovery = recover_container_files(response)
    (cited,) = recovery.citations[0]
    assert cited.anchor is not None
    assert done['text'][cited.anchor.start : cited.anchor.end].startswith('sandbox:/mnt/data/')
    assert len(recovery.raw_only) == 1  # the 0/0 one


# -- xAI tool-output citations --------------------------------------------------------------------------------


def test_xai_tool_output_citations_are_raw_only():
    response = ModelResponse(
        parts=[
            NativeToolReturnPart(
                tool_name='x_search',
                content={
                    'citations': ['https://x.com/i/status/1', {'x_citation': {'url': 'https://x.com/i/status/2'}}, 3]
                },
                tool_call_id='c1',
                provider_name='xai',
            ),
            NativeToolReturnPart(
                tool_name='x_search', content={'citations': 'bad'}, tool_call_id='c2', provider_name='xai'
            ),
            NativeToolReturnPart(tool_name='other', content='plain', tool_call_id='c3'),
            TextPart('answer'),
        ]
    )
    recovery = recover_xai_tool_output(response)
    assert [(r.url, r.part_index) for r in recovery.raw_only] == [
        ('https://x.com/i/status/1', 0),
        ('https://x.com/i/status/2', 0),
        (None, 0),
    ]
    assert [p.code for p in recovery.problems] == ['unreadable_raw_data']
    assert recover(response).raw_only == recovery.raw_only


# -- Cohere ---------------------------------------------------------------------------------------------------


def test_cohere_real_bodies(corpus: Path):
    path = (
        corpus
        / 'pydantic-ai-cassettes/tests/models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[auto-cohere].yaml'
    )
    body = yaml.safe_load(path.read_text())['interactions'][1]['response']['parsed_body']
    text, recovery = recover_cohere_from_body(body)
    assert [text[c.anchor.start : c.anchor.end] for c in recovery.citations[0] if c.anchor] == ['sunny', '22C.']
    assert recovery.citations[0][0].sources == [
        DocumentCitationSource(document_id='get_weather_9gpb31r7h7mj:0', excerpts=['Sunny, 22C in Paris'])
    ]
    vercel = sorted((corpus / 'vercel-ai-fixtures').rglob('cohere-citations.json'))
    if vercel:
        text, recovery = recover_cohere_from_body(json.loads(vercel[0].read_text()))
        assert [text[c.anchor.start : c.anchor.end] for c in recovery.citations[0] if c.anchor] == snapshot(
            ['Automation of tasks', 'Better decision-making', 'Cost reduction']
        )
        assert recovery.raw_only == []


def test_cohere_mismatch_is_raw_only():
    body: dict[str, Any] = {
        'message': {
            'content': [{'type': 'text', 'text': 'hello world'}],
            'citations': [
                {'start': 0, 'end': 5, 'text': 'world', 'sources': [{'id': 'd'}], 'type': 'TEXT_CONTENT'},
                {'start': 6, 'end': 11, 'text': 'world', 'sources': [{'document': {'url': 'https://w', 'title': 'W'}}]},
                {'start': 0, 'end': 5, 'text': 'hello', 'sources': []},
            ],
        }
    }
    text, recovery = recover_cohere_from_body(body)
    assert text == 'hello world'
    assert recovery.citations == {
        0: [Citation([WebCitationSource('https://w', title='W')], anchor=ContentCitationAnchor(start=6, end=11))]
    }
    assert [r.reason for r in recovery.raw_only] == [
        "start/end (0, 5) do not select the cited text 'world' in the answer",
        'no usable source',
    ]


def test_groq_search_results_are_raw_only():
    results = [
        {'url': 'https://a.example', 'title': 'A', 'content': 'a', 'score': 0.9},
        {'title': 'no url: not a search result'},
    ]
    response = ModelResponse(
        parts=[
            NativeToolReturnPart('web_search', {'results': results}, tool_call_id='c1', provider_name='groq'),
            NativeToolReturnPart('browser', {'results': 'not a list'}, tool_call_id='c2', provider_name='groq'),
            NativeToolReturnPart('code', {'output': '1'}, tool_call_id='c3', provider_name='groq'),
        ],
        provider_name='groq',
    )
    recovery = recover_xai_tool_output(response)
    assert [(r.provider, r.kind, r.url, r.part_index) for r in recovery.raw_only] == [
        ('groq', 'tool_output_search_result', 'https://a.example', 0)
    ]
    assert [(p.code, p.message, p.part_index) for p in recovery.problems] == [
        ('unreadable_raw_data', '`browser` return `results` is not a list.', 1)
    ]


def _xai(*parts: object, response_id: str | None = 'resp_xai') -> ModelResponse:
    return ModelResponse(parts=list(parts), provider_name='xai', provider_response_id=response_id)  # pyright: ignore[reportArgumentType]


CITED = Citation([WebCitationSource('https://a.example')], anchor=MarkerCitationAnchor(start=0, end=3))


@pytest.mark.parametrize(
    ('response', 'dropped'),
    [
        pytest.param(
            _xai(NativeToolCallPart('web_search', {}, tool_call_id='c1', provider_name='xai')), True, id='call'
        ),
        pytest.param(_xai(TextPart('[1]', citations=[CITED])), True, id='streamed-inline-only'),
        pytest.param(
            _xai(
                NativeToolCallPart('x_search', {}, tool_call_id='c1', provider_name='xai'),
                NativeToolReturnPart('x_search', {'citations': []}, tool_call_id='c1', provider_name='xai'),
            ),
            False,
            id='kept',
        ),
        pytest.param(_xai(TextPart('no search')), False, id='no-search'),
        pytest.param(
            _xai(NativeToolCallPart('code_execution', {}, tool_call_id='c1', provider_name='xai')),
            False,
            id='not-search',
        ),
        pytest.param(ModelResponse(parts=[TextPart('[1]', citations=[CITED])]), False, id='not-xai'),
        pytest.param(_xai(TextPart('[1]', citations=[CITED]), response_id=None), False, id='scripted-no-id'),
    ],
)
def test_xai_search_results_dropped_without_tool_output(response: ModelResponse, dropped: bool):
    problems = recover_xai_tool_output(response).problems
    assert [p.code for p in problems] == (['unmapped_provider_citation'] if dropped else [])
    if dropped:
        assert '`search_result_url`' in problems[0].message and '`include_output`' in problems[0].message


# -- Anthropic search_result_location -------------------------------------------------------------------------

SEARCH_LOCATION = {
    'type': 'search_result_location',
    'cited_text': 'Tides follow the Moon.',
    'search_result_index': 1,
    'source': 'https://kb.example/tides',
    'title': 'Tides KB',
    'start_block_index': 0,
    'end_block_index': 1,
}
WEB_LOCATION = {
    'type': 'web_search_result_location',
    'cited_text': 'The Moon pulls the sea.',
    'url': 'https://moon.example',
    'title': 'Moon',
    'encrypted_index': 'abc',
}
ANTHROPIC_BODY: dict[str, Any] = {
    'id': 'msg_a1',
    'type': 'message',
    'role': 'assistant',
    'model': 'claude-sonnet-4-6',
    'stop_reason': 'end_turn',
    'stop_sequence': None,
    'usage': {'input_tokens': 1, 'output_tokens': 1},
    'content': [
        {'type': 'text', 'text': 'Tides follow the Moon.', 'citations': [WEB_LOCATION, SEARCH_LOCATION]},
        {'type': 'text', 'text': ' Only a search result here.', 'citations': [{**SEARCH_LOCATION, 'source': 'kb-7'}]},
    ],
}


@pytest.mark.anyio
async def test_anthropic_search_result_location_survival():
    provider = AnthropicProvider(api_key='x', http_client=json_client(ANTHROPIC_BODY))
    agent = Agent(AnthropicModel('claude-sonnet-4-6', provider=provider), model_settings={'max_tokens': 1024})
    response = (await agent.run('q')).response
    first, second = response.parts
    assert isinstance(first, TextPart)
    assert isinstance(second, TextPart)
    # Pydantic AI maps only the web citation, but keeps both raw dicts on the first part...
    assert first.citations is not None
    assert [s.url for s in first.citations[0].sources if isinstance(s, WebCitationSource)] == ['https://moon.example']
    # ...and keeps nothing at all for the block cited only by a search result.
    assert second.citations is None
    assert second.provider_details is None
    recovery = recover_search_result_locations(response)
    assert recovery.citations == {
        0: [
            Citation(
                [WebCitationSource('https://kb.example/tides', title='Tides KB', excerpts=['Tides follow the Moon.'])],
                anchor=ContentCitationAnchor(start=0, end=len(first.content)),
            )
        ]
    }
    from_body = recover_search_result_locations_from_body(ANTHROPIC_BODY)
    assert sorted(from_body.citations) == [0, 1]
    assert from_body.citations[1][0].sources == [
        DocumentCitationSource(document_id='kb-7', title='Tides KB', excerpts=['Tides follow the Moon.'])
    ]


@pytest.mark.parametrize(
    ('source', 'kind'),
    [
        ('https://kb.example/tides', 'web'),
        ('HTTPS://kb.example/tides', 'web'),
        ('http://', 'document'),
        ('https:///no-host', 'document'),
        ('kb-7', 'document'),
    ],
)
def test_anthropic_search_source_kind_same_on_both_paths(source: str, kind: str):
    """Recovered search_result_location citations and `anthropic_search_results.resolve` make the same kind of source."""
    body: dict[str, JsonValue] = {
        **ANTHROPIC_BODY,
        'content': [{'type': 'text', 'text': 'T.', 'citations': [{**SEARCH_LOCATION, 'source': source}]}],
    }
    [[citation]] = recover_search_result_locations_from_body(body).citations.values()
    [recovered] = citation.sources
    messages: list[dict[str, JsonValue]] = [
        {
            'role': 'user',
            'content': [
                {'type': 'search_result', 'source': 'x', 'title': 'other', 'content': [{'type': 'text', 'text': 'x'}]},
                {
                    'type': 'search_result',
                    'source': source,
                    'title': 'Tides KB',
                    'content': [{'type': 'text', 'text': 'Tides follow the Moon.'}],
                },
            ],
        }
    ]
    resolved = anthropic_search_results.resolve(SEARCH_LOCATION | {'source': source}, messages)
    assert isinstance(resolved, Citation)
    assert resolved.sources == [recovered]
    assert isinstance(recovered, WebCitationSource if kind == 'web' else DocumentCitationSource)


def test_anthropic_bad_data():
    response = ModelResponse(
        parts=[
            TextPart('x', provider_name='anthropic', provider_details={'citations': 'bad'}),
            TextPart(
                'x', provider_name='anthropic', provider_details={'citations': [{'type': 'search_result_location'}]}
            ),
            TextPart('', provider_name='anthropic', provider_details={'citations': [SEARCH_LOCATION]}),
        ]
    )
    recovery = recover_search_result_locations(response)
    assert [p.code for p in recovery.problems] == ['unreadable_raw_data']
    assert [r.reason for r in recovery.raw_only] == ['no source, title or cited text', 'the cited block has no text']
    assert recovery.citations == {}


# -- properties -----------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 60) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
annotation = st.fixed_dictionaries(
    {'type': st.sampled_from(['container_file_citation', 'search_result_location', 'url_citation'])},
    optional={
        'start_index': st.integers(-2, 60),
        'end_index': st.integers(-2, 60),
        'file_id': st.text(max_size=4),
        'filename': st.text(max_size=4),
        'source': st.text(max_size=6),
        'title': st.text(max_size=4),
        'cited_text': st.text(max_size=4),
    },
)
details = st.dictionaries(
    st.sampled_from(['annotations', 'citations', 'other']), st.lists(annotation, max_size=4) | json_values, max_size=3
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), details, st.sampled_from([None, 'anthropic', 'openai'])), max_size=4))
def test_recover_never_crashes_and_offsets_inside(parts: list[tuple[str, dict[str, Any], str | None]]):
    response = ModelResponse(
        parts=[TextPart(text, provider_details=d or None, provider_name=name) for text, d, name in parts]
    )
    recovery = recover(response)
    for index, citations in recovery.citations.items():
        part = response.parts[index]
        assert isinstance(part, TextPart)
        for citation in citations:
            assert citation.anchor is not None
            assert 0 <= citation.anchor.start < citation.anchor.end <= len(part.content)
    for raw in recovery.raw_only:
        assert isinstance(raw, RawOnlyCitation)


@settings(max_examples=100, deadline=None)
@given(json_values, st.text(max_size=30))
def test_cohere_body_never_crashes(citations: Any, text: str):
    _, recovery = recover_cohere_from_body(
        {'message': {'content': [{'type': 'text', 'text': text}], 'citations': citations}}
    )
    for citation in recovery.citations.get(0, []):
        assert citation.anchor is not None
        assert 0 <= citation.anchor.start < citation.anchor.end <= len(text)


def _every_recovery(response: ModelResponse) -> Recovery:
    """`recover` without its first pass over the parts: every recovery run and merged."""
    out = Recovery()
    for recovery in (
        recover_container_files(response),
        recover_xai_tool_output(response),
        recover_search_result_locations(response),
    ):
        if recovery.citations or recovery.raw_only or recovery.problems:
            out = out.merged(recovery) if out.citations or out.raw_only or out.problems else recovery
    return out


tool_content = st.one_of(
    json_values,
    st.fixed_dictionaries({'citations': st.lists(st.text(max_size=12), max_size=2) | json_values}),
    st.fixed_dictionaries({'results': st.lists(st.fixed_dictionaries({'url': st.text(max_size=12)}), max_size=2)}),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=40), details, st.sampled_from([None, 'anthropic', 'openai'])), max_size=4),
    st.lists(st.tuples(tool_content, st.sampled_from(['xai', 'groq', 'anthropic'])), max_size=2),
    st.sampled_from([None, 'xai', 'anthropic', 'openai']),
    st.booleans(),
)
def test_recover_finds_what_every_recovery_finds(
    texts: list[tuple[str, dict[str, Any], str | None]],
    tools: list[tuple[Any, str]],
    provider: str | None,
    searched: bool,
):
    """The pass that tells which recoveries can find anything skips none that would."""
    parts: list[Any] = [NativeToolCallPart('web_search', {}, provider_name=provider)] if searched else []
    parts += [NativeToolReturnPart('web_search', content, provider_name=name) for content, name in tools]
    parts += [TextPart(text, provider_details=d or None, provider_name=name) for text, d, name in texts]
    response = ModelResponse(parts=parts, provider_name=provider, provider_response_id='r1' if provider else None)
    assert recover(response) == _every_recovery(response)
