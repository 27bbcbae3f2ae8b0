"""P4b: the stores keep up with writing each conversation as one JSON blob.

1,000 conversations of 20 messages (10 questions, 10 cited answers: 2 web sources and a document each) are saved to
a fresh store, then loaded back. Baseline, in the same run: each conversation's messages as one
`ModelMessagesTypeAdapter` JSON blob written with the driver directly, one transaction per conversation, and read
back with one `validate_json`. Goals, for both backends: save at most 3x, load at most 1.5x the baseline (wall
time, best of `ROUNDS`, measured interleaved). The store also keeps every answer indexed by URL, every domain its
sources are on, document and problem; the baseline keeps nothing but the blob.

Which baseline, per backend: the issue's is `sqlite3` writing the blob to a file (WAL; every commit flushed to
disk). The SQLite store is measured against exactly that. The PostgreSQL store is measured against the same blob
written with psycopg to the same server, so both sides pay the same round trips; that server runs with
PostgreSQL's defaults (every commit flushed, as the SQLite baseline), not the unflushed settings the tests use.
The ratio against the `sqlite3` blob is printed beside it.

The PostgreSQL half skips with the reason when no server is available (see tests/_postgres.py); with
`PYDANTIC_AI_CITATIONS_POSTGRES_DSN` set it uses that server as it is configured.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessagesTypeAdapter

from pydantic_ai_citations import PostgresConversationStore, SQLiteConversationStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests'))
from _postgres import DSN_VAR, REQUIRE_VAR, NoServer, fresh_schema, throwaway_cluster

CONVERSATIONS = int(os.environ.get('BENCH_STORE_CONVERSATIONS', '1000'))
TURNS = 10
ROUNDS = 2
WRITE_GOAL, READ_GOAL = 3.0, 1.5


def conversation(n: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for t in range(TURNS):
        messages.append(ModelRequest.user_text_prompt(f'Question {t} of conversation {n}: what does Pydantic do?'))
        text = f'Pydantic validates data ({n}.{t}). It is fast and widely used in Python projects.'
        messages.append(
            ModelResponse(
                parts=[
                    TextPart(
                        text,
                        citations=[
                            Citation(
                                [WebCitationSource(f'https://docs.pydantic.dev/{n}/{t}', title='Docs')],
                                anchor=ContentCitationAnchor(start=0, end=24),
                            ),
                            Citation(
                                [WebCitationSource(f'https://blog{t}.example.com/post/{n}')],
                                anchor=ContentCitationAnchor(start=25, end=len(text)),
                            ),
                            Citation([DocumentCitationSource(document_id=f'file-{n}-{t}', title='Spec')]),
                        ],
                    )
                ],
                model_name='bench',
                provider_name='bench',
            )
        )
    return messages


Data = list[list[ModelMessage]]


@pytest.fixture(scope='module')
def data() -> Data:
    """The conversations, made for this module's tests and released after them.

    Not made at import: `python3 dev.py bench` collects every benchmark module in one process, and the benchmarks
    after this one need not carry these 300,000 objects (27 MB). (Their presence was measured not to move the
    support check's figures: its runs make no collection past generation 0 either way.)
    """
    return [conversation(n) for n in range(CONVERSATIONS)]


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


# --- baselines ------------------------------------------------------------------------------------------------------


def sqlite_blob(path: str, data: Data) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute('PRAGMA journal_mode = WAL')
    conn.execute('CREATE TABLE c (id TEXT PRIMARY KEY, messages BLOB NOT NULL)')

    async def write() -> None:
        for n, messages in enumerate(data):
            conn.execute('BEGIN')
            conn.execute('INSERT INTO c VALUES (?, ?)', (f'c{n}', ModelMessagesTypeAdapter.dump_json(messages)))
            conn.execute('COMMIT')

    async def read() -> None:
        for n in range(len(data)):
            (blob,) = conn.execute('SELECT messages FROM c WHERE id = ?', (f'c{n}',)).fetchone()
            ModelMessagesTypeAdapter.validate_json(blob)

    return write, read


def postgres_blob(dsn: str, data: Data) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    import psycopg

    async def write() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await conn.execute('CREATE TABLE c (id TEXT PRIMARY KEY, messages BYTEA NOT NULL)')
            await conn.commit()
            for n, messages in enumerate(data):
                async with conn.transaction():
                    await conn.execute(
                        'INSERT INTO c VALUES (%s, %s)', (f'c{n}', ModelMessagesTypeAdapter.dump_json(messages))
                    )

    async def read() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for n in range(len(data)):
                cur = await conn.execute('SELECT messages FROM c WHERE id = %s', (f'c{n}',))
                row = await cur.fetchone()
                assert row is not None
                ModelMessagesTypeAdapter.validate_json(row[0])

    return write, read


def store_ops(store: Any, data: Data) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    async def write() -> None:
        for n, messages in enumerate(data):
            await store.save(Conversation(conversation_id=f'c{n}', messages=messages))

    async def read() -> None:
        for n in range(len(data)):
            loaded = await store.load(f'c{n}')
            assert loaded is not None
            assert len(loaded.messages) == 2 * TURNS

    return write, read


async def measure(
    make_baseline: Callable[[], tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]],
    make_store: Callable[[], Awaitable[Any]],
    close: Callable[[Any], Awaitable[None]],
    data: Data,
) -> dict[str, float]:
    best = {'base_write': 1e9, 'base_read': 1e9, 'store_write': 1e9, 'store_read': 1e9}
    for _ in range(ROUNDS):
        base_write, base_read = make_baseline()
        best['base_write'] = min(best['base_write'], await timed(base_write))
        best['base_read'] = min(best['base_read'], await timed(base_read))
        store = await make_store()
        try:
            write, read = store_ops(store, data)
            best['store_write'] = min(best['store_write'], await timed(write))
            best['store_read'] = min(best['store_read'], await timed(read))
            assert (await store.answers_citing(url='https://docs.pydantic.dev/0/3'))[0].conversation_id == 'c0'
        finally:
            await close(store)
    return best


def report(name: str, best: dict[str, float], baseline: str) -> tuple[float, float]:
    write = best['store_write'] / best['base_write']
    read = best['store_read'] / best['base_read']
    print(
        f'\n{name}: {CONVERSATIONS} conversations x {2 * TURNS} messages: save {best["store_write"]:.2f}s vs '
        f'{baseline} {best["base_write"]:.2f}s = {write:.2f}x (goal <= {WRITE_GOAL}x); load {best["store_read"]:.2f}s '
        f'vs {baseline} {best["base_read"]:.2f}s = {read:.2f}x (goal <= {READ_GOAL}x)'
    )
    return write, read


def check_goals(name: str, write: float, read: float) -> None:
    """Assert the goals; one not reached yet is reported as an xfail with the figures (never silently passed)."""
    missed = [
        f'{what} {ratio:.2f}x > {goal}x'
        for what, ratio, goal in (('save', write, WRITE_GOAL), ('load', read, READ_GOAL))
        if ratio > goal
    ]
    if missed:
        pytest.xfail(f'{name}: goal not reached yet: {", ".join(missed)}')


@pytest.fixture(scope='module')
def pg_dsn() -> Iterator[str]:
    if os.environ.get(DSN_VAR):
        yield os.environ[DSN_VAR]
        return
    try:
        with throwaway_cluster(durable=True) as dsn:
            yield dsn
    except NoServer as e:
        if os.environ.get(REQUIRE_VAR):
            pytest.fail(f'{REQUIRE_VAR} is set but no PostgreSQL server: {e}')
        pytest.skip(f'no PostgreSQL server: {e}')


def test_sqlite_store_keeps_up(benchmark: Any, data: Data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1000))

        def baseline() -> Any:
            return sqlite_blob(f'{tmp}/blob{next(counter)}.db', data)

        async def make_store() -> SQLiteConversationStore:
            return SQLiteConversationStore(f'{tmp}/store{next(counter)}.db')

        async def close(store: SQLiteConversationStore) -> None:
            store.close()

        best = benchmark.pedantic(
            lambda: asyncio.run(measure(baseline, make_store, close, data)), rounds=1, iterations=1
        )
        write, read = report('SQLite', best, 'sqlite3 blob')
    check_goals('SQLite', write, read)


def test_postgres_store_keeps_up(benchmark: Any, pg_dsn: str, data: Data) -> None:
    def baseline() -> Any:
        return postgres_blob(fresh_schema(pg_dsn), data)

    async def make_store() -> PostgresConversationStore:
        store = PostgresConversationStore(fresh_schema(pg_dsn))
        await store.open()
        return store

    async def close(store: PostgresConversationStore) -> None:
        await store.close()

    best = benchmark.pedantic(lambda: asyncio.run(measure(baseline, make_store, close, data)), rounds=1, iterations=1)
    write, read = report('PostgreSQL', best, 'psycopg blob')
    with tempfile.TemporaryDirectory() as tmp:
        base_write, base_read = sqlite_blob(f'{tmp}/blob.db', data)
        sqlite_best = {
            'base_write': asyncio.run(timed(base_write)),
            'base_read': asyncio.run(timed(base_read)),
            'store_write': best['store_write'],
            'store_read': best['store_read'],
        }
    report('PostgreSQL (for scale, against the sqlite3 blob)', sqlite_best, 'sqlite3 blob')
    check_goals('PostgreSQL', write, read)
