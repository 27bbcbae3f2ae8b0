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
- `after_model_request` finalises the request's observation and maps raw formats *in place* (`part.citations = …`):
  `agent.run_stream()` rebuilds its history from the parts manager, so only in-place changes to the part objects are
  visible there.

Per-run state lives on the instance `for_run` returns and in the run ledger (keyed by `run_id`), so
`TrackCitations.report(result)` works from the agent-level instance after the run.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx2
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
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.models import Model, ModelRequestContext, StreamedResponse
from pydantic_ai.run import AgentRunResult

from . import _ledger
from ._answer import CitedAnswer
from ._guard import OutputModeCheck
from ._history import fingerprint_response
from ._models import ApiLabel, ModelInfo, describe_model, describe_serving_model
from ._problems import CitationProblem
from ._wrappers import StreamWatch
from .formats.openai_markers import MARKER_START, to_citations
from .formats.perplexity import PerplexityTap, apply_sonar, apply_to_response
from .formats.unmapped import recover

MarkerSources = (
    Mapping[str, 'WebCitationSource | DocumentCitationSource']
    | Callable[[RunContext[Any]], Mapping[str, 'WebCitationSource | DocumentCitationSource']]
)
"""Sources by marker id, or a function of the run context returning them (see `TrackCitations.marker_sources`)."""

if TYPE_CHECKING:
    from .support._snapshots import SnapshotStore

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
    """Whether the response completed (a stream that was cancelled, broke or was closed early did not)."""
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
    run_id: str
    requests: list[_Request] = field(default_factory=list[_Request])
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
    `run_id` you gave the run to `report_run`). Adding it never switches a plain `agent.run()` to streaming.
    """

    _: KW_ONLY
    matrix: ObservationSink | None = None
    """A `CapabilityMatrix` (or any `ObservationSink`) to add `'observed'` evidence to. Default `None`: nothing is shared."""
    perplexity_tap: PerplexityTap | None = None
    """The `PerplexityTap` your Perplexity (Agent API) provider's HTTP client was made with
    (`perplexity_http_client(tap)`): its search results become `[N]` citations on the text. Default `None`."""
    marker_sources: MarkerSources | None = None
    """Sources by id for OpenAI-style private-use markers (`\\ue200cite\\ue202<id>\\ue201`) that a model writes when
    it was given sources rendered with `formats.openai_markers.render_source`: a mapping, or a function of the run
    context returning one. Each marker becomes a citation anchored on the sentence it closes, and the markers are
    removed from the part's text (in place). Unknown ids become `unresolved_marker` problems. Default `None`: text with
    markers is left as it is."""
    recover_raw: bool = True
    """Map citation data Pydantic AI leaves raw onto `TextPart.citations`, in place (Perplexity Sonar `[N]` markers,
    Anthropic `search_result_location`, …). Default `True`."""
    fingerprint: bool = True
    """Record a fingerprint of each cited part in `ModelResponse.metadata` (never sent to a model), so edits made
    later without `edit_text` are detected by `find_stale` / `CleanStaleCitations`. Default `True`."""
    snapshot: SnapshotStore | None = None
    """Capture every cited web page into this `support.SnapshotStore` when a run ends (pages die within weeks and
    Google grounding links expire, so capture at answer time). Default `None`: nothing is fetched. Needs `[support]`."""
    snapshot_transport: httpx2.AsyncBaseTransport | None = None
    """HTTP transport for `snapshot` captures (a proxy, or a mock in tests). Default `None`: a fresh real transport."""
    observe_stream_end: bool = True
    """Wrap the serving model to tell `'part_end'` from `'response_end'` arrival. Default `True`. Turn off under durable
    execution (Temporal, DBOS, Prefect reject model wrappers); arrival before `PartEndEvent` is then `'part_end'`."""
    id: str | None = 'track_citations'
    """One per agent by default; pass a distinct id to keep two."""

    _run: _RunState | None = field(default=None, init=False, repr=False, compare=False)
    _output_mode: OutputModeCheck = field(default_factory=OutputModeCheck, init=False, repr=False, compare=False)

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
        run_id = ctx.run_id or _new_run_id()
        run._run = _RunState(run_id)
        _ledger.entry(run_id).extras['track'] = run._run
        return run

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
            self._output_mode(ctx, request_context)
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
        if self.marker_sources is not None:
            sources = self.marker_sources(ctx) if callable(self.marker_sources) else self.marker_sources
            _ledger.record_problems(state.run_id, _markers_in_place(response, request, sources))
        if self.recover_raw:
            problems = _recover_in_place(response, request, self.perplexity_tap)
            if problems:
                _ledger.record_problems(state.run_id, problems)
        if self.fingerprint:
            fingerprint_response(response)
        observation = _observe(request)
        request.observation = observation
        if self.matrix is not None:
            self.matrix.add_observation(observation)
        return response

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        # Telemetry: when the agent is instrumented, the run's span is current here; annotate it. No-op otherwise.
        state = self._run
        if state is None:
            return result
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(telemetry_attributes(self.report_run(state.run_id, result.all_messages())))
        if self.snapshot is not None:
            from .support._snapshots import capture_answer  # the support extra is only needed when asked for

            answer = CitedAnswer.from_messages(result.all_messages())
            captured = await capture_answer(self.snapshot, answer, transport=self.snapshot_transport)
            _ledger.entry(state.run_id).extras['snapshots'] = captured
        return result

    def report(self, result: _RunResult) -> CitedRun:
        """The run's `CitedRun`, from the result of `run`, `run_sync`, `run_stream`, `iter` or `run_stream_events`.

        A streamed result that did not complete, or a run whose last response did not complete, gives an answer
        with `complete=False` and a `stream_incomplete` problem.
        """
        answer = CitedAnswer.from_result(result)
        return self.report_run(result.run_id, result.all_messages(), complete=answer.complete)

    def report_run(
        self, run_id: str, messages: Sequence[ModelMessage] | None = None, *, complete: bool = True
    ) -> CitedRun:
        """The `CitedRun` of a run by its `run_id`, for runs that ended without a result (cancelled, broken stream).

        Args:
            run_id: The run's id (`agent.run(..., run_id=...)` sets it; results expose it as `.run_id`).
            messages: The run's messages; defaults to the last response this capability saw (partial if it broke).
            complete: Pass `False` if you know the run did not complete.
        """
        entry = _ledger.lookup(run_id)
        found = entry.extras.get('track') if entry is not None else None
        state = found if isinstance(found, _RunState) else None
        requests = [_observe(r) for r in state.requests] if state is not None else []
        if requests and not requests[-1].complete:
            complete = False
        if messages is None:
            last = state.requests[-1].response if state is not None and state.requests else None
            messages = [last] if last is not None else []
        answer = CitedAnswer.from_messages(messages, complete=complete)
        problems = list(answer.problems)
        if entry is not None:
            with entry.lock:
                problems.extend(p for p in entry.problems if p not in problems)
        return CitedRun(run_id, answer, requests, problems)


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


def _markers_in_place(
    response: ModelResponse, request: _Request, sources: Mapping[str, WebCitationSource | DocumentCitationSource]
) -> list[CitationProblem]:
    """Private-use markers become citations on the text without them.

    In place: `run_stream` history shows only in-place changes, and markers must never be shown or sent back.
    """
    problems: list[CitationProblem] = []
    for index, part in enumerate(response.parts):
        if not isinstance(part, TextPart) or part.citations or MARKER_START not in part.content:
            continue
        conversion = to_citations(part.content, sources)
        problems.extend(dataclasses.replace(p, part_index=index) for p in conversion.problems)
        part.content = conversion.clean_text
        part.id = None  # the text changed: a provider must not reuse its stored copy of this item
        if conversion.citations:
            part.citations = conversion.citations
            request.recovered[index] = len(conversion.citations)
            request.arrivals.setdefault(index, 'response_end' if request.streamed else 'response')
    return problems


def _recover_in_place(response: ModelResponse, request: _Request, tap: PerplexityTap | None) -> list[CitationProblem]:
    """Fill `TextPart.citations` from raw formats, in place: `run_stream` history only shows in-place changes."""
    before = {i: len(p.citations or []) for i, p in enumerate(response.parts) if isinstance(p, TextPart)}
    problems: list[CitationProblem] = []
    recovery = recover(response)
    for part_index, citations in recovery.citations.items():
        part = response.parts[part_index]
        if isinstance(part, TextPart) and citations:
            part.citations = [*(part.citations or []), *citations]
    problems.extend(recovery.problems)
    details = response.provider_details or {}
    if request.info.api == 'perplexity-sonar' or 'unmapped' in details:
        problems.extend(apply_sonar(response))
    if tap is not None and response.provider_response_id is not None:
        collector = tap.collector_for(response.provider_response_id)
        if collector is not None:
            problems.extend(apply_to_response(response, collector))
    for index, count in before.items():
        part = response.parts[index]
        assert isinstance(part, TextPart)
        added = len(part.citations or []) - count
        if added > 0:
            request.recovered[index] = added
            request.arrivals.setdefault(index, 'response_end' if request.streamed else 'response')
    return problems


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
        complete=request.finished and not request.closed_early and request.error is None,
        error=request.error,
        parts=parts,
    )


def _new_run_id() -> str:
    import uuid

    return str(uuid.uuid4())
