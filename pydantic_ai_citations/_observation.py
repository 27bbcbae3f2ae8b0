"""What `TrackCitations` observes of a run: values (`RequestObservation`, `CitedRun`) and the records behind them.

The capability (`_track.py`) fills a `RunRecord` while the run goes on (one `RequestRecord` per model request
attempt); `observe` turns a request record into its frozen `RequestObservation`. Whether a response is complete is
decided by `_answer.incomplete_reason` alone.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal, Protocol

from pydantic import TypeAdapter
from pydantic_ai import ModelMessage, ModelResponse, ModelResponsePart, TextPart
from pydantic_ai.models import ModelRequestContext, StreamedResponse

from ._answer import CitedAnswer, incomplete_reason
from ._lazy import lazy_adapter
from ._models import ApiLabel, ModelInfo, describe_model
from ._problems import CitationProblem

__all__ = (
    'Arrival',
    'CitedRun',
    'ObservationSink',
    'PartArrival',
    'RequestObservation',
    'RequestRecord',
    'RunRecord',
    'cited_run',
    'cited_run_ta',
    'observe',
    'record_citations_delta',
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


cited_run_ta: TypeAdapter[CitedRun] = lazy_adapter(CitedRun)
"""JSON round trip for `CitedRun`."""


class ObservationSink(Protocol):
    """Anything that collects request observations, like `CapabilityMatrix`. Must be safe under concurrent runs."""

    def add_observation(self, observation: RequestObservation) -> None:
        """Record one observation."""
        ...


@dataclass
class RequestRecord:
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
    read_to_end: bool = False
    """The event stream was read to its end (under `run_stream`, before `after_model_request` runs, on leaving the
    block): `response` is the whole response, and a report taken now may call it complete."""
    recovered_parts: list[ModelResponsePart] | None = None
    """The parts recovery already ran on when the event stream ended (`TrackCitations.wrap_run_event_stream`), so
    that `after_model_request` does not run it again on them."""
    observation: RequestObservation | None = None

    @classmethod
    def start(cls, request_context: ModelRequestContext) -> RequestRecord:
        """The record of an attempt about to be sent, from what `prepare_model_request` sees."""
        settings = request_context.model_settings or {}
        return cls(
            describe_model(request_context.model),
            streamed=request_context.streaming,
            output_mode=_output_mode(request_context),
            citations_requested=bool(settings.get('citations', False)),
            attempt=request_context.attempt,
            # Given, not left to the fields' factories: calling `set[int]` and the like (a generic alias) costs an
            # exception raised and swallowed inside Python on every call, and this runs on every request.
            ended=set(),
            arrivals={},
            recovered={},
        )


@dataclass
class RunRecord:
    """What one run's instance records; the agent-level instance keeps it until the report is taken."""

    run_id: str
    requests: list[RequestRecord] = field(default_factory=list[RequestRecord])
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Found during the run by recovery and by the package's other capabilities (`add_run_problems`)."""
    seen: set[CitationProblem] = field(default_factory=set[CitationProblem])
    """`problems` as a set: each is taken once, in time linear in how many come."""
    lock: threading.Lock = field(default_factory=threading.Lock)


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


def current(state: RunRecord) -> RequestRecord | None:
    return state.requests[-1] if state.requests else None


def record_citations_delta(request: RequestRecord, index: int, with_text: bool) -> None:
    if with_text:
        request.arrivals[index] = 'with_text'
    elif index in request.ended:
        request.arrivals[index] = 'after_part_end'
    elif request.stream is not None and request.stream.finish_reason is not None:
        request.arrivals[index] = 'response_end'
    else:
        request.arrivals[index] = 'part_end'


def partial_response(stream: StreamedResponse) -> ModelResponse | None:
    try:
        return stream.get()
    except Exception:  # a broken stream may not be able to build a response; the run is incomplete either way
        return None


def observe(request: RequestRecord) -> RequestObservation:
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
        complete=(request.finished or request.read_to_end)
        and not request.closed_early
        and request.error is None
        and incomplete_reason(response) is None,
        error=request.error,
        parts=parts,
    )


def cited_run(state: RunRecord, messages: Sequence[ModelMessage], *, complete: bool | None = None) -> CitedRun:
    """The run's `CitedRun`: its answer, every request's observation, and the problems recorded during the run.

    The answer is complete only if the last request completed too (see `incomplete_reason`).
    """
    requests = [observe(r) for r in state.requests]
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
