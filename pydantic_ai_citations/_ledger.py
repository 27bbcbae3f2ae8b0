"""Per-run records of this package's capabilities, owned by capability instances rather than by the module.

The package's capabilities return themselves from `for_run`: a capability that returns a new instance makes Pydantic
AI rebuild and re-sort the run's whole capability tree and re-read every contribution (instructions, tools, settings)
on every run, which costs more than most hooks. So per-run state is not kept on a per-run copy: the (agent-level)
instance keeps a `RunRegistry` (`run_id` -> that run's state), and every hook finds its run's state by
`ctx.run_id`. Reports (`TrackCitations.report`) take a run's state and so release it; state nobody reports on is
released when the run ends (`CleanStaleCitations`), or never made (`StripCitationMarkup` keeps only runs where it
removed something). A registry is bounded (oldest runs are released first), so an application that never asks for
its reports does not grow it without bound.

`get_wrapper_model` is the one hook without a run context: Pydantic AI calls it for each attempt right after the
`prepare_model_request` hooks, in the same task, so `prepare_model_request` leaves what it needs in an
`AttemptSlots` keyed by the current task, and `get_wrapper_model` takes it from there (concurrent runs, in tasks or
threads, each see their own).

Problems other capabilities find (`StripCitationMarkup`, `CleanStaleCitations`, `VerifyEvidence`) reach the run's
`TrackCitations` through `record_problems(ctx, problems)`, which hands them to every capability of the run that
collects problems (`ProblemSink`), found through `RunContext.capabilities`.

The module itself keeps no state: a run without a `ProblemSink` keeps no problems.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic_ai import RunContext

from ._problems import CitationProblem

__all__ = (
    'MAX_RUNS',
    'AttemptSlots',
    'ProblemSink',
    'RunRegistry',
    'record_problems',
)

MAX_RUNS = 4096
"""How many unreported runs a registry keeps before releasing the oldest."""


@runtime_checkable
class ProblemSink(Protocol):
    """A capability that collects the problems the package's other capabilities find during a run (`TrackCitations`)."""

    def add_run_problems(self, run_id: str | None, problems: Iterable[CitationProblem]) -> int:
        """Add problems found during the run `run_id` (each once); return how many were not there yet."""
        ...


def record_problems(run: RunContext[Any] | None, problems: Iterable[CitationProblem]) -> bool:
    """Hand problems found during a run to the run's problem collectors (its `TrackCitations`, if any).

    Args:
        run: The run context; `None` records nothing.
        problems: What was found.

    Returns:
        `False` when every collector of the run already had all of them (found earlier in the run), else `True`.
    """
    found = list(problems)
    if run is None or not found:
        return bool(found)
    sinks = [c for c in run.capabilities.values() if isinstance(c, ProblemSink)]
    added = [sink.add_run_problems(run.run_id, found) for sink in sinks]
    return not sinks or any(added)


T = TypeVar('T')


class RunRegistry(Generic[T]):
    """`run_id` -> per-run state, owned by one agent-level capability instance; thread-safe and bounded."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self._runs: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()
        self._max_runs = max_runs

    def add(self, run_id: str, state: T) -> None:
        """Keep `state` for `run_id` (releasing the oldest runs beyond `max_runs`)."""
        with self._lock:
            self._runs[run_id] = state
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)

    def get(self, run_id: str | None) -> T | None:
        """The state of a run, or `None`."""
        with self._lock:
            return self._runs.get(run_id) if run_id is not None else None

    def setdefault(self, run_id: str, make: Callable[[], T]) -> T:
        """The state of a run, made with `make` (and kept) if there is none."""
        with self._lock:
            state = self._runs.get(run_id)
            if state is None:
                state = self._runs[run_id] = make()
                while len(self._runs) > self._max_runs:
                    self._runs.popitem(last=False)
            return state

    def take(self, run_id: str | None) -> T | None:
        """The state of a run, released from the registry; `None` if unknown (never seen, released or taken)."""
        with self._lock:
            return self._runs.pop(run_id, None) if run_id is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


class AttemptSlots(Generic[T]):
    """What `prepare_model_request` hands to `get_wrapper_model` for the same attempt, kept per task.

    Pydantic AI calls `get_wrapper_model` (which gets no run context) for each attempt right after the
    `prepare_model_request` hooks, from the same task (2.68: `_agent_graph.ModelRequestNode._prepare_attempt`), so
    the current task identifies the attempt even when runs of one agent go on concurrently in several tasks or
    threads. Keys are weak: a task that ends releases its slot.
    """

    def __init__(self) -> None:
        self._slots: weakref.WeakKeyDictionary[object, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def put(self, value: T | None) -> None:
        """Keep `value` for the current task's next `take` (`None` clears the slot)."""
        if value is None and not self._slots:  # nothing to clear (the common case: cheap, no lock)
            return
        key = _task()
        with self._lock:
            if value is None:
                self._slots.pop(key, None)
            else:
                self._slots[key] = value

    def take(self) -> T | None:
        """What the current task's `put` left, released; `None` if nothing."""
        if not self._slots:  # nothing was left for any task
            return None
        key = _task()
        with self._lock:
            return self._slots.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)


def _task() -> object:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop: called from synchronous code
        task = None
    return task if task is not None else threading.current_thread()
