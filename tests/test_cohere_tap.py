"""`CohereTap`: the Cohere v2 citations `CohereModel` drops become `TextPart.citations` (seam 3b, issue 14.1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent

from pydantic_ai_citations import CitedAnswer, CohereTap, TrackCitations, cohere_http_client
from pydantic_ai_citations._replay import cohere_tap_for
from pydantic_ai_citations.testing import RawResponse, load_recording

pytestmark = pytest.mark.anyio

COHERE_FIXTURE = 'vercel-ai-fixtures/packages/cohere/src/__fixtures__/cohere-citations.json'
TOOL_CHOICE = (
    'pydantic-ai-cassettes/tests/models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[auto-cohere].yaml'
)
TEXT = 'Paris is sunny. It is 22C.'


def _citation(start: int, end: int, text: str, doc: str = 'Paris: sunny, 22C') -> dict[str, Any]:
    source = {'type': 'document', 'id': f'doc:{len(doc)}', 'document': {'id': f'doc:{len(doc)}', 'text': doc}}
    return {'start': start, 'end': end, 'text': text, 'sources': [source], 'type': 'TEXT_CONTENT'}


def _body(*citations: dict[str, Any]) -> bytes:
    message = {'role': 'assistant', 'content': [{'type': 'text', 'text': TEXT}], 'citations': list(citations)}
    usage = {'billed_units': {'input_tokens': 1, 'output_tokens': 1}, 'tokens': {'input_tokens': 1, 'output_tokens': 1}}
    return json.dumps({'id': 'resp-1', 'message': message, 'finish_reason': 'COMPLETE', 'usage': usage}).encode()


def _agent(tap: CohereTap, body: bytes, track: TrackCitations) -> Agent[None, str]:
    from cohere import AsyncClientV2
    from pydantic_ai.models.cohere import CohereModel
    from pydantic_ai.providers.cohere import CohereProvider

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={'content-type': 'application/json'})

    client = AsyncClientV2(
        api_key='test',
        base_url='https://api.cohere.com',
        httpx_client=cohere_http_client(tap, transport=httpx.MockTransport(handler)),
    )
    return Agent(CohereModel('command-r', provider=CohereProvider(cohere_client=client)), capabilities=[track])


@pytest.mark.parametrize(('name', 'cited'), [(COHERE_FIXTURE, 3), (TOOL_CHOICE, 2)])
async def test_replayed_cohere_recording_keeps_its_citations(corpus: Path, name: str, cited: int):
    recording = load_recording(corpus / name)
    model = recording.model()
    track = TrackCitations(cohere_tap=cohere_tap_for(model))
    result = await Agent(model, capabilities=[track]).run(
        recording.prompt or 'Hello', model_settings=recording.model_settings
    )
    answer = CitedAnswer.from_result(result)
    assert track.report(result).answer.spans == answer.spans
    assert len(answer.spans) == cited
    body_citations = [c for r in recording.responses for c in _citations(r)]
    assert [answer.text[s.start : s.end] for s in answer.spans] == [c['text'] for c in body_citations]
    assert not answer.raw_only


def _citations(response: RawResponse) -> list[dict[str, Any]]:
    body: dict[str, Any] = json.loads(response.body)
    return body.get('message', {}).get('citations', [])


async def test_track_citations_with_a_cohere_tap():
    tap = CohereTap()
    track = TrackCitations(cohere_tap=tap)
    result = await _agent(tap, _body(_citation(0, 5, 'Paris'), _citation(22, 25, '22C')), track).run('Weather?')
    answer = CitedAnswer.from_result(result)
    assert [answer.text[s.start : s.end] for s in answer.spans] == ['Paris', '22C']
    assert tap.body_for('resp-1') is not None


async def test_unsound_cohere_anchor_is_raw_only():
    tap = CohereTap()
    track = TrackCitations(cohere_tap=tap)
    result = await _agent(
        tap, _body(_citation(0, 5, 'Paris'), _citation(3, 9, 'sunny', 'Paris weather report')), track
    ).run('Weather?')
    answer = CitedAnswer.from_result(result)
    assert [answer.text[s.start : s.end] for s in answer.spans] == ['Paris']
    assert len(answer.raw_only) == 1


async def test_replayed_cohere_without_the_tap_loses_citations(corpus: Path):
    recording = load_recording(corpus / COHERE_FIXTURE)
    result = await Agent(recording.model(), capabilities=[TrackCitations()]).run(recording.prompt or 'Hello')
    assert CitedAnswer.from_result(result).spans == []


async def test_without_the_tap_cohere_citations_are_lost():
    tap = CohereTap()
    result = await _agent(tap, _body(_citation(0, 5, 'Paris')), TrackCitations()).run('Weather?')
    assert CitedAnswer.from_result(result).spans == []


def test_cohere_tap_rejects_no_room():
    with pytest.raises(Exception, match='max_responses'):
        CohereTap(max_responses=0)


@pytest.mark.anyio
async def test_cohere_tap_rebuilds_a_streamed_body():
    """A streamed answer: the tap adds its events up to the body `TrackCitations` reads (text and citations)."""
    tap = CohereTap()
    cited = _citation(0, 5, 'Paris')
    events: list[object] = [
        'not json',
        {'type': 'message-start', 'id': 'co_stream'},
        {'type': 'content-delta', 'index': 0, 'delta': {'message': {'content': {'text': 'Paris'}}}},
        {'type': 'content-delta', 'index': 'odd', 'delta': {'message': {'content': {'text': ' is sunny.'}}}},
        {'type': 'content-delta', 'delta': 'not a mapping'},
        {'type': 'citation-start', 'index': 0, 'delta': {'message': {'citations': cited}}},
        {'type': 'message-end'},
    ]
    body = ''.join(f'event: x\ndata: {e if isinstance(e, str) else json.dumps(e)}\n\n' for e in events).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={'content-type': 'text/event-stream'}, stream=httpx.ByteStream(body))

    client = cohere_http_client(tap, transport=httpx.MockTransport(handler))
    async with client, client.stream('POST', 'https://api.cohere.com/v2/chat', json={}) as response:
        assert b''.join([chunk async for chunk in response.aiter_raw()]) == body
    assert tap.body_for('co_stream') == {
        'id': 'co_stream',
        'message': {'content': [{'type': 'text', 'text': 'Paris is sunny.'}], 'citations': [cited]},
    }


@pytest.mark.anyio
async def test_cohere_tap_stream_without_id_or_readable_bytes_records_nothing():
    tap = CohereTap()
    replies = {
        'identity': b'data: {"type": "content-delta"}\n\n',
        'br': b'\x00\x01',
    }

    def handler(request: httpx.Request) -> httpx.Response:
        encoding = request.url.params['e']
        headers = {'content-type': 'text/event-stream', 'content-encoding': encoding}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(replies[encoding]))

    async with cohere_http_client(tap, transport=httpx.MockTransport(handler)) as client:
        for encoding in replies:
            async with client.stream('POST', f'https://api.cohere.com/v2/chat?e={encoding}', json={}) as response:
                await response.aread()
    assert tap._bodies == {}  # pyright: ignore[reportPrivateUsage]
