"""Per-run findings shared between this package's capabilities, keyed by the agent run's `run_id`.

Capabilities get a fresh instance per run (`for_run`), so what they find during a run must live somewhere the
application can reach after the run. Every Pydantic AI result (`run`, `run_stream`, `iter`) exposes `run_id`,
and `RunContext.run_id` is the same id inside the run, so a small, bounded, thread-safe map keyed by it is enough.
Old runs are evicted first-in-first-out once `MAX_RUNS` is exceeded: the ledger never grows without bound.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._problems import CitationProblem

__all__ = ('MAX_RUNS', 'RunEntry', 'entry', 'forget', 'lookup', 'record_problems')

MAX_RUNS = 4096
"""How many runs the ledger keeps before evicting the oldest."""


@dataclass
class RunEntry:
    """What this package's capabilities recorded for one run. Mutable while the run goes on; guarded by `lock`."""

    run_id: str
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    extras: dict[str, object] = field(default_factory=dict[str, object])
    """Capability-specific records (e.g. `'track'` → the `TrackCitations` run state, `'strip'` → removed markup)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


_entries: OrderedDict[str, RunEntry] = OrderedDict()
_lock = threading.Lock()


def entry(run_id: str) -> RunEntry:
    """The entry for a run, created on first use."""
    with _lock:
        found = _entries.get(run_id)
        if found is None:
            found = _entries[run_id] = RunEntry(run_id)
            while len(_entries) > MAX_RUNS:
                _entries.popitem(last=False)
        return found


def lookup(run_id: str) -> RunEntry | None:
    """The entry for a run, or `None` if nothing was recorded (or it was evicted)."""
    with _lock:
        return _entries.get(run_id)


def forget(run_id: str) -> None:
    """Drop what was recorded for a run."""
    with _lock:
        _entries.pop(run_id, None)


def record_problems(run_id: str, problems: Iterable[CitationProblem]) -> None:
    """Add problems to a run's entry."""
    run = entry(run_id)
    with run.lock:
        run.problems.extend(problems)
