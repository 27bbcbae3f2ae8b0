"""Stream an answer to a UI, then hand over its citations once the response has really completed.

Providers send citations in a text-less delta, and several (Google, OpenAI Chat, OpenRouter, xAI) send it at the end
of the whole response: after the cited part's `PartEndEvent` when another part started in between. A consumer must
keep applying deltas to parts that have already ended, and must not treat the text as final until the run is over.

- `stream_cited(agent, prompt)` yields `TextChunk`s as text arrives and then exactly one `FinalAnswer`: a complete
  `CitedAnswer` built from the run's messages when the run finished and its last response is `'complete'`;
  otherwise an answer built from what arrived, with `complete=False` and a `stream_incomplete` problem.
  **Errors:** if the run raises, the incomplete `FinalAnswer` (carrying the exception as `error`) is yielded first
  and the exception is then re-raised from the iterator, so an `async for` loop sees both. A consumer that stops
  iterating (or leaves the `async with` early) gets `CitedStream.snapshot()`, which is never marked complete.
- `CitedVercelAIEventStream` / `CitedVercelAIAdapter` close a gap in Pydantic AI's Vercel AI adapter: it puts
  citations on the `text-end` chunk only, from the part as it was at `PartEndEvent`, and ignores deltas without
  text, so late citations never reach the UI stream. The subclass applies those deltas itself and sends the late
  citations as a `data-pydantic-ai-citations` chunk (keyed by the UI text part id, so a later update replaces it)
  plus `source-url` chunks for web sources not yet listed. `dump_messages` of the final history already has them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import Citation, ModelMessage, ModelResponse, ModelResponsePart, TextPart, WebCitationSource
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPartDelta,
    UserContent,
)
from pydantic_ai.output import OutputDataT
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import UIEventStream
from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
from pydantic_ai.ui.vercel_ai.request_types import RequestData
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, SourceUrlChunk

from ._answer import CitedAnswer, cited_answer_ta, last_response, shift_citation
from ._redact import redact as _redact

__all__ = (
    'CITATIONS_DATA_TYPE',
    'CITED_ANSWER_DATA_TYPE',
    'CitedStream',
    'CitedVercelAIAdapter',
    'CitedVercelAIEventStream',
    'FinalAnswer',
    'StreamItem',
    'TextChunk',
    'cited_answer_chunk',
    'stream_cited',
)

CITATIONS_DATA_TYPE = 'data-pydantic-ai-citations'
"""Vercel AI data chunk type carrying citations that arrived after their text part ended."""
CITED_ANSWER_DATA_TYPE = 'data-cited-answer'
"""Vercel AI data chunk type carrying a whole `CitedAnswer` (see `cited_answer_chunk`)."""

_citations_ta: TypeAdapter[list[Citation]] = TypeAdapter(list[Citation])


@dataclass(frozen=True)
class TextChunk:
    """Text as it arrives. Show it, but replace it with `FinalAnswer.answer.text` at the end."""

    text: str
    """The new text."""
    _: KW_ONLY
    part_index: int
    """Index of the text part in its response."""
    response_index: int = 0
    """Which model response of the run this is (0 first; a run with tool calls has several). Always 0 with
    `via='run_stream'`, which streams only the response that produces the output."""


@dataclass(frozen=True)
class FinalAnswer:
    """The last item of a cited stream: the answer with its citations."""

    answer: CitedAnswer
    """The answer. `answer.complete` is `False` (with a `stream_incomplete` problem) when the run did not finish."""
    _: KW_ONLY
    error: BaseException | None = field(default=None, compare=False)
    """The exception that broke the stream; it is re-raised after this item."""

    @property
    def complete(self) -> bool:
        """Whether the response really completed."""
        return self.answer.complete


StreamItem = TextChunk | FinalAnswer
"""What a `CitedStream` yields."""


class _Accumulator:
    """Rebuilds the response being streamed from events, applying deltas to parts that have already ended."""

    def __init__(self) -> None:
        self.parts: dict[int, ModelResponsePart] = {}
        self.ended: set[int] = set()
        self.response_index = -1

    def feed(self, event: AgentStreamEvent) -> list[TextChunk]:
        if isinstance(event, PartStartEvent):
            if self.response_index < 0 or (event.index == 0 and 0 in self.ended):
                self.parts.clear()
                self.ended.clear()
                self.response_index += 1
            self.parts[event.index] = event.part
            self.ended.discard(event.index)
            if isinstance(event.part, TextPart) and event.part.content:
                return [TextChunk(event.part.content, part_index=event.index, response_index=self.response_index)]
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            part = self.parts.get(event.index)
            if isinstance(part, TextPart):
                # Applied even after the part's end: late citations come this way.
                self.parts[event.index] = event.delta.apply(part)
                if event.delta.content_delta:
                    return [
                        TextChunk(event.delta.content_delta, part_index=event.index, response_index=self.response_index)
                    ]
        elif isinstance(event, PartEndEvent):
            self.parts[event.index] = event.part
            self.ended.add(event.index)
        return []

    def response(self) -> ModelResponse | None:
        if not self.parts:
            return None
        return ModelResponse(parts=[self.parts[i] for i in sorted(self.parts)], state='incomplete')


class CitedStream:
    """The items of a cited run: `TextChunk`s, then one `FinalAnswer`. Iterate it once."""

    def __init__(self, items: AsyncIterator[StreamItem], snapshot: Callable[[], CitedAnswer]) -> None:
        self._items = items
        self._snapshot = snapshot
        self._final: FinalAnswer | None = None
        self._started = False

    def __aiter__(self) -> AsyncIterator[StreamItem]:
        if self._started:
            raise UserError('A `CitedStream` can be iterated only once.')
        self._started = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamItem]:
        async for item in self._items:
            if isinstance(item, FinalAnswer):
                self._final = item
            yield item

    @property
    def final(self) -> FinalAnswer | None:
        """The `FinalAnswer`, once it has been yielded."""
        return self._final

    def snapshot(self) -> CitedAnswer:
        """The final answer if it has arrived, otherwise what arrived so far (`complete=False`, `stream_incomplete`)."""
        if self._final is not None:
            return self._final.answer
        return self._snapshot()

    async def aclose(self) -> None:
        """Stop the underlying run (done for you when the `stream_cited` context exits)."""
        aclose = getattr(self._items, 'aclose', None)
        if aclose is not None:
            await aclose()


def _incomplete(response: ModelResponse | None) -> CitedAnswer:
    return CitedAnswer.from_messages([response] if response is not None else [], complete=False)


def _completed(messages: Sequence[ModelMessage]) -> CitedAnswer:
    last = last_response(messages)
    # A provider that hit EOF without its terminal event leaves the response `'incomplete'`: not a finished answer.
    return CitedAnswer.from_messages(messages, complete=last is not None and last[1].state == 'complete')


async def _from_events(events: AsyncIterator[object], acc: _Accumulator) -> AsyncGenerator[StreamItem]:
    try:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                result = cast(AgentRunResultEvent[object], event).result
                yield FinalAnswer(_completed(result.all_messages()))
                return
            for chunk in acc.feed(cast(AgentStreamEvent, event)):
                yield chunk
    except Exception as exc:
        yield FinalAnswer(_incomplete(acc.response()), error=exc)
        raise
    # The events ended without a run result: the run did not finish.
    yield FinalAnswer(_incomplete(acc.response()))


async def _failed(exc: Exception) -> AsyncGenerator[StreamItem]:
    yield FinalAnswer(_incomplete(None), error=exc)
    raise exc


@dataclass
class _Snapshots:
    last: ModelResponse | None = None
    emitted: dict[int, int] = field(default_factory=dict[int, int])


async def _from_run_stream(result: Any, snaps: _Snapshots) -> AsyncGenerator[StreamItem]:
    try:
        async for response in cast(AsyncIterator[ModelResponse], result.stream_response(debounce_by=None)):
            snaps.last = response
            for index, part in enumerate(response.parts):
                if isinstance(part, TextPart):
                    done = snaps.emitted.get(index, 0)
                    if len(part.content) > done:
                        snaps.emitted[index] = len(part.content)
                        yield TextChunk(part.content[done:], part_index=index)
        messages = cast(list[ModelMessage], result.all_messages())
        if not result.is_complete:
            yield FinalAnswer(_incomplete(snaps.last))
            return
        yield FinalAnswer(_completed(messages))
    except Exception as exc:
        yield FinalAnswer(_incomplete(snaps.last), error=exc)
        raise


@asynccontextmanager
async def stream_cited(
    agent: AbstractAgent[AgentDepsT, OutputDataT],
    user_prompt: str | Sequence[UserContent] | None = None,
    *,
    via: Literal['events', 'run_stream'] = 'events',
    **run_kwargs: object,
) -> AsyncGenerator[CitedStream]:
    """Run an agent and stream its text, then its answer with citations once the response has really completed.

    ```python
    async with stream_cited(agent, 'How tall is K2?') as stream:
        async for item in stream:
            if isinstance(item, TextChunk):
                ui.append(item.text)
            else:
                ui.show(render_html(item.answer))
    ```

    Args:
        agent: The agent to run.
        user_prompt: The prompt.
        via: `'events'` runs `agent.run_stream_events(...)` (the whole run, every model response, ends with the run
            result); `'run_stream'` runs `agent.run_stream(...)` (streams the response that produces the output).
        **run_kwargs: Passed on to `run_stream_events` / `run_stream` (`message_history`, `deps`, `model`, ...).

    Yields:
        A `CitedStream`. If the run raises, the stream yields an incomplete `FinalAnswer` (with `error` set) and then
        re-raises the exception. Leaving the block early stops the run; `stream.snapshot()` then gives what arrived,
        marked incomplete.
    """
    if via == 'events':
        run_events = cast(Callable[..., AbstractAsyncContextManager[AsyncIterator[object]]], agent.run_stream_events)
        async with run_events(user_prompt, **run_kwargs) as events:
            acc = _Accumulator()
            items = _from_events(events, acc)
            stream = CitedStream(items, lambda: _incomplete(acc.response()))
            try:
                yield stream
            finally:
                await items.aclose()
    elif via == 'run_stream':
        run_stream = cast(Callable[..., AbstractAsyncContextManager[Any]], agent.run_stream)
        snaps = _Snapshots()
        async with AsyncExitStack() as stack:
            try:
                # `run_stream` opens the model stream on entry, so a failure can surface here already.
                result = await stack.enter_async_context(run_stream(user_prompt, **run_kwargs))
            except Exception as exc:
                items = _failed(exc)
            else:
                items = _from_run_stream(result, snaps)
            stream = CitedStream(items, lambda: _incomplete(snaps.last))
            try:
                yield stream
            finally:
                await items.aclose()
    else:
        raise UserError(f'Unknown `via` {via!r}; use `"events"` or `"run_stream"`.')


# --------------------------------------------------------------------------------------------------------------------
# Vercel AI


def cited_answer_chunk(result: AgentRunResult[object], *, redact: bool = False) -> DataChunk:
    """A Vercel AI data chunk with the run's whole `CitedAnswer` (JSON), for an `on_complete` callback.

    ```python
    async def on_complete(result):
        yield cited_answer_chunk(result)

    adapter.run_stream(on_complete=on_complete)
    ```

    Args:
        result: The completed run.
        redact: Hide document excerpts (see `redact`) before sending.
    """
    answer = _completed(result.all_messages())
    if redact:
        answer = _redact(answer)
    data = cast(JsonValue, cited_answer_ta.dump_python(answer, mode='json'))
    return DataChunk(type=CITED_ANSWER_DATA_TYPE, data=data)


@dataclass
class _TextGroup:
    """One Vercel UI text part: consecutive text parts of a response."""

    text_id: str
    indexes: list[int]
    closed: bool = False
    sent: str | None = None
    """JSON of the citations the UI has (from `text-end` or our last data chunk)."""


@dataclass
class CitedVercelAIEventStream(VercelAIEventStream[AgentDepsT, OutputDataT]):
    """`VercelAIEventStream` that also delivers citations arriving after their text part ended.

    Late citations (Google, OpenAI Chat, OpenRouter, xAI when another part follows the text) are sent as a
    `data-pydantic-ai-citations` chunk with `id` = the UI text part's id and
    `data = {'text_id': ..., 'provider_name': ..., 'citations': [...]}` — every citation of that UI text part, anchors on its merged text,
    in the same shape as `providerMetadata.pydantic_ai.citations` — followed by `source-url` chunks for new web URLs.
    Merge `citations` into the text part's `providerMetadata.pydantic_ai.citations` on the client (see `docs/ui.md`)
    so that history sent back restores them.
    """

    _cit_parts: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_at_end: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_groups: dict[int, _TextGroup] = field(default_factory=dict[int, _TextGroup], init=False, repr=False)
    _cit_open: _TextGroup | None = field(default=None, init=False, repr=False)
    _cit_urls: set[str] = field(default_factory=set[str], init=False, repr=False)

    async def handle_part_start(self, event: PartStartEvent) -> AsyncIterator[BaseChunk]:
        if event.index == 0 and 0 in self._cit_at_end:  # a new model response: part indexes start over
            self._cit_parts.clear()
            self._cit_at_end.clear()
            self._cit_groups.clear()
            self._cit_open = None
        async for chunk in super().handle_part_start(event):
            yield chunk
        part = event.part
        if isinstance(part, TextPart):
            # The parent starts a new UI text part unless this one follows text; it then holds the new id.
            if event.previous_part_kind != 'text' or self._cit_open is None:
                self._cit_open = _TextGroup(self.message_id, [])
            self._cit_open.indexes.append(event.index)
            self._cit_groups[event.index] = self._cit_open
            self._cit_parts[event.index] = part

    async def handle_part_delta(self, event: PartDeltaEvent) -> AsyncIterator[BaseChunk]:
        async for chunk in super().handle_part_delta(event):
            yield chunk
        delta = event.delta
        part = self._cit_parts.get(event.index)
        if not isinstance(delta, TextPartDelta) or part is None:
            return
        self._cit_parts[event.index] = delta.apply(part)
        group = self._cit_groups[event.index]
        if group.closed and delta.citations_delta is not None:
            for chunk in self._late_chunks(group):
                yield chunk

    async def handle_part_end(self, event: PartEndEvent) -> AsyncIterator[BaseChunk]:
        part = event.part
        group = self._cit_groups.get(event.index)
        if isinstance(part, TextPart) and group is not None:
            self._cit_parts[event.index] = part
            self._cit_at_end[event.index] = part
        async for chunk in super().handle_part_end(event):
            yield chunk
        if isinstance(part, TextPart) and group is not None and event.next_part_kind != 'text':
            # The parent has sent `text-end` with the parts as they were at their own ends, and listed their URLs.
            group.closed = True
            at_end = [self._cit_at_end.get(i, self._cit_parts[i]) for i in group.indexes]
            group.sent = _citations_json(at_end)
            self._cit_urls.update(_web_urls(at_end))
            # A part of the group may have received citations after its own end but before the group closed.
            for chunk in self._late_chunks(group):
                yield chunk

    def _late_chunks(self, group: _TextGroup) -> list[BaseChunk]:
        parts = [self._cit_parts[i] for i in group.indexes]
        current = _citations_json(parts)
        if current == group.sent:
            return []
        group.sent = current
        chunks: list[BaseChunk] = [
            DataChunk(
                type=CITATIONS_DATA_TYPE,
                id=group.text_id,
                data={
                    'text_id': group.text_id,
                    'provider_name': next((p.provider_name for p in parts if p.citations), None),
                    'citations': _dump_citations(parts),
                },
            )
        ]
        for citation in _merged_citations(parts):
            for source in citation.sources:
                if isinstance(source, WebCitationSource) and source.url not in self._cit_urls:
                    self._cit_urls.add(source.url)
                    chunks.append(SourceUrlChunk(source_id=source.url, url=source.url, title=source.title))
        return chunks


@dataclass
class CitedVercelAIAdapter(VercelAIAdapter[AgentDepsT, OutputDataT]):
    """`VercelAIAdapter` whose event stream is a `CitedVercelAIEventStream` (late citations reach the UI)."""

    def build_event_stream(self) -> UIEventStream[RequestData, BaseChunk, AgentDepsT, OutputDataT]:
        """Build the citation-aware Vercel AI event stream."""
        return CitedVercelAIEventStream(
            self.run_input,
            accept=self.accept,
            sdk_version=self.sdk_version,
            server_message_id=self.server_message_id,
            manage_system_prompt=self.manage_system_prompt,
        )


def _merged_citations(parts: Sequence[TextPart]) -> list[Citation]:
    """Citations of consecutive parts with anchors shifted onto their joined text (as the Vercel adapter merges)."""
    out: list[Citation] = []
    offset = 0
    for part in parts:
        out.extend(shift_citation(citation, offset) for citation in part.citations or [])
        offset += len(part.content)
    return out


def _dump_citations(parts: Sequence[TextPart]) -> list[JsonValue]:
    return cast(list[JsonValue], _citations_ta.dump_python(_merged_citations(parts), mode='json'))


def _citations_json(parts: Sequence[TextPart]) -> str:
    return _citations_ta.dump_json(_merged_citations(parts)).decode()


def _web_urls(parts: Sequence[TextPart]) -> set[str]:
    return {s.url for c in _merged_citations(parts) for s in c.sources if isinstance(s, WebCitationSource)}
