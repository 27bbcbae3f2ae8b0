"""`StreamWatch`: the one pass-through model wrapper this package's capabilities return from `get_wrapper_model`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import ModelMessage, RunContext
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

__all__ = ('StreamWatch',)


class StreamWatch(WrapperModel):
    """Pass-through wrapper that hands each streamed response to `on_stream` and gives it a `metadata` dict.

    `agent.run_stream()` records a response rebuilt from the stream (`StreamedResponse.get()`), not the one
    `after_model_request` returns, and `get()` passes `StreamedResponse.metadata` by reference: a dict put there
    before the hook runs, and filled in place by it (fingerprints), is what `run_stream` history carries. Cost: a
    streamed response with nothing to record may end up with `metadata={}` instead of `None`.
    """

    def __init__(self, wrapped: Model, on_stream: Callable[[StreamedResponse], None]) -> None:
        super().__init__(wrapped)
        self._on_stream = on_stream

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            if stream.metadata is None:
                stream.metadata = {}
            self._on_stream(stream)
            yield stream
