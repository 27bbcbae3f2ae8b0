"""`TrackCitations`: observe how citations reach each run, and turn a finished run into a `CitedRun`.

Hooks used, and why:

- `prepare_model_request` runs once per *attempt*, with the model that will actually serve it (also under
  `FallbackModel` and retries), so that is where the serving model, output mode and citations setting are read.
- `get_wrapper_model` wraps the model serving a streamed request in a pass-through `StreamWatch` (`_wrappers.py`)
  that remembers the provider's `StreamedResponse` (a request that is not streamed gets no wrapper). When a citations
  delta passes through the event stream, the response's `finish_reason` tells whether the provider had already
  finished its response (citations flushed at `'response_end'`, as OpenAI Chat, OpenRouter, Google and xAI do) or was
  still inside the part (`'part_end'`, as Anthropic, Bedrock and OpenAI Responses do). Events alone cannot tell the
  two apart for a single-part answer.
- `wrap_run_event_stream` is a pass-through generator that looks at `PartStartEvent`, `PartDeltaEvent` and
  `PartEndEvent` only: about 4 % overhead on a 2,000-delta stream, where an `on_event` listener costs about 12 %.
  It is applied to every streamed node (`run_stream`, `run_stream_events`, `iter` + `node.stream`, an
  `event_stream_handler`). The `has_wrap_run_event_stream` property is overridden to `False` so that a plain
  `agent.run()` is *not* switched to streaming just because this capability is present: a non-streamed request is
  recorded as `'response'` and goes on the wire exactly as it would without the capability.
- `after_model_request` finalises the request's observation and has `_recover.recover_in_place` map raw formats
  *in place* (`agent.run_stream()` rebuilds its history from the parts manager, so only in-place changes to the part
  objects are visible there). Under `run_stream` Pydantic AI calls it only when the `async with` block is left, so
  for a streamed request `wrap_run_event_stream` already recovers once the events have been read to their end, on
  the parts `StreamedResponse.get()` hands over (the very objects every later `get()` and the history hold), and
  `after_model_request` skips those parts. Recovery adds nothing a part already holds, so running it twice on a
  rebuilt copy never duplicates a citation.

`for_run` returns the instance itself (a new instance would make Pydantic AI rebuild the run's capability tree on
every run, see `_ledger`): it opens the run's `RunRecord` in the instance's bounded `RunRegistry`, where each hook
finds it by `ctx.run_id`, until `report(result)` / `report_run(run_id)` takes it. Whether the answer is complete is
decided by `_answer.incomplete_reason` alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import NoneType
from typing import Any, Protocol, cast

from opentelemetry import trace
from opentelemetry.trace import NoOpTracer
from pydantic_ai import (
    DocumentCitationSource,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    RunContext,
    TextPart,
    TextPartDelta,
    WebCitationSource,
)
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.models import Model, ModelRequestContext, StreamedResponse
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings

from ._answer import run_messages
from ._checks import (
    require,
    require_agent,
    require_base_fields,
    require_bools,
    require_mapping,
    require_messages,
    require_optional_bools,
    require_result,
    shown,
)
from ._guard import OutputModeCheck
from ._ledger import AttemptSlots, RunRegistry
from ._models import describe_serving_model
from ._observation import (
    Arrival,
    CitedRun,
    ObservationSink,
    PartArrival,
    RequestObservation,
    RequestRecord,
    RunRecord,
    cited_run,
    cited_run_ta,
    current,
    observe,
    partial_response,
    record_citations_delta,
    telemetry_attributes,
)
from ._problems import CitationProblem
from ._recover import MarkerSources, raw_annotations_problem, record_whole_body, recover_in_place
from ._tap import AnthropicTap, CohereTap, MistralTap, PerplexityTap
from ._wrappers import watch_streams
from .formats.markup import MARKER_START
from .formats.openai_placement import check_marker_placement
from .formats.unmapped import RAW_ANNOTATIONS_SETTING

__all__ = (
    'Arrival',
    'CitedRun',
    'ObservationSink',
    'PartArrival',
    'RequestObservation',
    'TrackCitations',
    'cited_run_ta',
    'telemetry_attributes',
)


class _RunResult(Protocol):
    @property
    def run_id(self) -> str: ...

    def all_messages(self) -> list[ModelMessage]: ...


@dataclass
class TrackCitations(AbstractCapability[Any]):
    """Record, per run, which model served each request and when each text part's citations arrived.

    ```python
    track = TrackCitations()
    agent = Agent(model, capabilities=[track])
    result = await agent.run('…')
    run = track.report(result)  # CitedRun: .answer (CitedAnswer), .requests, .problems
    ```

    Works the same for `run`, `run_sync`, `run_stream`, `iter` and `run_stream_events` (pass their result, or the
    `run_id` you gave the run to `report_run`). Adding it never switches a plain `agent.run()` to streaming. For an
    agent built elsewhere (`Agent.from_spec(..., custom_capability_types=[TrackCitations])`), get the instance with
    `TrackCitations.of(agent)`. What the application does after the run (page snapshots:
    `support.capture_answer(store, run.answer)`) is a call of its own.
    """

    _: KW_ONLY
    matrix: ObservationSink | None = None
    """A `CapabilityMatrix` (or any `ObservationSink`) to add `'observed'` evidence to. Default `None`: nothing is shared."""
    perplexity_tap: PerplexityTap | None = None
    """The `PerplexityTap` your Perplexity (Agent API) provider's HTTP client was made with
    (`perplexity_http_client(tap)`): its search results become `[N]` citations on the text, and a stream it saw end
    without `response.completed` makes the answer incomplete. Default `None`."""
    cohere_tap: CohereTap | None = None
    """The `CohereTap` your `CohereProvider`'s cohere client was made with (`httpx_client=cohere_http_client(tap)`):
    the Cohere v2 citations `CohereModel` drops become citations on the text. Default `None`."""
    anthropic_tap: AnthropicTap | None = None
    """The `AnthropicTap` your `AnthropicProvider`'s HTTP client was made with (`anthropic_http_client(tap)`): text
    blocks cited only by `search_result_location` (which Pydantic AI drops without a trace) get their citations.
    Default `None`: such a block then keeps no citation, and as Pydantic AI keeps no raw data or event of it either,
    nothing tells that it was cited, so no problem can be recorded."""
    mistral_tap: MistralTap | None = None
    """The `MistralTap` your Mistral client's async HTTP client was made with (`async_client=mistral_http_client(tap)`):
    the `reference` content chunks `MistralModel` drops are listed in the answer's `raw_only`, with their offsets.
    Default `None`: a Mistral answer then carries a problem saying reference chunks cannot be seen."""
    marker_sources: MarkerSources | None = None
    """Sources by id for OpenAI-style private-use markers (`\\ue200cite\\ue202<id>\\ue201`) that a model writes when
    it was given sources rendered with `formats.openai_markers.render_source`: a mapping, or a function of the run
    context returning one. Each marker becomes a citation anchored on the sentence it closes, and the markers are
    removed from the part's text (in place). Unknown ids become `unresolved_marker` problems. Default `None`: the
    markers stay in the stored text and every answer built from it (`CitedAnswer`, `stream_cited`) removes them and
    records each as a problem."""
    recover_raw: bool = True
    """Map citation data Pydantic AI leaves raw onto `TextPart.citations`, in place (Perplexity Sonar `[N]` markers,
    Anthropic `search_result_location`, …). Default `True`."""
    observe_stream_end: bool = True
    """Wrap the serving model to tell `'part_end'` from `'response_end'` arrival. Default `True`. Turn off under durable
    execution (Temporal, DBOS, Prefect reject model wrappers); arrival before `PartEndEvent` is then `'part_end'`, and
    under `run_stream` recovery (taps included) runs only when the `async with` block is left, as there is no streamed
    response to recover from when the stream ends."""
    id: str | None = 'track_citations'
    """One per agent by default; pass a distinct id to keep two."""

    _output_mode: OutputModeCheck = field(default_factory=OutputModeCheck, init=False, repr=False, compare=False)
    _runs: RunRegistry[RunRecord] = field(default_factory=RunRegistry[RunRecord], init=False, repr=False, compare=False)
    """Runs of this instance whose report was not taken yet, each with what was recorded of it."""
    _watch: AttemptSlots[RunRecord] = field(
        default_factory=AttemptSlots[RunRecord], init=False, repr=False, compare=False
    )
    """The run of a streamed attempt whose stream `get_wrapper_model` watches (set by `prepare_model_request`)."""

    def __post_init__(self) -> None:
        # Checked here so that a wrong value (also from an agent spec) fails when the agent is built, not mid-run.
        if self.matrix is not None and not callable(getattr(self.matrix, 'add_observation', None)):
            raise UserError(
                f'TrackCitations: `matrix` must be a `CapabilityMatrix` (any object with `add_observation`) or None, '
                f'got {shown(self.matrix)}.'
            )
        require(
            'TrackCitations',
            'perplexity_tap',
            self.perplexity_tap,
            (PerplexityTap, NoneType),
            'a `PerplexityTap` or None',
        )
        require('TrackCitations', 'cohere_tap', self.cohere_tap, (CohereTap, NoneType), 'a `CohereTap` or None')
        require(
            'TrackCitations', 'anthropic_tap', self.anthropic_tap, (AnthropicTap, NoneType), 'an `AnthropicTap` or None'
        )
        require('TrackCitations', 'mistral_tap', self.mistral_tap, (MistralTap, NoneType), 'a `MistralTap` or None')
        if self.marker_sources is not None and not callable(self.marker_sources):
            require_mapping(
                'TrackCitations',
                'marker_sources',
                self.marker_sources,
                str,
                (WebCitationSource, DocumentCitationSource),
                'a mapping of marker id (str) to `WebCitationSource` / `DocumentCitationSource`, a function of the '
                'run context returning one, or None',
            )
        require_bools('TrackCitations', recover_raw=self.recover_raw, observe_stream_end=self.observe_stream_end)
        require_base_fields(self)

    @classmethod
    def of(cls, agent: AbstractAgent[Any, Any], *, id: str | None = None) -> TrackCitations:
        """The `TrackCitations` instance of `agent` (e.g. one built with `Agent.from_spec`), to call `report` on.

        Args:
            agent: The agent.
            id: The capability's `id` when the agent has more than one.

        Raises:
            UserError: `agent` is not an agent, or it has none, or several and `id` does not pick one.
        """
        require_agent(agent, where='TrackCitations.of')
        found: list[TrackCitations] = []

        def visit(capability: AbstractCapability[Any]) -> None:
            if isinstance(capability, cls) and (id is None or capability.id == id):
                found.append(capability)

        agent.root_capability.apply(visit)
        if len(found) == 1:
            return found[0]
        which = f' with id {id!r}' if id is not None else ''
        if not found:
            raise UserError(f'The agent has no `TrackCitations` capability{which}; add `TrackCitations()` to it.')
        raise UserError(f'The agent has {len(found)} `TrackCitations` capabilities; pass `id=` to pick one.')

    @property
    def has_wrap_run_event_stream(self) -> bool:
        # Pydantic AI switches a plain `agent.run()` to streaming when a capability overrides
        # `wrap_run_event_stream` (2.68: `run.py:748`). Tracking must not change what goes on the wire, so report
        # `False`: the wrapper is still applied to every node that is streamed (the combined capability calls each
        # child's `wrap_run_event_stream` regardless of this flag).
        return False

    def get_model_settings(self) -> Callable[[RunContext[Any]], ModelSettings] | None:
        # OpenAI models keep `container_file_citation` (code interpreter files) only as raw annotations: turn them on
        # so recovery can map them, unless the application chose a value itself. Other models ignore the key.
        if not self.recover_raw:
            return None
        return _raw_annotations_setting

    async def for_run(self, ctx: RunContext[Any]) -> TrackCitations:
        run_id = ctx.run_id or _new_run_id()
        self._runs.add(run_id, RunRecord(run_id, [], [], set()))  # (explicit: see `RequestRecord.start`)
        return self  # the same instance: its hooks find the run's record by `ctx.run_id`

    def add_run_problems(self, run_id: str | None, problems: Iterable[CitationProblem]) -> int:
        """Take problems the package's other capabilities found during a run (see `_ledger.record_problems`)."""
        if (state := self._runs.get(run_id)) is None:
            return 0
        with state.lock:
            new = list(dict.fromkeys(p for p in problems if p not in state.seen))  # (problems are values)
            state.problems.extend(new)
            state.seen.update(new)
        return len(new)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if (state := self._runs.get(ctx.run_id)) is not None:
            request = RequestRecord.start(request_context)
            with state.lock:
                state.requests.append(request)
            problem = self._output_mode(ctx, request_context)
            if problem is not None:
                self.add_run_problems(state.run_id, [problem])
            # Only a streamed attempt is watched: for one that is not, the agent calls `Model.request`, which a
            # `StreamWatch` only passes through, so no layer (and no per-request wrapper scope) is added.
            self._watch.put(state if request.streamed and self.observe_stream_end else None)
        return request_context

    def get_wrapper_model(self, model: Model) -> Model | None:
        if (run := self._watch.take()) is None:  # what `prepare_model_request` left for this attempt
            return None

        def watch(stream: StreamedResponse) -> None:
            if (request := current(run)) is not None:
                request.stream = stream

        return watch_streams(model, watch)

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterable[AgentStreamEvent]:
        state = self._runs.get(ctx.run_id)
        if state is None:  # pragma: no cover - a run this instance did not open (or whose report was taken)
            async for event in stream:
                yield event
            return
        request: RequestRecord | None = None
        exhausted = False
        # (No `on_model_request_error` hook: overriding it puts every streamed request on Pydantic AI's slower
        # error-recovery path, ~30 % on a 2,000-delta stream. A failed attempt simply never finishes.)
        try:
            # Hot path: a couple of isinstance checks per event; only part events touch state.
            async for event in stream:
                if isinstance(event, PartDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, TextPartDelta) and delta.citations_delta is not None:
                        request = request or current(state)
                        if request is not None:
                            record_citations_delta(request, event.index, bool(delta.content_delta))
                elif isinstance(event, PartStartEvent):
                    request = request or current(state)
                    if request is not None and isinstance(event.part, TextPart) and event.part.citations:
                        request.arrivals[event.index] = 'with_text'
                elif isinstance(event, PartEndEvent):
                    request = request or current(state)
                    if request is not None:
                        request.ended.add(event.index)
                yield event
            exhausted = True
        except BaseException as error:
            if request is not None:
                request.error = f'{type(error).__name__}: {error}'
            raise
        finally:
            if request is not None and not request.finished:
                self._stream_ended(ctx, request, exhausted=exhausted)

    def _stream_ended(self, ctx: RunContext[Any], request: RequestRecord, *, exhausted: bool) -> None:
        """The event stream of a request `after_model_request` has not seen yet ended: read to its end, or not."""
        if exhausted:
            self._recover_at_stream_end(ctx, request)
            return
        request.closed_early = True
        if request.stream is not None and request.response is None:
            request.response = partial_response(request.stream)

    def _recover_at_stream_end(self, ctx: RunContext[Any], request: RequestRecord) -> None:
        """Recover when the event stream has been read to its end, before `after_model_request` runs.

        Under `run_stream`, Pydantic AI calls `after_model_request` only when the `async with` block is left, and its
        history holds `StreamedResponse.get()`: a new `ModelResponse` of the very part objects. Recovering in place on
        those parts now means an answer read inside the block holds what recovery (taps included) finds;
        `after_model_request` then finds the parts recovered (`_recovered_already`). Without a stream (the model was
        not wrapped: `observe_stream_end=False`), recovery waits for `after_model_request`.
        """
        if request.stream is None or (response := partial_response(request.stream)) is None:
            return
        model = ctx.model
        if (request.info.api == 'other' or request.info.model_class == 'FallbackModel') and isinstance(model, Model):
            # (as `after_model_request` does with the request's model: the response names the model that served it)
            request.info = describe_serving_model(
                cast('Model[Any]', model), response.model_name, response.provider_name
            )
        self._recover(ctx, request, response)
        request.recovered_parts = list(response.parts)
        request.response = response
        request.read_to_end = True

    def _recover(self, ctx: RunContext[Any], request: RequestRecord, response: ModelResponse) -> None:
        """Check marker placement and map raw formats onto `response`'s parts, in place (`_recover.recover_in_place`)."""
        sources = self.marker_sources(ctx) if callable(self.marker_sources) else self.marker_sources
        for index, part in enumerate(response.parts):  # where markers stand, before recovery removes them
            if isinstance(part, TextPart) and MARKER_START in part.content:  # (it reports unknown ids itself)
                self.add_run_problems(ctx.run_id, check_marker_placement(part.content, part_index=index))
        recovery = recover_in_place(
            response,
            api=request.info.api,
            marker_sources=sources,
            raw=self.recover_raw,
            tap=self.perplexity_tap,
            cohere_tap=self.cohere_tap,
            anthropic_tap=self.anthropic_tap,
            mistral_tap=self.mistral_tap,
        )
        for index, count in recovery.added.items():
            request.recovered[index] = count
            request.arrivals.setdefault(index, 'response_end' if request.streamed else 'response')
        self.add_run_problems(ctx.run_id, recovery.problems)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        if (state := self._runs.get(ctx.run_id)) is None or (request := current(state)) is None:
            return response
        request.response = response
        request.finished = True
        if request.info.api == 'other' or request.info.model_class == 'FallbackModel':
            request.info = describe_serving_model(request_context.model, response.model_name, response.provider_name)
        if not _recovered_already(request, response):
            self._recover(ctx, request, response)
        if self.recover_raw and (problem := raw_annotations_problem(request.info.api, request_context.model_settings)):
            self.add_run_problems(state.run_id, [problem])
        if not request.streamed:
            record_whole_body(response)
        if self.matrix is not None:
            request.observation = observe(request)
            self.matrix.add_observation(request.observation)
        # Otherwise the observation is made when it is needed (`report`, telemetry), from the same record, or here
        # for an earlier finished request before its response is released: a report needs only the last response
        # (issue 15.7).
        for earlier in state.requests[:-1]:
            if earlier.finished and earlier.observation is None:
                earlier.observation = observe(earlier)
            earlier.response = earlier.stream = None
        return response

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        # Telemetry: when the agent is instrumented, the run's span is current here; annotate it. No-op otherwise
        # (an agent that is not instrumented runs with a no-op tracer: nothing to look up).
        if type(ctx.tracer) is NoOpTracer:
            return result
        state = self._runs.get(ctx.run_id)
        span = trace.get_current_span()
        if state is not None and span.is_recording():
            span.set_attributes(telemetry_attributes(cited_run(state, result.all_messages())))
        return result

    def report(self, result: _RunResult) -> CitedRun:
        """The run's `CitedRun`, from the result of `run`, `run_sync`, `run_stream`, `iter` or `run_stream_events`.

        The answer is complete only when the provider's finishing signal arrived (see `CitedAnswer.complete`); a run
        stopped early keeps the text that arrived. Taking the report releases what this instance kept of the run.

        Raises:
            UserError: this instance never saw the run (the agent that ran it has another `TrackCitations`, or none;
                use `TrackCitations.of(agent)`), or its report was already taken.
        """
        require_result(result, where='TrackCitations.report')
        state = self._take(result.run_id)
        messages, stopped = run_messages(result, state.requests[-1].response if state.requests else None)
        return cited_run(state, messages, complete=False if stopped else None)

    def report_run(
        self, run_id: str, messages: Sequence[ModelMessage] | None = None, *, complete: bool | None = None
    ) -> CitedRun:
        """The `CitedRun` of a run by its `run_id`, for runs that ended without a result (cancelled, broken stream).

        Args:
            run_id: The run's id (`agent.run(..., run_id=...)` sets it; results expose it as `.run_id`).
            messages: The run's messages; defaults to the last response this capability saw (partial if it broke).
            complete: Pass `False` if you know the run did not complete.

        Raises:
            UserError: this instance never saw a run with this id, or its report was already taken; or `run_id` is
                not a str, `messages` not a list of messages, `complete` not a bool or `None`.
        """
        where = 'TrackCitations.report_run'
        require(where, 'run_id', run_id, str, "the run's id (a string; for a result use `report`)")
        if messages is not None:
            require_messages(messages, where=where)
        require_optional_bools(where, complete=complete)
        state = self._take(run_id)
        if messages is None:
            last = state.requests[-1].response if state.requests else None
            messages = [last] if last is not None else []
        return cited_run(state, messages, complete=complete)

    def _take(self, run_id: str) -> RunRecord:
        state = self._runs.take(run_id)
        if state is not None:
            return state
        raise UserError(
            f'This `TrackCitations` has no record of run {run_id!r}: it was not run by an agent with this instance '
            "among its capabilities (get the agent's own with `TrackCitations.of(agent)`), or its report was "
            'already taken.'
        )


def _recovered_already(request: RequestRecord, response: ModelResponse) -> bool:
    """Whether recovery already ran on `response`'s parts (or equal copies) when its event stream ended.

    Forgets those parts either way. Other parts (another capability rebuilt the response) are recovered again;
    recovery adds nothing a part already holds, so that never duplicates a citation.
    """
    done, request.recovered_parts = request.recovered_parts, None
    parts = response.parts
    return (
        done is not None and len(done) == len(parts) and all(a is b or a == b for a, b in zip(done, parts, strict=True))
    )


def _raw_annotations_setting(ctx: RunContext[Any]) -> ModelSettings:
    if ctx.model_settings is not None and RAW_ANNOTATIONS_SETTING in ctx.model_settings:
        return {}
    return cast(ModelSettings, {RAW_ANNOTATIONS_SETTING: True})


def _new_run_id() -> str:
    import uuid

    return str(uuid.uuid4())
