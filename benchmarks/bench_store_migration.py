"""Issue 15 point 5: the store's migration from v1 runs in time linear in the entries it backfills.

A v1 database (conversations and entries only: what version 1 of the schema stored) holding `N` messages in
conversations of 20 (10 cited answers each, a few forks sharing their first turns) is migrated to the current schema
on open: v2 backfills every answer with its owner conversation, v4 indexes their URLs and domains. The same is done
with `2N` messages; the time must grow at most 2.2x (best of `ROUNDS`, interleaved). Before, each answer's owner was
searched tip by tip with a recursive query per answer: 8,000 messages took 21.6 s, holding the write lock.

Both backends: the PostgreSQL half skips with the reason when no server is available (see tests/_postgres.py).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Citation, ModelMessage, ModelRequest, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.conversation import Conversation

from pydantic_ai_citations import PostgresConversationStore, SQLiteConversationStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests'))
from _postgres import DSN_VAR, REQUIRE_VAR, NoServer, fresh_schema, throwaway_cluster

MESSAGES = int(os.environ.get('BENCH_MIGRATION_MESSAGES', '4000'))
PER_CONVERSATION = 20
ROUNDS = 3
GOAL = 2.2


def conversations(messages: int) -> list[Conversation]:
    found: list[Conversation] = []
    for n in range(messages // PER_CONVERSATION):
        history: list[ModelMessage] = []
        for t in range(PER_CONVERSATION // 2):
            history.append(ModelRequest.user_text_prompt(f'Question {t} of {n}'))
            url = f'https://docs{t}.example{n % 7}.com/{n}/{t}'
            history.append(
                ModelResponse(parts=[TextPart(f'Answer {t}.', citations=[Citation([WebCitationSource(url)])])])
            )
        found.append(Conversation(conversation_id=f'c{n}', messages=history))
    return found


def downgrade_statements() -> list[str]:
    """What turns a current database back into a v1 one: the answer tables and what v5, v7 and v8 added gone (heads back in tips), the version log cut."""
    return [
        'DROP TABLE answers',
        'DROP TABLE answer_sources',
        'DROP TABLE answer_problems',
        'INSERT INTO tips (conversation_id, entry_id) SELECT conversation_id, head_id FROM conversations '
        'WHERE head_id IS NOT NULL',
        'ALTER TABLE conversations DROP COLUMN head_id',
        'DROP TABLE resolved_redirects',
        'ALTER TABLE entries DROP COLUMN run_start',
        'DELETE FROM schema_migrations WHERE version > 1',
    ]


async def fill(store: Any, messages: int) -> None:
    for conversation in conversations(messages):
        await store.save(conversation)
    # forks share their parent's first turns: owners must be found once per entry, not once per conversation
    for n in range(0, messages // PER_CONVERSATION, 10):
        await store.fork(f'c{n}', at=4, new_conversation_id=f'f{n}')


def sqlite_v1(path: str, messages: int) -> None:
    store = SQLiteConversationStore(path)
    asyncio.run(fill(store, messages))
    store.close()
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in downgrade_statements():
            conn.execute(statement)
        conn.execute('PRAGMA user_version = 1')


def time_sqlite(template: str, work: str) -> float:
    Path(work).write_bytes(Path(template).read_bytes())
    for suffix in ('-wal', '-shm'):
        Path(work + suffix).unlink(missing_ok=True)
    start = time.perf_counter()
    SQLiteConversationStore(work).close()
    return time.perf_counter() - start


def report(name: str, single: float, double: float) -> float:
    ratio = double / single
    print(
        f'\n{name} migration v1 -> current: {MESSAGES} messages {single:.2f}s, {2 * MESSAGES} messages {double:.2f}s '
        f'= {ratio:.2f}x (goal <= {GOAL}x)'
    )
    return ratio


def test_sqlite_migration_is_linear(benchmark: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        single, double = f'{tmp}/single.db', f'{tmp}/double.db'
        sqlite_v1(single, MESSAGES)
        sqlite_v1(double, 2 * MESSAGES)

        def measure() -> list[float]:
            best = [1e9, 1e9]
            for _ in range(ROUNDS):
                best[0] = min(best[0], time_sqlite(single, f'{tmp}/work.db'))
                best[1] = min(best[1], time_sqlite(double, f'{tmp}/work.db'))
            return best

        best = benchmark.pedantic(measure, rounds=1, iterations=1)
        with sqlite3.connect(f'{tmp}/work.db') as conn:
            answers = conn.execute('SELECT count(*), count(DISTINCT conversation_id) FROM answers').fetchone()
        # every answer of the 2N messages, each with its owner conversation
        assert answers == (MESSAGES, 2 * MESSAGES // PER_CONVERSATION)
    assert report('SQLite', *best) <= GOAL


@pytest.fixture(scope='module')
def pg_dsn() -> Iterator[str]:
    if os.environ.get(DSN_VAR):
        yield os.environ[DSN_VAR]
        return
    try:
        with throwaway_cluster() as dsn:
            yield dsn
    except NoServer as e:
        if os.environ.get(REQUIRE_VAR):
            pytest.fail(f'{REQUIRE_VAR} is set but no PostgreSQL server: {e}')
        pytest.skip(f'no PostgreSQL server: {e}')


async def postgres_round(dsn: str, messages: int) -> float:
    """A fresh v1 schema with `messages` messages, then the time to migrate it."""
    import psycopg

    target = fresh_schema(dsn)
    async with PostgresConversationStore(target) as store:
        await fill(store, messages)
    async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
        for statement in downgrade_statements():
            await conn.execute(statement)  # pyright: ignore[reportArgumentType]
    store = PostgresConversationStore(target)
    start = time.perf_counter()
    await store.open()
    elapsed = time.perf_counter() - start
    await store.close()
    return elapsed


def test_postgres_migration_is_linear(benchmark: Any, pg_dsn: str) -> None:
    def measure() -> list[float]:
        best = [1e9, 1e9]
        for _ in range(ROUNDS - 1):
            best[0] = min(best[0], asyncio.run(postgres_round(pg_dsn, MESSAGES)))
            best[1] = min(best[1], asyncio.run(postgres_round(pg_dsn, 2 * MESSAGES)))
        return best

    best = benchmark.pedantic(measure, rounds=1, iterations=1)
    assert report('PostgreSQL', *best) <= GOAL
