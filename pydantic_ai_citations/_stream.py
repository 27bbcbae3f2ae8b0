"""Stream an answer to a UI, then hand over its citations once the response has really completed.

Providers send citations in a text-less delta, and several (Google, OpenAI Chat, OpenRouter, xAI) send it at the end
of the whole response: after the cited part's `PartEndEvent` when another part started in between. A consumer must
keep applying deltas to parts that have already ended, and must not treat the text as final until the run is over.

- `stream_cited(agent, prompt)` yields `TextChunk`s as text arrives and then exactly one `FinalAnswer`: the
  `CitedAnswer` built from the run's messages when the run finished (complete only when the provider's finishing
  signal arrived, see `CitedAnswer.complete`); otherwise an answer built from what arrived, with `complete=False` and
  a `stream_incomplete` problem. Chunks never carry citation markup: each run of text parts that the answer joins
  into one text (a response's text parts, thinking parts between them or not) goes through a
  `formats.markup.StreamCleaner`, which holds back a possible opening of markup (and trailing spaces) until it is
  decided, so a chunk may arrive a little later than its delta; the `FinalAnswer`'s text is cleaned the same way.
  **Errors:** if the run raises, the incomplete `FinalAnswer` (carrying the exception as `error`) is yielded first
  and the exception is then re-raised from the iterator, so an `async for` loop sees both. A consumer that stops
  iterating (or leaves the `async with` early) gets `CitedStream.snapshot()`, which is never marked complete.

The Vercel AI adapter that also delivers late citations lives in `pydantic_ai_citations.ui`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from types import NoneType
from typing import Any, Literal, cast

from pydantic_ai import ModelMessage, ModelResponse, ModelResponsePart, NativeToolCallPart, TextPart
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
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.tools import AgentDepsT

from ._answer import CitedAnswer
from ._checks import is_messages, require, require_agent
from .formats.markup import StreamCleaner

__all__ = (
    'CitedStream',
    'FinalAnswer',
    'StreamItem',
    'TextChunk',
    'stream_cited',
)


@dataclass(frozen=True)
class TextChunk:
    """Text as it arrives. Show it, but replace it with `FinalAnswer.answer.text` at the end."""

    text: str
    """The new text."""
    _: KW_ONLY
    part_index: int
    """Index of the text part in its response. The text parts the answer joins are cleaned as one text, so a chunk of
    a part may begin with the end of the text part before it, held back until this part's text decided it."""
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


class _Cleaners:
    """One `StreamCleaner` per run of text parts that make one text: chunks never carry citation markup.

    The text parts of a response make one text to a reader (and to `CitedAnswer`, which joins them directly, as
    Pydantic AI's text output does, and strips them as one text, `formats.markup.strip_joined`), thinking parts between
    them or not; a native tool call starts a new text (`answer_parts`, `_continues`). So the parts of a run share a
    cleaner: a marker that opens a part takes the space that ends the part before, as it does in the answer.
    """

    def __init__(self) -> None:
        self.by_part: dict[int, StreamCleaner] = {}

    def feed(self, index: int, text: str, response_index: int = 0, *, after: int | None = None) -> list[TextChunk]:
        """Clean `text` of part `index`; `after`: the text part (registered here) whose text this part's continues."""
        chunks: list[TextChunk] = []
        cleaner = self.by_part.get(index)
        if cleaner is None:
            cleaner = self.by_part.get(after) if after is not None else None
            if cleaner is None:
                # A new run: what earlier runs still hold comes first, so chunks stay in text order.
                chunks = [
                    c
                    for earlier in sorted(self.by_part)
                    if earlier < index
                    for c in self.close(earlier, response_index)
                ]
                cleaner = StreamCleaner()
            self.by_part[index] = cleaner
        clean = cleaner.feed(text)
        if clean:
            chunks.append(TextChunk(clean, part_index=index, response_index=response_index))
        return chunks

    def close(self, index: int, response_index: int = 0, incomplete: bool = False) -> list[TextChunk]:
        """Close the run that part `index` is in; what it still holds is a chunk of its last part."""
        cleaner = self.by_part.get(index)
        if cleaner is None:
            return []
        run = [i for i, c in self.by_part.items() if c is cleaner]
        for i in run:
            del self.by_part[i]
        rest = cleaner.close(incomplete=incomplete)
        return [TextChunk(rest, part_index=max(run), response_index=response_index)] if rest else []

    def close_all(self, response_index: int = 0, incomplete: bool = False) -> list[TextChunk]:
        """Close every cleaner; `incomplete`: the text was cut off, so a held possible opening of markup goes."""
        chunks: list[TextChunk] = []
        while self.by_part:
            chunks += self.close(min(self.by_part), response_index, incomplete)
        return chunks


class _Accumulator:
    """Rebuilds the response being streamed from events, applying deltas to parts that have already ended."""

    def __init__(self) -> None:
        self.parts: dict[int, ModelResponsePart] = {}
        self.ended: set[int] = set()
        self.response_index = -1
        self.cleaners = _Cleaners()
        self.last_text: int | None = None
        """The text part of this response whose text the next text part continues (`_continues`)."""

    def feed(self, event: AgentStreamEvent) -> list[TextChunk]:
        if isinstance(event, PartStartEvent):
            chunks: list[TextChunk] = []
            if self.response_index < 0 or (event.index == 0 and 0 in self.ended):
                chunks = self.cleaners.close_all(self.response_index)
                self.parts.clear()
                self.ended.clear()
                self.response_index += 1
                self.last_text = None
            self.parts[event.index] = event.part
            self.ended.discard(event.index)
            if isinstance(event.part, TextPart):  # registered even when empty: the next text part follows it
                chunks += self.cleaners.feed(event.index, event.part.content, self.response_index, after=self.last_text)
                self.last_text = event.index
            elif isinstance(event.part, NativeToolCallPart):
                self.last_text = None
            return chunks
        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            part = self.parts.get(event.index)
            if isinstance(part, TextPart):
                # Applied even after the part's end: late citations come this way.
                self.parts[event.index] = event.delta.apply(part)
                if event.delta.content_delta:
                    return self.cleaners.feed(event.index, event.delta.content_delta, self.response_index)
        elif isinstance(event, PartEndEvent):
            self.parts[event.index] = event.part
            self.ended.add(event.index)
            # The cleaner stays open: whether what it holds is a cut-off opening of markup is known only at the end
            # (`flush`); the next part or response closes it as complete.
        return []

    def flush(self, incomplete: bool) -> list[TextChunk]:
        """The text still held back by the cleaners (at the end of the events); `incomplete` as the answer's."""
        return self.cleaners.close_all(max(self.response_index, 0), incomplete)

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


async def _from_events(events: AsyncIterator[object], acc: _Accumulator) -> AsyncGenerator[StreamItem]:
    try:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                result = cast('AgentRunResultEvent[object]', event).result
                answer = CitedAnswer.from_messages(result.all_messages())
                for chunk in acc.flush(not answer.complete):
                    yield chunk
                yield FinalAnswer(answer)
                return
            for chunk in acc.feed(cast(AgentStreamEvent, event)):
                yield chunk
    except Exception as exc:
        yield FinalAnswer(_incomplete(acc.response()), error=exc)
        raise
    # The events ended without a run result: the run did not finish.
    for chunk in acc.flush(True):
        yield chunk
    yield FinalAnswer(_incomplete(acc.response()))


async def _failed(exc: Exception) -> AsyncGenerator[StreamItem]:
    yield FinalAnswer(_incomplete(None), error=exc)
    raise exc


@dataclass
class _Snapshots:
    last: ModelResponse | None = None
    emitted: dict[int, int] = field(default_factory=dict[int, int])
    cleaners: _Cleaners = field(default_factory=_Cleaners)


def _continues(parts: Sequence[ModelResponsePart], index: int) -> int | None:
    """The text part before `parts[index]` whose text it continues: the last one, unless a native tool call follows it.

    As `CitedAnswer` (`answer_parts`) and Pydantic AI's text output join text parts: directly, across thinking parts.
    """
    for before in range(index - 1, -1, -1):
        part = parts[before]
        if isinstance(part, TextPart):
            return before
        if isinstance(part, NativeToolCallPart):
            return None
    return None


async def _from_run_stream(result: Any, snaps: _Snapshots) -> AsyncGenerator[StreamItem]:
    try:
        async for response in cast('AsyncIterator[ModelResponse]', result.stream_response(debounce_by=None)):
            snaps.last = response
            for index, part in enumerate(response.parts):
                if isinstance(part, TextPart):
                    done = snaps.emitted.get(index)
                    if done is None or len(part.content) > done:  # registered even when empty (see `_Cleaners`)
                        snaps.emitted[index] = len(part.content)
                        after = _continues(response.parts, index)
                        for chunk in snaps.cleaners.feed(index, part.content[done or 0 :], after=after):
                            yield chunk
        messages = cast('list[ModelMessage]', result.all_messages())
        answer = CitedAnswer.from_messages(messages) if result.is_complete else _incomplete(snaps.last)
        for chunk in snaps.cleaners.close_all(incomplete=not answer.complete):
            yield chunk
        yield FinalAnswer(answer)
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
        A stream to iterate once: `TextChunk`s, then one `FinalAnswer`. If the run raises, the stream yields an
        incomplete `FinalAnswer` (with `error` set) and then re-raises the exception. Leaving the block early stops
        the run; `stream.snapshot()` then gives what arrived, marked incomplete.

    Raises:
        UserError: `agent` is not an agent, `user_prompt` is not a prompt, or `via` is neither `'events'` nor
            `'run_stream'`.
    """
    require_agent(agent, where='stream_cited')
    require(
        'stream_cited', 'user_prompt', user_prompt, (str, Sequence, NoneType), 'a str, a list of `UserContent` or None'
    )
    if is_messages(user_prompt):
        raise UserError(
            'stream_cited: `user_prompt` must be the prompt, got a list of messages: pass them as `message_history=`.'
        )
    if via == 'events':
        run_events = cast('Callable[..., AbstractAsyncContextManager[AsyncIterator[object]]]', agent.run_stream_events)
        async with run_events(user_prompt, **run_kwargs) as events:
            acc = _Accumulator()
            items = _from_events(events, acc)
            stream = CitedStream(items, lambda: _incomplete(acc.response()))
            try:
                yield stream
            finally:
                await items.aclose()
    elif via == 'run_stream':
        run_stream = cast('Callable[..., AbstractAsyncContextManager[Any]]', agent.run_stream)
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
