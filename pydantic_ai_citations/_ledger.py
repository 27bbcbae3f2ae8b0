"""Per-run records of this package's capabilities, owned by capability instances rather than by the module.

Capabilities get a fresh instance per run (`for_run`), so what they find during a run must be reachable after the
run. The owner is the agent-level capability instance: it keeps a `RunRegistry` (`run_id` -> records), the per-run
instance fills its run's `RunRecords`, and the application takes them with the capability's report call, which
releases them. A registry is bounded (oldest runs are released first), so an application that never asks for its
reports does not grow it without bound.

Problems other capabilities find (`StripCitationMarkup`, `CleanStaleCitations`, `VerifyEvidence`) reach the run's
`TrackCitations` through `record_problems(ctx, problems)`, which hands them to every capability of the run that
collects problems (`ProblemSink`), found through `RunContext.capabilities`.

The module itself keeps no state: `StripCitationMarkup` keeps its removed markup in a `RunRegistry` of its own, and a
run without a `ProblemSink` keeps no problems.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic_ai import RunContext

from ._problems import CitationProblem

__all__ = (
    'MAX_RUNS',
    'ProblemSink',
    'RunRegistry',
    'record_problems',
    'run_copy',
)

MAX_RUNS = 4096
"""How many unreported runs a registry keeps before releasing the oldest."""


@runtime_checkable
class ProblemSink(Protocol):
    """A run capability that collects the problems the package's other capabilities find (`TrackCitations`)."""

    def add_run_problems(self, problems: Iterable[CitationProblem]) -> int:
        """Add problems found during the current run (each once); return how many were not there yet."""
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
    added = [sink.add_run_problems(found) for sink in sinks]
    return not sinks or any(added)


T = TypeVar('T')


def run_copy(capability: T) -> T:
    """A shallow copy of an agent-level capability, for `for_run` to give its per-run state.

    Fields (configuration, and what the agent's instance owns: its `RunRegistry`, its once-per-agent checks) are
    shared with the agent's instance; the caller replaces the per-run ones. `dataclasses.replace` would run
    `__init__` and `__post_init__` again (validation was done at construction) and build default factories only to
    replace them, about 15 µs per capability on every run; this takes about 1 µs.
    """
    run = object.__new__(type(capability))
    run.__dict__.update(capability.__dict__)
    return run


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
