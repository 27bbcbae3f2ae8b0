"""Partitions of an audit as Dask tasks (`dask.distributed`): a local cluster, a scheduler address, or a client.

Imported only when an audit asks for a cluster, so the support module works without the `[audit]` extra. The
driver submits a few partitions per worker and submits the next one as each finishes (the source is never read far
ahead of the workers), and hands results on in partition order. The pages go to every worker once.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from ._audit_run import AuditFormat, AuditOptions, Checker, Partition, PartitionResult, check_partition
from ._report import Pages

__all__ = ('dask_checker',)

_MISSING = [name for name in ('dask', 'distributed') if importlib.util.find_spec(name) is None]
if _MISSING:
    raise ImportError(
        f'an audit on Dask needs {", ".join(_MISSING)}: install the extra with '
        '`pip install "pydantic-ai-citations[audit]"`.'
    )

from distributed import Client, LocalCluster, as_completed  # noqa: E402

IN_FLIGHT_PER_WORKER = 2
"""Partitions submitted or waiting to be written, per worker thread: enough to keep workers busy, no more."""


# distributed's own annotations are partly missing (sync and async clients share them): its objects are `Any` here.


def _window(client: Any) -> int:
    threads: Mapping[str, int] = client.nthreads()
    return max(2, IN_FLIGHT_PER_WORKER * sum(threads.values()) + 1)


def _checker(client: Any) -> Checker:
    def check(
        parts: Iterator[Partition], pages: Pages, options: AuditOptions, fmt: AuditFormat
    ) -> Iterator[PartitionResult]:
        [shared] = client.scatter([pages], broadcast=True, hash=False)  # a key of its own: audits never share one
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
                    pending.add(client.submit(check_partition, partition, shared, options, fmt, pure=False))
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

    return check


@contextmanager
def dask_checker(*, workers: int | None, scheduler: str | None, client: object | None) -> Generator[Checker]:
    """Check partitions on `client`, on the cluster at `scheduler`, or on a new local cluster of `workers` processes."""
    with ExitStack() as stack:
        if isinstance(client, Client):
            yield _checker(client)
            return
        if client is not None:
            raise TypeError(f'client must be a distributed.Client, got {client!r}')
        if scheduler is not None:
            yield _checker(stack.enter_context(Client(scheduler)))
            return
        cluster: Any = stack.enter_context(  # pyright: ignore[reportUnknownVariableType]
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,  # the check is pure Python: one process per core
                processes=True,
                dashboard_address=None,  # pyright: ignore[reportArgumentType]  # None: no dashboard
                silence_logs=logging.WARNING,
            )
        )
        yield _checker(stack.enter_context(Client(cluster)))
