"""`TrackCitations`: observe how citations reach each run, and turn a finished run into a `CitedRun`.

Hooks used, and why:

- `prepare_model_request` runs once per *attempt*, with the model that will actually serve it (also under
  `FallbackModel` and retries), so that is where the serving model, output mode and citations setting are read.
- `get_wrapper_model` wraps the serving model in a pass-through `StreamWatch` (`_wrappers.py`) that remembers the
  provider's `StreamedResponse` when a request is streamed. When a citations delta passes through the event stream,
  the response's `finish_reason` tells whether the provider had already finished its response (citations flushed at
  `'response_end'`, as OpenAI Chat, OpenRouter, Google and xAI do) or was still inside the part (`'part_end'`, as
  Anthropic, Bedrock and OpenAI Responses do). Events alone cannot tell the two apart for a single-part answer.
- `wrap_run_event_stream` is a pass-through generator that looks at `PartStartEvent`, `PartDeltaEvent` and
  `PartEndEvent` only: about 4 % overhead on a 2,000-delta stream, where an `on_event` listener costs about 12 %.
  It is applied to every streamed node (`run_stream`, `run_stream_events`, `iter` + `node.stream`, an
  `event_stream_handler`). The `has_wrap_run_event_stream` property is overridden to `False` so that a plain
  `agent.run()` is *not* switched to streaming just because this capability is present: a non-streamed request is
  recorded as `'response'` and goes on the wire exactly as it would without the capability.
- `after_model_request` finalises the request's observation and has `_recover.recover_in_place` map raw formats
  *in place* (`agent.run_stream()` rebuilds its history from the parts manager, so only in-place changes to the part
  objects are visible there).

Per-run state lives on the instance `for_run` returns; the agent-level instance keeps each run's state in a bounded
`RunRegistry` until `report(result)` / `report_run(run_id)` takes it, so reporting works from the agent-level
instance after the run. Whether the answer is complete is decided by `_answer.incomplete_reason` alone.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, Protocol

from opentelemetry import trace
from pydantic import TypeAdapter
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

from ._answer import CitedAnswer, incomplete_reason, run_messages
from ._guard import OutputModeCheck
from ._ledger import RunRegistry
from ._models import ApiLabel, ModelInfo, describe_model, describe_serving_model
from ._problems import CitationProblem
from ._recover import record_whole_body, recover_in_place
from ._wrappers import StreamWatch
from .formats.perplexity import PerplexityTap

MarkerSources = (
    Mapping[str, 'WebCitationSource | DocumentCitationSource']
    | Callable[[RunContext[Any]], Mapping[str, 'WebCitationSource | DocumentCitationSource']]
)
"""Sources by marker id, or a function of the run context returning them (see `TrackCitations.marker_sources`)."""

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

Arrival = Literal['with_text', 'part_end', 'after_part_end', 'response_end', 'none', 'response']
"""When a text part's citations arrived.

- `'with_text'`: in the same event as text (the part's start event, or a delta that also carried text);
- `'part_end'`: in a citations-only delta before the part's `PartEndEvent`, while the provider's response was still open;
- `'after_part_end'`: after the part's `PartEndEvent` (another part had started), so a UI that finalises a part on
  `PartEndEvent` misses them;
- `'response_end'`: before the part's `PartEndEvent`, but only once the provider had finished its whole response;
- `'none'`: the part has no citations;
- `'response'`: a non-streamed request (citations came with the whole response).
"""

AnchorKindSeen = Literal['content', 'marker', 'none']
SourceKindSeen = Literal['web', 'document']


@dataclass(frozen=True)
class PartArrival:
    """What one text part of a response carried, and when its citations arrived."""

    part_index: int
    """Index of the `TextPart` in the response."""
    arrival: Arrival
    """When its citations arrived (see `Arrival`)."""
    citations: int
    """How many citations the part holds at the end of the request."""
    _: KW_ONLY
    anchor_kinds: list[AnchorKindSeen] = field(default_factory=list[AnchorKindSeen])
    """Anchor kind of each citation (`'none'` for a citation without a position)."""
    source_kinds: list[SourceKindSeen] = field(default_factory=list[SourceKindSeen])
    """Kind of each source of each citation, in order."""
    recovered: int = 0
    """How many of the citations this package recovered from raw data Pydantic AI left unmapped."""


@dataclass(frozen=True)
class RequestObservation:
    """One attempt at a model request, as `TrackCitations` saw it."""

    api: ApiLabel
    """The provider API that served it (OpenAI Chat and Responses told apart)."""
    system: str
    """`Model.system` of the serving model."""
    model_name: str
    """`Model.model_name` of the serving model."""
    _: KW_ONLY
    provider_name: str | None = None
    """`ModelResponse.provider_name` of the response, when there was one."""
    streamed: bool
    """Whether the request was streamed."""
    output_mode: str
    """`ModelRequestParameters.output_mode` (`'text'`, `'tool'`, `'native'`, `'prompted'`, …)."""
    citations_requested: bool
    """Whether citations were asked for (`Citations()` or the `citations` model setting)."""
    attempt: int = 1
    """The attempt number (`> 1` after a fallback or retry)."""
    complete: bool = False
    """Whether the response completed: the provider's finishing signal arrived (`_answer.incomplete_reason`), and the
    stream was not cancelled, broken or closed early."""
    error: str | None = None
    """The error that ended the attempt, if any."""
    parts: list[PartArrival] = field(default_factory=list[PartArrival])
    """One entry per `TextPart` of the response."""

    @property
    def text_output(self) -> bool:
        """Whether the output mode was text (the only mode Pydantic AI asks providers for citations in)."""
        return self.output_mode == 'text'


@dataclass(frozen=True)
class CitedRun:
    """A finished (or broken) run's answer plus how its citations got there."""

    run_id: str
    """The agent run's `run_id`."""
    answer: CitedAnswer
    """The run's answer; `answer.complete` is `False` when the last response did not complete."""
    requests: list[RequestObservation] = field(default_factory=list[RequestObservation])
    """Every model request attempt of the run, in order."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """The answer's problems plus those recorded during the run (by this and the package's other capabilities)."""


cited_run_ta: TypeAdapter[CitedRun] = TypeAdapter(CitedRun)
"""JSON round trip for `CitedRun`."""


class ObservationSink(Protocol):
    """Anything that collects request observations, like `CapabilityMatrix`. Must be safe under concurrent runs."""

    def add_observation(self, observation: RequestObservation) -> None:
        """Record one observation."""
        ...


class _RunResult(Protocol):
    @property
    def run_id(self) -> str: ...

    def all_messages(self) -> list[ModelMessage]: ...


@dataclass
class _Request:
    """Mutable state of one attempt, owned by one run."""

    info: ModelInfo
    streamed: bool
    output_mode: str
    citations_requested: bool
    attempt: int
    stream: StreamedResponse | None = None
    ended: set[int] = field(default_factory=set[int])
    arrivals: dict[int, Arrival] = field(default_factory=dict[int, Arrival])
    closed_early: bool = False
    finished: bool = False
    error: str | None = None
    response: ModelResponse | None = None
    recovered: dict[int, int] = field(default_factory=dict[int, int])
    observation: RequestObservation | None = None


@dataclass
class _RunState:
    """What one run's instance records; the agent-level instance keeps it until the report is taken."""

    run_id: str
    requests: list[_Request] = field(default_factory=list[_Request])
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Found during the run by recovery and by the package's other capabilities (`add_run_problems`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


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
    execution (Temporal, DBOS, Prefect reject model wrappers); arrival before `PartEndEvent` is then `'part_end'`."""
    id: str | None = 'track_citations'
    """One per agent by default; pass a distinct id to keep two."""

    _run: _RunState | None = field(default=None, init=False, repr=False, compare=False)
    _output_mode: OutputModeCheck = field(default_factory=OutputModeCheck, init=False, repr=False, compare=False)
    _runs: RunRegistry[_RunState] = field(default_factory=RunRegistry[_RunState], init=False, repr=False, compare=False)
    """Runs of this (agent-level) instance whose report was not taken yet."""

    @classmethod
    def of(cls, agent: AbstractAgent[Any, Any], *, id: str | None = None) -> TrackCitations:
        """The `TrackCitations` instance of `agent` (e.g. one built with `Agent.from_spec`), to call `report` on.

        Args:
            agent: The agent.
            id: The capability's `id` when the agent has more than one.

        Raises:
            UserError: the agent has none, or several and `id` does not pick one.
        """
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

    async def for_run(self, ctx: RunContext[Any]) -> TrackCitations:
        run = dataclasses.replace(self)
        run._output_mode = self._output_mode  # warns once per agent: the agent's instance owns the check
        run._run = _RunState(ctx.run_id or _new_run_id())
        self._runs.add(run._run.run_id, run._run)
        return run

    def add_run_problems(self, problems: Iterable[CitationProblem]) -> None:
        """Take problems the package's other capabilities found during this run (see `_ledger.record_problems`)."""
        if (state := self._run) is not None:
            with state.lock:
                state.problems.extend(p for p in problems if p not in state.problems)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if (state := self._run) is not None:
            settings = request_context.model_settings or {}
            request = _Request(
                describe_model(request_context.model),
                streamed=request_context.streaming,
                output_mode=_output_mode(request_context),
                citations_requested=bool(settings.get('citations', False)),
                attempt=request_context.attempt,
            )
            with state.lock:
                state.requests.append(request)
            problem = self._output_mode(ctx, request_context)
            if problem is not None:
                self.add_run_problems([problem])
        return request_context

    def get_wrapper_model(self, model: Model) -> Model | None:
        if self._run is None or not self.observe_stream_end:
            return None
        run = self._run

        def watch(stream: StreamedResponse) -> None:
            if (request := _current(run)) is not None:
                request.stream = stream

        return StreamWatch(model, watch)

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterable[AgentStreamEvent]:
        state = self._run
        if state is None:  # pragma: no cover - only reachable on the agent-level instance
            async for event in stream:
                yield event
            return
        request: _Request | None = None
        exhausted = False
        # (No `on_model_request_error` hook: overriding it puts every streamed request on Pydantic AI's slower
        # error-recovery path, ~30 % on a 2,000-delta stream. A failed attempt simply never finishes.)
        try:
            # Hot path: a couple of isinstance checks per event; only part events touch state.
            async for event in stream:
                if isinstance(event, PartDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, TextPartDelta) and delta.citations_delta is not None:
                        request = request or _current(state)
                        if request is not None:
                            _record_citations_delta(request, event.index, bool(delta.content_delta))
                elif isinstance(event, PartStartEvent):
                    request = request or _current(state)
                    if request is not None and isinstance(event.part, TextPart) and event.part.citations:
                        request.arrivals[event.index] = 'with_text'
                elif isinstance(event, PartEndEvent):
                    request = request or _current(state)
                    if request is not None:
                        request.ended.add(event.index)
                yield event
            exhausted = True
        except BaseException as error:
            if request is not None:
                request.error = f'{type(error).__name__}: {error}'
            raise
        finally:
            if not exhausted and request is not None and not request.finished:
                request.closed_early = True
                if request.stream is not None and request.response is None:
                    request.response = _partial(request.stream)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        if (state := self._run) is None or (request := _current(state)) is None:
            return response
        request.response = response
        request.finished = True
        if request.info.api == 'other' or request.info.model_class == 'FallbackModel':
            request.info = describe_serving_model(request_context.model, response.model_name, response.provider_name)
        sources = self.marker_sources(ctx) if callable(self.marker_sources) else self.marker_sources
        recovery = recover_in_place(
            response, api=request.info.api, marker_sources=sources, raw=self.recover_raw, tap=self.perplexity_tap
        )
        for index, count in recovery.added.items():
            request.recovered[index] = count
            request.arrivals.setdefault(index, 'response_end' if request.streamed else 'response')
        self.add_run_problems(recovery.problems)
        if not request.streamed:
            record_whole_body(response)
        request.observation = _observe(request)
        if self.matrix is not None:
            self.matrix.add_observation(request.observation)
        return response

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        # Telemetry: when the agent is instrumented, the run's span is current here; annotate it. No-op otherwise.
        state = self._run
        span = trace.get_current_span()
        if state is not None and span.is_recording():
            span.set_attributes(telemetry_attributes(_cited_run(state, result.all_messages())))
        return result

    def report(self, result: _RunResult) -> CitedRun:
        """The run's `CitedRun`, from the result of `run`, `run_sync`, `run_stream`, `iter` or `run_stream_events`.

        The answer is complete only when the provider's finishing signal arrived (see `CitedAnswer.complete`); a run
        stopped early keeps the text that arrived. Taking the report releases what this instance kept of the run.

        Raises:
            UserError: this instance never saw the run (the agent that ran it has another `TrackCitations`, or none;
                use `TrackCitations.of(agent)`), or its report was already taken.
        """
        state = self._take(result.run_id)
        messages, stopped = run_messages(result, state.requests[-1].response if state.requests else None)
        return _cited_run(state, messages, complete=False if stopped else None)

    def report_run(
        self, run_id: str, messages: Sequence[ModelMessage] | None = None, *, complete: bool | None = None
    ) -> CitedRun:
        """The `CitedRun` of a run by its `run_id`, for runs that ended without a result (cancelled, broken stream).

        Args:
            run_id: The run's id (`agent.run(..., run_id=...)` sets it; results expose it as `.run_id`).
            messages: The run's messages; defaults to the last response this capability saw (partial if it broke).
            complete: Pass `False` if you know the run did not complete.

        Raises:
            UserError: this instance never saw a run with this id, or its report was already taken.
        """
        state = self._take(run_id)
        if messages is None:
            last = state.requests[-1].response if state.requests else None
            messages = [last] if last is not None else []
        return _cited_run(state, messages, complete=complete)

    def _take(self, run_id: str) -> _RunState:
        state = self._runs.take(run_id)
        if state is not None:
            return state
        raise UserError(
            f'This `TrackCitations` has no record of run {run_id!r}: it was not run by an agent with this instance '
            "among its capabilities (get the agent's own with `TrackCitations.of(agent)`), or its report was "
            'already taken.'
        )


def _cited_run(state: _RunState, messages: Sequence[ModelMessage], *, complete: bool | None = None) -> CitedRun:
    requests = [_observe(r) for r in state.requests]
    if requests and not requests[-1].complete:
        complete = False
    answer = CitedAnswer.from_messages(messages, complete=complete)
    problems = list(answer.problems)
    with state.lock:
        problems.extend(p for p in state.problems if p not in problems)
    return CitedRun(state.run_id, answer, requests, problems)


def _output_mode(request_context: ModelRequestContext) -> str:
    """The output mode the request will use: `'auto'` resolved the way the serving model resolves it."""
    params = request_context.model_request_parameters
    if params.output_mode != 'auto':
        return str(params.output_mode)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # settings the model does not support are not our concern here
            _, prepared = request_context.model.prepare_request(request_context.model_settings, params)
    except Exception:  # the request itself will report an invalid combination; keep what we know
        return 'auto'
    return str(prepared.output_mode)


def telemetry_attributes(run: CitedRun) -> dict[str, str | int | bool | Sequence[str]]:
    """OpenTelemetry attributes for a run span: citation counts, problem codes, arrival kinds."""
    answer = run.answer
    arrivals = sorted({p.arrival for r in run.requests for p in r.parts if p.citations})
    return {
        'pydantic_ai_citations.citations': len(answer.spans) + len(answer.unanchored),
        'pydantic_ai_citations.anchored': len(answer.spans),
        'pydantic_ai_citations.unanchored': len(answer.unanchored),
        'pydantic_ai_citations.raw_only': len(answer.raw_only),
        'pydantic_ai_citations.sources': len(answer.sources),
        'pydantic_ai_citations.problem_codes': sorted({p.code for p in run.problems}),
        'pydantic_ai_citations.arrival': arrivals,
        'pydantic_ai_citations.complete': answer.complete,
    }


def _current(state: _RunState) -> _Request | None:
    return state.requests[-1] if state.requests else None


def _record_citations_delta(request: _Request, index: int, with_text: bool) -> None:
    if with_text:
        request.arrivals[index] = 'with_text'
    elif index in request.ended:
        request.arrivals[index] = 'after_part_end'
    elif request.stream is not None and request.stream.finish_reason is not None:
        request.arrivals[index] = 'response_end'
    else:
        request.arrivals[index] = 'part_end'


def _partial(stream: StreamedResponse) -> ModelResponse | None:
    try:
        return stream.get()
    except Exception:  # a broken stream may not be able to build a response; the run is incomplete either way
        return None


def _observe(request: _Request) -> RequestObservation:
    if request.observation is not None:
        return request.observation
    response = request.response
    parts: list[PartArrival] = []
    if response is not None:
        for index, part in enumerate(response.parts):
            if not isinstance(part, TextPart):
                continue
            citations = part.citations or []
            if not request.streamed:
                arrival: Arrival = 'response' if citations else 'none'
            elif not citations:
                arrival = 'none'
            else:
                arrival = request.arrivals.get(index, 'response_end')
            parts.append(
                PartArrival(
                    index,
                    arrival,
                    len(citations),
                    anchor_kinds=[c.anchor.kind if c.anchor is not None else 'none' for c in citations],
                    source_kinds=[s.kind for c in citations for s in c.sources],
                    recovered=request.recovered.get(index, 0),
                )
            )
    return RequestObservation(
        request.info.api,
        request.info.system,
        request.info.model_name,
        provider_name=response.provider_name if response is not None else None,
        streamed=request.streamed,
        output_mode=request.output_mode,
        citations_requested=request.citations_requested,
        attempt=request.attempt,
        complete=request.finished
        and not request.closed_early
        and request.error is None
        and incomplete_reason(response) is None,
        error=request.error,
        parts=parts,
    )


def _new_run_id() -> str:
    import uuid

    return str(uuid.uuid4())
