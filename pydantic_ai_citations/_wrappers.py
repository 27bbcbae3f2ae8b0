"""`StreamWatch`: the one pass-through model wrapper this package's capabilities return from `get_wrapper_model`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import ModelMessage, RunContext
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

__all__ = ('StreamWatch', 'watch_streams')

OnStream = Callable[[StreamedResponse], None]


class StreamWatch(WrapperModel):
    """Pass-through wrapper that hands each streamed response to its callbacks and gives it a `metadata` dict.

    `agent.run_stream()` records a response rebuilt from the stream (`StreamedResponse.get()`), not the one
    `after_model_request` returns, and `get()` passes `StreamedResponse.metadata` by reference: a dict put there
    before the hook runs, and filled in place by it (fingerprints), is what `run_stream` history carries. Cost: a
    streamed response with nothing to record may end up with `metadata={}` instead of `None`.
    """

    def __init__(self, wrapped: Model, *on_stream: OnStream) -> None:
        super().__init__(wrapped)
        self.on_stream = on_stream
        """Called in order with each streamed response, before it is iterated."""

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
            for on_stream in self.on_stream:
                on_stream(stream)
            yield stream


def watch_streams(model: Model, on_stream: OnStream) -> StreamWatch:
    """`model` wrapped to hand its streamed responses to `on_stream`.

    When `model` is already a `StreamWatch` (another of the package's capabilities wrapped this attempt's model just
    before: `get_wrapper_model` is called per attempt), one layer serves both: a new `StreamWatch` around the same
    model calls the earlier callbacks first, as nested layers would (the inner layer sees the stream first).
    """
    if isinstance(model, StreamWatch):
        return StreamWatch(model.wrapped, *model.on_stream, on_stream)
    return StreamWatch(model, on_stream)
