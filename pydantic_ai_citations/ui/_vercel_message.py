"""The assistant `UIMessage` the AI SDK's `useChat` builds from a Vercel AI data stream.

`CitedVercelAIEventStream` fingerprints the text a UI holds from what it sent, and `testing.check_seams` sends that
message back, as a UI does.

The AI SDK (`processUIMessageStream`) adds a part per `text-start`, `reasoning-start`, tool call, source, file and
data chunk, in stream order; deltas go to their part, a part's end chunk sets its provider metadata, and message
metadata is merged. This package's late citations (`data-pydantic-ai-citations`) are merged into their text part's
`providerMetadata.pydantic_ai.citations` as `docs/ui.md` tells a client to. What `CitedVercelAIAdapter.load_messages`
makes of the result is the history a UI sends back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from pydantic_ai.ui.vercel_ai.request_types import (
    DataUIPart,
    DynamicToolInputAvailablePart,
    DynamicToolOutputAvailablePart,
    DynamicToolOutputErrorPart,
    FileUIPart,
    ReasoningUIPart,
    SourceDocumentUIPart,
    SourceUrlUIPart,
    StepStartUIPart,
    TextUIPart,
    ToolInputAvailablePart,
    ToolOutputAvailablePart,
    ToolOutputErrorPart,
    UIMessage,
    UIMessagePart,
)
from pydantic_ai.ui.vercel_ai.response_types import (
    BaseChunk,
    DataChunk,
    FileChunk,
    FinishChunk,
    MessageMetadataChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceDocumentChunk,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolInputAvailableChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
)

from ._vercel_ai import CITATIONS_DATA_TYPE

__all__ = ('ui_message_of', 'ui_message_with_text_ids')


class _Builder:
    def __init__(self, message_id: str) -> None:
        self.id = message_id
        self.parts: list[UIMessagePart] = []
        self.texts: dict[str, int] = {}  # text or reasoning part id -> its place in `parts`
        self.tools: dict[str, int] = {}  # tool call id -> its place
        self.inputs: dict[str, tuple[str, Any, bool | None, Any]] = {}  # tool call id -> name, input, dynamic, metadata
        self.metadata: Any = None

    def merge_metadata(self, given: Any) -> None:
        held: object = self.metadata
        if given is None:
            return
        if isinstance(held, dict) and isinstance(given, dict):
            self.metadata = {**cast('dict[str, Any]', held), **cast('dict[str, Any]', given)}
        else:
            self.metadata = given

    def put(self, key: dict[str, int], name: str, part: UIMessagePart) -> None:
        if name in key:
            self.parts[key[name]] = part
        else:
            key[name] = len(self.parts)
            self.parts.append(part)

    def text(self, name: str) -> TextUIPart | ReasoningUIPart:
        return cast('TextUIPart | ReasoningUIPart', self.parts[self.texts[name]])

    def add(self, chunk: BaseChunk) -> None:
        if isinstance(chunk, StartChunk):
            self.id = chunk.message_id or self.id
            self.merge_metadata(chunk.message_metadata)
        elif isinstance(chunk, (MessageMetadataChunk, FinishChunk)):
            self.merge_metadata(chunk.message_metadata)
        elif isinstance(chunk, StartStepChunk):
            self.parts.append(StepStartUIPart())
        elif isinstance(chunk, TextStartChunk):
            self.put(self.texts, chunk.id, TextUIPart(text='', state='streaming'))
        elif isinstance(chunk, ReasoningStartChunk):
            self.put(self.texts, chunk.id, ReasoningUIPart(text='', state='streaming'))
        elif isinstance(chunk, (TextDeltaChunk, ReasoningDeltaChunk)):
            part = self.text(chunk.id)
            self.parts[self.texts[chunk.id]] = part.model_copy(update={'text': part.text + chunk.delta})
        elif isinstance(chunk, (TextEndChunk, ReasoningEndChunk)):
            part = self.text(chunk.id)
            metadata = chunk.provider_metadata if chunk.provider_metadata is not None else part.provider_metadata
            self.parts[self.texts[chunk.id]] = part.model_copy(update={'state': 'done', 'provider_metadata': metadata})
        else:
            self.add_other(chunk)

    def add_other(self, chunk: BaseChunk) -> None:
        if isinstance(chunk, ToolInputStartChunk):
            self.inputs[chunk.tool_call_id] = (chunk.tool_name, None, chunk.dynamic, chunk.provider_metadata)
        elif isinstance(chunk, ToolInputAvailableChunk):
            self.inputs[chunk.tool_call_id] = (chunk.tool_name, chunk.input, chunk.dynamic, chunk.provider_metadata)
            self.put(self.tools, chunk.tool_call_id, self.tool_part(chunk.tool_call_id, chunk.provider_executed))
        elif isinstance(chunk, (ToolOutputAvailableChunk, ToolOutputErrorChunk)):
            self.put(self.tools, chunk.tool_call_id, self.tool_part(chunk.tool_call_id, chunk.provider_executed, chunk))
        elif isinstance(chunk, SourceUrlChunk):
            self.parts.append(SourceUrlUIPart(source_id=chunk.source_id, url=chunk.url, title=chunk.title))
        elif isinstance(chunk, SourceDocumentChunk):
            self.parts.append(
                SourceDocumentUIPart(
                    source_id=chunk.source_id, media_type=chunk.media_type, title=chunk.title, filename=chunk.filename
                )
            )
        elif isinstance(chunk, FileChunk):
            self.parts.append(FileUIPart(media_type=chunk.media_type, url=chunk.url))
        elif isinstance(chunk, DataChunk) and not chunk.transient:
            if chunk.type == CITATIONS_DATA_TYPE:
                self.merge_citations(chunk.data)
            part = DataUIPart(type=chunk.type, id=chunk.id, data=chunk.data)
            if chunk.id is None:
                self.parts.append(part)
            else:
                self.put(self.texts, f'{chunk.type}:{chunk.id}', part)

    def merge_citations(self, data: Any) -> None:
        """A late-citations chunk's citations into its text part's provider metadata (`docs/ui.md`)."""
        found = cast('dict[str, Any]', data) if isinstance(data, dict) else {}
        place = self.texts.get(str(found.get('text_id')))
        part = self.parts[place] if place is not None else None
        if not isinstance(part, TextUIPart):
            return
        metadata = dict(part.provider_metadata or {})
        metadata['pydantic_ai'] = {**metadata.get('pydantic_ai', {}), 'citations': found.get('citations')}
        self.parts[cast(int, place)] = part.model_copy(update={'provider_metadata': metadata})

    def tool_part(self, call_id: str, provider_executed: bool | None, result: BaseChunk | None = None) -> UIMessagePart:
        name, given, dynamic, meta = self.inputs.get(call_id, ('unknown', None, None, None))
        fields: dict[str, Any] = {
            'tool_call_id': call_id,
            'input': given,
            'provider_executed': provider_executed,
            'call_provider_metadata': meta,
            **({'tool_name': name} if dynamic else {'type': f'tool-{name}'}),
        }
        state = 'input-available'
        if isinstance(result, ToolOutputAvailableChunk):
            state, fields['output'] = 'output-available', result.output
        elif isinstance(result, ToolOutputErrorChunk):
            state, fields['error_text'] = 'output-error', result.error_text
        return cast(UIMessagePart, _TOOL_PARTS[bool(dynamic), state](**fields))


_TOOL_PARTS: dict[tuple[bool, str], type[Any]] = {
    (False, 'input-available'): ToolInputAvailablePart,
    (False, 'output-available'): ToolOutputAvailablePart,
    (False, 'output-error'): ToolOutputErrorPart,
    (True, 'input-available'): DynamicToolInputAvailablePart,
    (True, 'output-available'): DynamicToolOutputAvailablePart,
    (True, 'output-error'): DynamicToolOutputErrorPart,
}
"""The AI SDK's tool part for each state, a dynamic tool's (named by `tool_name`) or a static one's (`tool-NAME`)."""


def ui_message_of(chunks: Iterable[BaseChunk], *, message_id: str = 'assistant') -> UIMessage:
    """The assistant message `useChat` builds from `chunks` (one run's stream), late citations merged in."""
    return ui_message_with_text_ids(chunks, message_id=message_id)[0]


def ui_message_with_text_ids(
    chunks: Iterable[BaseChunk], *, message_id: str = 'assistant'
) -> tuple[UIMessage, list[str]]:
    """`ui_message_of(chunks)`, and the chunk id of each of its text parts, in order."""
    builder = _Builder(message_id)
    for chunk in chunks:
        builder.add(chunk)
    ids = sorted((place, name) for name, place in builder.texts.items() if isinstance(builder.parts[place], TextUIPart))
    message = UIMessage(id=builder.id, role='assistant', metadata=builder.metadata, parts=builder.parts)
    return message, [name for _, name in ids]
