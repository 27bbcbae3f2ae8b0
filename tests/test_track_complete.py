"""One source of truth for completeness: an answer is complete only when the provider's own finishing signal arrived.

Real recorded streams are cut cleanly at event boundaries before their finishing event (Anthropic `message_delta`,
OpenAI Responses `response.completed`, Perplexity Sonar chat's `finish_reason` chunk) and replayed through Pydantic AI's
real model classes: every path (`TrackCitations.report`, `stream_cited`'s `FinalAnswer`, `CitedAnswer.from_result`)
must say `complete=False` with a `stream_incomplete` problem naming the missing signal.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pydantic_ai import Agent, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from pydantic_ai_citations import (
    CitedAnswer,
    FinalAnswer,
    PerplexityTap,
    TextChunk,
    TrackCitations,
    perplexity_http_client,
    stream_cited,
)
from pydantic_ai_citations._answer import finish_signal, incomplete_reason
from pydantic_ai_citations.testing import CitingModel, Recording, ScriptedCitation, load_recording

pytestmark = pytest.mark.anyio

C = 'pydantic-ai-cassettes/tests/models/cassettes'
STREAMS = {
    'anthropic-web-search': f'{C}/test_anthropic/test_anthropic_web_search_citations_stream.yaml',
    'anthropic-document': f'{C}/test_anthropic/test_anthropic_document_citations_stream.yaml',
    'openai-responses': f'{C}/test_openai/test_openai_responses_web_search_citations_stream.yaml',
    'perplexity-sonar': 'vercel-ai-fixtures/packages/perplexity/src/__fixtures__/perplexity-citations.chunks.txt',
}
FINISHING = re.compile(rb'"type":\s*"message_delta"|"type":\s*"response\.completed"|"finish_reason":\s*"')
SEPARATOR = re.compile(rb'\r?\n\r?\n')
CUTS = 8
"""Cuts per recording, spread over the events before the finishing one."""


def _cuts(recording: Recording) -> list[tuple[int, Recording]]:
    """The recording cut cleanly after `k` events, for `CUTS` values of `k` before the finishing event."""
    raw = recording.responses[0]
    events = [e for e in SEPARATOR.split(raw.body) if e.strip()]
    finish = next(i for i, e in enumerate(events) if FINISHING.search(e))
    assert finish > 2, 'the finishing event comes after some text'
    ks = sorted({max(1, round(finish * (j + 1) / CUTS)) for j in range(CUTS)})
    out: list[tuple[int, Recording]] = []
    for k in ks:
        body = b''.join(e + b'\n\n' for e in events[:k])
        out.append((k, dataclasses.replace(recording, responses=[dataclasses.replace(raw, body=body)])))
    return out


def _complete_recording(corpus: Path, name: str) -> Recording:
    recording = load_recording(corpus / STREAMS[name])
    assert recording.streamed
    return recording


def _assert_incomplete(answer: CitedAnswer, where: str) -> None:
    assert not answer.complete, where
    codes = [p.code for p in answer.problems]
    assert codes.count('stream_incomplete') == 1, (where, codes)


@pytest.mark.parametrize('name', list(STREAMS))
async def test_full_recording_is_complete(corpus: Path, name: str):
    recording = _complete_recording(corpus, name)
    track = TrackCitations()
    agent = Agent(recording.model(), capabilities=[track])
    async with agent.run_stream(recording.prompt or 'q', model_settings=recording.model_settings) as stream:
        await stream.get_output()
    run = track.report(stream)
    assert run.answer.complete
    assert 'stream_incomplete' not in [p.code for p in run.problems]
    assert CitedAnswer.from_result(stream).complete


@pytest.mark.parametrize('name', list(STREAMS))
async def test_cut_stream_is_incomplete_through_report(corpus: Path, name: str):
    recording = _complete_recording(corpus, name)
    for k, cut in _cuts(recording):
        track = TrackCitations()
        agent = Agent(cut.model(), capabilities=[track])
        run_id = f'cut-{name}-{k}'
        try:
            async with agent.run_stream(cut.prompt or 'q', model_settings=cut.model_settings, run_id=run_id) as stream:
                await stream.get_output()
        except Exception:  # a cut that leaves no text may fail the run: the report says so too
            run = track.report_run(run_id)
        else:
            run = track.report(stream)
            _assert_incomplete(CitedAnswer.from_result(stream), f'{name} cut after {k} events: from_result')
            _assert_incomplete(
                CitedAnswer.from_messages(stream.all_messages()), f'{name} cut after {k} events: from_messages'
            )
        _assert_incomplete(run.answer, f'{name} cut after {k} events: report')
        assert run.requests[-1].complete is False or not run.answer.complete


@pytest.mark.parametrize('via', ['events', 'run_stream'])
@pytest.mark.parametrize('name', list(STREAMS))
async def test_cut_stream_is_incomplete_through_stream_cited(corpus: Path, name: str, via: Any):
    recording = _complete_recording(corpus, name)
    for k, cut in _cuts(recording)[::2]:
        final: FinalAnswer | None = None
        text = ''
        try:
            async with stream_cited(
                Agent(cut.model()), cut.prompt or 'q', via=via, model_settings=cut.model_settings
            ) as stream:
                async for item in stream:
                    if isinstance(item, TextChunk):
                        text += item.text
                    else:
                        final = item
        except Exception:
            pass
        assert final is not None
        _assert_incomplete(final.answer, f'{name} cut after {k} events, via={via}')
        assert not final.complete


async def test_missing_signal_is_named():
    response = ModelResponse(parts=[TextPart('K2 is')], provider_name='anthropic')
    reason = incomplete_reason(response)
    assert reason is not None and 'message_delta.stop_reason' in reason
    response = ModelResponse(parts=[TextPart('K2 is')], provider_name='openai', finish_reason='stop')
    assert finish_signal(response) is None  # the Chat adapter writes 'stop' itself when none came
    reason = incomplete_reason(response)
    assert reason is not None and 'finish_reason' in reason
    done = ModelResponse(
        parts=[TextPart('K2.')], provider_name='anthropic', provider_details={'finish_reason': 'end_turn'}
    )
    assert incomplete_reason(done) is None
    assert incomplete_reason(ModelResponse(parts=[TextPart('K2.')], provider_name='xai', finish_reason='stop')) is None
    # A model whose adapter records no signal (FunctionModel, custom models) is judged by its state.
    assert incomplete_reason(ModelResponse(parts=[TextPart('K2.')])) is None
    assert incomplete_reason(ModelResponse(parts=[TextPart('K2.')], state='interrupted')) is not None


async def test_non_streamed_without_finish_reason_is_complete_when_seen_whole():
    """A non-streamed body cannot be cut: `TrackCitations` records that it arrived whole (Chat providers may omit
    `finish_reason`; the Chat adapter then writes 'stop' itself)."""

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('K2 is tall.')], provider_name='openai', finish_reason='stop')

    track = TrackCitations()
    result = await Agent(FunctionModel(answer), capabilities=[track]).run('q')
    assert track.report(result).answer.complete
    assert CitedAnswer.from_result(result).complete


async def test_run_stream_stopped_early_keeps_the_text_that_arrived():
    text = 'K2 is 8,611 m tall. It lies on the border of Pakistan and China.'
    model = CitingModel(
        text,
        [ScriptedCitation('K2 is 8,611 m tall.', [WebCitationSource('https://k2.example')])],
        style='anthropic',
        chunk_size=4,
    )
    track = TrackCitations()
    agent = Agent(model, capabilities=[track])
    async with agent.run_stream('q') as stream:
        async for _ in stream.stream_text(delta=True):
            break
    for answer in (CitedAnswer.from_result(stream), track.report(stream).answer):
        assert not answer.complete
        assert answer.text
        assert text.startswith(answer.text)


async def test_report_of_an_unknown_run_raises():
    track = TrackCitations()
    with pytest.raises(UserError, match="no record of run 'nope'"):
        track.report_run('nope')
    other = Agent(CitingModel('K2.', style='anthropic'))  # this agent does not have `track`
    result = await other.run('q')
    with pytest.raises(UserError, match='TrackCitations.of'):
        track.report(result)


async def test_report_is_released_once_taken_and_of_finds_the_instance():
    track = TrackCitations()
    agent = Agent(CitingModel('K2.', style='anthropic'), capabilities=[track])
    assert TrackCitations.of(agent) is track
    result = await agent.run('q')
    assert TrackCitations.of(agent).report(result).answer.text == 'K2.'
    with pytest.raises(UserError, match='already taken'):
        track.report(result)
    with pytest.raises(UserError, match='no `TrackCitations`'):
        TrackCitations.of(Agent(CitingModel('K2.', style='anthropic')))
    two = Agent(CitingModel('K2.', style='anthropic'), capabilities=[TrackCitations(), TrackCitations(id='b')])
    with pytest.raises(UserError, match='pass `id=`'):
        TrackCitations.of(two)
    assert TrackCitations.of(two, id='b').id == 'b'


async def test_of_finds_the_instance_of_an_agent_from_a_spec():
    agent = Agent.from_spec(
        {'model': 'test', 'capabilities': [{'TrackCitations': {}}]}, custom_capability_types=[TrackCitations]
    )
    result = await agent.run('q')
    assert TrackCitations.of(agent).report(result).answer.complete


async def test_failed_before_first_request_is_not_complete():
    def broken(messages: list[Any], info: AgentInfo) -> ModelResponse:
        raise RuntimeError('down')

    track = TrackCitations()
    with pytest.raises(RuntimeError):
        await Agent(FunctionModel(broken), capabilities=[track]).run('q', run_id='down')
    run = track.report_run('down')
    assert not run.answer.complete
    assert run.answer.text == ''


# -- Perplexity Agent API: the tap's verdict ----------------------------------------------------------------------

AGENT_STREAM = (
    Path(__file__).resolve().parents[1] / 'pydantic_ai_citations/matrix/fixtures/perplexity/agent-api-stream.sse'
)


def _perplexity_agent(tap: PerplexityTap, body: bytes, track: TrackCitations | None = None) -> Agent[None, str]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=body)

    client = perplexity_http_client(tap, transport=httpx2.MockTransport(handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai/v1', api_key='x', http_client=client)
    return Agent(OpenAIResponsesModel('sonar-pro', provider=provider), capabilities=[track] if track else [])


def _agent_stream_cut() -> bytes:
    events = [e for e in SEPARATOR.split(AGENT_STREAM.read_bytes()) if e.strip()]
    finish = next(i for i, e in enumerate(events) if b'response.completed' in e)
    return b''.join(e + b'\n\n' for e in events[:finish])


async def test_perplexity_agent_cut_before_completed_is_incomplete_everywhere():
    tap = PerplexityTap()
    track = TrackCitations(perplexity_tap=tap)
    agent = _perplexity_agent(tap, _agent_stream_cut(), track)
    async with agent.run_stream('What causes tides?') as stream:
        await stream.get_output()
    response = stream.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    collector = tap.collector_for(response.provider_response_id)
    assert collector is not None and not collector.completed
    _assert_incomplete(CitedAnswer.from_result(stream), 'from_result')
    _assert_incomplete(CitedAnswer.from_messages(stream.all_messages()), 'from_messages')
    _assert_incomplete(track.report(stream).answer, 'report')
    # the stored history carries the tap's verdict: a later reader sees it too
    stored = json.loads(json.dumps(response.metadata))
    assert stored['pydantic_ai_citations_finish']['complete'] is False

    tap = PerplexityTap()
    final: FinalAnswer | None = None
    async with stream_cited(_perplexity_agent(tap, _agent_stream_cut(), TrackCitations(perplexity_tap=tap)), 'q') as s:
        async for item in s:
            if isinstance(item, FinalAnswer):
                final = item
    assert final is not None
    _assert_incomplete(final.answer, 'stream_cited')


async def test_perplexity_agent_full_stream_is_complete():
    tap = PerplexityTap()
    track = TrackCitations(perplexity_tap=tap)
    agent = _perplexity_agent(tap, AGENT_STREAM.read_bytes(), track)
    async with agent.run_stream('What causes tides?') as stream:
        await stream.get_output()
    assert CitedAnswer.from_result(stream).complete
    assert track.report(stream).answer.complete


@pytest.mark.parametrize('name', list(STREAMS))
async def test_cut_stream_observation_is_incomplete_and_left_out_of_the_matrix(corpus: Path, name: str):
    from pydantic_ai_citations.matrix import CapabilityMatrix

    recording = _complete_recording(corpus, name)
    _, cut = _cuts(recording)[-1]
    matrix = CapabilityMatrix()
    track = TrackCitations(matrix=matrix)
    agent = Agent(cut.model(), capabilities=[track])
    async with agent.run_stream(cut.prompt or 'q', model_settings=cut.model_settings) as stream:
        await stream.get_output()
    assert track.report(stream).requests[-1].complete is False
    assert 'an incomplete observed run was left out' in matrix.to_json()
