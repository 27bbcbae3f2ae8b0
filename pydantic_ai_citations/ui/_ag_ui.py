"""AG-UI: Pydantic AI's adapter plus the citations AG-UI has no place for, those arriving late included.

AG-UI has no citation carrier: Pydantic AI's `AGUIEventStream` sends a text message's content and nothing of its
citations, and `AGUIAdapter.dump_messages` drops `TextPart.citations` (Pydantic AI 2.68). `CitedAGUIEventStream`
sends every citation of a text message as a `CUSTOM` event named `pydantic_ai_citations` right after
`TEXT_MESSAGE_END`, and sends it again (same `message_id`, so a client replaces it) whenever citations arrive after
the text part ended (Google, OpenAI Chat, OpenRouter, xAI when another part follows the text). The text deltas it
sends never carry citation markup (`formats.markup.StreamCleaner`), and the anchors are offsets into the text the
client received. `CitedAGUIAdapter.dump_messages` gives history the same text (no markup). `cited_answer_event` sends
the whole `CitedAnswer` from an `on_complete` callback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, cast, get_args, get_origin
from uuid import uuid4

from pydantic_ai import ModelMessage, ModelResponse, TextPart
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import PartDeltaEvent, PartEndEvent, PartStartEvent, TextPartDelta
from pydantic_ai.output import OutputDataT
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import UIEventStream

from .._answer import incomplete_reason
from .._checks import require_messages
from ._common import (
    HeldTextEnds,
    TextBlock,
    answer_json,
    citations_json,
    dump_citations,
    merged_citations,
    require_ui_messages,
    shown_texts,
)

try:
    from ag_ui.core import (
        BaseEvent,
        CustomEvent,
        Message,
        RunAgentInput,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
    )
    from pydantic_ai.ui.ag_ui import DEFAULT_AG_UI_VERSION, AGUIAdapter, AGUIEventStream
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        'The AG-UI adapter needs the `ag-ui-protocol` package: `pip install "pydantic-ai-citations[ag-ui]"`.'
    ) from e

_AG_UI_MESSAGES: tuple[type, ...] = tuple(
    t for t in get_args(get_args(Message)[0] if get_origin(Message) is Annotated else Message) if isinstance(t, type)
)
"""The classes of AG-UI's `Message` union (user, assistant, tool, ... messages)."""

__all__ = (
    'CITATIONS_EVENT_NAME',
    'CITED_ANSWER_EVENT_NAME',
    'CitedAGUIAdapter',
    'CitedAGUIEventStream',
    'cited_answer_event',
)

CITATIONS_EVENT_NAME = 'pydantic_ai_citations'
"""Name of the AG-UI `CUSTOM` event carrying the citations of one text message."""
CITED_ANSWER_EVENT_NAME = 'cited_answer'
"""Name of the AG-UI `CUSTOM` event carrying a whole `CitedAnswer` (see `cited_answer_event`)."""


def cited_answer_event(result: AgentRunResult[object], *, redact: bool = False) -> CustomEvent:
    """An AG-UI `CUSTOM` event named `cited_answer` with the run's whole `CitedAnswer` (JSON), for `on_complete`.

    ```python
    async def on_complete(result):
        yield cited_answer_event(result)

    adapter.run_stream(on_complete=on_complete)
    ```

    Args:
        result: The completed run.
        redact: Hide document excerpts (see `redact`) before sending.

    Raises:
        UserError: `result` is not a run's result, or `redact` is not a bool.
    """
    return CustomEvent(
        name=CITED_ANSWER_EVENT_NAME, value=answer_json(result, redact=redact, where='cited_answer_event')
    )


@dataclass
class CitedAGUIEventStream(
    HeldTextEnds[RunAgentInput, BaseEvent, AgentDepsT, OutputDataT], AGUIEventStream[AgentDepsT, OutputDataT]
):
    """`AGUIEventStream` whose text carries no citation markup and whose citations reach the client.

    After each `TEXT_MESSAGE_END` of a message with citations, and again when citations arrive after that, it
    sends a `CUSTOM` event named `pydantic_ai_citations` with
    `value = {'message_id': ..., 'provider_name': ..., 'citations': [...]}`: every citation of that text message,
    in Pydantic AI's `Citation` JSON shape, anchors on the message text as the client received it (Python string
    indices). Keep the last one per `message_id`. Text that arrives for a part after its message ended is sent as a
    text message of its own (`_cit_late_text`).
    """

    _cit_parts: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_messages: dict[int, TextBlock] = field(default_factory=dict[int, TextBlock], init=False, repr=False)
    _cit_open: TextBlock | None = field(default=None, init=False, repr=False)

    async def handle_part_start(self, event: PartStartEvent) -> AsyncIterator[BaseEvent]:
        for agui_event in self._cit_late_text():
            yield agui_event
        if event.index == 0 and 0 in self._cit_parts:  # a new model response: part indexes start over
            # With no turn between the two (an output validator's retry), `after_response` did not run: the citations
            # `TrackCitations` mapped onto the last response after its end go out now, before its parts are let go.
            for agui_event in self._all_citations_events():
                yield self._stamped(agui_event)
            self._cit_parts.clear()
            self._cit_messages.clear()
            self._cit_open = None
        part = event.part
        if isinstance(part, TextPart):
            # The parent starts a new text message unless this part follows text.
            if event.previous_part_kind != 'text' or self._cit_open is None:
                self._cit_open = self._cit_new_block(sent='[]')
            self._cit_open.indexes.append(event.index)
            self._cit_messages[event.index] = self._cit_open
            self._cit_parts[event.index] = part
            event = replace(event, part=replace(part, content=self._cit_open.cleaner.feed(part.content)))
        async for agui_event in super().handle_part_start(event):
            yield agui_event
        if isinstance(part, TextPart) and self._cit_open is not None:
            self._cit_open.id = self.message_id

    async def handle_part_delta(self, event: PartDeltaEvent) -> AsyncIterator[BaseEvent]:
        delta = event.delta
        message = self._cit_messages.get(event.index)
        if not isinstance(delta, TextPartDelta) or message is None:
            async for agui_event in super().handle_part_delta(event):
                yield agui_event
            return
        self._cit_parts[event.index] = delta.apply(self._cit_parts[event.index])
        if (
            message.closed
        ):  # no text may follow TEXT_MESSAGE_END: late text goes in a message of its own (`_cit_late_text`)
            message.late += delta.content_delta or ''
            for agui_event in self._citations_events(message):
                yield agui_event
            return
        clean = message.cleaner.feed(delta.content_delta or '')
        async for agui_event in super().handle_part_delta(replace(event, delta=replace(delta, content_delta=clean))):
            yield agui_event

    async def handle_part_end(self, event: PartEndEvent) -> AsyncIterator[BaseEvent]:
        part = event.part
        message = self._cit_messages.get(event.index)
        if isinstance(part, TextPart) and message is not None:
            self._cit_parts[event.index] = part
            if event.next_part_kind != 'text' and self._cit_hold(message.cleaner.holds_opening, event):
                return  # prose or cut-off markup: `_cit_end_text` runs once that is known
        async for agui_event in self._cit_end_text(event, cut_off=self._cit_broken):
            yield agui_event

    async def _cit_end_text(self, event: PartEndEvent, *, cut_off: bool) -> AsyncIterator[BaseEvent]:
        # Stamped here: a held end is released outside `AGUIEventStream.handle_event`, which stamps the others.
        async for agui_event in self._cit_unstamped_end(event, cut_off=cut_off):
            yield self._stamped(agui_event)

    async def _cit_unstamped_end(self, event: PartEndEvent, *, cut_off: bool) -> AsyncIterator[BaseEvent]:
        message = self._cit_messages.get(event.index)
        closing = isinstance(event.part, TextPart) and message is not None and event.next_part_kind != 'text'
        if closing and message is not None:
            rest, _ = self._cit_close(message, self._cit_parts, event, cut_off=cut_off)
            if rest:
                yield TextMessageContentEvent(message_id=message.id, delta=rest)
        async for agui_event in super().handle_part_end(event):
            yield agui_event
        if closing and message is not None:
            message.closed = True
            for agui_event in self._citations_events(message):
                yield agui_event

    async def after_response(self) -> AsyncIterator[BaseEvent]:
        for agui_event in self._cit_late_text():
            yield self._stamped(agui_event)
        async for agui_event in super().after_response():
            yield agui_event  # pragma: no cover - the parent sends nothing here (Pydantic AI 2.68)
        # `TrackCitations` maps raw formats onto the parts in place once the response is done (resolved markers,
        # Perplexity `[N]`, Cohere): the parts this stream holds from their `PartEndEvent` show it now.
        for agui_event in self._all_citations_events():
            yield self._stamped(agui_event)

    def _stamped(self, agui_event: BaseEvent) -> BaseEvent:
        """`agui_event` with a timestamp, as `AGUIEventStream.handle_event` gives the events it sends."""
        if agui_event.timestamp is None:
            agui_event.timestamp = self._get_timestamp()
        return agui_event

    async def handle_run_result(self, event: AgentRunResultEvent[Any]) -> AsyncIterator[BaseEvent]:
        for agui_event in self._cit_late_text():
            yield agui_event
        async for agui_event in super().handle_run_result(event):
            yield agui_event  # pragma: no cover - the parent sends nothing here (Pydantic AI 2.68)
        # The run's last response is the last word: a part that got citations after its end is a new object here,
        # and only that object saw changes made in place afterwards.
        parts = event.result.response.parts
        self._cit_parts.update({i: p for i, p in enumerate(parts) if i in self._cit_parts and isinstance(p, TextPart)})
        for agui_event in self._all_citations_events():
            yield agui_event

    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        for agui_event in self._cit_late_text(cut_off=True):
            yield self._stamped(agui_event)
        async for agui_event in super().on_error(error):
            yield agui_event

    async def on_cancelled(self, cancelled: RunCancelled) -> AsyncIterator[BaseEvent]:
        for agui_event in self._cit_late_text(cut_off=True):
            yield self._stamped(agui_event)
        async for agui_event in super().on_cancelled(cancelled):
            yield agui_event

    def _cit_blocks(self) -> list[TextBlock]:
        return list({id(m): m for m in self._cit_messages.values()}.values())

    def _cit_text_events(self, text: str, block: TextBlock | None) -> list[BaseEvent]:
        message_id = str(uuid4())  # (not `new_message_id()`: the part being streamed keeps its id)
        return [
            self._stamped(TextMessageStartEvent(message_id=message_id, role='assistant')),
            self._stamped(TextMessageContentEvent(message_id=message_id, delta=text)),
            self._stamped(TextMessageEndEvent(message_id=message_id)),
        ]

    def _all_citations_events(self) -> list[BaseEvent]:
        messages = {id(m): m for m in self._cit_messages.values() if m.closed}
        return [e for message in messages.values() for e in self._citations_events(message)]

    def _citations_events(self, message: TextBlock) -> list[BaseEvent]:
        # Anchored on the text the message holds: not on text that arrived after its `TEXT_MESSAGE_END`.
        parts = message.held_parts(self._cit_parts)
        citations = merged_citations(parts, cut_off=message.cut_off)
        current = citations_json(citations)
        if current == message.sent:
            return []
        message.sent = current
        value = {
            'message_id': message.id,
            'provider_name': next((p.provider_name for p in parts if p.citations), None),
            'citations': dump_citations(citations),
        }
        return [CustomEvent(name=CITATIONS_EVENT_NAME, value=value)]


def _without_markup(message: ModelMessage) -> ModelMessage:
    """`message` with each run of consecutive text parts as the one text `CitedAGUIEventStream` sends of it.

    `AGUIAdapter.dump_messages` joins consecutive text parts into one text; the stream cleans a response's texts with
    one cleaner, a text followed by another part passing what it holds back on to the next (`shown_texts`; a tail no
    text took is a text of its own at the end). When the response did not complete, the text that ends it may end
    inside markup (`(cite index="1-1`): that tail is removed, as `CitedAnswer` removes it.
    """
    if not isinstance(message, ModelResponse):
        return message
    parts = list(message.parts)
    runs: list[list[int]] = []
    for index, part in enumerate(parts):
        if isinstance(part, TextPart):
            if not (index and isinstance(parts[index - 1], TextPart)):
                runs.append([])
            runs[-1].append(index)
    if not runs:
        return message
    texts = [''.join(cast(TextPart, parts[i]).content for i in run) for run in runs]
    cut_off = incomplete_reason(message) is not None
    shown, tail = shown_texts(texts, ends_with_text=isinstance(parts[-1], TextPart), cut_off=cut_off)
    if tail:
        parts.append(TextPart(tail))
    elif all(seen.text == text for seen, text in zip(shown, texts, strict=True)):
        return message
    # Each run as one part with the text the stream sent (the dumper joins consecutive text parts into one text).
    # Citations stay as they are, on the old offsets: `AGUIAdapter.dump_messages` drops them.
    first = {run[0]: seen.text for run, seen in zip(runs, shown, strict=True)}
    joined = {index for run in runs for index in run[1:]}
    return replace(
        message,
        parts=[
            replace(part, content=first[i]) if i in first and isinstance(part, TextPart) else part
            for i, part in enumerate(parts)
            if i not in joined
        ],
    )


@dataclass
class CitedAGUIAdapter(AGUIAdapter[AgentDepsT, OutputDataT]):
    """`AGUIAdapter` whose event stream is a `CitedAGUIEventStream` (citations reach the client, late ones too).

    Its `dump_messages` gives text without citation markup, as the stream sends it.
    """

    @classmethod
    def dump_messages(
        cls,
        messages: Sequence[ModelMessage],
        *,
        ag_ui_version: str = DEFAULT_AG_UI_VERSION,
        preserve_file_data: bool = False,
    ) -> list[Message]:
        """`AGUIAdapter.dump_messages`, with text as `CitedAGUIEventStream` sends it: without citation markup.

        Consecutive text parts, which make one AG-UI text, are stripped as that one text (`strip_joined`), so history
        shown in the client reads as the streamed answer did. AG-UI has no citation carrier, so the dumped messages
        hold no citations (Pydantic AI 2.68): keep the server-side history if you need them.
        """
        require_messages(messages, where='CitedAGUIAdapter.dump_messages')
        return super().dump_messages(
            [_without_markup(m) for m in messages], ag_ui_version=ag_ui_version, preserve_file_data=preserve_file_data
        )

    @classmethod
    def load_messages(cls, messages: Sequence[Message], *, preserve_file_data: bool = False) -> list[ModelMessage]:
        """`AGUIAdapter.load_messages`, refusing what is not a list of AG-UI messages (it loaded nothing, silently)."""
        require_ui_messages('CitedAGUIAdapter.load_messages', messages, _AG_UI_MESSAGES, 'the AG-UI `Message`s')
        return super().load_messages(messages, preserve_file_data=preserve_file_data)

    def build_event_stream(self) -> UIEventStream[RunAgentInput, BaseEvent, AgentDepsT, OutputDataT]:
        """Build the citation-aware AG-UI event stream."""
        return CitedAGUIEventStream(
            self.run_input,
            accept=self.accept,
            ag_ui_version=self.ag_ui_version,
            include_usage=self.include_usage,
            manage_system_prompt=self.manage_system_prompt,
            preserve_file_data=self.preserve_file_data,
        )
