"""`CleanStaleCitations`: keeps citations in history true to their text inside agent runs.

The work is done by the pure functions of `_edit` (fingerprints, `find_stale`'s pass, repairs, marker stripping);
this module only decides when they run and where their results go. The only state is each run's `_RunState`, kept
by the instance (which `for_run` returns as it is, see `_ledger`) under the run's id from its first model request
until the run ends (`wrap_run`).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, cast

from pydantic_ai import ModelMessage, ModelResponse, TextPart
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import WrapModelRequestHandler
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT, RunContext

from ._checks import require_base_fields
from ._edit import Marked, copy_with, fingerprint_response, repair_history, strip_citation_markers, survey
from ._ledger import AttemptSlots, RunRegistry, record_problems
from ._problems import CitationProblem
from ._wrappers import watch_streams

__all__ = ('CleanStaleCitations',)


@dataclass
class CleanStaleCitations(AbstractCapability[AgentDepsT]):
    """Keep citations in history true to their text: repair edited parts, and clean what goes to other providers.

    - After each model response (and after every capability's `after_model_request`, so changes other capabilities
      make in place are included), each cited text part is fingerprinted in `ModelResponse.metadata` (a short hash of
      its text and anchored spans, never sent to a model), in `run`, `iter`, `run_stream_events` and `run_stream` alike.
    - Before each model request, parts whose text no longer matches their fingerprint (edited outside `edit_text`)
      are repaired in the stored history (`ctx.messages`, like Pydantic AI's `ProcessHistory`), as `on_edit` says,
      and reported as `stale_after_edit` to the run's `TrackCitations`.
    - For each attempt (also each model of a `FallbackModel`, and each candidate of `ModelFallback`), raw citation
      markup in text parts another provider produced is removed from what is sent, as `on_provider_switch` says, and
      reported as `markers_stripped_for_provider`. The stored history keeps it. Parts of the provider serving the
      attempt are sent exactly as Pydantic AI sends them (Anthropic web-search citations, OpenAI Responses
      annotations with their item id).
    """

    _: KW_ONLY
    on_edit: Literal['realign', 'clear'] = 'realign'
    """What to do with the citations of an edited part. Default `'realign'`: keep each citation whose anchored text
    still appears exactly once in the edited text (moved there), drop the others. `'clear'`: drop them all."""
    on_provider_switch: Literal['strip_markers', 'keep'] = 'strip_markers'
    """What to do with raw citation markup in text parts from another provider. Default `'strip_markers'`: remove
    from what is sent exactly this (see `strip_citation_markers`): OpenAI private-use markers (`\\ue200…\\ue201`),
    `【…†…】` markers, Anthropic-style cite tags (`<cite …>` or `(cite …>` and `</cite>`; the cited words stay), and
    numbered markers (Perplexity's `[1]` / `[1, 2]`, xAI's `[[1]](url)`) in a part with a citation marker-anchored on
    one (elsewhere `[1]` may be prose and is kept); also one space before a removed marker where it separated a word
    from punctuation. Citations are shifted to the shorter text; one anchored on removed markup is dropped. `'keep'`:
    send the text as stored."""
    _runs: RunRegistry[_RunState] = field(
        default_factory=lambda: RunRegistry[_RunState](), init=False, repr=False, compare=False
    )
    """Each running run's state, by `run_id`: made by its first model request, released when the run ends."""
    _attempt: AttemptSlots[_RunState] = field(
        default_factory=lambda: AttemptSlots[_RunState](), init=False, repr=False, compare=False
    )
    """The run of the attempt `get_wrapper_model` is about to wrap (set by `prepare_model_request`)."""

    def __post_init__(self) -> None:
        if self.on_edit not in ('realign', 'clear'):
            raise UserError(f"`on_edit` must be 'realign' or 'clear', got {self.on_edit!r}.")
        if self.on_provider_switch not in ('strip_markers', 'keep'):
            raise UserError(f"`on_provider_switch` must be 'strip_markers' or 'keep', got {self.on_provider_switch!r}.")
        require_base_fields(self)

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> CleanStaleCitations[AgentDepsT]:
        return self  # no per-run copy (see `_ledger`): a run's state is kept by `run_id` in `_runs`

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: Callable[[], Awaitable[AgentRunResult[Any]]]
    ) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:  # however the run ends (also a run stopped early): its state goes with it
            self._runs.take(ctx.run_id)

    def _run_state(self, ctx: RunContext[AgentDepsT]) -> _RunState:
        if ctx.run_id is None:  # pragma: no cover - Pydantic AI gives every run an id
            return _RunState()
        return self._runs.setdefault(ctx.run_id, _new_run_state)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        state = self._run_state(ctx)
        stored = ctx.messages
        marked: Marked | None = [] if self.on_provider_switch == 'strip_markers' else None
        replaced, problems = repair_history(stored, self.on_edit, marked)
        # One pass serves both hooks: `prepare_model_request` reuses the marked parts while they still describe
        # the messages it is given (checked by identity), and surveys again otherwise.
        state.marked = (len(stored), marked) if marked is not None and not replaced else None
        if not replaced:
            return request_context
        by_identity: dict[int, ModelResponse] = {}
        for index, response in replaced.items():
            by_identity[id(stored[index])] = response
            stored[index] = response  # in the stored history, like `ProcessHistory`
        request_context.messages = [
            by_identity.get(id(m), m) if isinstance(m, ModelResponse) else m for m in request_context.messages
        ]
        if ctx.run_id is not None:
            record_problems(ctx, problems)
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        state = self._run_state(ctx)
        state.ctx = ctx
        state.streaming = request_context.streaming
        model = request_context.model
        # For `get_wrapper_model`, called next for this attempt: it watches a streamed attempt's stream, and with
        # 'strip_markers' it cleans for each model of a `FallbackModel`.
        fallback = self.on_provider_switch == 'strip_markers' and _has_fallback(model)
        self._attempt.put(state if state.streaming or fallback else None)
        if self.on_provider_switch == 'keep' or isinstance(model, FallbackModel):
            return request_context  # a `FallbackModel`'s models are each cleaned by `get_wrapper_model`
        messages, problems = _strip_for(model, request_context.messages, state.marked_for(request_context.messages))
        if messages is not None:
            request_context.messages = messages  # a copy: the stored history keeps the markup
            record_problems(ctx, problems)  # to the run's `TrackCitations`
        return request_context

    def get_wrapper_model(self, model: Model) -> Model | None:
        if (state := self._attempt.take()) is None:  # what `prepare_model_request` left for this attempt
            return None
        inner = model
        if self.on_provider_switch == 'strip_markers':
            # `FallbackModel` tries its models inside one attempt, so `prepare_model_request` never sees them:
            # clean for each of them where it sends the request.
            inner = _clean_fallback(model, state)
        if not state.streaming:  # `Model.request` gets no stream to watch: no layer for it
            return inner if inner is not model else None
        return watch_streams(inner, state.streams.append)

    async def wrap_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        response = await handler(request_context)
        # Fingerprinted here, after every capability's `after_model_request` (they run inside `handler`, in an
        # order set by the agent's capability list): a capability that changes the response in place (as
        # `TrackCitations` does) has done so by now.
        state = self._runs.get(ctx.run_id)
        streams = state.streams if state is not None else []
        stream = None
        if response.metadata is not None and streams:
            stream = next((s for s in streams if s.metadata is response.metadata), None)
        if stream is not None:
            streams.remove(stream)
        fingerprint_response(response)
        if stream is not None and response.metadata == {}:
            # The slot opened for a streamed response that needed no fingerprint: leave no trace.
            stream.metadata = None
            response.metadata = None
        return response


def _new_run_state() -> _RunState:
    return _RunState(streams=[])  # (given, not left to the factory: see `RequestRecord.start`)


@dataclass
class _RunState:
    """What one run's hooks share with each other and with the model wrappers they return; dropped with the run."""

    ctx: RunContext[Any] | None = None
    """The run's context, so problems found by the model wrappers reach the run's `TrackCitations`."""
    streaming: bool = True
    """Whether the current attempt is streamed (set by `prepare_model_request`)."""
    streams: list[StreamedResponse] = field(default_factory=list[StreamedResponse])
    marked: tuple[int, Marked] | None = None
    """This step's survey of text parts that may hold markup: (length of the history surveyed, parts)."""

    def marked_for(self, messages: Sequence[ModelMessage]) -> Marked | None:
        if self.marked is None or self.marked[0] != len(messages):
            return None
        return self.marked[1]


def _candidates(messages: Sequence[ModelMessage], marked: Marked | None) -> Marked:
    """The parts of `messages` that may hold markup: `marked` while it still describes `messages`, else a new survey."""
    if marked is not None:
        n = len(messages)
        if all(i < n and messages[i] is m and m.parts[j] is p for i, m, j, p, _ in marked):
            return marked
    fresh: Marked = []
    survey(messages, fresh, anchors=False)
    return fresh


def _strip_for(
    model: Model, messages: Sequence[ModelMessage], marked: Marked | None = None
) -> tuple[list[ModelMessage] | None, list[CitationProblem]]:
    """`messages` with markup stripped from parts `model` does not accept as its own, or `None` if none had any."""
    problems: list[CitationProblem] = []
    new_parts: dict[int, list[Any]] = {}
    destination = ''
    accepts = _accepts(model)
    for message_index, message, part_index, part, markup in _candidates(messages, marked):
        if accepts(message, part):
            continue  # the same provider: sent exactly as Pydantic AI would send it
        stripped, removed = strip_citation_markers(part, markup)
        if not removed:
            continue
        new_parts.setdefault(message_index, list(message.parts))[part_index] = stripped
        destination = destination or f'{model.system!r} ({model.model_name})'
        problems.append(
            CitationProblem(
                'markers_stripped_for_provider',
                f'{len(removed)} raw citation marker(s) of provider {part.provider_name!r} were removed from '
                f'what is sent to {destination}; the stored history keeps them.',
                message_index=message_index,
                part_index=part_index,
                start=removed[0][0],
                end=removed[0][1],
            )
        )
    if not new_parts:
        return None, problems
    out = list(messages)
    for message_index, parts in new_parts.items():
        message = out[message_index]
        assert isinstance(message, ModelResponse)
        out[message_index] = copy_with(message, parts=cast('list[TextPart]', parts))
    return out, problems


def _accepts(model: Model) -> Callable[[ModelResponse, TextPart], bool]:
    """`model.accepts_stateless_artifacts`, asked once per provider of a history.

    Pydantic AI's own method reads only the model's systems and the names, `canonical_system` and `provider_url` that
    say where the part came from: its answer is kept by those. A model that overrides the method is asked every time.
    """
    if type(model).accepts_stateless_artifacts is not Model.accepts_stateless_artifacts:
        return model.accepts_stateless_artifacts
    answers: dict[tuple[str | None, str | None, str | None, str | None], bool] = {}

    def accepts(response: ModelResponse, part: TextPart) -> bool:
        key = (part.provider_name, response.provider_name, response.canonical_system, response.provider_url)
        try:
            answer = answers.get(key)
        except TypeError:  # a hand-built part or response with a name that is not text: asked as it is
            return model.accepts_stateless_artifacts(response, part)
        if answer is None:
            answer = answers[key] = model.accepts_stateless_artifacts(response, part)
        return answer

    return accepts


def _layers(model: Model) -> tuple[list[WrapperModel], Model]:
    """The `WrapperModel` layers around `model`'s innermost model, outermost first, and that model."""
    layers: list[WrapperModel] = []
    while isinstance(model, WrapperModel):
        layers.append(model)
        model = model.wrapped
    return layers, model


def _has_fallback(model: Model) -> bool:
    """Whether `model` is a `FallbackModel`, or wraps one (through `WrapperModel` layers)."""
    return isinstance(_layers(model)[1], FallbackModel)


def _clean_fallback(model: Model, state: _RunState) -> Model:
    """`model` with each model of its `FallbackModel` wrapped in `_CleanForProvider`, or `model` if it has none.

    The `FallbackModel` is looked for through `WrapperModel` layers: capabilities listed after this one (such as
    `TrackCitations`, whose `StreamWatch` watches streamed requests by default) wrap the model first. Those layers are
    shallow-copied around the cleaned copy; the agent's model is left as it is.
    """
    layers, inner = _layers(model)
    if not isinstance(inner, FallbackModel):
        return model
    clone = copy.copy(inner)
    clone.models = [_CleanForProvider(m, state) for m in inner.models]
    rebuilt: Model = clone
    for layer in reversed(layers):
        outer = copy.copy(layer)
        outer.wrapped = rebuilt
        rebuilt = outer
    return rebuilt


class _CleanForProvider(WrapperModel):
    """One model of a `FallbackModel`: strips other providers' markup from what it is sent."""

    def __init__(self, wrapped: Model, state: _RunState) -> None:
        super().__init__(wrapped)
        self._state = state

    def _clean(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        cleaned, problems = _strip_for(self.wrapped, messages, self._state.marked_for(messages))
        if cleaned is None:
            return messages
        record_problems(self._state.ctx, problems)
        return cleaned

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await self.wrapped.request(self._clean(messages), model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with self.wrapped.request_stream(
            self._clean(messages), model_settings, model_request_parameters, run_context
        ) as stream:
            yield stream
