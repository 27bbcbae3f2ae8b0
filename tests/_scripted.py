"""One scripted streamed model for the stream and UI tests: text, thinking, tool calls and citation deltas on chosen
vendor part ids, in the order a script gives them (see section 6b of the reference)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

from pydantic_ai import Citation, ModelMessage, ModelResponse, TextPart, ToolReturnPart
from pydantic_ai.messages import ModelResponseStreamEvent
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.settings import ModelSettings

Step = (
    tuple[Literal['text', 'think', 'tool'], object, str]
    | tuple[Literal['cite'], object, list[Citation]]
    | tuple[Literal['raw'], object, dict[str, Any]]
)
"""(kind, vendor part id, value): text, thinking or a tool call (the tool's name, no arguments), citations, or a text
part's raw `provider_details` (as OpenAI's annotations arrive)."""


@dataclass
class ScriptedStream(StreamedResponse):
    script: Sequence[Step] = ()
    provider: str = 'scripted'
    """`provider_name`. One that sends a finishing signal (`'anthropic'`) makes a response without one cut off."""
    _ts: datetime = field(default_factory=lambda: datetime.now(UTC))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        for kind, vendor, value in self.script:
            if kind == 'cite':
                events = self._parts_manager.handle_text_delta(
                    vendor_part_id=vendor, content='', citations=cast(list[Citation], value), provider_name='scripted'
                )
            elif kind == 'raw':
                events = self._parts_manager.handle_text_delta(
                    vendor_part_id=vendor, content='', provider_details=cast(dict[str, Any], value)
                )
            elif kind == 'text':
                events = self._parts_manager.handle_text_delta(vendor_part_id=vendor, content=cast(str, value))
            elif kind == 'think':
                events = self._parts_manager.handle_thinking_delta(vendor_part_id=vendor, content=cast(str, value))
            else:
                events = [
                    self._parts_manager.handle_tool_call_part(
                        vendor_part_id=vendor, tool_name=cast(str, value), args='{}'
                    )
                ]
            for event in events:
                yield event

    @property
    def model_name(self) -> str:
        return 'scripted'

    @property
    def provider_name(self) -> str:
        return self.provider

    @property
    def provider_url(self) -> None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._ts


class ScriptedModel(Model):
    """Streams `script`; with `first`, streams that for the run's first request (no tool return yet), e.g. a tool call.

    `provider`: the stream's `provider_name` (see `ScriptedStream.provider`).
    """

    def __init__(self, script: Sequence[Step], *, first: Sequence[Step] | None = None, provider: str = 'scripted'):
        super().__init__()
        self.script = script
        self.first = first
        self.stream_provider = provider

    @property
    def model_name(self) -> str:
        return 'scripted'

    @property
    def system(self) -> str:
        return 'scripted'

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return ModelResponse(parts=[TextPart(''.join(str(v) for k, _, v in self.script if k == 'text'))])

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse, None]:
        _, params = self.prepare_request(model_settings, model_request_parameters)
        looked_up = any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        script = self.first if self.first is not None and not looked_up else self.script
        yield ScriptedStream(model_request_parameters=params, script=script, provider=self.stream_provider)


async def run_messages(agent: Any, prompt: str, *, streamed: bool) -> list[ModelMessage]:
    """The messages of one run of `agent` on `prompt`: `run_stream` to its output, or `run`."""
    if streamed:
        async with agent.run_stream(prompt) as run:
            await run.get_output()
        return cast(list[ModelMessage], run.all_messages())
    return cast(list[ModelMessage], (await agent.run(prompt)).all_messages())
