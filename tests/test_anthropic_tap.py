"""Anthropic text blocks cited only by `search_result_location`: Pydantic AI 2.68 keeps nothing of them.

`AnthropicTap` records the text blocks of each Messages body (streamed or not) and `TrackCitations(anthropic_tap=...)`
recovers their citations onto the very text parts, or reports a block it cannot place. The recordings are
hand-written (tests/data/README.md): no real recording of this citation type exists in the shared corpus.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pydantic import JsonValue
from pydantic_ai import Agent, ModelResponse, TextPart
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    WebCitationSource,
)
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

from pydantic_ai_citations import AnthropicTap, CitedAnswer, TrackCitations, anthropic_http_client
from pydantic_ai_citations._recover import recover_anthropic_in_place  # the recovery step, tested on purpose
from pydantic_ai_citations.testing import SeamPath, load_recording

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / 'data'
BODY = DATA / 'anthropic-search-result-location.json'
STREAM = DATA / 'anthropic-search-result-location.chunks.txt'


def _serve(path: Path) -> httpx2.MockTransport:
    response = load_recording(path).responses[0]

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': response.content_type}, content=response.body)

    return httpx2.MockTransport(handler)


def _agent(path: Path, tap: AnthropicTap | None, track: TrackCitations | None = None) -> Agent[None, str]:
    transport = _serve(path)
    client = anthropic_http_client(tap, transport=transport) if tap else httpx2.AsyncClient(transport=transport)
    model = AnthropicModel('claude-sonnet-4-5', provider=AnthropicProvider(api_key='x', http_client=client))
    return Agent(model, model_settings={'max_tokens': 1024}, capabilities=[track] if track else [])


async def _response(agent: Agent[None, str], streamed: bool) -> tuple[ModelResponse, Any]:
    if streamed:
        async with agent.run_stream('What moves the tides?') as result:
            await result.get_output()
    else:
        result = await agent.run('What moves the tides?')
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    return last, result


def _texts(response: ModelResponse) -> list[TextPart]:
    return [p for p in response.parts if isinstance(p, TextPart)]


@pytest.mark.parametrize('path', [BODY, STREAM], ids=['json', 'stream'])
async def test_pydantic_ai_alone_keeps_nothing_of_the_block(path: Path):
    """Why the tap exists: the first block is cited only by `search_result_location`, and nothing of it survives."""
    response, _ = await _response(_agent(path, None), path is STREAM)
    first = _texts(response)[0]
    assert first.content == 'Tides follow the Moon.'
    assert first.citations is None
    assert first.provider_details is None
    answer = CitedAnswer.from_messages([response])
    assert all(r.part_index != 0 for r in answer.raw_only)  # (the mixed block's raw list is there, part 2)
    assert all(p.part_index != 0 for p in answer.problems)
    assert 'Tides KB' not in repr(answer)


@pytest.mark.parametrize('path', [BODY, STREAM], ids=['json', 'stream'])
async def test_track_citations_recovers_search_result_locations(path: Path):
    tap = AnthropicTap()
    track = TrackCitations(anthropic_tap=tap)
    response, result = await _response(_agent(path, tap, track), path is STREAM)
    first, uncited, mixed, last = _texts(response)
    assert first.citations == [
        Citation(
            [WebCitationSource('https://kb.example/tides', title='Tides KB', excerpts=['Tides follow the Moon.'])],
            anchor=ContentCitationAnchor(start=0, end=len(first.content)),
        )
    ]
    assert first.provider_name == 'anthropic'
    assert first.provider_details == {'citations': [json.loads(BODY.read_text())['content'][0]['citations'][0]]}
    assert uncited.citations is None and uncited.provider_details is None
    # Pydantic AI mapped the web citation and kept the raw list: the search result is recovered from that list.
    assert mixed.citations is not None
    assert [type(s).__name__ for c in mixed.citations for s in c.sources] == [
        'WebCitationSource',
        'DocumentCitationSource',
    ]
    assert last.citations == [
        Citation(
            [DocumentCitationSource(document_id='kb-9', title='Coasts', excerpts=['Bays amplify the range.'])],
            anchor=ContentCitationAnchor(start=0, end=len(last.content)),
        )
    ]
    run = track.report(result)
    assert run.problems == []
    answer = run.answer
    assert [s.url or s.document_id for s in answer.sources] == [
        'https://kb.example/tides',
        'https://moon.example/tides',
        'kb-7',
        'kb-9',
    ]
    # The citation with no source, title or cited text is kept for audit, with its reason.
    [raw] = answer.raw_only
    assert raw.data == {
        'type': 'search_result_location',
        'search_result_index': 3,
        'start_block_index': 0,
        'end_block_index': 1,
    }
    assert raw.part_index == response.parts.index(last)


async def test_stream_in_place_history_shows_the_recovered_citation():
    tap = AnthropicTap()
    agent = _agent(STREAM, tap, TrackCitations(anthropic_tap=tap))
    async with agent.run_stream('q') as result:
        await result.get_output()
    answer = CitedAnswer.from_result(result)
    assert answer.complete
    assert any(answer.text[s.start : s.end] == 'Tides follow the Moon.' for s in answer.spans)


def _tapped(blocks: list[dict[str, JsonValue]], response_id: str = 'msg_1') -> AnthropicTap:
    tap = AnthropicTap()
    tap._record(response_id, blocks)  # pyright: ignore[reportPrivateUsage]
    return tap


SEARCH: dict[str, JsonValue] = {
    'type': 'search_result_location',
    'source': 'kb-1',
    'title': 'KB',
    'cited_text': 'x',
    'search_result_index': 0,
    'start_block_index': 0,
    'end_block_index': 1,
}


def test_a_cited_block_that_matches_no_part_is_a_problem():
    blocks: list[dict[str, JsonValue]] = [
        {'text': 'A.', 'citations': [SEARCH]},
        {'text': 'edited elsewhere', 'citations': []},
        {'text': 'C.', 'citations': [SEARCH]},
    ]
    response = ModelResponse(parts=[TextPart('A.'), TextPart('B.'), TextPart('C.')], provider_response_id='msg_1')
    problems = recover_anthropic_in_place(response, _tapped(blocks))
    # Once one block does not match, the order is lost: the later block is not placed, even on equal text.
    assert [(p.code, p.detail) for p in problems] == [('unmapped_provider_citation', "'C.'")]
    first, _, last = _texts(response)
    assert first.citations is not None
    assert last.citations is None


def test_empty_blocks_may_have_no_part_and_unknown_responses_are_left_alone():
    blocks: list[dict[str, JsonValue]] = [{'text': '', 'citations': []}, {'text': 'A.', 'citations': [SEARCH]}]
    response = ModelResponse(parts=[TextPart('A.')], provider_response_id='msg_1')
    assert recover_anthropic_in_place(response, _tapped(blocks)) == []
    assert _texts(response)[0].citations is not None
    other = ModelResponse(parts=[TextPart('A.')], provider_response_id='msg_other')
    assert recover_anthropic_in_place(other, _tapped(blocks)) == []
    assert _texts(other)[0].citations is None
    bare: dict[str, JsonValue] = {'type': 'search_result_location', 'search_result_index': 0}
    unusable = ModelResponse(parts=[TextPart('A.')], provider_response_id='msg_1')
    assert recover_anthropic_in_place(unusable, _tapped([{'text': 'A.', 'citations': [bare]}])) == []
    part = _texts(unusable)[0]
    assert part.citations is None
    assert part.provider_details == {'citations': [bare]}  # kept raw: the answer lists it as raw-only
    assert [r.data for r in CitedAnswer.from_messages([unusable]).raw_only] == [bare]
    no_search = ModelResponse(parts=[TextPart('A.')], provider_response_id='msg_1')
    assert recover_anthropic_in_place(no_search, _tapped([{'text': 'A.', 'citations': [{'type': 'x'}]}])) == []
    assert _texts(no_search)[0].provider_details is None


async def test_tap_passes_other_traffic_through_and_reports_unreadable_bodies():
    tap = AnthropicTap(max_responses=1)
    replies = {
        '/v1/messages': (200, 'application/json', b'{not json'),
        '/v1/models': (200, 'application/json', json.dumps({'id': 'not-recorded'}).encode()),
        '/v1/other/messages': (200, 'text/plain', b'plain'),
        '/v1/bad/messages': (500, 'application/json', b'{"id": "error"}'),
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        status, content_type, body = replies[request.url.path]
        return httpx2.Response(status, headers={'content-type': content_type}, content=body)

    async with anthropic_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        for path, (_, _, body) in replies.items():
            response = await client.post(f'https://api.anthropic.com{path}', json={})
            assert response.content == body  # the SDK gets the bytes unchanged
        other = await client.post('https://example.com/v1/messages', json={})
        assert other.request.headers.get('accept-encoding') != 'identity'
    assert [p.code for p in tap.problems] == ['unreadable_raw_data']
    assert tap.text_blocks_for('not-recorded') is None
    assert tap.text_blocks_for('error') is None
    assert tap.text_blocks_for(None) is None


async def test_tap_reads_gzip_bodies_and_keeps_the_newest():
    tap = AnthropicTap(max_responses=1)
    bodies = [
        {'id': 'msg_a', 'content': [{'type': 'text', 'text': 'A', 'citations': [SEARCH]}]},
        {'id': 'msg_b', 'content': [{'type': 'tool_use'}, {'type': 'text', 'text': 'B'}, 'junk']},
    ]

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = bodies[int(request.url.params['n'])]
        return httpx2.Response(
            200,
            headers={'content-type': 'application/json', 'content-encoding': 'gzip'},
            stream=httpx2.ByteStream(gzip.compress(json.dumps(body).encode())),
        )

    async with anthropic_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        await client.post('https://api.anthropic.com/v1/messages?n=0', json={})
        assert tap.text_blocks_for('msg_a') == [{'text': 'A', 'citations': [SEARCH]}]
        await client.post('https://api.anthropic.com/v1/messages?n=1', json={})
    assert tap.text_blocks_for('msg_a') is None
    assert tap.text_blocks_for('msg_b') == [{'text': 'B', 'citations': []}]


async def test_tap_stream_with_odd_events():
    tap = AnthropicTap()
    events: list[object] = [
        [1],
        {'type': 'message_start', 'message': {'id': 'msg_s'}},
        {'type': 'content_block_start', 'index': 0, 'content_block': {'type': 'thinking'}},
        {'type': 'content_block_delta', 'index': 0, 'delta': {'type': 'thinking_delta', 'thinking': 'hm'}},
        {'type': 'content_block_start', 'index': 1, 'content_block': {'type': 'text', 'text': 'Hi', 'citations': None}},
        {'type': 'content_block_delta', 'index': 1, 'delta': {'type': 'signature_delta'}},
        {'type': 'content_block_delta', 'index': 1, 'delta': {'type': 'citations_delta', 'citation': SEARCH}},
        {'type': 'content_block_delta', 'index': 1, 'delta': {'type': 'text_delta', 'text': ' there'}},
        {'type': 'content_block_stop', 'index': 0},
        {'type': 'content_block_stop', 'index': 1},
        {'type': 'message_stop'},
    ]
    body = ''.join(f'data: {json.dumps(e)}\n\n' for e in events).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, stream=httpx2.ByteStream(body))

    client = anthropic_http_client(tap, transport=httpx2.MockTransport(handler))
    async with client, client.stream('POST', 'https://api.anthropic.com/v1/messages', json={}) as response:
        assert b''.join([chunk async for chunk in response.aiter_raw()]) == body
    assert tap.text_blocks_for('msg_s') == [{'text': 'Hi there', 'citations': [SEARCH]}]


async def test_tap_stream_in_an_unreadable_encoding_is_a_problem():
    tap = AnthropicTap()

    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {'content-type': 'text/event-stream', 'content-encoding': 'br'}
        return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(b'\x00'))

    client = anthropic_http_client(tap, transport=httpx2.MockTransport(handler))
    async with client, client.stream('POST', 'https://api.anthropic.com/v1/messages', json={}) as response:
        await response.aread()
    assert [p.code for p in tap.problems] == ['unreadable_raw_data']


def test_tap_arguments():
    with pytest.raises(UserError, match='max_responses'):
        AnthropicTap(max_responses=0)
    tap = AnthropicTap(hosts=['anthropic.internal'])
    assert tap.hosts == ('anthropic.internal',)
    tap._record(None, [])  # pyright: ignore[reportPrivateUsage]
    assert tap.text_blocks_for('') is None


# --- replay: recordings are served through the tap, as an application sets it up --------------------------------


@pytest.mark.parametrize('path', [BODY, STREAM], ids=['json', 'stream'])
async def test_replay_serves_anthropic_recordings_through_the_tap(path: Path):
    from pydantic_ai_citations._models import describe_model
    from pydantic_ai_citations._replay import TappedModel, anthropic_tap_for, cohere_tap_for, perplexity_tap_for
    from pydantic_ai_citations.testing import replay_recording

    model = replay_recording(path)
    assert isinstance(model, TappedModel) and isinstance(model.wrapped, AnthropicModel)
    assert describe_model(model).api == 'anthropic-messages'
    tap = anthropic_tap_for(model)
    assert isinstance(tap, AnthropicTap)
    assert cohere_tap_for(model) is None and perplexity_tap_for(model) is None
    assert anthropic_tap_for(replay_recording(path)) is not tap  # each model its own tap
    track = TrackCitations(anthropic_tap=tap)
    agent = Agent(model, model_settings={'max_tokens': 1024}, capabilities=[track])
    response, result = await _response(agent, path is STREAM)
    first = _texts(response)[0]
    assert first.citations is not None
    assert [s for c in first.citations for s in c.sources] == [
        WebCitationSource('https://kb.example/tides', title='Tides KB', excerpts=['Tides follow the Moon.'])
    ]
    assert track.report(result).problems == []


RUN_STREAM_PATHS: tuple[SeamPath, ...] = ('run_stream', 'stream_cited_run_stream')


@pytest.mark.parametrize('path', [BODY, STREAM], ids=['json', 'stream'])
async def test_seams_hold_on_replayed_search_result_locations(path: Path):
    from pydantic_ai_citations.testing import SEAM_PATHS, check_seams

    paths: list[SeamPath] = [p for p in SEAM_PATHS if p not in RUN_STREAM_PATHS]
    report = await check_seams(load_recording(path), paths=paths, max_cuts=2)
    report.assert_ok()


async def test_run_stream_answer_read_inside_the_block_holds_tap_citations():
    """Under `run_stream`, Pydantic AI calls `after_model_request` only when the `async with` block exits;
    `TrackCitations` recovers when the stream has been read to its end, so an answer read inside the block holds what
    only the tap saw."""
    from pydantic_ai_citations.testing import check_seams

    report = await check_seams(load_recording(STREAM), paths=list(RUN_STREAM_PATHS), max_cuts=0)
    report.assert_ok()


async def test_matrix_accounts_every_streamed_search_result_location():
    """Without the tap in replay, the streamed recording's three `search_result_location` citations were unaccounted."""
    from pydantic_ai_citations.matrix._probes import build_matrix

    matrix = await build_matrix(probes=False, recordings=[STREAM])
    assert matrix.cell('anthropic-messages', 'wire') == '100%'
    notes = matrix.to_dict()['rows']
    assert 'unaccounted' not in json.dumps(notes)
    assert matrix.cell('anthropic-messages', 'citations') != 'no'
