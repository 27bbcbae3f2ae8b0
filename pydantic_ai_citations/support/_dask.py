"""Partitions of an audit as Dask tasks (`dask.distributed`): a local cluster, a scheduler address, or a client.

Imported only when an audit asks for a cluster, so the support module works without the `[audit]` extra. The
driver submits a few partitions per worker and submits the next one as each finishes (the source is never read far
ahead of the workers), and hands results on in partition order.

The pages and options go to every worker once, in a worker plugin registered for the run (`_AuditRun`): a task
carries only its partition and the plugin's name. The plugin keeps the run's `AuditCache` on each worker thread, so
a worker splits each page once per run, not once per partition; removing the plugin when the run ends drops it.

On a cluster of this machine's processes, a worker writes each partition's output to a file in a folder of the run
and sends back only its name and tally: the driver copies the file to the output instead of receiving, unpickling and
holding megabytes per partition (measured from 20,000 to 80,000 answers: its peak memory grew 5.6-5.8 %, against up to
16 % when results carried their output). Workers elsewhere send their output with the result.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from types import MappingProxyType
from typing import Any, cast

from ._audit_run import (
    AnswerSource,
    AuditCache,
    AuditFormat,
    AuditOptions,
    Checker,
    Partition,
    PartitionResult,
    check_partition,
    freeze_heap,
    partitions,
)
from ._report import Pages

__all__ = ('dask_checker',)

_MISSING = [name for name in ('dask', 'distributed') if importlib.util.find_spec(name) is None]
if _MISSING:
    raise ImportError(
        f'an audit on Dask needs {", ".join(_MISSING)}: install the extra with '
        '`pip install "pydantic-ai-citations[audit]"`.'
    )

import dask  # noqa: E402
from distributed import Client, LocalCluster, WorkerPlugin, as_completed, get_worker  # noqa: E402

IN_FLIGHT_PER_WORKER = 2
"""Partitions submitted or waiting to be written, per worker thread: enough to keep workers busy, no more."""


# distributed's own annotations are partly missing (sync and async clients share them): its objects are `Any` here.


def _window(client: Any) -> int:
    threads: Mapping[str, int] = client.nthreads()
    return max(2, IN_FLIGHT_PER_WORKER * sum(threads.values()) + 1)


class _AuditRun(WorkerPlugin):
    """One audit's pages and options on a worker, and the caches its partitions share there (one per thread)."""

    def __init__(self, pages: Pages, options: AuditOptions, fmt: AuditFormat, spool: str | None = None) -> None:
        self.pages = pages
        self.options = options
        self.fmt: AuditFormat = fmt
        self.spool = spool
        """The run's folder for partition outputs, on a cluster of the driver's machine (else `None`)."""
        self.local: threading.local | None = None  # made on the worker: each thread checks with its own cache
        self.frozen = False

    def setup(self, worker: object) -> None:
        self.local = threading.local()
        self.frozen = freeze_heap()

    def teardown(self, worker: object) -> None:
        self.local = None  # the run is over: its caches go
        if self.frozen:
            gc.unfreeze()

    def _running(self) -> threading.local:
        """This worker's thread-local caches of the run (raises once the run was stopped here)."""
        if self.local is None:
            raise RuntimeError('the audit was stopped on this worker')
        return self.local

    def check(self, partition: Partition) -> PartitionResult:
        local = self._running()
        cache: AuditCache | None = getattr(local, 'cache', None)
        if cache is None:
            cache = local.cache = AuditCache(self.pages)
        result = check_partition(partition, cache, self.options, self.fmt)
        if self.spool is None or not result.output:
            return result
        self._running()  # (stopped meanwhile: the driver is removing the run's folder, write nothing there)
        path = os.path.join(self.spool, f'{partition.index}.out')
        # Written under a name of its own, then renamed: a partition checked twice at once (a retry while a worker the
        # scheduler gave up on still runs it) never leaves the driver a file half written.
        part = f'{path}.{uuid.uuid4().hex}'
        with open(part, 'w', encoding='utf-8', errors='surrogatepass', newline='') as file:
            file.write(result.output)
        os.replace(part, path)
        return dataclasses.replace(result, output='', spool=path)


def _check_on_worker(partition: Partition, run: str) -> PartitionResult:
    """The task: check `partition` with the worker's plugin of audit `run` (module-level: shipped by reference)."""
    return cast(_AuditRun, get_worker().plugins[run]).check(partition)


def _checker(client: Any, *, local: bool) -> Checker:
    def check(
        source: AnswerSource, size: int, pages: Pages, options: AuditOptions, fmt: AuditFormat
    ) -> Iterator[PartitionResult]:
        parts = partitions(source, size, ranges=local)
        run = f'pydantic-ai-citations-audit-{uuid.uuid4().hex}'  # a name of its own: audits never share one
        spool = tempfile.mkdtemp(prefix=f'{run}-') if local else None
        try:
            client.register_plugin(_AuditRun(pages, options, fmt, spool), name=run)
        except BaseException:
            _remove(spool)
            raise
        window = _window(client)
        pending: Any = as_completed()
        done: dict[int, PartitionResult] = {}
        submitted = written = 0
        try:
            while True:
                while submitted - written < window:
                    partition = next(parts, None)
                    if partition is None:
                        break
                    pending.add(client.submit(_check_on_worker, partition, run, pure=False))
                    submitted += 1
                if written == submitted:
                    return
                future: Any = next(pending)
                result: PartitionResult = future.result()
                future.release()
                done[result.index] = result
                while written in done:
                    yield done.pop(written)
                    written += 1
        finally:
            for future in list(pending.futures):
                future.cancel()
            try:
                client.unregister_worker_plugin(run)
            finally:
                _remove(spool)  # (outputs of partitions not written: the run failed or was stopped)

    return check


def _remove(spool: str | None) -> None:
    """Remove the run's folder, again if a partition still running when the run stopped wrote into it meanwhile."""
    if spool is None:
        return
    for _ in range(3):
        shutil.rmtree(spool, ignore_errors=True)
        if not os.path.exists(spool):
            return
        time.sleep(0.05)


@contextmanager
def dask_checker(*, workers: int | None, scheduler: str | None, client: object | None) -> Generator[Checker]:
    """Check partitions on `client`, on the cluster at `scheduler`, or on a new local cluster of `workers` processes."""
    with ExitStack() as stack:
        if isinstance(client, Client):
            own: object = getattr(client, 'cluster', None)
            yield _checker(client, local=isinstance(own, LocalCluster))  # its workers run on this machine
            return
        if client is not None:
            raise TypeError(f'client must be a distributed.Client, got {client!r}')
        if scheduler is not None:
            yield _checker(stack.enter_context(Client(scheduler)), local=False)  # its workers may not see our files
            return
        cluster: Any = stack.enter_context(local_cluster(workers or 1))
        yield _checker(stack.enter_context(Client(cluster)), local=True)


QUIET_CLUSTER: Mapping[str, object] = MappingProxyType(
    {
        'distributed.worker.profile.enabled': False,
        'distributed.admin.tick.interval': '500ms',
        'distributed.worker.memory.monitor-interval': '500ms',
        'distributed.admin.system-monitor.interval': '2s',
    }
)
"""The Dask settings of the local cluster `workers=` starts: less of Dask's own background work than its defaults.

- No worker profiler: it samples the running task's stack every 10 ms for the dashboard alone, which this cluster
  does not have (it cost an audit on 2 workers 4 % of its throughput, measured on 20,000 answers, 4 runs each way).
- Event-loop health ticks every 500 ms (default 20 ms): a loop blocked for longer than Dask's limit (3 s) is still
  reported.
- Memory checks every 500 ms (default 100 ms): a worker past its memory limit is still paused, spilled or restarted.
- Host metrics (CPU, memory, network, disks) sampled every 2 s (default 500 ms): they feed the dashboard and logs.

Measured on 2 workers, 12 audits of 20,000 answers each way in alternating processes: 10 % less wall time (faster
in each of the 6 pairs), the workers 9 % and the driver (scheduler and nannies) about 30 % less CPU. Idle, the
driver used 0.2 s of CPU per 5 s and each worker 0.09 s with Dask's defaults; 0.03-0.06 s and 0.02 s with these.
"""


def local_cluster(workers: int) -> Any:
    """The local cluster `workers=` starts: `workers` processes of one thread (the check is pure Python: one per core).

    It has no dashboard, and runs with `QUIET_CLUSTER`'s settings: the scheduler and the nannies read them as they
    start, and each nanny keeps a copy of its own for every worker process it starts, a worker it restarts (past its
    memory limit, or after a crash) included. They are set for this process only while the cluster starts (another
    thread starting a cluster of its own meanwhile would get them too), and restored after.
    """
    with dask.config.set(QUIET_CLUSTER):
        # A copy: a nanny keeps the configuration it is given, and the global one goes back to the defaults after this.
        return LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,  # pyright: ignore[reportArgumentType]  # None: no dashboard
            silence_logs=logging.WARNING,
            config=copy.deepcopy(cast(Any, dask).config.config),
        )
