"""`PostgresConversationStore`: `SQLiteConversationStore`'s schema, migrations and queries on PostgreSQL (psycopg 3).

The statements are the same text (`_store_sql`, in the PostgreSQL dialect); rows are built and read by the same
functions as the SQLite store, so both backends store and return the same bytes.

Everything is async on a `psycopg_pool.AsyncConnectionPool`: no worker threads. Each write is one transaction that
first takes a transaction-level advisory lock on its conversation (and a shared one on the store, which `delete`
takes exclusively because it collects entries no conversation reaches any more), then checks the revision: two
writers of one conversation, in any number of processes, cannot both win; the second gets `ConversationConflict`.

Install with the `postgres` extra: `pip install 'pydantic-ai-citations[postgres]'`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from operator import itemgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any, LiteralString, TypeAlias, TypeVar, cast

import anyio
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
)
from pydantic_ai.exceptions import UserError

from . import _store  # pyright: ignore[reportPrivateUsage]  # read its page sizes when used (tests change them)
from . import _store_sql as sql
from ._checks import require_at_least, shown
from ._problems import CitationProblem
from ._store import (
    _BACKFILLS,  # pyright: ignore[reportPrivateUsage]
    _GROUNDING_KEY,  # pyright: ignore[reportPrivateUsage]
    SCHEMA_VERSION,
    StoreCorruptionError,
    StoredAnswer,
    _answer_rows,  # pyright: ignore[reportPrivateUsage]
    _answer_statements,  # pyright: ignore[reportPrivateUsage]
    _AnswerRow,  # pyright: ignore[reportPrivateUsage]
    _build_adapters,  # pyright: ignore[reportPrivateUsage]
    _ChainWalk,  # pyright: ignore[reportPrivateUsage]
    _dump_record,  # pyright: ignore[reportPrivateUsage]
    _entry_from_row,  # pyright: ignore[reportPrivateUsage]
    _entry_rows,  # pyright: ignore[reportPrivateUsage]
    _now,  # pyright: ignore[reportPrivateUsage]
    _package_version,  # pyright: ignore[reportPrivateUsage]
    _plan_edit,  # pyright: ignore[reportPrivateUsage]
    _record_from_row,  # pyright: ignore[reportPrivateUsage]
    _record_statements,  # pyright: ignore[reportPrivateUsage]
    _records_query,  # pyright: ignore[reportPrivateUsage]
    _stored_answer,  # pyright: ignore[reportPrivateUsage]
    _StoredAnswers,  # pyright: ignore[reportPrivateUsage]
    _versions,  # pyright: ignore[reportPrivateUsage]
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
    from psycopg_pool import AsyncConnectionPool

__all__ = ('PostgresConversationStore',)

_T = TypeVar('_T')
_Conn: TypeAlias = 'AsyncConnection[tuple[Any, ...]]'
_Write: TypeAlias = 'Callable[[_Conn, AsyncPipeline], Awaitable[_T]]'
"""A write's statements: given the connection in pipeline mode (its transaction begun, the lock queued) and the
pipeline, to `sync()` at the end (so an error is raised where the transaction can still roll back) or sooner when it
needs results."""
_Statements = list[tuple[str, list[tuple[object, ...]]]]


def _new_pool(conninfo: str, min_size: int, max_size: int, timeout: float) -> AsyncConnectionPool[_Conn]:
    """A pool of psycopg connections in autocommit mode, not open yet.

    psycopg is imported here, when a store is made, not with the package: `import *` stays light.
    """
    try:
        from psycopg_pool import AsyncConnectionPool
    except ImportError as e:  # pragma: no cover - the postgres extra is installed wherever the tests run
        raise ImportError(
            "`PostgresConversationStore` needs psycopg 3 and psycopg-pool: pip install 'pydantic-ai-citations[postgres]'"
        ) from e
    return AsyncConnectionPool(
        conninfo, min_size=min_size, max_size=max_size, timeout=timeout, open=False, kwargs={'autocommit': True}
    )


_LOCK_CLASS = 7030
"""Advisory lock keys: `(_LOCK_CLASS, 0)` the store (shared by writers, exclusive for `delete` and migrations),
`(_LOCK_CLASS + 1, hashtext(conversation_id))` one conversation."""


def _pg(statement: str) -> LiteralString:
    return cast(LiteralString, sql.POSTGRES.sql(statement))  # the package's own statements, never user text


async def _execute_all(conn: _Conn, statements: _Statements) -> None:
    async with conn.pipeline(), conn.cursor() as cur:  # one round trip for the lot
        await _queue(cur, statements)


async def _queue(cur: AsyncCursor[tuple[Any, ...]], statements: _Statements) -> None:
    """Send `statements` (in pipeline mode: their results are read at the pipeline's next sync)."""
    for statement, params in statements:
        if len(params) == 1:
            await cur.execute(_pg(statement), params[0])
        elif params and (batch := _batch(statement, params)) is not None:
            await cur.execute(*batch)
        elif params:
            await cur.executemany(_pg(statement), params)


def _batch(statement: str, rows: Sequence[tuple[object, ...]]) -> tuple[LiteralString, list[list[object]]] | None:
    """`rows` of an `INSERT ... VALUES` as one statement with one array per column (`sql.pg_unnest`), or `None`.

    Not for an upsert given one key twice: PostgreSQL refuses to update a row twice in one statement, where one
    statement per row updates it twice (the last row wins).
    """
    if 'DO UPDATE' in statement and len({row[0] for row in rows}) < len(rows):
        return None
    columns = [list(column) for column in zip(*rows, strict=True)]
    batched = sql.pg_unnest(statement, tuple(_pg_type(column) for column in columns))
    return None if batched is None else (cast(LiteralString, batched), columns)


def _pg_type(column: Sequence[object]) -> str:
    """The PostgreSQL type of a column of parameters (the store's own: text, bytes, floats, ints, `None`s)."""
    value = next((v for v in column if v is not None), None)
    if isinstance(value, bytes):
        return 'BYTEA'
    if isinstance(value, float):
        return 'DOUBLE PRECISION'
    if isinstance(value, int):
        return 'BIGINT'
    return 'TEXT'


async def _fetchone(conn: _Conn, statement: str, params: Sequence[object] = ()) -> tuple[Any, ...] | None:
    cur = await conn.execute(_pg(statement), params, binary=True)
    return await cur.fetchone()


async def _fetchall(conn: _Conn, statement: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    # Results in binary: stored messages arrive as they are, not as hex text to decode (a quarter of a `load`).
    cur = await conn.execute(_pg(statement), params, binary=True)
    return await cur.fetchall()


async def _schema_version(conn: _Conn) -> int:
    row = await _fetchone(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL")
    if row is None or not row[0]:
        return 0
    row = await _fetchone(conn, 'SELECT coalesce(max(version), 0) FROM schema_migrations')
    return int(row[0]) if row else 0


async def _migrate_step(conn: _Conn, version: int) -> None:
    """`SCHEMA[version]`'s DDL and its backfill (`_BACKFILLS`), batch by batch, as the SQLite store runs them."""
    for statement in sql.SCHEMA[version]:
        await conn.execute(_pg(statement))
    for step in _BACKFILLS[version]:
        for statement in step.setup:
            await conn.execute(_pg(statement))
        after = ''
        while True:
            rows = await _fetchall(conn, step.select, (after, _store.BACKFILL_BATCH))
            await _execute_all(conn, step.write(rows))
            if len(rows) < _store.BACKFILL_BATCH:
                break
            after = rows[-1][0]
        for statement in step.teardown:
            await conn.execute(_pg(statement))


async def _read_chain(
    conn: _Conn, head_id: str, limit: int | None, first: Sequence[Sequence[Any]] | None = None
) -> list[ConversationEntry]:
    """The history up to `head_id`, page by page; `first` is its first page when already read.

    Without a `limit`, the first page is read run by run (`sql.CHAIN_RUNS`, or `sql.PG_LOAD_RUNS` for `first`).
    """
    walk = _ChainWalk(head_id, limit)
    if limit is None:
        more = walk.take_runs(first if first is not None else await _fetchall(conn, sql.CHAIN_RUNS, (head_id,)))
    else:
        more = walk.add(first) if first is not None else True
    while more:
        more = walk.add(await _fetchall(conn, sql.CHAIN, walk.params()))
    return walk.entries()


_Loaded = tuple[ConversationRecord, list[ConversationEntry]]


async def _load(conn: _Conn, conversation_id: str, limit: int | None, scope: str | None) -> _Loaded | None | bool:
    """A record and its history's first page in one statement (one round trip, one snapshot), then any other pages.

    `False` when a later page found entries gone that a concurrent save or delete released: read again.
    """
    if limit is None:
        rows = await _fetchall(conn, sql.PG_LOAD_RUNS, (conversation_id, conversation_id))
    else:
        rows = await _fetchall(conn, sql.PG_LOAD, (conversation_id, min(_store.CHAIN_PAGE, limit), conversation_id))
    rows.sort(key=itemgetter(4))  # by depth: the order they arrive in (at no cost then), which SQL does not promise
    if not rows or rows[0][4] != 0 or (scope is not None and rows[0][1] != scope):
        return None
    record = _record_from_row(conversation_id, rows[0][3])
    if record.head_id is None or limit == 0:
        return record, []
    # The statement reads the history from the head in the record's row (`conversations.head_id`); should that not
    # be the head the record holds (it always is for what this package writes), it is read from the record's head.
    first = rows[1:] if rows[0][0] == record.head_id else None
    try:
        return record, await _read_chain(conn, record.head_id, limit, first)
    except LookupError:
        again = await _fetchone(conn, sql.REVISION, (conversation_id,))
        if again is not None and again[0] == record.revision:
            raise
        return False


@asynccontextmanager
async def _transaction(conn: _Conn) -> AsyncGenerator[None]:
    """The transaction of `conn` (psycopg's), entered as it is (`conn.transaction()` would add pipelines that sync)."""
    from psycopg import AsyncTransaction  # loaded with the pool already

    async with AsyncTransaction(conn):
        yield


class _StoredBefore(Exception):
    """`write_record` was given entries that are stored already (rolls its first attempt back)."""


def _is_unique_violation(error: Exception) -> bool:
    from psycopg import errors  # loaded with the pool already

    return isinstance(error, errors.UniqueViolation)


class PostgresConversationStore(_StoredAnswers):
    """Pydantic AI's `ConversationStore` on PostgreSQL, with `SQLiteConversationStore`'s citation queries.

    ```python
    async with PostgresConversationStore('postgresql://app@db/conversations') as store:
        conversation = await store.load(cid) or Conversation(conversation_id=cid)
        result = await agent.run(prompt, conversation=conversation)
        await store.save(result)
        await store.answers_citing(domain='docs.pydantic.dev')
    ```

    The pool opens (and the schema is created or migrated) on first use or `open()`; `close()` closes it.
    """

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 30.0) -> None:
        """A store on the database at `conninfo` (a libpq connection string or URL).

        Args:
            conninfo: Where the database is.
            min_size: Connections the pool keeps open.
            max_size: Connections the pool opens at most.
            timeout: Seconds to wait for a connection from the pool.

        Raises:
            UserError: `conninfo` is not a str, `min_size` / `max_size` are not counts of connections (`max_size`
                at least 1 and at least `min_size`), or `timeout` is not a number of seconds.
        """
        if not isinstance(cast(object, conninfo), str):
            raise UserError(
                'PostgresConversationStore: `conninfo` must be a libpq connection string or URL (str), '
                f'got {shown(conninfo)}.'
            )
        where = 'PostgresConversationStore'
        require_at_least(where, 'min_size', min_size, 0, int, 'a number of connections (an int >= 0)')
        least = max(min_size, 1)
        require_at_least(where, 'max_size', max_size, least, int, f'a number of connections (an int >= {least})')
        require_at_least(where, 'timeout', timeout, 0, (int, float), 'a number of seconds (>= 0)')
        self.conninfo = conninfo
        self._versions = _versions()
        _build_adapters()
        self._pool = _new_pool(conninfo, min_size, max_size, timeout)
        self._ready = False
        self._closed = False
        self._opening: anyio.Lock | None = None
        self._filling: anyio.Lock | None = None

    async def open(self, *, target: int = SCHEMA_VERSION) -> int:
        """Open the pool and create or migrate the schema to `target`; return the schema version."""
        return await self.migrate(target=target)

    async def _open_pool(self) -> None:
        """Open the pool, and wait for its `min_size` connections (at most `timeout` seconds).

        Not waiting, the migration's request came before the first connection was ready and the pool grew by one: it
        then hands its two connections out in turn, and a caller doing one thing at a time met two server processes,
        each colder for it (a load of 20 messages: 45 us more, against one connection).
        """
        if self._filling is None:
            self._filling = anyio.Lock()
        async with self._filling:
            if self._ready:
                return
            from psycopg_pool import PoolTimeout  # loaded with the pool already

            try:
                await self._pool.open(wait=True, timeout=self._pool.timeout)
            except PoolTimeout:
                # psycopg closes a pool that did not fill in time, for good: the next use opens a new one.
                old = self._pool
                self._pool = _new_pool(self.conninfo, old.min_size, old.max_size, old.timeout)
                raise
            self._ready = True

    async def close(self) -> None:
        """Close the pool. The store cannot be used after this (make a new one)."""
        await self._pool.close()
        self._ready = False
        self._closed = True

    async def __aenter__(self) -> PostgresConversationStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def migrate(self, *, target: int = SCHEMA_VERSION) -> int:
        """Upgrade the database to schema version `target`, one step per transaction (as `migrate` for SQLite).

        Raises:
            UserError: The database was written by a newer version of this package, or `target` is out of range.
        """
        if not 0 <= target <= SCHEMA_VERSION:
            raise UserError(f'`target` must be between 0 and {SCHEMA_VERSION}, got {target!r}.')
        if not self._ready:
            await self._open_pool()
        while True:
            with self._readable():
                current = await self._migrate_once(target)
            if current >= target:
                return current

    async def _migrate_once(self, target: int) -> int:
        """One migration step (when one is due) in its own transaction; the version after it."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute('SELECT pg_advisory_xact_lock(%s, 0)', (_LOCK_CLASS,))
            current = await _schema_version(conn)
            if current > SCHEMA_VERSION:
                raise UserError(
                    f'The database has schema version {current!r}, newer than this package supports '
                    f'({SCHEMA_VERSION}); upgrade pydantic-ai-citations.'
                )
            if current >= target:
                return current
            await _migrate_step(conn, current)
            await conn.execute(_pg(sql.LOG_MIGRATION), (current + 1, _now().isoformat(), _package_version()))
            return current + 1

    async def _ensure_open(self) -> None:
        if self._ready:
            return
        if self._closed:
            raise UserError(f'{type(self).__name__}: the store was closed (`close()`); make a new one to go on.')
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if not self._ready:
                await self.open()

    @contextmanager
    def _readable(self) -> Generator[None]:
        """A schema that is not the one its version says (tables missing or already there) is `StoreCorruptionError`."""
        try:
            yield
        except Exception as e:
            from psycopg import errors
            from psycopg.conninfo import conninfo_to_dict

            if not isinstance(e, (errors.UndefinedTable, errors.UndefinedColumn, errors.DuplicateTable)):
                raise
            where = conninfo_to_dict(self.conninfo)
            name = f'{where.get("host") or "localhost"}/{where.get("dbname") or ""}'  # never the password
            raise StoreCorruptionError(None, name, f'its schema is not the one its version says ({e})') from e

    async def _query(self, fn: Callable[[_Conn], Awaitable[_T]]) -> _T:
        if not self._ready:
            await self._ensure_open()
        # `getconn` / `putconn`, not the pool's `connection()`: a read in autocommit mode leaves no transaction for that
        # context to end (`putconn` rolls back or closes a connection that is not idle all the same), and its two
        # context managers cost a `load` about 15 us (about 5 % of it).
        conn = await self._pool.getconn()
        try:
            with self._readable():
                return await fn(conn)
        finally:
            await self._pool.putconn(conn)

    async def _write(self, conversation_id: str | None, fn: _Write[_T]) -> _T:
        await self._ensure_open()
        with self._readable():
            return await self._write_locked(conversation_id, fn)

    async def _write_locked(self, conversation_id: str | None, fn: _Write[_T]) -> _T:
        # One pipeline, and the transaction entered inside it: `BEGIN`, the lock and the write's statements go in one
        # round trip (more only when `fn` reads results first), the `COMMIT` (or `ROLLBACK`) in one more when the
        # pipeline ends. (`conn.transaction()` in pipeline mode wraps its block in two more pipelines, which sync on
        # entering and on leaving: five round trips for the same write.)
        async with self._pool.connection() as conn, conn.pipeline() as pipeline, _transaction(conn):
            if conversation_id is None:
                await conn.execute('SELECT pg_advisory_xact_lock(%s, 0)', (_LOCK_CLASS,))
            else:
                await conn.execute(
                    'SELECT pg_advisory_xact_lock_shared(%s, 0), pg_advisory_xact_lock(%s, hashtext(%s))',
                    (_LOCK_CLASS, _LOCK_CLASS + 1, conversation_id),
                )
            try:
                return await fn(conn, pipeline)
            except BaseException:
                # An error read without a sync (a fetch) leaves the pipeline aborted: sync, so the ROLLBACK runs.
                with suppress(Exception):
                    await pipeline.sync()
                raise

    async def _read(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> tuple[ConversationRecord, list[ConversationEntry]] | None:
        """`load`'s record and history: one statement for a history of up to `CHAIN_PAGE` entries."""
        if limit is not None and limit < 0:
            raise UserError('`limit` must not be negative.')

        async def read(conn: _Conn) -> tuple[ConversationRecord, list[ConversationEntry]] | None:
            while (loaded := await _load(conn, conversation_id, limit, scope)) is False:
                pass  # a concurrent save or delete released entries: read again, as the base store does
            assert loaded is not True
            return loaded

        return await self._query(read)

    # --- the five primitives, and a one-query history ---

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        self._require_id('read_record', conversation_id)

        async def read(conn: _Conn) -> ConversationRecord | None:
            row = await _fetchone(conn, sql.RECORD, (conversation_id,))
            return None if row is None else _record_from_row(conversation_id, row[0])

        return await self._query(read)

    async def _write_statements(self, statements: _Statements) -> None:
        async def write(conn: _Conn, pipeline: AsyncPipeline) -> None:
            async with conn.cursor() as cur:
                await _queue(cur, statements)
            await pipeline.sync()  # an error raised here rolls the write back (at `COMMIT` it would be the pool)

        await self._write(None, write)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        statement, params = _records_query(scope, limit)

        async def read(conn: _Conn) -> list[ConversationRecord]:
            return [_record_from_row(cid, blob) for cid, blob in await _fetchall(conn, statement, params)]

        return await self._query(read)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        entry_rows = _entry_rows(record.conversation_id, new_entries)
        answers: list[_AnswerRow | None] = []
        record_statements = _record_statements(record, _dump_record(record), new=expected_revision is None)
        new_ids = {e.id for e in new_entries}
        cid = record.conversation_id
        head = record.head_id

        async def write(conn: _Conn, pipeline: AsyncPipeline, *, new: bool) -> None:
            # New entries and their answers are inserted as new (no speculative insertion, no update to prepare):
            # one that is stored already fails this write, which is rolled back and done again as a write of stored
            # entries (their answers' index rows replaced rather than added).
            async with conn.cursor() as checks, conn.cursor() as cur:
                # The insert of an entry stored before fails wherever psycopg reads its result: at the sync, or
                # sooner, while later statements are sent (the server answers while the client is still sending).
                try:
                    await checks.execute(_pg(sql.PG_SAVE_CHECKS), (cid, head or ''))
                    entries = (sql.INSERT_ENTRY if new else sql.INSERT_ENTRY_IF_NEW, entry_rows)
                    await _queue(cur, [entries, *record_statements])
                    # The server runs those (the lock held) while the answers are made here; then the answers, in
                    # the same round trip: a failed check rolls it all back.
                    if not answers:
                        answers.extend(_answer_rows(cid, new_entries))
                    await _queue(cur, _answer_statements(answers, new=new, upsert=not new, versions=self._versions))
                    await pipeline.sync()
                except Exception as e:
                    if new and _is_unique_violation(e):
                        raise _StoredBefore from e
                    raise
                current, head_found = cast('tuple[str | None, bool]', await checks.fetchone())
            if current != expected_revision:
                raise ConversationConflict(cid)
            if head is not None and head not in new_ids and not head_found:
                raise ConversationConflict(cid)

        try:
            await self._write(cid, lambda conn, pipeline: write(conn, pipeline, new=True))
        except _StoredBefore:
            await self._write(cid, lambda conn, pipeline: write(conn, pipeline, new=False))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        self._require_id('delete_record', conversation_id, expected_revision=expected_revision)

        async def delete(conn: _Conn, pipeline: AsyncPipeline) -> None:
            row = await _fetchone(conn, sql.REVISION, (conversation_id,))
            if row is None or row[0] != expected_revision:
                raise ConversationConflict(conversation_id)
            await conn.execute(_pg(sql.DELETE_RECORD), (conversation_id,))
            await conn.execute(_pg(sql.DELETE_TIPS), (conversation_id,))
            for statement in sql.PG_COLLECT_GARBAGE:
                await conn.execute(_pg(statement))
            await conn.execute(_pg(sql.FORGET_RESOLVED), (_GROUNDING_KEY,))
            await pipeline.sync()

        await self._write(None, delete)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        async def read(conn: _Conn) -> ConversationEntry:
            row = await _fetchone(conn, sql.ENTRY, (entry_id,))
            if row is None:
                raise KeyError(entry_id)
            return _entry_from_row(*row)

        return await self._query(read)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []

        async def read(conn: _Conn) -> list[ConversationEntry]:
            return await _read_chain(conn, head_id, limit)

        return await self._query(read)

    # --- citations: the queries are `_StoredAnswers`'; this runs their statements ---

    async def _answers(
        self, where: str, params: tuple[object, ...], *, order: str = sql.BY_STORED, limit: int | None = None
    ) -> list[StoredAnswer]:
        statement = sql.ANSWERS + where + order + (sql.LIMIT if limit is not None else '')
        values = (*params, limit) if limit is not None else params

        async def read(conn: _Conn) -> list[StoredAnswer]:
            return [_stored_answer(*row) for row in await _fetchall(conn, statement, values)]

        return await self._query(read)

    async def _edit_answer(
        self,
        conversation_id: str,
        message_index: int,
        part_index: int,
        new_text: str,
        expected_revision: str | None,
        scope: str | None,
    ) -> tuple[Conversation, list[CitationProblem]]:
        async def edit(conn: _Conn, pipeline: AsyncPipeline) -> tuple[Conversation, list[CitationProblem]]:
            row = await _fetchone(conn, sql.RECORD_AND_SCOPE, (conversation_id,))
            if row is None or (scope is not None and row[1] != scope):
                raise UserError(f'Conversation {conversation_id!r} is not in the store.')
            record = _record_from_row(conversation_id, row[0])
            if expected_revision is not None and record.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            history: list[ConversationEntry] = []
            if record.head_id:
                history = await _read_chain(conn, record.head_id, None)
            plan = _plan_edit(record, history, message_index, part_index, new_text)
            statements: _Statements = [
                *plan.statements(self._versions),
                *_record_statements(plan.record, _dump_record(plan.record)),
            ]
            async with conn.cursor() as cur:
                await _queue(cur, statements)
            await pipeline.sync()
            return plan.conversation, plan.problems

        return await self._write(conversation_id, edit)
