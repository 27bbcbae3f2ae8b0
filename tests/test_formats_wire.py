from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import JsonValue
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations.formats.wire import (
    WIRE_APIS,
    WireCitation,
    count_wire_citations,
    parse_sse,
    wire_citations_ta,
)

PPLX = files('pydantic_ai_citations.matrix') / 'fixtures' / 'perplexity'
CASSETTES = Path('pydantic-ai-cassettes') / 'tests' / 'models' / 'cassettes'


def kinds(citations: list[WireCitation]) -> dict[str, int]:
    return dict(Counter(c.kind for c in citations))


def api_for(uri: str) -> str | None:
    if 'anthropic.com' in uri:
        return 'anthropic-messages'
    if 'bedrock-runtime' in uri:
        return 'bedrock-converse'
    if 'api.openai.com/v1/responses' in uri:
        return 'openai-responses'
    if 'openrouter.ai' in uri:
        return 'openrouter'
    if 'aiplatform.googleapis.com' in uri:
        return 'google-vertex'
    if 'generativelanguage.googleapis.com' in uri and 'enerateContent' in uri:
        return 'google-gemini'
    if 'api.cohere.com' in uri:
        return 'cohere'
    return None


def cassette_payloads(path: Path) -> Iterator[tuple[str, Any]]:
    """The model-endpoint response bodies of a cassette: parsed JSON, SSE events, or decoded Bedrock events."""
    data = yaml.safe_load(path.read_text())
    for interaction in data['interactions']:
        if 'response_sample' in interaction:  # pydantic-ai's xAI gRPC format
            yield 'xai', interaction['response_sample']['json']
            continue
        api = api_for(interaction['request']['uri'])
        if api is None:
            continue
        response = interaction['response']
        if 'parsed_body' in response:
            yield api, response['parsed_body']
            continue
        body = response['body']['string']
        if isinstance(body, bytes):
            from botocore.eventstream import EventStreamBuffer

            # botocore ships without type hints: its event-stream members are untyped.
            buffer = EventStreamBuffer()
            buffer.add_data(body)  # pyright: ignore[reportUnknownMemberType]
            events: list[dict[str, Any]] = []
            for message in buffer:
                headers = cast(dict[str, str], message.headers)  # pyright: ignore[reportUnknownMemberType]
                payload = cast(bytes, message.payload)  # pyright: ignore[reportUnknownMemberType]
                events.append({headers[':event-type']: json.loads(payload)})
            yield api, events
        elif body.lstrip().startswith('{'):
            yield api, json.loads(body)
        else:
            yield api, parse_sse(body)


# Regenerated from the cassettes with this module; they agree with recordings.md's "raw count" column.
RAW_COUNTS = {
    'test_anthropic/test_anthropic_document_citations.yaml': {'char_location': 1},
    'test_anthropic/test_anthropic_document_citations_stream.yaml': {'char_location': 1},
    'test_anthropic/test_anthropic_pdf_citations.yaml': {'page_location': 1},
    'test_anthropic/test_anthropic_web_search_citations.yaml': {'web_search_result_location': 7},
    'test_anthropic/test_anthropic_web_search_citations_stream.yaml': {'web_search_result_location': 7},
    'test_bedrock/test_bedrock_document_citations_live.yaml': {'documentChar': 1},
    'test_bedrock/test_bedrock_document_citations_live_stream.yaml': {'documentChar': 1},
    'test_bedrock/test_bedrock_pdf_citations.yaml': {'documentPage': 1},
    'test_google/test_google_gemini_web_search_citations.yaml': {'grounding_support': 4, 'grounding_chunk.web': 5},
    'test_google/test_google_vertex_web_search_citations_stream.yaml': {
        'grounding_support': 6,
        'grounding_chunk.web': 5,
    },
    'test_openai/test_openai_responses_web_search_citations.yaml': {'url_citation': 1},
    'test_openai/test_openai_responses_web_search_citations_stream.yaml': {'url_citation': 1},
    'test_openai_responses/test_openai_responses_model_builtin_tools_web_search.yaml': {'url_citation': 3},
    'test_openai_responses/test_openai_responses_model_file_search_tool_with_results.yaml': {'file_citation': 1},
    'test_openai_responses/test_openai_responses_code_execution_return_image_stream.yaml': {
        'container_file_citation': 2
    },
    'test_openrouter/test_openrouter_web_search_annotations.yaml': {'url_citation': 5},
    'test_google/test_google_model_file_search_tool.yaml': {
        'grounding_support': 3,
        'grounding_chunk.retrievedContext': 3,
    },
    'test_google/test_google_model_web_fetch_tool.yaml': {'grounding_support': 1, 'grounding_chunk.web': 1},
    'test_tool_choice_matrix/test_tool_choice_matrix[auto-cohere].yaml': {'text_content': 2},
    'test_xai/test_xai_x_search_citations_recorded.xai.yaml': {'x_citation': 1, 'search_result_url': 15},
}


@pytest.mark.parametrize('name', list(RAW_COUNTS), ids=[Path(n).stem for n in RAW_COUNTS])
def test_raw_counts_on_real_recordings(corpus: Path, name: str):
    total: Counter[str] = Counter()
    for api, payload in cassette_payloads(corpus / CASSETTES / name):
        for citation in count_wire_citations(api, payload):  # type: ignore[arg-type]
            total[citation.kind] += 1
    assert dict(total) == RAW_COUNTS[name]


def test_offsets_on_real_recordings(corpus: Path):
    name = 'test_openai/test_openai_responses_web_search_citations_stream.yaml'
    ((api, events),) = list(cassette_payloads(corpus / CASSETTES / name))
    (citation,) = count_wire_citations(api, events)  # type: ignore[arg-type]
    assert (citation.start, citation.end, citation.offset_unit) == (71, 144, 'char')
    assert citation.url == 'https://github.com/pydantic/pydantic-ai?utm_source=openai'
    xai = 'test_xai/test_xai_x_search_citations_recorded.xai.yaml'
    ((_, body),) = list(cassette_payloads(corpus / CASSETTES / xai))
    inline = [c for c in count_wire_citations('xai', body) if c.kind == 'x_citation']
    assert [(c.start, c.end) for c in inline] == [(227, 283)]


def test_stream_snapshot_and_final_body_counted_once():
    annotation = {'type': 'url_citation', 'start_index': 0, 'end_index': 4, 'url': 'https://a', 'title': 'A'}
    message: dict[str, Any] = {
        'type': 'message',
        'id': 'msg_1',
        'content': [{'type': 'output_text', 'text': 'abcd', 'annotations': [annotation]}],
    }
    events: list[Any] = [
        {
            'type': 'response.output_text.annotation.added',
            'item_id': 'msg_1',
            'content_index': 0,
            'annotation': annotation,
        },
        {'type': 'response.content_part.done', 'item_id': 'msg_1', 'content_index': 0, 'part': message['content'][0]},
        {'type': 'response.output_item.done', 'item': message},
        {'type': 'response.completed', 'response': {'output': [message]}},
    ]
    assert len(count_wire_citations('openai-responses', events)) == 1
    assert len(count_wire_citations('openai-responses', {'output': [message]})) == 1


def test_perplexity_agent_fixtures():
    events = parse_sse((PPLX / 'agent-api-stream.sse').read_bytes())
    streamed = count_wire_citations('perplexity-agent', list(events))
    assert kinds(streamed) == {'search_result': 4, 'numbered_marker': 5}
    body = json.loads((PPLX / 'agent-api-response.json').read_bytes())
    assert kinds(count_wire_citations('perplexity-agent', body)) == {'search_result': 2, 'numbered_marker': 3}
    unresolved = [c for c in streamed if c.kind == 'numbered_marker' and c.url is None]
    assert [(c.document_id, c.start, c.end) for c in unresolved] == [('9', 185, 188)]


def test_perplexity_agent_conflicting_result_counts_each_url():
    """An id sent again with another URL is another object on the wire; markers citing it resolve to no URL."""
    events = parse_sse((PPLX / 'agent-api-stream.sse').read_bytes())
    resent: JsonValue = {
        'type': 'response.reasoning.search_results',
        'results': [{'id': 2, 'url': 'https://elsewhere.example'}],
    }
    counted = count_wire_citations('perplexity-agent', [*events[:5], resent, *events[5:]])
    assert kinds(counted) == {'search_result': 5, 'numbered_marker': 5}
    assert [c.url for c in counted if c.document_id == '2' and c.kind == 'search_result'] == [
        'https://ocean.example.net/spring-neap',
        'https://elsewhere.example',
    ]
    assert {c.url for c in counted if c.kind == 'numbered_marker' and c.document_id == '2'} == {None}


def test_perplexity_sonar_fixtures():
    body = json.loads((PPLX / 'sonar-chat.json').read_bytes())
    chunks = parse_sse((PPLX / 'sonar-chat-stream.sse').read_bytes())
    expected = {'search_result': 2, 'numbered_marker': 4}
    assert kinds(count_wire_citations('perplexity-sonar', body)) == expected
    assert kinds(count_wire_citations('perplexity-sonar', list(chunks))) == expected


@pytest.mark.parametrize(
    ('api', 'payload', 'expected'),
    [
        pytest.param(
            'openai-chat',
            [
                {
                    'choices': [
                        {
                            'index': 0,
                            'delta': {
                                'annotations': [
                                    {
                                        'type': 'url_citation',
                                        'url_citation': {'url': 'u', 'start_index': 1, 'end_index': 3},
                                    }
                                ]
                            },
                        }
                    ]
                },
                {
                    'choices': [
                        {
                            'index': 0,
                            'delta': {
                                'annotations': [
                                    {
                                        'type': 'url_citation',
                                        'url_citation': {'url': 'u', 'start_index': 1, 'end_index': 3},
                                    }
                                ]
                            },
                        }
                    ]
                },
            ],
            {'url_citation': 1},
            id='openai-chat-stream-repeats',
        ),
        pytest.param(
            'cohere',
            [
                {
                    'type': 'citation-start',
                    'delta': {
                        'message': {'citations': {'start': 0, 'end': 2, 'text': 'ab', 'sources': [{'id': 'd1'}]}}
                    },
                },
                {'type': 'message-end'},
            ],
            {'citation': 1},
            id='cohere-stream',
        ),
        pytest.param(
            'bedrock-converse',
            [
                {
                    'contentBlockIndex': 0,
                    'delta': {'citation': {'location': {'web': {'url': 'https://w', 'domain': 'w'}}}},
                }
            ],
            {'web': 1},
            id='bedrock-raw-payload',
        ),
        pytest.param(
            'anthropic-messages',
            {
                'content': [
                    {
                        'type': 'text',
                        'text': 'x',
                        'citations': [
                            {
                                'type': 'search_result_location',
                                'search_result_index': 2,
                                'source': 's',
                                'start_block_index': 0,
                                'end_block_index': 1,
                            }
                        ],
                    }
                ]
            },
            {'search_result_location': 1},
            id='anthropic-search-result',
        ),
        pytest.param(
            'mistral',
            {
                'choices': [
                    {
                        'index': 0,
                        'message': {
                            'content': [{'type': 'text', 'text': 'x'}, {'type': 'reference', 'reference_ids': [1, 2]}]
                        },
                    }
                ]
            },
            {'reference': 2},
            id='mistral-references',
        ),
        pytest.param(
            'groq',
            {
                'choices': [
                    {
                        'index': 0,
                        'message': {
                            'executed_tools': [{'search_results': {'results': [{'url': 'https://g', 'title': 'G'}]}}]
                        },
                    }
                ]
            },
            {'search_result': 1},
            id='groq-search-results',
        ),
    ],
)
def test_synthetic_payloads(api: str, payload: Any, expected: dict[str, int]):
    assert kinds(count_wire_citations(api, payload)) == expected  # type: ignore[arg-type]


def test_unknown_api_is_misuse():
    with pytest.raises(UserError, match="'nope'"):
        count_wire_citations('nope', {})  # type: ignore[arg-type]


def test_round_trip_json():
    citations = count_wire_citations('perplexity-agent', json.loads((PPLX / 'agent-api-response.json').read_bytes()))
    assert wire_citations_ta.validate_json(wire_citations_ta.dump_json(citations)) == citations
    assert citations[0] == snapshot(
        WireCitation(
            api='perplexity-agent',
            kind='search_result',
            key='["pplx-result", 3]',
            url='https://coast.example.com/bay-of-fundy',
            document_id='3',
            title='Bay of Fundy tidal range',
        )
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
shaped = st.fixed_dictionaries(
    {},
    optional={
        'type': st.sampled_from(
            ['response.output_text.annotation.added', 'content_block_delta', 'citation-start', 'message_start']
        ),
        'choices': st.lists(st.dictionaries(st.sampled_from(['index', 'message', 'delta']), json_values), max_size=2),
        'candidates': st.lists(
            st.dictionaries(st.sampled_from(['groundingMetadata', 'index']), json_values), max_size=2
        ),
        'output': json_values,
        'content': json_values,
        'message': json_values,
        'citations': json_values,
        'outputs': json_values,
        'delta': json_values,
    },
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(WIRE_APIS), st.one_of(json_values, shaped, st.lists(shaped, max_size=4)))
def test_never_crashes(api: Any, payload: Any):
    citations = count_wire_citations(api, payload)
    assert len({c.key for c in citations}) == len(citations)


@settings(max_examples=80, deadline=None)
@given(
    body=st.lists(
        st.sampled_from(
            ['data: {"a": 1}', 'data:{"b":2}', 'event: x', ': comment', 'data: [DONE]', '', 'data: x', '\r']
        ),
        max_size=12,
    ).map('\n'.join),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_sse_decoder_is_split_safe(body: str, cuts: list[int]) -> None:
    from pydantic_ai_citations.formats._sse import sse_data

    got = _sse_in_pieces(body.encode(), cuts)
    assert got == sse_data(body)
    assert '[DONE]' not in got


def _sse_in_pieces(raw: bytes, cuts: list[int]) -> list[str]:
    """The events of `raw` fed to one `SseDecoder` in pieces, cut at `cuts` (those past the end ignored)."""
    from pydantic_ai_citations.formats._sse import SseDecoder

    decoder = SseDecoder()
    got: list[str] = []
    start = 0
    for cut in sorted(c for c in cuts if c <= len(raw)):
        got += decoder.feed(raw[start:cut])
        start = cut
    return got + decoder.feed(raw[start:]) + decoder.flush()


def _sse_by_the_spec(raw: bytes) -> list[str]:
    """The SSE events of a whole body, line by line as the spec reads it (each line decoded on its own)."""
    events: list[str] = []
    data: list[str] = []
    for line in [*raw.split(b'\n'), b'']:  # (the end of the body ends its last event)
        text = line.rstrip(b'\r').decode('utf-8', errors='replace')
        if not text:
            if data and '\n'.join(data).strip() != '[DONE]':
                events.append('\n'.join(data))
            data = []
        elif text.startswith('data:'):
            data.append(text[5:].removeprefix(' '))
    return events


@settings(max_examples=300, deadline=None)
@given(
    raw=st.lists(
        st.sampled_from([b'data:', b'data: ', b'x', b'\n', b'\r', b'\r\n', b'\n\n', b': c', b'[DONE]', b'\xe2\x82\xac'])
        | st.binary(max_size=4),  # invalid UTF-8 too: lone continuation bytes, truncated sequences
        max_size=30,
    ).map(b''.join),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=6),
)
def test_sse_decoder_reads_any_bytes_in_any_pieces_as_the_spec_does(raw: bytes, cuts: list[int]) -> None:
    assert _sse_in_pieces(raw, cuts) == _sse_by_the_spec(raw)
