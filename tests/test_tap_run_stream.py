"""Taps under `agent.run_stream`: the answer read inside the `async with` block holds what only the tap saw.

Pydantic AI calls `after_model_request` only when the block is left, so `TrackCitations` recovers as soon as the event
stream has been read to its end, in place on the parts the streamed response hands over (`StreamedResponse.get()`
builds a new `ModelResponse` each time, from the very part objects). Each tap kind with a streamed wire body is run
through every way of reading the stream; the answer inside the block, the one after it, `track.report`, the UI
adapters and a second recovery all agree, with no citation lost or counted twice.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

import httpx
import httpx2
import pytest
from ag_ui.core import BaseEvent, CustomEvent
from pydantic import JsonValue
from pydantic_ai import Agent, ModelResponse, RunContext, TextPart
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, TextEndChunk

from pydantic_ai_citations import (
    AnthropicTap,
    CitedAnswer,
    CohereTap,
    FinalAnswer,
    MistralTap,
    PerplexityTap,
    TrackCitations,
    cohere_http_client,
    mistral_http_client,
    perplexity_http_client,
    stream_cited,
)
from pydantic_ai_citations._recover import recover_in_place  # a second recovery, tested on purpose
from pydantic_ai_citations.testing import replay_recording
from pydantic_ai_citations.ui import (
    CITATIONS_DATA_TYPE,
    CITATIONS_EVENT_NAME,
    CitedAGUIEventStream,
    CitedVercelAIEventStream,
)

pytestmark = pytest.mark.anyio

Capability = AbstractCapability[Any]

HERE = Path(__file__).parent
ANTHROPIC_STREAM = HERE / 'data' / 'anthropic-search-result-location.chunks.txt'
PERPLEXITY_STREAM = HERE.parent / 'pydantic_ai_citations/matrix/fixtures/perplexity/agent-api-stream.sse'

# -- one streamed wire body per tap kind --------------------------------------------------------------------------

COHERE_TEXT = 'Paris is sunny. It is 22C.'


def _cohere_citation(start: int, end: int, text: str) -> dict[str, JsonValue]:
    source: dict[str, JsonValue] = {
        'type': 'document',
        'id': 'doc:1',
        'document': {'id': 'doc:1', 'text': 'Paris: 22C'},
    }
    return {'start': start, 'end': end, 'text': text, 'sources': [source], 'type': 'TEXT_CONTENT'}


COHERE_EVENTS: list[dict[str, JsonValue]] = [
    {'type': 'message-start', 'id': 'co-stream-1', 'delta': {'message': {'role': 'assistant'}}},
    {'type': 'content-start', 'index': 0, 'delta': {'message': {'content': {'type': 'text', 'text': ''}}}},
    {'type': 'content-delta', 'index': 0, 'delta': {'message': {'content': {'text': 'Paris is sunny.'}}}},
    {'type': 'content-delta', 'index': 0, 'delta': {'message': {'content': {'text': ' It is 22C.'}}}},
    {'type': 'citation-start', 'index': 0, 'delta': {'message': {'citations': _cohere_citation(0, 5, 'Paris')}}},
    {'type': 'citation-end', 'index': 0},
    {'type': 'citation-start', 'index': 1, 'delta': {'message': {'citations': _cohere_citation(22, 25, '22C')}}},
    {'type': 'citation-end', 'index': 1},
    {'type': 'content-end', 'index': 0},
    {
        'type': 'message-end',
        'delta': {
            'finish_reason': 'COMPLETE',
            'usage': {
                'billed_units': {'input_tokens': 1, 'output_tokens': 1},
                'tokens': {'input_tokens': 1, 'output_tokens': 1},
            },
        },
    },
]
COHERE_STREAM = ''.join(f'event: {e["type"]}\ndata: {json.dumps(e)}\n\n' for e in COHERE_EVENTS).encode()

MISTRAL_REFS: list[dict[str, JsonValue]] = [
    {'type': 'reference', 'reference_ids': [0]},
    {'type': 'reference', 'reference_ids': [1, 'doc-2']},
]


def _mistral_chunk(content: JsonValue, finish: str | None = None) -> str:
    chunk: dict[str, JsonValue] = {
        'id': 'cmpl-ref-stream',
        'object': 'chat.completion.chunk',
        'created': 1700000000,
        'model': 'mistral-large-latest',
        'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': content}, 'finish_reason': finish}],
    }
    if finish:
        chunk['usage'] = {'prompt_tokens': 10, 'completion_tokens': 12, 'total_tokens': 22}
    return f'data: {json.dumps(chunk)}\n\n'


MISTRAL_STREAM = (
    _mistral_chunk('')
    + _mistral_chunk([{'type': 'text', 'text': 'Tides follow the Moon.'}])
    + _mistral_chunk([MISTRAL_REFS[0]])
    + _mistral_chunk(' Bays amplify the range.')
    + _mistral_chunk([MISTRAL_REFS[1]])
    + _mistral_chunk(None, 'stop')
    + 'data: [DONE]\n\n'
).encode()


def _anthropic(*extra: Capability) -> tuple[Agent[None, str], TrackCitations]:
    from pydantic_ai_citations._replay import anthropic_tap_for

    model = replay_recording(ANTHROPIC_STREAM)
    tap = anthropic_tap_for(model)
    assert isinstance(tap, AnthropicTap)
    track = TrackCitations(anthropic_tap=tap)
    return Agent(model, model_settings={'max_tokens': 1024}, capabilities=[track, *extra]), track


def _cohere(*extra: Capability) -> tuple[Agent[None, str], TrackCitations]:
    from cohere import AsyncClientV2
    from pydantic_ai.models.cohere import CohereModel
    from pydantic_ai.providers.cohere import CohereProvider

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={'content-type': 'text/event-stream'}, content=COHERE_STREAM)

    tap = CohereTap()
    client = AsyncClientV2(
        api_key='x',
        base_url='https://api.cohere.com',
        httpx_client=cohere_http_client(tap, transport=httpx.MockTransport(handler)),
    )
    track = TrackCitations(cohere_tap=tap)
    model = CohereModel('command-r', provider=CohereProvider(cohere_client=client))
    return Agent(model, capabilities=[track, *extra]), track


def _mistral(*extra: Capability) -> tuple[Agent[None, str], TrackCitations]:
    from mistralai.client import Mistral
    from pydantic_ai.models.mistral import MistralModel
    from pydantic_ai.providers.mistral import MistralProvider

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=MISTRAL_STREAM)

    tap = MistralTap()
    transport = httpx2.MockTransport(handler)
    client = Mistral(
        api_key='x',
        server_url='https://api.mistral.ai',
        client=httpx2.Client(transport=transport),
        async_client=mistral_http_client(tap, transport=transport),
    )
    track = TrackCitations(mistral_tap=tap)
    model = MistralModel('mistral-large-latest', provider=MistralProvider(mistral_client=client))
    return Agent(model, capabilities=[track, *extra]), track


def _perplexity(*extra: Capability) -> tuple[Agent[None, str], TrackCitations]:
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, headers={'content-type': 'text/event-stream'}, content=PERPLEXITY_STREAM.read_bytes()
        )

    tap = PerplexityTap()
    client = perplexity_http_client(tap, transport=httpx2.MockTransport(handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai/v1', api_key='x', http_client=client)
    track = TrackCitations(perplexity_tap=tap)
    return Agent(OpenAIResponsesModel('sonar-pro', provider=provider), capabilities=[track, *extra]), track


@dataclass(frozen=True)
class TapKind:
    build: Callable[..., tuple[Agent[None, str], TrackCitations]]
    """The agent (its `TrackCitations` with the tap, then any capabilities given) and its `TrackCitations`."""
    check: Callable[[CitedAnswer], None]
    """Asserts that the answer holds what only the tap saw."""


def _anthropic_check(answer: CitedAnswer) -> None:
    assert {s.url or s.document_id for s in answer.sources} >= {'https://kb.example/tides', 'kb-9'}
    assert any(answer.text[s.start : s.end] == 'Tides follow the Moon.' for s in answer.spans)
    assert [r.data.get('search_result_index') for r in answer.raw_only if isinstance(r.data, dict)] == [3]


def _cohere_check(answer: CitedAnswer) -> None:
    assert [answer.text[s.start : s.end] for s in answer.spans] == ['Paris', '22C']


def _mistral_check(answer: CitedAnswer) -> None:
    offsets = [22, len('Tides follow the Moon. Bays amplify the range.')]
    assert [r.data for r in answer.raw_only] == [
        {**ref, 'offset': o} for ref, o in zip(MISTRAL_REFS, offsets, strict=True)
    ]


def _perplexity_check(answer: CitedAnswer) -> None:
    assert [answer.text[s.start : s.end] for s in answer.spans] == ['[1]', '[2]', '[3]', '[2]']
    assert [s.url for s in answer.sources] == [
        'https://tides.example.org/moon-and-tides',
        'https://ocean.example.net/spring-neap',
        'https://coast.example.com/bay-of-fundy',
    ]


TAPS = {
    'anthropic': TapKind(_anthropic, _anthropic_check),
    'cohere': TapKind(_cohere, _cohere_check),
    'mistral': TapKind(_mistral, _mistral_check),
    'perplexity': TapKind(_perplexity, _perplexity_check),
}


async def _drain(iterator: Any) -> None:
    async for _ in iterator:
        pass


READS: dict[str, Callable[[Any], Any]] = {
    'get_output': lambda result: result.get_output(),
    'stream_output': lambda result: _drain(result.stream_output(debounce_by=None)),
    'stream_text': lambda result: _drain(result.stream_text(debounce_by=None)),
    'stream_text_delta': lambda result: _drain(result.stream_text(delta=True, debounce_by=0.01)),
    'stream_response': lambda result: _drain(result.stream_response(debounce_by=None)),
}


def _text_parts(response: ModelResponse) -> list[tuple[object, object]]:
    return [(p.citations, p.provider_details) for p in response.parts if isinstance(p, TextPart)]


@pytest.mark.parametrize('read', list(READS))
@pytest.mark.parametrize('kind', list(TAPS))
async def test_answer_read_inside_the_block_holds_the_tap_citations(kind: str, read: str):
    agent, track = TAPS[kind].build()
    async with agent.run_stream('What moves the tides?') as result:
        await READS[read](result)
        inside = CitedAnswer.from_result(result)
        response = result.response  # a new `ModelResponse` built from the very part objects
        inside_parts = copy.deepcopy(_text_parts(response))
        report = track.report(result)  # taken inside the block, before `after_model_request` ran
    TAPS[kind].check(inside)
    TAPS[kind].check(CitedAnswer.from_messages([response]))
    assert inside.complete
    assert report.answer.spans == inside.spans and report.answer.raw_only == inside.raw_only
    assert report.answer.complete and all(r.complete for r in report.requests)
    assert 'stream_incomplete' not in [p.code for p in report.problems]
    # `after_model_request` ran when the block was left: it found the parts recovered and added nothing.
    after = CitedAnswer.from_result(result)
    assert after == inside
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    assert _text_parts(last) == inside_parts
    assert _text_parts(response) == inside_parts


@pytest.mark.parametrize('via', ['run_stream', 'events'])
@pytest.mark.parametrize('kind', list(TAPS))
async def test_stream_cited_final_answer_holds_the_tap_citations(kind: str, via: Literal['run_stream', 'events']):
    agent, _ = TAPS[kind].build()
    final: list[FinalAnswer] = []
    async with stream_cited(agent, 'What moves the tides?', via=via) as stream:
        final = [item async for item in stream if isinstance(item, FinalAnswer)]
    [item] = final
    TAPS[kind].check(item.answer)
    assert item.complete


@pytest.mark.parametrize('kind', list(TAPS))
async def test_a_second_recovery_adds_nothing(kind: str):
    agent, track = TAPS[kind].build()
    async with agent.run_stream('What moves the tides?') as result:
        await result.get_output()
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    for response in (last, copy.deepcopy(last)):  # the parts recovered, and copies of them
        before = copy.deepcopy(response)
        recovery = recover_in_place(
            response,
            api='other',
            tap=track.perplexity_tap,
            cohere_tap=track.cohere_tap,
            anthropic_tap=track.anthropic_tap,
            mistral_tap=track.mistral_tap,
        )
        assert recovery.added == {}
        assert response == before


@dataclass
class _RebuildResponse(AbstractCapability[Any]):
    """Hands on a copy of each response with new part objects that differ (a changed `id`), as a capability may."""

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        parts = [replace(p, id='rebuilt') if isinstance(p, TextPart) else p for p in response.parts]
        return replace(response, parts=parts)


@pytest.mark.parametrize('kind', list(TAPS))
async def test_a_response_rebuilt_after_the_stream_is_recovered_again_without_duplicates(kind: str):
    agent, _ = TAPS[kind].build()
    async with agent.run_stream('What moves the tides?') as streamed:
        await streamed.get_output()
    expected = CitedAnswer.from_result(streamed)
    # `TrackCitations` runs after `_RebuildResponse` (Pydantic AI calls `after_model_request` in reverse order), so
    # it gets parts it did not recover at the stream's end: it recovers them again, and adds nothing they hold.
    agent, track = TAPS[kind].build(_RebuildResponse())
    async with agent.iter('What moves the tides?') as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    await _drain(stream)
    assert run.result is not None
    answer = CitedAnswer.from_result(run)
    TAPS[kind].check(answer)
    assert answer.spans == expected.spans
    assert answer.raw_only == expected.raw_only
    last = run.result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    for part in last.parts:
        if isinstance(part, TextPart):
            assert part.id == 'rebuilt'
            citations = [repr(c) for c in part.citations or []]
            assert len(citations) == len(set(citations))
    assert track.report(run.result).answer.spans == expected.spans


# -- the UI adapters send what the tap saw -------------------------------------------------------------------------


def _cited_ids(citations: list[Any]) -> set[str]:
    return {s.get('url') or s.get('document_id') for c in citations for s in c['sources']}


def _vercel_sources(chunks: list[BaseChunk]) -> set[str]:
    last: dict[str, list[Any]] = {}
    for chunk in chunks:
        if isinstance(chunk, TextEndChunk) and chunk.provider_metadata:
            last[chunk.id] = chunk.provider_metadata['pydantic_ai'].get('citations', [])
        elif isinstance(chunk, DataChunk) and chunk.type == CITATIONS_DATA_TYPE:
            data = cast(dict[str, Any], chunk.data)
            last[data['text_id']] = data['citations']
    return {i for citations in last.values() for i in _cited_ids(citations)}


def _agui_sources(events: list[BaseEvent]) -> set[str]:
    last = {e.value['message_id']: e.value['citations'] for e in events if isinstance(e, CustomEvent)}
    assert all(isinstance(e, CustomEvent) and e.name == CITATIONS_EVENT_NAME for e in events if e.type == 'CUSTOM')
    return {i for citations in last.values() for i in _cited_ids(citations)}


@pytest.mark.parametrize('kind', ['anthropic', 'cohere', 'perplexity'])  # (Mistral's are raw-only: never shown)
@pytest.mark.parametrize('ui', ['vercel', 'ag-ui'])
async def test_ui_adapters_send_the_tap_citations(kind: str, ui: str):
    agent, _ = TAPS[kind].build()
    results: list[Any] = []

    async def on_complete(result: Any) -> Any:
        results.append(result)
        return None

    async with agent.run_stream_events('What moves the tides?') as events:
        if ui == 'vercel':
            stream = CitedVercelAIEventStream[Any, str]().transform_stream(events, on_complete=on_complete)
            sent = _vercel_sources([chunk async for chunk in stream])
        else:
            agui = CitedAGUIEventStream[Any, str]().transform_stream(events, on_complete=on_complete)
            sent = _agui_sources([event async for event in agui])
    answer = CitedAnswer.from_result(results[0])
    TAPS[kind].check(answer)
    assert sent == {s.url or s.document_id for s in answer.sources}


async def test_inside_a_fallback_model_the_serving_model_decides_recovery_at_the_stream_end():
    """Without a tap, a Mistral answer says reference chunks cannot be seen, also when a `FallbackModel` served it."""
    from pydantic_ai.models.fallback import FallbackModel

    agent, _ = _mistral()
    track = TrackCitations()
    fallback = Agent(FallbackModel(agent.model), capabilities=[track])  # pyright: ignore[reportArgumentType]
    async with fallback.run_stream('What moves the tides?') as result:
        await result.get_output()
        problems = track.report(result).problems
    assert [p.code for p in problems] == ['unmapped_provider_citation']
    assert 'mistral_tap' in problems[0].message


@pytest.mark.parametrize('kind', list(TAPS))
async def test_without_observe_stream_end_recovery_waits_for_the_end_of_the_block(kind: str):
    """`observe_stream_end=False` (durable execution) leaves no stream to recover from early: after the block, the
    answer holds the tap citations all the same."""
    agent, track = TAPS[kind].build()
    bare = replace(track, observe_stream_end=False)
    agent = Agent(agent.model, capabilities=[bare])  # pyright: ignore[reportArgumentType]
    async with agent.run_stream('What moves the tides?', model_settings={'max_tokens': 1024}) as result:
        await result.get_output()
    TAPS[kind].check(CitedAnswer.from_result(result))
