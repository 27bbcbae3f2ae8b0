"""Per-run records of this package's capabilities, owned by capability instances rather than by the module.

Capabilities get a fresh instance per run (`for_run`), so what they find during a run must be reachable after the
run. The owner is the agent-level capability instance: it keeps a `RunRegistry` (`run_id` -> records), the per-run
instance fills its run's `RunRecords`, and the application takes them with the capability's report call, which
releases them. A registry is bounded (oldest runs are released first), so an application that never asks for its
reports does not grow it without bound.

Problems other capabilities find (`StripCitationMarkup`, `CleanStaleCitations`, `VerifyEvidence`) reach the run's
`TrackCitations` through `record_problems(ctx, problems)`, which hands them to every capability of the run that
collects problems (`ProblemSink`), found through `RunContext.capabilities`.

Transitional: `entry` / `lookup` / `forget` keep the old process-global map for the capabilities that still read
their own records from it by `run_id` (`StripCitationMarkup`'s removed markup, `CleanStaleCitations`' log); they go
once those keep per-instance state too. `TrackCitations` no longer uses it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic_ai import RunContext

from ._problems import CitationProblem

__all__ = (
    'MAX_RUNS',
    'ProblemSink',
    'RunEntry',
    'RunRegistry',
    'entry',
    'forget',
    'lookup',
    'record_problems',
)

MAX_RUNS = 4096
"""How many unreported runs a registry (and the transitional global map) keeps before releasing the oldest."""


@runtime_checkable
class ProblemSink(Protocol):
    """A run capability that collects the problems the package's other capabilities find (`TrackCitations`)."""

    def add_run_problems(self, problems: Iterable[CitationProblem]) -> None:
        """Add problems found during the current run."""
        ...


def record_problems(run: RunContext[Any] | str | None, problems: Iterable[CitationProblem]) -> None:
    """Hand problems found during a run to the run's problem collectors.

    Args:
        run: The run context (preferred: the problems reach the run's `TrackCitations`), or, transitionally, a
            `run_id` (the problems only go to the global map read by `lookup`).
        problems: What was found.
    """
    found = list(problems)
    if not found or run is None:
        return
    if isinstance(run, RunContext):
        for capability in run.capabilities.values():
            if isinstance(capability, ProblemSink):
                capability.add_run_problems(found)
        if run.run_id is None:
            return
        run = run.run_id
    record = entry(run)
    with record.lock:
        record.problems.extend(found)


@dataclass
class RunEntry:
    """What capabilities recorded for one run. Mutable while the run goes on; guarded by `lock`."""

    run_id: str
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    extras: dict[str, object] = field(default_factory=dict[str, object])
    """Capability-specific records (e.g. `'strip'` -> removed markup)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


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

    def get(self, run_id: str) -> T | None:
        """The state of a run, or `None`."""
        with self._lock:
            return self._runs.get(run_id)

    def take(self, run_id: str) -> T | None:
        """The state of a run, released from the registry; `None` if unknown (never seen, released or taken)."""
        with self._lock:
            return self._runs.pop(run_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


# --- transitional process-global map (see the module docstring) --------------------------------------------------

_entries: OrderedDict[str, RunEntry] = OrderedDict()
_lock = threading.Lock()


def entry(run_id: str) -> RunEntry:
    """The transitional global entry for a run, created on first use."""
    with _lock:
        found = _entries.get(run_id)
        if found is None:
            found = _entries[run_id] = RunEntry(run_id)
            while len(_entries) > MAX_RUNS:
                _entries.popitem(last=False)
        return found


def lookup(run_id: str) -> RunEntry | None:
    """The transitional global entry for a run, or `None`."""
    with _lock:
        return _entries.get(run_id)


def forget(run_id: str) -> None:
    """Drop the transitional global entry of a run."""
    with _lock:
        _entries.pop(run_id, None)
