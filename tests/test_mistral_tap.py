"""Mistral `reference` content chunks: Pydantic AI 2.68's `MistralModel` drops them without a trace.

`MistralTap` records them from each chat completion body (streamed or not) and `TrackCitations(mistral_tap=...)` lists
them on the answer as `raw_only` data with their offsets. Without a tap, a Mistral answer says they cannot be seen.
The bodies are hand-written (no real recording with reference chunks exists in the shared corpus), in the shapes of
the `mistralai` SDK's `ReferenceChunk` (`{'type': 'reference', 'reference_ids': [...]}`) and `TextChunk`.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from pydantic import JsonValue
from pydantic_ai import Agent, ModelResponse, TextPart
from pydantic_ai.models.mistral import MistralModel
from pydantic_ai.providers.mistral import MistralProvider

from pydantic_ai_citations import CitedAnswer, MistralTap, TrackCitations, mistral_http_client
from pydantic_ai_citations._recover import recover_in_place, recover_mistral_in_place  # the recovery step, on purpose
from pydantic_ai_citations._tap import MistralRecord

pytestmark = pytest.mark.anyio

TEXT = 'Tides follow the Moon. Bays amplify the range.'
REF_A: dict[str, JsonValue] = {'type': 'reference', 'reference_ids': [0]}
REF_B: dict[str, JsonValue] = {'type': 'reference', 'reference_ids': [1, 'doc-2']}
BODY: dict[str, JsonValue] = {
    'id': 'cmpl-ref-json',
    'object': 'chat.completion',
    'created': 1700000000,
    'model': 'mistral-large-latest',
    'choices': [
        {
            'index': 0,
            'message': {
                'role': 'assistant',
                'content': [
                    {'type': 'text', 'text': 'Tides follow the Moon.'},
                    REF_A,
                    {'type': 'text', 'text': ' Bays amplify the range.'},
                    REF_B,
                ],
                'tool_calls': None,
            },
            'finish_reason': 'stop',
        }
    ],
    'usage': {'prompt_tokens': 10, 'completion_tokens': 12, 'total_tokens': 22},
}


def _chunk(content: JsonValue, finish: str | None = None) -> dict[str, JsonValue]:
    return {
        'id': 'cmpl-ref-stream',
        'object': 'chat.completion.chunk',
        'created': 1700000000,
        'model': 'mistral-large-latest',
        'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': content}, 'finish_reason': finish}],
        **({'usage': {'prompt_tokens': 10, 'completion_tokens': 12, 'total_tokens': 22}} if finish else {}),
    }


STREAM = (
    ''.join(
        f'data: {json.dumps(event)}\n\n'
        for event in [
            _chunk(''),
            _chunk([{'type': 'text', 'text': 'Tides follow the Moon.'}]),
            _chunk([REF_A]),
            _chunk(' Bays amplify the range.'),
            _chunk([REF_B]),
            _chunk(None, 'stop'),
        ]
    )
    + 'data: [DONE]\n\n'
).encode()


def _serve(streamed: bool) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if streamed:
            return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=STREAM)
        return httpx2.Response(200, headers={'content-type': 'application/json'}, content=json.dumps(BODY).encode())

    return httpx2.MockTransport(handler)


def _agent(streamed: bool, tap: MistralTap | None, track: TrackCitations | None) -> Agent[None, str]:
    from mistralai.client import Mistral

    transport = _serve(streamed)
    async_client = mistral_http_client(tap, transport=transport) if tap else httpx2.AsyncClient(transport=transport)
    client = Mistral(
        api_key='x',
        server_url='https://api.mistral.ai',
        client=httpx2.Client(transport=transport),
        async_client=async_client,
    )
    model = MistralModel('mistral-large-latest', provider=MistralProvider(mistral_client=client))
    return Agent(model, capabilities=[track] if track else [])


async def _response(agent: Agent[None, str], streamed: bool) -> tuple[ModelResponse, Any]:
    if streamed:
        async with agent.run_stream('What moves the tides?') as result:
            await result.get_output()
    else:
        result = await agent.run('What moves the tides?')
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    return last, result


@pytest.mark.parametrize('streamed', [False, True], ids=['json', 'stream'])
async def test_pydantic_ai_alone_keeps_nothing_of_reference_chunks(streamed: bool):
    response, _ = await _response(_agent(streamed, None, None), streamed)
    [part] = response.parts
    assert isinstance(part, TextPart) and part.content == TEXT
    assert part.citations is None and part.provider_details is None
    assert 'reference' not in repr(response)


@pytest.mark.parametrize('streamed', [False, True], ids=['json', 'stream'])
async def test_without_a_tap_the_answer_says_reference_chunks_cannot_be_seen(streamed: bool):
    track = TrackCitations()
    _, result = await _response(_agent(streamed, None, track), streamed)
    [problem] = [p for p in track.report(result).problems if p.code == 'unmapped_provider_citation']
    assert problem.message.startswith('Without `TrackCitations(mistral_tap=...)`, Mistral `reference` content chunks')
    assert 'cannot be seen' in problem.message


@pytest.mark.parametrize('streamed', [False, True], ids=['json', 'stream'])
async def test_track_citations_lists_tapped_reference_chunks(streamed: bool):
    tap = MistralTap()
    track = TrackCitations(mistral_tap=tap)
    response, result = await _response(_agent(streamed, tap, track), streamed)
    rid = 'cmpl-ref-stream' if streamed else 'cmpl-ref-json'
    record = tap.references_for(rid)
    assert record is not None and record.text == TEXT
    expected = [{**REF_A, 'offset': 22}, {**REF_B, 'offset': len(TEXT)}]
    assert record.references == expected
    [part] = response.parts
    assert isinstance(part, TextPart) and part.content == TEXT
    assert part.provider_details == {'citations': expected}
    assert part.provider_name == 'mistral'
    run = track.report(result)
    assert run.problems == []
    assert [r.data for r in run.answer.raw_only] == expected
    assert all("'reference' is not mapped" in r.reason for r in run.answer.raw_only)
    assert [r.data for r in CitedAnswer.from_result(result).raw_only] == expected


async def test_a_tap_that_did_not_see_the_response_says_so():
    tap = MistralTap()
    track = TrackCitations(mistral_tap=tap)
    _, result = await _response(_agent(False, None, track), False)  # the client was not built with the tap
    [problem] = track.report(result).problems
    assert problem.code == 'unmapped_provider_citation'
    assert 'did not see this response' in problem.message


def _tapped(response_id: str, *contents: object) -> MistralTap:
    tap = MistralTap()
    record = MistralRecord()
    for content in contents:
        record.feed(content)
    tap._record(response_id, record)  # pyright: ignore[reportPrivateUsage]
    return tap


def test_recovery_edge_cases():
    text = ModelResponse(parts=[TextPart('Hello.')], provider_response_id='r1')
    # No references: nothing to do, no problem.
    assert recover_mistral_in_place(text, _tapped('r1', 'Hello.')) == []
    assert text.parts[0] == TextPart('Hello.')
    # The tapped text differs from the part: the references cannot be placed.
    [problem] = recover_mistral_in_place(text, _tapped('r1', 'Other.', [REF_A]))
    assert 'differs from the tapped body' in problem.message and problem.detail is not None
    # A response without text cannot hold reference chunks: no problem, with or without a tap.
    empty = ModelResponse(parts=[], provider_response_id='r1')
    assert recover_mistral_in_place(empty, MistralTap()) == []
    assert recover_in_place(empty, api='mistral').problems == []
    # Raw citations already kept on the part stay, the references are added after them.
    kept = ModelResponse(
        parts=[TextPart('Hi.', provider_name='other', provider_details={'citations': [{'x': 1}]})],
        provider_response_id='r2',
    )
    assert recover_mistral_in_place(kept, _tapped('r2', [{'type': 'text', 'text': 'Hi.'}, REF_A, 7])) == []
    part = kept.parts[0]
    assert isinstance(part, TextPart) and part.provider_name == 'other'
    assert part.provider_details == {'citations': [{'x': 1}, {**REF_A, 'offset': 3}]}
    # `recover_raw=False` reads no tap and records no problem.
    assert recover_in_place(text, api='mistral', raw=False, mistral_tap=MistralTap()).problems == []


def test_record_ignores_what_is_not_content():
    record = MistralRecord()
    for content in (None, 3, [None, {'type': 'thinking'}, {'type': 'text', 'text': 1}], {'type': 'text'}):
        record.feed(content)
    assert (record.text, record.references) == ('', [])


def test_tap_keeps_the_newest_and_ignores_responses_without_id():
    tap = MistralTap(max_responses=1)
    tap._record(None, MistralRecord())  # pyright: ignore[reportPrivateUsage]
    tap._record('', MistralRecord())  # pyright: ignore[reportPrivateUsage]
    tap._record('a', MistralRecord())  # pyright: ignore[reportPrivateUsage]
    tap._record('b', MistralRecord())  # pyright: ignore[reportPrivateUsage]
    assert tap.references_for('a') is None and tap.references_for('b') is not None
    assert tap.references_for(None) is None


async def test_tap_passes_other_traffic_through_and_reports_unreadable_bodies():
    answers = {
        '/v1/models': (200, 'application/json', b'{"id": "cmpl-other"}'),
        '/v1/chat/completions': (200, 'application/json', b'not json'),
        '/v1/error/chat/completions': (500, 'application/json', b'{"id": "cmpl-error"}'),
        '/v1/text/chat/completions': (200, 'text/plain', b'{"id": "cmpl-text"}'),
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        status, content_type, body = answers[request.url.path]
        return httpx2.Response(status, headers={'content-type': content_type}, content=body)

    tap = MistralTap()
    async with mistral_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        for path, (status, _, body) in answers.items():
            response = await client.post(f'https://api.mistral.ai{path}')
            assert (response.status_code, response.content) == (status, body)
        other = await client.post('https://elsewhere.example/v1/chat/completions', content=b'')
        assert other.status_code == 200
    assert [p.code for p in tap.problems] == ['unreadable_raw_data']
    assert tap.references_for('cmpl-other') is None and tap.references_for('cmpl-error') is None
    assert isinstance(MistralTap().transport(), httpx2.AsyncBaseTransport)


async def test_tap_passes_the_stream_on_unchanged():
    stream = b'data: not json\n\n' + STREAM

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=stream)

    tap = MistralTap()
    async with mistral_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        response = await client.post('https://api.mistral.ai/v1/chat/completions/')
        assert response.content == stream
    record = tap.references_for('cmpl-ref-stream')
    assert record is not None and len(record.references) == 2
