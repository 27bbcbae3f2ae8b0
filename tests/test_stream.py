from __future__ import annotations

import json
import runpy
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from _scripted import ScriptedModel, Step
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    ModelMessage,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPartDelta,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.vercel_ai import VercelAIEventStream
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, SourceUrlChunk, TextEndChunk

from pydantic_ai_citations import CitedAnswer, FinalAnswer, TextChunk, render_markdown, stream_cited
from pydantic_ai_citations._stream import CitedStream, StreamItem, _Accumulator, _from_events
from pydantic_ai_citations.testing import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation, ScriptedStreamError
from pydantic_ai_citations.ui import (
    CITATIONS_DATA_TYPE,
    CITED_ANSWER_DATA_TYPE,
    CitedVercelAIAdapter,
    CitedVercelAIEventStream,
    cited_answer_chunk,
)

pytestmark = pytest.mark.anyio

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border', title='Border')
CITES = [ScriptedCitation('K2 is 8,611 m tall.', [WIKI]), ScriptedCitation('China–Pakistan border', [BORDER])]
VIAS: tuple[Literal['events', 'run_stream'], ...] = ('events', 'run_stream')


def citing(style: CitingStyle = 'google', **kwargs: Any) -> Agent[None, str]:
    return Agent(CitingModel(TEXT, CITES, style=style, **kwargs))


async def collect(stream: CitedStream) -> list[StreamItem]:
    return [item async for item in stream]


@pytest.mark.parametrize('via', VIAS)
@pytest.mark.parametrize(
    ('style', 'late'),
    [*((style, False) for style in CITING_STYLES), pytest.param('google', True, id='google-part-after-text')],
)
async def test_streamed_answer_equals_run_answer(style: CitingStyle, late: bool, via: Literal['events', 'run_stream']):
    async with stream_cited(citing(style, part_after_text=late), 'How tall is K2?', via=via) as stream:
        items = await collect(stream)
    *chunks, final = items
    assert isinstance(final, FinalAnswer)
    assert final.complete
    assert final.error is None
    assert all(isinstance(c, TextChunk) for c in chunks)
    assert ''.join(c.text for c in chunks if isinstance(c, TextChunk)) == final.answer.text
    expected = CitedAnswer.from_result(await citing(style, part_after_text=late).run('How tall is K2?'))
    assert render_markdown(final.answer) == render_markdown(expected)
    assert final.answer.spans == expected.spans
    assert final.answer.unanchored == expected.unanchored
    assert stream.snapshot() is final.answer


@pytest.mark.parametrize('via', VIAS)
@pytest.mark.parametrize('chunk_size', [1, 5])
@pytest.mark.parametrize(
    'text',
    [
        pytest.param('K2 is tall. \ue200cite\ue202turn0search0\ue201 End, China border.', id='marker-opens-a-part'),
        pytest.param('K2 is tall \ue200cite\ue202turn0search0\ue201China border, it is.', id='marker-ends-a-part'),
    ],
)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_streamed_text_equals_the_answer_around_a_removed_marker(
    style: CitingStyle, text: str, chunk_size: int, via: Literal['events', 'run_stream']
):
    """Consecutive text parts are cleaned as the one text the answer strips: the space before a removed marker goes
    or stays alike, wherever Anthropic's or Bedrock's part boundaries fall."""
    cites = [ScriptedCitation('K2 is tall', [WIKI]), ScriptedCitation('China border', [BORDER])]
    agent = Agent(CitingModel(text, cites, style=style, chunk_size=chunk_size))
    async with stream_cited(agent, 'q', via=via) as stream:
        *chunks, final = await collect(stream)
    assert isinstance(final, FinalAnswer)
    assert ''.join(c.text for c in chunks if isinstance(c, TextChunk)) == final.answer.text
    assert '\ue200' not in final.answer.text and '  ' not in final.answer.text
    if style in ('anthropic', 'bedrock', 'google'):
        assert [final.answer.span_text(s) for s in final.answer.spans] == ['K2 is tall', 'China border']


async def test_google_citations_arrive_after_part_end_and_are_included():
    agent = citing('google', part_after_text=True)
    order: list[str] = []
    async with agent.run_stream_events('q') as events:
        async for event in events:
            if isinstance(event, PartEndEvent) and event.index == 0:
                order.append('end-0')
            elif (
                isinstance(event, PartDeltaEvent)
                and event.index == 0
                and isinstance(event.delta, TextPartDelta)
                and event.delta.citations_delta
            ):
                order.append('citations-0')
    assert order == ['end-0', 'citations-0']  # the late delta this helper must keep listening for
    for via in VIAS:
        async with stream_cited(agent, 'q', via=via) as stream:
            final = (await collect(stream))[-1]
        assert isinstance(final, FinalAnswer)
        assert [(s.start, s.end, s.sources) for s in final.answer.spans] == [(0, 19, [1]), (35, 56, [2])]


@pytest.mark.parametrize('via', VIAS)
async def test_broken_stream_gives_incomplete_answer_then_raises(via: Literal['events', 'run_stream']):
    items: list[StreamItem] = []

    async def consume() -> None:
        async with stream_cited(citing('google', chunk_size=5, break_stream_after=3), 'q', via=via) as stream:
            async for item in stream:
                items.append(item)

    with pytest.raises(ScriptedStreamError):
        await consume()
    *chunks, final = items
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == ['K2 is', ' 8,61', '1 m t']
    assert isinstance(final, FinalAnswer)
    assert not final.complete
    assert not final.answer.complete
    assert isinstance(final.error, ScriptedStreamError)
    assert [p.code for p in final.answer.problems] == ['stream_incomplete']
    assert final.answer.text == 'K2 is 8,611 m t'
    assert final.answer.spans == []  # the citations never arrived


@pytest.mark.parametrize('via', VIAS)
async def test_consumer_closing_early_gets_incomplete_snapshot(via: Literal['events', 'run_stream']):
    async with stream_cited(citing('anthropic', chunk_size=4), 'q', via=via) as stream:
        async for item in stream:
            assert isinstance(item, TextChunk)
            break
    assert stream.final is None
    snapshot = stream.snapshot()
    assert not snapshot.complete
    assert [p.code for p in snapshot.problems] == ['stream_incomplete']
    assert TEXT.startswith(snapshot.text)
    assert snapshot.text


def test_response_left_incomplete_is_not_complete():
    """A response whose `state` is not `'complete'` (e.g. a provider stream that hit EOF) gives no complete answer."""
    for state in ('incomplete', 'interrupted'):
        response = ModelResponse(parts=[TextPart('K2 is')], state=state)
        answer = CitedAnswer.from_messages([response])
        assert not answer.complete
        assert [p.code for p in answer.problems] == ['stream_incomplete']
    assert CitedAnswer.from_messages([ModelResponse(parts=[TextPart('K2 is tall.')])]).complete


async def test_text_of_every_response_streams_and_final_answer_is_last_response():
    calls = 0

    async def stream_fn(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            yield 'Let me check. '
            yield {0: DeltaToolCall(name='lookup', json_args='{}', tool_call_id='c1')}
        else:
            yield 'K2 is 8,611 m.'

    agent = Agent(FunctionModel(stream_function=stream_fn))

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    async with stream_cited(agent, 'q') as stream:
        items = await collect(stream)
    chunks = [(i.text, i.response_index) for i in items if isinstance(i, TextChunk)]
    by_response = {r: ''.join(t for t, i in chunks if i == r) for _, r in chunks}
    assert by_response == {0: 'Let me check. ', 1: 'K2 is 8,611 m.'}
    assert [r for _, r in chunks] == sorted(r for _, r in chunks)  # in order
    final = items[-1]
    assert isinstance(final, FinalAnswer)
    assert final.answer.text == 'K2 is 8,611 m.'
    assert final.complete


async def test_misuse():
    from pydantic_ai.exceptions import UserError

    with pytest.raises(UserError, match="'sideways'"):
        async with stream_cited(citing(), 'q', via='sideways'):  # pyright: ignore[reportArgumentType]
            pass
    with pytest.raises(UserError, match=r'stream_cited: `agent` must be an agent \(`Agent`.*got None'):
        async with stream_cited(None, 'q'):  # pyright: ignore[reportArgumentType]
            pass
    result = await citing().run('q')
    with pytest.raises(UserError, match="`agent` must be an agent.*That is a run's result"):
        async with stream_cited(result, 'q'):  # pyright: ignore[reportArgumentType]
            pass
    for prompt, expected in (
        (5, r'^stream_cited: `user_prompt` must be a str, a list of `UserContent` or None, got 5\.$'),
        (result.all_messages(), r'got a list of messages: pass them as `message_history=`'),
    ):
        for via in ('events', 'run_stream'):
            with pytest.raises(UserError, match=expected):
                async with stream_cited(citing(), prompt, via=via):  # pyright: ignore[reportArgumentType]
                    pass
    async with stream_cited(citing(), 'q') as stream:
        await collect(stream)
        with pytest.raises(UserError, match='once'):
            await collect(stream)


# --------------------------------------------------------------------------------------------------------------------
# Vercel AI


async def vercel_chunks(event_stream: VercelAIEventStream[None, str], agent: Agent[None, str]) -> list[BaseChunk]:
    async with agent.run_stream_events('q') as events:
        return [chunk async for chunk in event_stream.transform_stream(events)]


def _types(chunks: Sequence[BaseChunk]) -> list[str]:
    return [str(getattr(chunk, 'type', '')) for chunk in chunks]


async def test_vercel_stock_stream_drops_google_late_citations():
    chunks = await vercel_chunks(VercelAIEventStream(), citing('google', part_after_text=True))
    text_end = next(c for c in chunks if isinstance(c, TextEndChunk))
    assert text_end.provider_metadata is None  # the gap: the citations came after this chunk
    assert not any(isinstance(c, SourceUrlChunk) for c in chunks)


async def test_vercel_google_late_citations_reach_the_ui():
    chunks = await vercel_chunks(CitedVercelAIEventStream(), citing('google', part_after_text=True))
    types = _types(chunks)
    assert types.index(CITATIONS_DATA_TYPE) > types.index('text-end')
    assert types.count(CITATIONS_DATA_TYPE) == 1
    text_end = next(c for c in chunks if isinstance(c, TextEndChunk))
    data = next(c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE)
    assert data.id == text_end.id
    assert data.data['text_id'] == text_end.id
    assert data.data['provider_name'] == 'google'
    assert [(c['anchor']['start'], c['anchor']['end'], c['sources'][0]['url']) for c in data.data['citations']] == [
        (0, 19, 'https://en.wikipedia.org/wiki/K2'),
        (35, 56, 'https://example.com/border'),
    ]
    urls = [c.url for c in chunks if isinstance(c, SourceUrlChunk)]
    assert urls == ['https://en.wikipedia.org/wiki/K2', 'https://example.com/border']
    # The wire encoding is valid Vercel AI SSE.
    encoded = CitedVercelAIEventStream().encode_event(data)
    assert encoded.startswith('data: ')
    assert json.loads(encoded[6:])['type'] == CITATIONS_DATA_TYPE


@pytest.mark.parametrize('style', ['anthropic', 'openai-responses', 'google', 'xai'])
async def test_vercel_in_time_citations_are_not_repeated(style: CitingStyle):
    """Citations that arrive before the text part ends are on `text-end` already: nothing extra is sent."""
    cited = await vercel_chunks(CitedVercelAIEventStream(), citing(style))
    stock = await vercel_chunks(VercelAIEventStream(), citing(style))
    assert CITATIONS_DATA_TYPE not in _types(cited)
    assert _types(cited) == _types(stock)


async def test_vercel_late_citation_for_earlier_part_of_merged_text():
    """Part 0 gets its citations while text part 1 is open: the stock `text-end` carries part 0 as it ended."""
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    script: list[Step] = [('text', 'a', 'K2 is tall. '), ('text', 'b', 'Very tall.'), ('cite', 'a', cite)]
    chunks = await vercel_chunks(CitedVercelAIEventStream(), Agent(ScriptedModel(script)))
    types = _types(chunks)
    assert types.count('text-start') == 1
    assert types.count('text-end') == 1
    assert types.index(CITATIONS_DATA_TYPE) == types.index('text-end') + 1
    data = next(c for c in chunks if isinstance(c, DataChunk))
    assert [(c['anchor']['start'], c['anchor']['end']) for c in data.data['citations']] == [(0, 2)]


async def test_vercel_adapter_uses_cited_stream():
    body = json.dumps(
        {
            'trigger': 'submit-message',
            'id': 'chat-1',
            'messages': [{'id': 'm1', 'role': 'user', 'parts': [{'type': 'text', 'text': 'How tall is K2?'}]}],
        }
    ).encode()
    agent = citing('google', part_after_text=True)
    adapter = CitedVercelAIAdapter(agent=agent, run_input=CitedVercelAIAdapter.build_run_input(body))
    assert isinstance(adapter.build_event_stream(), CitedVercelAIEventStream)

    async def on_complete(result: Any) -> AsyncIterator[BaseChunk]:
        yield cited_answer_chunk(result, redact=True)

    chunks = [chunk async for chunk in adapter.run_stream(on_complete=on_complete)]
    types = _types(chunks)
    assert CITATIONS_DATA_TYPE in types
    assert CITED_ANSWER_DATA_TYPE in types
    answer_chunk = next(c for c in chunks if isinstance(c, DataChunk) and c.type == CITED_ANSWER_DATA_TYPE)
    answer = CitedAnswer.from_json(json.dumps(answer_chunk.data))
    assert answer.text == TEXT
    assert len(answer.spans) == 2
    assert answer.complete


def test_example_stream_to_ui_runs(capsys: pytest.CaptureFixture[str]):
    example = Path(__file__).resolve().parents[1] / 'examples' / 'stream_to_ui.py'
    runpy.run_path(str(example), run_name='__main__')
    out = capsys.readouterr().out
    assert 'final (complete=True)' in out
    assert 'final (complete=False)' in out
    assert '"type":"data-pydantic-ai-citations"' in out


@pytest.mark.parametrize('via', VIAS)
async def test_stream_failing_before_any_text(via: Literal['events', 'run_stream']):
    items: list[StreamItem] = []

    async def consume() -> None:
        async with stream_cited(citing('anthropic', break_stream_after=0), 'q', via=via) as stream:
            async for item in stream:
                items.append(item)

    with pytest.raises(ScriptedStreamError):
        await consume()
    assert len(items) == 1
    final = items[0]
    assert isinstance(final, FinalAnswer)
    assert not final.complete
    assert final.answer.text == ''
    assert [p.code for p in final.answer.problems] == ['stream_incomplete']


async def test_vercel_multi_step_run_keeps_late_citation_tracking_per_response():
    """Part indexes start over in each model response: the stream's own bookkeeping must too."""
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    first: list[Step] = [('text', 't', 'Checking. '), ('tool', 'c', 'lookup')]
    agent = Agent(
        ScriptedModel([('text', 'a', 'K2 is tall. '), ('text', 'b', 'Very.'), ('cite', 'a', cite)], first=first)
    )

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    chunks = await vercel_chunks(CitedVercelAIEventStream(), agent)
    data = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert len(data) == 1
    text_ends = [c for c in chunks if isinstance(c, TextEndChunk)]
    assert data[0].id == text_ends[-1].id


async def test_events_ending_without_result_are_incomplete():
    async def no_result() -> AsyncIterator[object]:
        yield PartStartEventFactory.text('K2 is')

    acc = _Accumulator()
    items = [item async for item in _from_events(no_result(), acc)]
    final = items[-1]
    assert isinstance(final, FinalAnswer)
    assert not final.complete
    assert final.answer.text == 'K2 is'


async def test_cited_answer_chunk_unredacted():
    result = await citing('anthropic').run('q')
    chunk = cited_answer_chunk(result)
    assert chunk.type == CITED_ANSWER_DATA_TYPE
    assert CitedAnswer.from_json(json.dumps(chunk.data)) == CitedAnswer.from_result(result)


class PartStartEventFactory:
    @staticmethod
    def text(content: str) -> PartStartEvent:
        return PartStartEvent(index=0, part=TextPart(content))


MARKER = '\ue200cite\ue202turn0search0\ue201'


@pytest.mark.parametrize('via', VIAS)
@pytest.mark.parametrize(
    ('script', 'text'),
    [
        pytest.param(
            [('text', 'a', 'K2 is tall '), ('think', 't', 'hm'), ('text', 'b', f'{MARKER}. More')],
            'K2 is tall. More',
            id='space-before-a-marker-across-thinking',
        ),
        pytest.param(
            [('text', 'a', 'K2 is \ue200cite'), ('think', 't', 'hm'), ('text', 'b', '\ue202turn0\ue201 tall.')],
            'K2 is tall.',
            id='marker-split-across-thinking',
        ),
    ],
)
async def test_text_parts_joined_across_other_parts_stream_as_the_answer(
    script: list[Step], text: str, via: Literal['events', 'run_stream']
):
    """The answer joins a response's text parts directly, thinking parts between them or not (as Pydantic AI's text
    output does): the stream cleans them as that one text (it showed 'K2 is tall . More' and the id 'turn0')."""
    async with stream_cited(Agent(ScriptedModel(script)), 'q', via=via) as stream:
        *chunks, final = await collect(stream)
    assert isinstance(final, FinalAnswer)
    assert ''.join(c.text for c in chunks if isinstance(c, TextChunk)) == final.answer.text
    assert final.answer.text == text
