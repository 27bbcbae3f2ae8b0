"""`SQLiteConversationStore`: Pydantic AI's `ConversationStore` on SQLite, with each answer's citations kept queryable.

Messages are stored exactly as `ModelMessagesTypeAdapter` writes them (one JSON document per entry), so a history
read back dumps to the same bytes, citations, `provider_details` and this package's fingerprints included. Beside
each stored `ModelResponse` that has text, the store keeps its normalised `CitedAnswer`, the raw provider citation
data and the versions that produced it, indexed by cited URL, domain and problem code.

Everything runs on the stdlib `sqlite3` module, on one connection guarded by a lock: in a worker thread
(`anyio.to_thread`), or right on the event loop's thread for the few reads and small saves that cannot make it wait
(`_read_now`, `SQLiteConversationStore._save`). Writes are single `BEGIN IMMEDIATE` transactions that check the
conversation's revision first, so two writers of one conversation (in this process or another) cannot both win: the
second gets Pydantic AI's `ConversationConflict`, as with `InMemoryConversationStore`.

The schema is versioned with `PRAGMA user_version`; `MIGRATIONS` upgrades a database step by step on open, each
step in its own transaction, and logs it in `schema_migrations`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import sqlite3
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import anyio.to_thread
import pydantic
from pydantic import JsonValue, TypeAdapter
from pydantic_ai import (
    AgentRunResult,
    Citation,
    DocumentCitationSource,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.result import StreamedRunResult
from pydantic_core import PydanticSerializationError

from . import _store_sql as sql
from ._answer import CitedAnswer, answer_parts, cited_answer_ta, cited_outside, response_answer
from ._checks import first_error, require, require_at_least, shown
from ._edit import edit_response
from ._problems import PROBLEM_CODES, CitationProblem, ProblemCode
from ._urls import (
    GROUNDING_HOST,
    bare_host,
    domain_range,
    host_key,
    host_spellings,
    ipv6_host,
    is_grounding_redirect,
    key_host,
    title_domain,
    url_host,
)
from .formats._raw import as_list, as_map

if TYPE_CHECKING:
    from .support import PageSnapshot

__all__ = (
    'MIGRATIONS',
    'SCHEMA_VERSION',
    'AnswerVersions',
    'SQLiteConversationStore',
    'StoreCorruptionError',
    'StoredAnswer',
    'migrate',
)

_T = TypeVar('_T')

_CONFIG = pydantic.ConfigDict(defer_build=True, ser_json_bytes='base64', val_json_bytes='base64')
_message_ta: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage, config=_CONFIG)
"""One message, as `ModelMessagesTypeAdapter` writes each item of a history."""
_messages_ta: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage], config=_CONFIG)
_by_kind: dict[type, TypeAdapter[Any]] = {
    ModelRequest: TypeAdapter(list[ModelRequest], config=_CONFIG),
    ModelResponse: TypeAdapter(list[ModelResponse], config=_CONFIG),
}
"""One-item lists of a message of that exact class: the same bytes as `_message_ta`'s, in less than half its time (the
union's serializer spends more on finding the member than the member spends on the message)."""


def _message_json(message: ModelMessage) -> bytes:
    """`message` as `ModelMessagesTypeAdapter` writes it as an item of a history (`_message_ta.dump_json`)."""
    adapter = _by_kind.get(type(message))
    if adapter is None:  # a subclass, or not a message (which the union's serializer reports)
        return _message_ta.serializer.to_json(message)
    return adapter.serializer.to_json([message])[1:-1]


_records_ta: TypeAdapter[list[ConversationRecord]] = TypeAdapter(list[ConversationRecord], config=_CONFIG)
"""A record, stored as a one-item list: the config (bytes as base64, like messages) only applies to a container."""


def _dump_record(record: ConversationRecord) -> bytes:
    return _records_ta.dump_json([record])


_json_ta: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


def _build_adapters() -> None:
    """Build the message and record adapters now: a store does when it is made.

    Deferred at import (which stays light), they were built by the first save or load, which spent a tenth of a second
    on it.
    """
    for adapter in (_message_ta, _messages_ta, _records_ta, *_by_kind.values()):
        adapter.rebuild()


class StoreCorruptionError(RuntimeError):
    """Stored data cannot be read back: a bad row, or a damaged database file or schema.

    A bad row holds bad JSON or data no longer valid for its type, or is part of a history whose `parent_id`s loop or
    break. It is left as it is and nothing else is touched: other conversations and answers still load.
    """

    def __init__(self, table: str | None, key: str, reason: str) -> None:
        self.table = table
        """The table holding the bad row; `None` when the database as a whole cannot be read."""
        self.key = key
        """The row's key (entry id, conversation id), or the database's path when `table` is `None`."""
        self.reason = reason
        """Why it could not be read."""
        if table is None:
            super().__init__(f'The database {key!r} cannot be read: {reason}')
        else:
            super().__init__(f'Stored row {key!r} in table {table!r} cannot be read: {reason}')


class _BrokenChain(StoreCorruptionError, KeyError):
    """A history names a parent entry that is not stored.

    Also a `KeyError`, as Pydantic AI's `ConversationStore` expects of a history that breaks: a store that reads a
    record and its history separately tells a concurrent save or delete (read again) from damage (raised) by it.
    """

    def __init__(self, entry_id: str, parent_id: str | None) -> None:
        if parent_id is None:
            super().__init__('entries', entry_id, 'a history ends at this entry, which is not stored')
        else:
            super().__init__('entries', entry_id, f'its parent entry {parent_id!r} is not stored')

    __str__ = RuntimeError.__str__


@dataclass(frozen=True)
class AnswerVersions:
    """What produced a stored answer."""

    package: str
    """`pydantic-ai-citations` version that stored it."""
    pydantic_ai: str
    """Pydantic AI version that stored it."""
    _: KW_ONLY
    provider_name: str | None = None
    """`ModelResponse.provider_name`."""
    model_name: str | None = None
    """`ModelResponse.model_name`."""
    response_time: datetime | None = None
    """`ModelResponse.timestamp`."""
    stored_at: datetime
    """When the answer was stored."""


@dataclass(frozen=True)
class StoredAnswer:
    """A stored `ModelResponse`'s answer, with its citations normalised and raw."""

    entry_id: str
    """The `ConversationEntry.id` of the response."""
    conversation_id: str
    """The conversation that stored it (entries can be shared with forks)."""
    answer: CitedAnswer
    """`CitedAnswer.from_messages([response])`: indexes in it refer to that one-message history."""
    raw: JsonValue
    """Raw provider citation data: `[{'part_index', 'provider_name', 'citations'}]` per text part with
    `provider_details['citations']`, plus `{'part_index': None, 'annotations'}` for response-level annotations."""
    versions: AnswerVersions
    """What produced and stored it."""


# --- schema ---------------------------------------------------------------------------------------------------------

_Statements = list[tuple[str, list[tuple[object, ...]]]]
"""Statements (the shared `?` text) with their parameter rows: a driver sends each as one batch."""

BACKFILL_BATCH = 500
"""Rows a migration's backfill reads, validates and writes at a time: its memory stays bounded by one batch."""


@dataclass(frozen=True)
class _Backfill:
    """A migration's data step, the same on both backends.

    `setup`, then `select` batch by batch (keyed on the first column, `BACKFILL_BATCH` rows at a time) with `write`
    turning each batch into statements, then `teardown`.
    """

    setup: tuple[str, ...]
    select: str
    write: Callable[[Sequence[Sequence[Any]]], _Statements]
    teardown: tuple[str, ...] = ()


def _backfill_answers(rows: Sequence[Sequence[Any]]) -> _Statements:
    """v2: the answers of the responses stored before it, from `(entry id, message, owner)` rows.

    Their source index rows are v4's to write (it rebuilds that table in its own format, from the answers). A row
    that cannot be read is left for `read_entry` to report; the migration does not fail on it.
    """
    found: list[_AnswerRow | None] = []
    for entry_id, blob, owner in rows:
        try:
            message = _message_ta.validate_json(blob)
        except ValueError:
            continue
        if isinstance(message, ModelResponse):
            found.append(_answer_row(entry_id, owner or '', message))
    return _answer_statements(found, new=True, sources=False)


def _stored_keys(blob: bytes, message: bytes | None) -> _SourceKeys:
    """The index keys of a stored answer (`blob`), with the citations on its response's text it does not show.

    `message`: the response's stored JSON (`None` when its entry is gone: the answer's own sources only).

    Raises:
        ValueError: The answer cannot be read.
    """
    answer = cited_answer_ta.validate_json(blob)
    outside: list[TextPart] = []
    if message is not None and b'citation_outside_answer' in blob:  # (only then does it cite outside its text)
        try:
            response = _message_ta.validate_json(message)
        except ValueError:
            response = None
        if isinstance(response, ModelResponse):
            outside = [cast(TextPart, response.parts[i]) for i in cited_outside(response, answer_parts(response))]
    return _source_keys(answer, outside)


def _reindex_answers(rows: Sequence[Sequence[Any]]) -> _Statements:
    """v4: the source index rows of stored answers, from `(entry id, answer, message)` rows.

    An answer that cannot be read keeps no index rows; reading it reports it.
    """
    keys: list[tuple[str, _SourceKeys]] = []
    for entry_id, blob, message in rows:
        try:
            keys.append((entry_id, _stored_keys(blob, message)))
        except ValueError:
            continue
    return _source_statements(keys)


def _move_heads(rows: Sequence[Sequence[Any]]) -> _Statements:
    """v8: each conversation's head into its row, its tips its branches alone, from `(conversation id, record)` rows.

    A record that cannot be read keeps its tips as they are (every entry they reach stays); reading it reports it.
    """
    heads: list[tuple[object, ...]] = []
    conversations: list[tuple[object, ...]] = []
    tips: list[tuple[object, ...]] = []
    for conversation_id, blob in rows:
        try:
            record = _record_from_row(conversation_id, blob)
        except StoreCorruptionError:
            continue
        heads.append((record.head_id, conversation_id))
        conversations.append((conversation_id,))
        tips += [(conversation_id, tip) for tip in _tips(record)]
    return [(sql.SET_HEAD, heads), (sql.DELETE_TIPS, conversations), (sql.INSERT_TIP, tips)]


def _rekey_hosts(rows: Sequence[Sequence[Any]]) -> _Statements:
    """v6: each `host_key` of an internationalised host written as cited, from `(host_key,)` rows, in one spelling."""
    found: list[tuple[object, ...]] = []
    for (key,) in rows:
        if not key.isascii() and (new := host_key(_index_host(key_host(key)))) != key:
            found.append((new, key))
    return [(sql.REKEY_HOST, found)]


def _index_outside(rows: Sequence[Sequence[Any]]) -> _Statements:
    """v6: the index rows v4 left out (citations on text an answer does not show), from `(entry id, answer, message)`."""
    urls: list[tuple[object, ...]] = []
    documents: list[tuple[object, ...]] = []
    for entry_id, blob, message in rows:
        if message is None or b'citation_outside_answer' not in blob:
            continue
        try:
            keys = _stored_keys(blob, message)
        except ValueError:
            continue
        pairs = [*((url, key) for url, key in keys.urls), *(('', key) for key in keys.domains)]
        urls += [(entry_id, key, url, key, url, entry_id) for url, key in pairs]
        documents += [(entry_id, document, entry_id, document) for document in keys.documents]
    return [(sql.INSERT_SOURCE_IF_MISSING, urls), (sql.INSERT_DOCUMENT_IF_MISSING, documents)]


_BACKFILLS: tuple[tuple[_Backfill, ...], ...] = (
    (),
    (
        _Backfill(
            (sql.OWNERS_CREATE, sql.OWNERS_FILL, sql.OWNERS_ANALYZE),
            sql.ENTRIES_BATCH,
            _backfill_answers,
            (sql.OWNERS_DROP,),
        ),
    ),
    (),  # v3's rebuild of the source index: v4 rebuilds it in its own format
    (_Backfill((), sql.ANSWERS_BATCH, _reindex_answers),),
    (),  # v5: entries stored before have no `run_start` (each is a run of its own)
    (_Backfill((), sql.HOST_KEYS_BATCH, _rekey_hosts), _Backfill((), sql.ANSWERS_BATCH, _index_outside)),
    (),  # v7: redirects resolved before it are not known by redirect (`edit_answer` still copies their domains)
    (_Backfill((), sql.RECORDS_BATCH, _move_heads),),
)
"""`_BACKFILLS[n]`: the data steps after `SCHEMA[n]`'s DDL, in order."""


def _migrate_sqlite(conn: sqlite3.Connection, version: int) -> None:
    for statement in sql.SCHEMA[version]:
        conn.execute(sql.SQLITE.sql(statement))
    for step in _BACKFILLS[version]:
        for statement in step.setup:
            conn.execute(statement)
        after = ''
        while True:
            rows = conn.execute(step.select, (after, BACKFILL_BATCH)).fetchall()
            _execute_all(conn, step.write(rows))
            if len(rows) < BACKFILL_BATCH:
                break
            after = rows[-1][0]
        for statement in step.teardown:
            conn.execute(statement)


def _v1(conn: sqlite3.Connection) -> None:
    """The conversation log: records, entries, tips."""
    _migrate_sqlite(conn, 0)


def _v2(conn: sqlite3.Connection) -> None:
    """Stored answers and their index; backfills the answers of responses stored before."""
    _migrate_sqlite(conn, 1)


def _v3(conn: sqlite3.Connection) -> None:
    """Every domain a source is under (and Gemini's page domains) indexed: now v4's work (which rebuilds the index)."""
    _migrate_sqlite(conn, 2)


def _v4(conn: sqlite3.Connection) -> None:
    """URLs and domains in one index, by reversed host (`_urls.host_key`); rebuilds the source index."""
    _migrate_sqlite(conn, 3)


def _v5(conn: sqlite3.Connection) -> None:
    """Histories read a run at a time (`entries.run_start`); no scope index row for a conversation without one."""
    _migrate_sqlite(conn, 4)


def _v6(conn: sqlite3.Connection) -> None:
    """Internationalised hosts keyed in one spelling; citations outside answers indexed where v4 left them out."""
    _migrate_sqlite(conn, 5)


def _v7(conn: sqlite3.Connection) -> None:
    """Where grounding redirects led, kept by redirect (`index_snapshots`) for answers stored later."""
    _migrate_sqlite(conn, 6)


def _v8(conn: sqlite3.Connection) -> None:
    """A conversation's head in its row (`conversations.head_id`); `tips` its branches alone."""
    _migrate_sqlite(conn, 7)


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8)
"""`MIGRATIONS[n]` upgrades a database from schema version `n` to `n + 1`."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this package writes (`PRAGMA user_version`)."""


def migrate(conn: sqlite3.Connection, *, target: int = SCHEMA_VERSION) -> int:
    """Upgrade the database behind `conn` to schema version `target`, one step per transaction; return the version.

    Raises:
        UserError: The database was written by a newer version of this package (its `user_version` is higher than
            `SCHEMA_VERSION`), or `target` is out of range.
    """
    if not 0 <= target <= SCHEMA_VERSION:
        raise UserError(f'`target` must be between 0 and {SCHEMA_VERSION}, got {target!r}.')
    current = _user_version(conn)
    while current < target:

        def step(conn: sqlite3.Connection) -> int:
            # Read again inside the write lock: another process may have migrated meanwhile.
            version = _user_version(conn)
            if version < target:
                MIGRATIONS[version](conn)
                version += 1
                conn.execute(sql.LOG_MIGRATION, (version, _now().isoformat(), _package_version()))
                conn.execute(f'PRAGMA user_version = {version:d}')
            return version

        current = _transaction(conn, 'BEGIN IMMEDIATE', step)
    return current


def _user_version(conn: sqlite3.Connection) -> int:
    version = cast(int, conn.execute('PRAGMA user_version').fetchone()[0])
    if version > SCHEMA_VERSION:
        raise UserError(
            f'The database has schema version {version!r}, newer than this package supports ({SCHEMA_VERSION}); '
            'upgrade pydantic-ai-citations.'
        )
    if version < 0:
        raise UserError(
            f'The database has `user_version` {version!r}: another application wrote it, not this package. '
            'Open a store file this package wrote, or a new path.'
        )
    return version


def _transaction(conn: sqlite3.Connection, begin: str, fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """`fn(conn)` in one transaction; on any error rolled back, and that error raised (never the rollback's)."""
    conn.execute(begin)
    return _committed(conn, fn)


def _committed(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """`fn(conn)` in the transaction begun, then committed; on any error rolled back, and that error raised."""
    try:
        result = fn(conn)
        conn.execute('COMMIT')
    except BaseException as error:
        _rollback(conn, error)
        raise
    return result


def _transaction_now(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], None], busy_ms: int) -> bool:
    """`fn(conn)` in one write transaction if no other writer holds the database now (never waiting): whether it ran.

    `busy_ms`: the connection's own wait for a lock, set back once the transaction has begun.
    """
    conn.execute('PRAGMA busy_timeout = 0')
    try:
        conn.execute('BEGIN IMMEDIATE')
    except sqlite3.OperationalError as e:
        if e.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):  # (extended codes too)
            raise
        return False
    finally:
        conn.execute(f'PRAGMA busy_timeout = {busy_ms}')
    _committed(conn, fn)
    return True


def _checkpointed(conn: sqlite3.Connection) -> bool:
    """Checkpoint the WAL as far as readers allow (PASSIVE, as SQLite's own): whether it ran.

    After a commit: an error here (a full disk while pages are copied) is not the write's, which is stored. It is
    dropped, as SQLite drops its own checkpoint's, and the next write tries again.
    """
    try:
        conn.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchall()
    except sqlite3.Error:
        return False
    return True


_MAX_BUSY_MS = 2**31 - 1
"""The longest wait for a lock SQLite takes, in ms (a C int): a longer `timeout` waits this long."""

INLINE_SAVE_BYTES = 256 << 10
"""A SQLite save writing more than this (messages, answers and record, as JSON) always commits in the worker thread."""
SLOW_COMMIT = 0.004
"""Seconds: a save committed on the event loop's thread that took longer sends the next saves to the worker thread."""
SLOW_COMMIT_SAVES = 64
"""How many: then one is tried on the event loop's thread again."""
CHECKPOINT_WRITES = 64
CHECKPOINT_BYTES = 4 << 20
"""A SQLite store checkpoints its WAL (in the worker thread) after this many writes or bytes saved, whichever first."""


def _rollback(conn: sqlite3.Connection, error: BaseException) -> None:
    """Roll back after `error`, which stays the one raised: it says what went wrong.

    SQLite may have rolled back already (a full disk does), or the rollback may fail: that is noted on `error`.
    """
    if not conn.in_transaction:
        return
    try:
        conn.execute('ROLLBACK')
    except sqlite3.Error as e:
        error.add_note(f'(Rolling the transaction back failed too: {e})')


def _unreadable(error: sqlite3.Error, path: str) -> Exception | None:
    """What `error` means when the database cannot be read, or `None` (a busy or full database: raised as it is).

    `UserError` for a file that is not a SQLite database, `StoreCorruptionError` for a damaged file or a schema that
    is not the one its version says.
    """
    name = cast('str | None', getattr(error, 'sqlite_errorname', None)) or ''
    message = str(error)
    if name == 'SQLITE_NOTADB':
        return UserError(
            f'{path!r} is not a SQLite database ({message}). Open a store file this package wrote, or a new path.'
        )
    if name.startswith('SQLITE_CORRUPT') or message.startswith('Could not decode to UTF-8'):
        return StoreCorruptionError(None, path, message)
    if message.startswith(('no such table', 'no such column', 'table ', 'index ')):  # missing, or already exists
        return StoreCorruptionError(None, path, f'its schema is not the one its version says ({message})')
    return None


# --- rows -----------------------------------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _package_version() -> str:
    try:
        return importlib.metadata.version('pydantic-ai-citations')
    except importlib.metadata.PackageNotFoundError:
        return '0+unknown'


def _pydantic_ai_version() -> str:
    import pydantic_ai

    return pydantic_ai.__version__


@dataclass(frozen=True)
class _SourceKeys:
    """What an answer is found by: its URLs with their `host_key`s, other domains' `host_key`s, its document ids."""

    urls: list[tuple[str, str]]
    domains: list[str]
    documents: list[str]
    redirects: list[str]
    """The URL keys of the Google grounding redirects among `urls` (where they led: `resolved_redirects`)."""


def _key(text: str) -> str:
    """`text` as an index key: NUL (which PostgreSQL text cannot hold) as U+FFFD, on both backends alike.

    The answer itself keeps the NUL (answers and messages are stored as JSON, which escapes it); only the lookup
    columns change, and `answers_citing` looks up its argument the same way.
    """
    return text.replace('\x00', '\ufffd')


_MAX_URL_KEY = 1_000
"""Characters of a URL kept as it is in its index key; a longer URL is keyed by them and a hash of all of it (an index
key of PostgreSQL holds at most about 2.7 kB: a 3 kB URL failed the whole save there, and only there)."""


def _index_host(host: str) -> str:
    """`host` in the one spelling the index keys it by: an internationalised name as IDNA 2008 writes it (A-labels).

    A host cited with Unicode labels, or with some of each (`bücher.xn--mnchen-3ya.de`), is keyed as
    `xn--bcher-kva.xn--mnchen-3ya.de`, and so is every spelling of it a lookup is given. A name IDNA 2008 does not
    convert (a symbol in a label) is keyed as it is.
    """
    if host.isascii():
        return host
    import idna  # (on first use: its tables are large)

    try:
        return bare_host(idna.encode(host, uts46=True).decode('ascii')) or host
    except (idna.IDNAError, UnicodeError):
        return host


def _url_key(url: str) -> tuple[str, str]:
    """`url` (as an index key) and the `host_key` of its host (`''` for a URL without one): its index row's key."""
    url = _key(url)
    host = url_host(url)
    if len(url) > _MAX_URL_KEY:  # (the same key for a lookup: `answers_citing` keys its argument here too)
        digest = hashlib.sha256(url.encode('utf-8', 'surrogatepass')).hexdigest()
        url = f'{url[:_MAX_URL_KEY]}#sha256={digest}'
    return url, host_key(_index_host(host)) if host is not None else ''


_GROUNDING_KEY = host_key(GROUNDING_HOST)


def _source_keys(answer: CitedAnswer, outside: Sequence[TextPart] = ()) -> _SourceKeys:
    """The keys of the answer's sources, and of the citations on `outside`, its response's text it does not show.

    The stored response cites those too (`cited_outside`): `answers_citing` finds it by them. Without them (a
    migration reindexing stored answers), the answer's sources alone.
    """
    urls: dict[tuple[str, str], None] = {}
    domains: dict[str, None] = {}
    documents: dict[str, None] = {}
    redirects: dict[str, None] = {}
    for url, title, document_id in _cited(answer, outside):
        if document_id:
            documents[_key(document_id)] = None
        if not url:
            continue
        found = _url_key(url)
        urls[found] = None
        if found[1] == _GROUNDING_KEY and is_grounding_redirect(url):
            redirects[found[0]] = None
            if page := title_domain(_key(title or '')):
                # Gemini cites through an opaque redirect and names the page's domain in the title: index that too.
                domains[host_key(_index_host(page))] = None
    for _, key in urls:
        domains.pop(key, None)  # already indexed with its URL
    return _SourceKeys(list(urls), list(domains), list(documents), list(redirects))


def _cited(answer: CitedAnswer, outside: Sequence[TextPart]) -> Iterator[tuple[str | None, str | None, str | None]]:
    """`(url, title, document_id)` of the answer's sources, then of the sources cited on `outside` parts."""
    for source in answer.sources:
        yield source.url, source.title, source.document_id
    for part in outside:
        for citation in as_list(part.citations):  # (read defensively, as the answer reads them)
            for source in as_list(citation.sources) if isinstance(citation, Citation) else ():
                if isinstance(source, WebCitationSource) and isinstance(cast(object, source.url), str):
                    yield source.url, source.title, None
                elif isinstance(source, DocumentCitationSource) and isinstance(cast(object, source.document_id), str):
                    yield None, source.title, source.document_id


class _AnswerRow(NamedTuple):
    """What a save stores for one answer (a tuple: a save makes one per response)."""

    entry_id: str
    conversation_id: str
    answer: bytes
    raw: bytes
    provider_name: str | None
    model_name: str | None
    response_time: str | None
    keys: _SourceKeys
    problems: list[str]


def _answer_row(
    entry_id: str, conversation_id: str, response: ModelResponse, edited: Sequence[CitationProblem] = ()
) -> _AnswerRow | None:
    """The row of a response with answer text or citations (`None` for one with neither: a tool call, say).

    `edited`: what `edit_answer` reported making this response (citations it dropped), kept with its answer.
    """
    indexes = answer_parts(response)
    outside = [cast(TextPart, response.parts[i]) for i in cited_outside(response, indexes)]
    if not indexes and not outside and not edited:
        return None
    answer = response_answer(response)
    if edited:  # (as the answer's own problems: of message 0, the response the answer is built from)
        answer = dataclasses.replace(
            answer, problems=[*answer.problems, *(dataclasses.replace(p, message_index=0) for p in edited)]
        )
    raw: list[JsonValue] = []
    for index, part in enumerate(response.parts):
        details = as_map(part.provider_details) if isinstance(part, TextPart) else None
        if details is not None and 'citations' in details:
            raw.append(
                {
                    'part_index': index,
                    'provider_name': part.provider_name,
                    'citations': _json(details['citations']),
                }
            )
    response_details = as_map(response.provider_details)
    if response_details is not None and 'annotations' in response_details:
        raw.append({'part_index': None, 'annotations': _json(response_details['annotations'])})
    return _AnswerRow(
        entry_id,
        conversation_id,
        answer.to_json(),
        _json_ta.dump_json(raw) if raw else b'[]',  # (most responses have no raw citation data)
        response.provider_name and _key(response.provider_name),
        response.model_name and _key(response.model_name),
        response.timestamp.isoformat() if isinstance(response.timestamp, datetime) else None,  # pyright: ignore[reportUnnecessaryIsInstance]
        _source_keys(answer, outside),
        sorted({p.code for p in answer.problems}),
    )


def _answer_rows(
    conversation_id: str, entries: Sequence[ConversationEntry], edited: Sequence[CitationProblem] = ()
) -> list[_AnswerRow | None]:
    """The answer rows of new entries' responses; `edited` goes with the first (see `_answer_row`)."""
    responses = [e for e in entries if isinstance(e.message, ModelResponse)]
    return [
        _answer_row(e.id, conversation_id, cast(ModelResponse, e.message), edited if i == 0 else ())
        for i, e in enumerate(responses)
    ]


def _json(value: object) -> JsonValue:
    try:
        return _json_ta.validate_python(value)
    except pydantic.ValidationError:
        return repr(value)


def _versions() -> tuple[str, str]:
    """This package's and Pydantic AI's versions, as stored with each answer (looked up once per store: it is slow)."""
    return _package_version(), _pydantic_ai_version()


def _answer_statements(
    rows: Sequence[_AnswerRow | None],
    *,
    new: bool,
    upsert: bool = True,
    versions: tuple[str, str] | None = None,
    sources: bool = True,
) -> _Statements:
    """The statements that store answers and their index rows: one per table for all the answers of a save.

    With `new`, the entries are known to be brand new (no index rows to replace): nothing is deleted first. Without
    `upsert`, answers are inserted as new (a stored one fails the statement). `versions` defaults to `_versions()`.
    Without `sources`, the answers' source index rows are left out (v2's backfill: v4 writes them).
    """
    found = [row for row in rows if row is not None]
    if not found:
        return []
    (package, pydantic_ai), now = versions or _versions(), _now().isoformat()
    statements: _Statements = [
        (
            sql.UPSERT_ANSWER if upsert else sql.INSERT_ANSWER,
            [
                (r.entry_id, r.conversation_id, r.answer, r.raw, package, pydantic_ai)
                + (r.provider_name, r.model_name, r.response_time, now)
                for r in found
            ],
        )
    ]
    if not new:
        ids: list[tuple[object, ...]] = [(row.entry_id,) for row in found]
        statements += [(sql.DELETE_SOURCES, ids), (sql.DELETE_PROBLEMS, ids)]
    if sources:
        statements += _source_statements([(r.entry_id, r.keys) for r in found])
        # where the grounding redirects they cite led, as `index_snapshots` found (a rewritten history, an edit)
        resolved: list[tuple[object, ...]] = [(r.entry_id, url, r.entry_id) for r in found for url in r.keys.redirects]
        statements.append((sql.APPLY_RESOLVED, resolved))
    statements.append((sql.INSERT_PROBLEM, [(r.entry_id, code) for r in found for code in r.problems]))
    return statements


def _source_statements(keys: Sequence[tuple[str, _SourceKeys]]) -> _Statements:
    rows: list[tuple[object, ...]] = []
    for entry_id, k in keys:  # one statement for the three kinds of row
        rows += [(entry_id, key, url, None) for url, key in k.urls]
        rows += [(entry_id, key, '', None) for key in k.domains]
        rows += [(entry_id, None, None, document) for document in k.documents]
    return [(sql.INSERT_SOURCE, rows)]


def _execute_all(conn: sqlite3.Connection, statements: _Statements) -> None:
    for statement, params in statements:
        if params:
            conn.executemany(statement, params)


def _entry_rows(conversation_id: str, entries: Sequence[ConversationEntry]) -> list[tuple[object, ...]]:
    """`(id, parent_id, kind, message JSON, run_start)` rows of new entries.

    `run_start` (`sql.SCHEMA` v5): the first entry of the run an entry continues, a new entry whose child it is with a
    greater id (as Pydantic AI's time-ordered ids are), else `None` (it starts one).

    Raises:
        UserError: A message cannot be written as JSON (a lone surrogate in a string, say): it would not load back.
    """
    rows: list[tuple[object, ...]] = []
    starts: dict[str, str] = {}
    for index, entry in enumerate(entries):
        parent = entry.parent_id
        start = starts.get(parent) if parent is not None and parent < entry.id else None
        starts[entry.id] = start or entry.id
        try:
            rows.append((entry.id, parent, entry.kind, _message_json(entry.message), start))
        except PydanticSerializationError as e:
            raise UserError(
                f"New message {index} of conversation {conversation_id!r} cannot be stored: {e}. Pydantic AI's "
                '`ModelMessagesTypeAdapter` cannot write it as JSON either; remove or replace the characters '
                "(`text.encode('utf-8', 'replace').decode()`) before saving."
            ) from e
    _check_no_loop(entries)
    return rows


def _check_no_loop(entries: Sequence[ConversationEntry]) -> None:
    """New entries whose `parent_id`s lead back to one of them would make a history without a start.

    Raises:
        UserError: They do.
    """
    parents = {e.id: e.parent_id for e in entries}
    cleared: set[str] = set()
    for entry in entries:
        path: set[str] = set()
        current: str | None = entry.id
        while current in parents and current not in cleared:
            if current in path:
                raise UserError(f"The new entries' `parent_id`s form a loop through entry {current!r}.")
            path.add(current)
            current = parents[current]
        cleared |= path


_ids, _parents, _messages_of = itemgetter(0), itemgetter(1), itemgetter(3)
"""The columns of a history's `(id, parent_id, kind, message, ...)` rows."""


def _entries_from_rows(rows: Sequence[Sequence[Any]]) -> list[ConversationEntry]:
    """Entries from `(id, parent_id, kind, message, ...)` rows (later columns unread), messages validated in one call."""
    try:
        messages = _messages_ta.validate_json(b'[' + b','.join(map(_messages_of, rows)) + b']')
    except ValueError:  # pydantic.ValidationError included: find the bad row
        messages = []
    if len(messages) != len(rows) or any(row[2] != 'message' for row in rows):
        return [_entry_from_row(*row[:4]) for row in rows]  # raises `StoreCorruptionError` for the bad row
    return [ConversationEntry(id=row[0], parent_id=row[1], message=m) for row, m in zip(rows, messages, strict=True)]


def _entry_from_row(entry_id: str, parent_id: str | None, kind: str, blob: bytes) -> ConversationEntry:
    try:
        message = _message_ta.validate_json(blob)
    except pydantic.ValidationError as e:
        raise StoreCorruptionError('entries', entry_id, f'the message is not valid: {first_error(e)}') from e
    if kind != 'message':
        raise StoreCorruptionError('entries', entry_id, f'unknown entry kind {kind!r}')
    return ConversationEntry(id=entry_id, parent_id=parent_id, message=message)


def _record_from_row(conversation_id: str, blob: bytes) -> ConversationRecord:
    try:
        (record,) = _records_ta.validate_json(blob)
        return record
    except pydantic.ValidationError as e:
        raise StoreCorruptionError(
            'conversations', conversation_id, f'the record is not valid: {first_error(e)}'
        ) from e
    except ValueError as e:  # not exactly one record in the stored list
        raise StoreCorruptionError('conversations', conversation_id, f'the record is not valid: {e}') from e


def _tips(record: ConversationRecord) -> list[str]:
    """The rows of `tips` for a record: its branches (its head is `conversations.head_id`)."""
    return list(dict.fromkeys(record.branches))


def _records_query(scope: str | None, limit: int | None) -> tuple[str, list[object]]:
    statement, params = sql.RECORDS, list[object]()
    if scope is not None:
        statement += sql.RECORDS_IN_SCOPE
        params.append(scope)
    statement += sql.RECORDS_ORDER
    if limit is not None:
        statement += sql.LIMIT
        params.append(limit)
    return statement, params


def _record_statements(record: ConversationRecord, blob: bytes, *, new: bool = False) -> _Statements:
    """The statements (shared `?` text) and parameter rows that put a record and its tips.

    With `new`, the conversation is known not to be stored (its write checks that): it has no tips to delete.
    """
    cid = record.conversation_id
    return [
        (
            sql.UPSERT_RECORD,
            [(cid, record.scope, record.revision, record.updated_at.timestamp(), blob, record.head_id)],
        ),
        (sql.DELETE_TIPS, [] if new else [(cid,)]),
        (sql.INSERT_TIP, [(cid, tip) for tip in _tips(record)]),
    ]


@dataclass(frozen=True)
class _EditPlan:
    record: ConversationRecord
    entry_rows: list[tuple[object, ...]]
    answer_rows: list[_AnswerRow | None]
    conversation: Conversation
    problems: list[CitationProblem]
    copies: list[tuple[object, ...]]
    """`(new entry, old entry, new entry)` of each message stored again: `sql.COPY_RESOLVED`'s rows."""

    def statements(self, versions: tuple[str, str]) -> _Statements:
        """The entries, their answers and index rows (those `index_snapshots` added to the old ones too)."""
        return [
            (sql.INSERT_ENTRY, self.entry_rows),
            *_answer_statements(self.answer_rows, new=True, versions=versions),
            (sql.COPY_RESOLVED, self.copies),
        ]


def _plan_edit(
    record: ConversationRecord, history: list[ConversationEntry], message_index: int, part_index: int, new_text: str
) -> _EditPlan:
    """What `edit_answer` writes: the edited response and the messages after it as a new branch (both backends)."""
    if not 0 <= message_index < len(history) or not isinstance(history[message_index].message, ModelResponse):
        raise UserError(f'`message_index` {message_index!r} does not name a `ModelResponse` in the history.')
    response = history[message_index].message
    assert isinstance(response, ModelResponse)
    if not 0 <= part_index < len(response.parts) or not isinstance(response.parts[part_index], TextPart):
        raise UserError(f'`part_index` {part_index!r} does not name a `TextPart` of message {message_index}.')
    edited, problems = edit_response(response, part_index, new_text)
    problems = [dataclasses.replace(p, message_index=message_index, part_index=part_index) for p in problems]
    messages = [e.message for e in history]
    messages[message_index] = edited
    parent_id = history[message_index - 1].id if message_index else None
    new_entries: list[ConversationEntry] = []
    for message in messages[message_index:]:
        new_entries.append(ConversationEntry(parent_id=parent_id, message=message))
        parent_id = new_entries[-1].id
    branches = [*(b for b in record.branches if b != history[-1].id), history[-1].id]
    updated = dataclasses.replace(
        record, head_id=parent_id, branches=branches, revision=str(uuid.uuid4()), updated_at=_now()
    )
    conversation = Conversation(
        messages=messages,
        usage=updated.usage,
        conversation_id=record.conversation_id,
        deferred_tool_requests=updated.deferred_tool_requests,
        revision=updated.revision,
        new_message_index=len(messages),
    )
    return _EditPlan(
        updated,
        _entry_rows(record.conversation_id, new_entries),
        _answer_rows(record.conversation_id, new_entries, problems),  # (the edited response is the first)
        conversation,
        problems,
        [(new.id, old.id, new.id) for new, old in zip(new_entries, history[message_index:], strict=True)],
    )


CHAIN_PAGE = 1000
"""Entries a history read fetches per statement; a `parent_id` loop is found within one page of where it starts."""


class _ChainWalk:
    """Reads a history from its head towards its first entry, `CHAIN_PAGE` entries per statement (`sql.CHAIN`).

    A stored entry seen twice (the `parent_id`s loop) is `StoreCorruptionError`; a parent that is not stored is a
    `_BrokenChain`, which is also the `KeyError` Pydantic AI's store expects (as is a head that is not stored).
    """

    def __init__(self, head_id: str, limit: int | None) -> None:
        self.head_id = head_id
        self.limit = limit
        self.rows: list[Sequence[Any]] = []
        self.seen: set[str] = set()
        self.next_id = head_id

    def params(self) -> tuple[str, int]:
        """`sql.CHAIN`'s parameters for the next page."""
        want = CHAIN_PAGE if self.limit is None else min(CHAIN_PAGE, self.limit - len(self.rows))
        return self.next_id, want

    def add(self, rows: Sequence[Sequence[Any]]) -> bool:
        """Take one page (head-most first); `True` when the history goes on past it."""
        _, want = self.params()
        if not rows:
            if not self.rows:
                raise _BrokenChain(self.head_id, None)
            raise _BrokenChain(self.rows[-1][0], self.next_id)
        for row in rows:
            if row[0] in self.seen:
                raise StoreCorruptionError('entries', row[0], "the history's `parent_id`s loop back to this entry")
            self.seen.add(row[0])
        self.rows.extend(rows)
        parent = cast('str | None', rows[-1][1])
        if parent is None or (self.limit is not None and len(self.rows) >= self.limit):
            return False
        if len(rows) < want:
            raise _BrokenChain(rows[-1][0], parent)
        self.next_id = parent
        return True

    def take_runs(self, rows: Sequence[Sequence[Any]]) -> bool:
        """Take what a `sql.CHAIN_RUNS` read found (first, and without a `limit`); `True` when the history goes on.

        The rows come in any order and may hold other entries (ids within a run's range): the history is what their
        `parent_id`s lead through from the head. Where that ends before the first entry (an entry written another way,
        a loop, a parent not stored), the history is read on entry by entry (`sql.CHAIN`), which tells which.
        """
        if _in_order(rows, self.next_id):  # a history one save wrote: one run, read in key order
            self.rows.extend(reversed(rows))
            return False
        by_id = {row[0]: row for row in rows}
        found: list[Sequence[Any]] = []
        current: str | None = self.next_id
        while current is not None and (row := by_id.pop(current, None)) is not None:
            found.append(row)
            current = row[1]
        self.seen.update(row[0] for row in found)
        self.rows.extend(found)
        if current is None:
            return False
        self.next_id = current
        return True

    def entries(self) -> list[ConversationEntry]:
        """The history read, first entry first."""
        return _entries_from_rows(self.rows[::-1])


def _in_order(rows: Sequence[Sequence[Any]], head_id: str) -> bool:
    """Whether `rows` are a whole history ending at `head_id`, first entry first: each the parent of the next.

    Then they are what `_ChainWalk.take_runs` follows from the head, found without looking each parent up.
    """
    if not rows or rows[-1][0] != head_id or rows[0][1] is not None:
        return False
    return list(map(_parents, rows))[1:] == list(map(_ids, rows))[:-1]


def _domain_host(domain: str) -> str:
    """The host `answers_citing(domain=...)` looks up."""
    text = _key(domain.strip())
    if ':' in text and '/' not in text and (address := ipv6_host(text)) is not None:  # a bare IPv6 address
        return address
    host = url_host(text if '//' in text else f'//{text}') if '/' in text or ':' in text else bare_host(text)
    if not host:
        raise UserError(f'`domain` must name a host, like `"github.com"`; got {domain!r}.')
    return host


_MAX_INT = 2**63 - 1
"""The largest integer both databases take (a 64-bit `INTEGER` / `BIGINT`)."""


_MAX_KEY_BYTES = 2_000
"""UTF-8 bytes an id or a scope may have: each is an index key, and PostgreSQL's hold at most about 2.7 kB."""


def _plain_key(value: object) -> bool:
    """`value` is an id or a scope `_require_storable` takes as it is: a `str` of ASCII, without NUL, not too long."""
    return type(value) is str and value.isascii() and len(value) <= _MAX_KEY_BYTES and '\x00' not in value


def _require_storable(where: str, *, found_by_key: bool = False, **values: object) -> None:
    """Raise `UserError` for an argument the database cannot take: text with a lone surrogate, an int past 64 bits.

    An id or a scope (unless `found_by_key`: a URL or domain looked up by its index key, `_key`) must also hold no NUL
    character (PostgreSQL text cannot) and fit `_MAX_KEY_BYTES`: refused on both backends alike. (Message text is
    checked apart, when it is written: `_entry_rows`.)
    """
    for name, value in values.items():
        if isinstance(value, str) and not found_by_key:
            if '\x00' in value:
                raise UserError(f'{where}: `{name}` holds a NUL character: {shown(value)}.')
            if len(value) > _MAX_KEY_BYTES // 4 and len(value.encode('utf-8', 'replace')) > _MAX_KEY_BYTES:
                raise UserError(f'{where}: `{name}` is longer than {_MAX_KEY_BYTES} bytes (UTF-8): {shown(value)}.')
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as e:
                raise UserError(
                    f'{where}: `{name}` holds a lone surrogate ({shown(value)}): it cannot be stored or looked up as '
                    "UTF-8 text. Replace it first (`value.encode('utf-8', 'replace').decode()`)."
                ) from e
        elif isinstance(value, int) and not isinstance(value, bool) and value > _MAX_INT:
            raise UserError(f'{where}: `{name}` must be at most {_MAX_INT} (a 64-bit int), got {value!r}.')


# --- the store ------------------------------------------------------------------------------------------------------


class _StoredAnswers(ConversationStore):
    """The citation queries, answered the same way by both backends: each runs the shared statements in `_answers`."""

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        """Pydantic AI's `ConversationStore.save`, refusing what is not a conversation with the way to save it.

        A `run_stream` result has no `conversation`: give the conversation the run continued its messages and usage
        (`conversation.messages = run.all_messages()`, `conversation.usage = run.usage`) and save that.

        Raises:
            UserError: `conversation` is neither a `Conversation` nor an `AgentRunResult`, its `conversation_id` is
                not a `str`, or `scope` is neither a `str` nor `None`.
            ConversationConflict: As `ConversationStore.save`.
        """
        if isinstance(conversation, StreamedRunResult):
            raise UserError(
                f'{type(self).__name__}.save: a `run_stream` result has no `conversation` to save. Give the '
                'conversation the run continued its messages and usage, and save that: '
                '`conversation.messages = run.all_messages()`, `conversation.usage = run.usage`, '
                '`await store.save(conversation)`.'
            )
        if not isinstance(cast(object, conversation), Conversation | AgentRunResult):
            raise UserError(
                f'{type(self).__name__}.save: `conversation` must be a `Conversation` or the result of `agent.run` '
                f'(`AgentRunResult`), got {shown(conversation)}.'
            )
        held = conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        # Stored as it is: another type would only fail when the record is read back (`StoreCorruptionError`).
        self._require_id('save', held.conversation_id, scope=scope)
        for name, value in (('conversation_id', held.conversation_id), ('scope', scope)):
            if value is not None and '\x00' in value:
                raise UserError(f'{type(self).__name__}.save: `{name}` holds a NUL character: {shown(value)}.')
        return await super().save(conversation, scope=scope)

    async def load(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> Conversation | None:
        """Pydantic AI's `ConversationStore.load`, refusing arguments of the wrong type (see `_require_id`).

        Raises:
            UserError: `conversation_id` is not a `str`, `scope` not a `str` or `None`, or `limit` not an int >= 0
                or `None`.
        """
        self._require_id('load', conversation_id, scope=scope, limit=limit)
        return await super().load(conversation_id, limit=limit, scope=scope)

    async def load_entries(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> list[ConversationEntry] | None:
        """Pydantic AI's `ConversationStore.load_entries`, refusing arguments of the wrong type (see `_require_id`).

        Raises:
            UserError: `conversation_id` is not a `str`, `scope` not a `str` or `None`, or `limit` not an int >= 0
                or `None`.
        """
        self._require_id('load_entries', conversation_id, scope=scope, limit=limit)
        return await super().load_entries(conversation_id, limit=limit, scope=scope)

    async def branch(
        self,
        conversation_id: str,
        *,
        at: int | None = None,
        from_entry: str | None = None,
        expected_revision: str | None,
        scope: str | None = None,
    ) -> Conversation:
        """Pydantic AI's `ConversationStore.branch`, refusing arguments of the wrong type (see `_require_id`).

        Raises:
            UserError: As `ConversationStore.branch`, or an argument is of the wrong type.
            ConversationConflict: As `ConversationStore.branch`.
        """
        self._require_id(
            'branch', conversation_id, at=at, from_entry=from_entry, expected_revision=expected_revision, scope=scope
        )
        return await super().branch(
            conversation_id, at=at, from_entry=from_entry, expected_revision=expected_revision, scope=scope
        )

    async def fork(
        self,
        conversation_id: str,
        *,
        at: int | None = None,
        from_entry: str | None = None,
        new_conversation_id: str | None = None,
        scope: str | None = None,
        source_scope: str | None = None,
    ) -> Conversation:
        """Pydantic AI's `ConversationStore.fork`, refusing arguments of the wrong type (see `_require_id`).

        Raises:
            UserError: As `ConversationStore.fork`, or an argument is of the wrong type.
            ConversationConflict: As `ConversationStore.fork`.
        """
        self._require_id(
            'fork',
            conversation_id,
            at=at,
            from_entry=from_entry,
            new_conversation_id=new_conversation_id,
            scope=scope,
            source_scope=source_scope,
        )
        return await super().fork(
            conversation_id,
            at=at,
            from_entry=from_entry,
            new_conversation_id=new_conversation_id,
            scope=scope,
            source_scope=source_scope,
        )

    async def delete(self, conversation_id: str, *, scope: str | None = None) -> None:
        """Pydantic AI's `ConversationStore.delete`, refusing arguments of the wrong type (see `_require_id`).

        Raises:
            UserError: `conversation_id` is not a `str`, or `scope` not a `str` or `None`.
        """
        self._require_id('delete', conversation_id, scope=scope)
        await super().delete(conversation_id, scope=scope)

    async def list_conversations(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> list[ConversationRecord]:
        """Pydantic AI's `ConversationStore.list_conversations`, refusing arguments of the wrong type.

        Raises:
            UserError: `scope` is not a `str` or `None`, or `limit` not an int >= 0 or `None`.
        """
        self._require_optional('list_conversations', scope=scope, limit=limit)
        return await super().list_conversations(scope=scope, limit=limit)

    async def edit_answer(
        self,
        conversation_id: str,
        *,
        message_index: int,
        part_index: int,
        new_text: str,
        expected_revision: str | None = None,
        scope: str | None = None,
    ) -> tuple[Conversation, list[CitationProblem]]:
        """Edit a stored answer's text part with `edit_response`, atomically, as a new branch of the conversation.

        The edited response and the messages after it are stored as new entries branching off the message before
        it; the old history stays stored as a branch (`ConversationRecord.branches`), like Pydantic AI's `branch`.
        The edited part's citations are realigned (or dropped and reported), and the response is fingerprinted afresh
        (so `find_stale` catches later edits made outside the store, also for answers not fingerprinted before).
        What the edit dropped is stored with the edited answer too, as its problems (`answers_with_problem(
        'citation_dropped_after_edit')` finds it).

        Args:
            conversation_id: The conversation.
            message_index: Index of the `ModelResponse` in the conversation's current history.
            part_index: Index of the `TextPart` in that response.
            new_text: The new text.
            expected_revision: The revision the caller loaded; `None` edits whatever is current.
            scope: Only edit it if it was saved with this scope.

        Returns:
            The edited conversation (ready to continue and `save`), and what `edit_text` dropped.

        Raises:
            UserError: The conversation is not stored, the indexes do not name a text part of a response, or an
                argument is of the wrong type.
            ConversationConflict: The conversation changed since `expected_revision`.
        """
        where = f'{type(self).__name__}.edit_answer'
        self._require_id('edit_answer', conversation_id, expected_revision=expected_revision, scope=scope)
        require(where, 'message_index', message_index, int, 'an index into the history (an int)')
        require(where, 'part_index', part_index, int, "an index into the response's parts (an int)")
        require(where, 'new_text', new_text, str, 'a str')
        return await self._edit_answer(conversation_id, message_index, part_index, new_text, expected_revision, scope)

    @abstractmethod
    async def _edit_answer(
        self,
        conversation_id: str,
        message_index: int,
        part_index: int,
        new_text: str,
        expected_revision: str | None,
        scope: str | None,
    ) -> tuple[Conversation, list[CitationProblem]]: ...

    def _require_id(self, method: str, conversation_id: object, **optional: object) -> None:
        """Raise `UserError` unless `conversation_id` is a `str` and each of `optional` is as `_require_optional` says."""
        if _plain_key(conversation_id) and all(value is None for value in optional.values()):
            return  # the usual (a `load`'s): what the checks below pass, told without building their messages' context
        require(f'{type(self).__name__}.{method}', 'conversation_id', conversation_id, str, 'a str')
        _require_storable(f'{type(self).__name__}.{method}', conversation_id=conversation_id)
        self._require_optional(method, **optional)

    def _require_optional(self, method: str, **values: object) -> None:
        """Raise `UserError` unless each of `values` is the type Pydantic AI gives it, or `None`.

        `at` / `limit` are ints; the others (scopes, revisions, entry and conversation ids) are strs. Pydantic AI
        types them so and checks none: another value would find nothing (a scope or id is compared with what is
        stored), fail later with a `TypeError`, or be stored and make the record unreadable.
        """
        where = f'{type(self).__name__}.{method}'
        for name, value in values.items():
            if name in ('at', 'limit'):
                require(where, name, value, (int, NoneType), 'an int or None')
            else:
                require(where, name, value, (str, NoneType), 'a str or None')
        _require_storable(where, found_by_key=False, **values)

    @abstractmethod
    async def _answers(
        self, where: str, params: tuple[object, ...], *, order: str = sql.BY_STORED, limit: int | None = None
    ) -> list[StoredAnswer]: ...

    async def answer(self, entry_id: str) -> StoredAnswer | None:
        """The stored answer of the response with this entry id, or `None`.

        Raises:
            UserError: `entry_id` is not a `str`.
        """
        require(f'{type(self).__name__}.answer', 'entry_id', entry_id, str, 'a str (`ConversationEntry.id`)')
        _require_storable(f'{type(self).__name__}.answer', entry_id=entry_id)
        found = await self._answers(sql.BY_ENTRY, (entry_id,))
        return found[0] if found else None

    async def answers_citing(self, *, url: str | None = None, domain: str | None = None) -> list[StoredAnswer]:
        """Stored answers citing `url` exactly, or any URL on `domain` or its subdomains.

        `domain` is a host name (`'github.com'`; case, a trailing dot and a leading `www.` ignored); a URL or
        `host:port` is taken for its host (`'https://github.com/'` is `'github.com'`), and an IPv6 address with or
        without brackets. An internationalised domain name finds the URLs cited with either of its spellings
        (`'münchen.de'` and `'xn--mnchen-3ya.de'`). A top-level domain alone
        (`'com'`) matches nothing. Gemini cites every page through a Google grounding redirect and names the page's
        domain in the source title: such an answer is found by that domain too.

        Raises:
            UserError: Not exactly one of `url` and `domain` is given as a `str`, or `domain` names no host.
        """
        where = f'{type(self).__name__}.answers_citing'
        require(where, 'url', url, (str, NoneType), 'a URL (a str) or None')
        require(where, 'domain', domain, (str, NoneType), 'a host name (a str) or None')
        _require_storable(where, found_by_key=True, url=url, domain=domain)
        if (url is None) == (domain is None):
            raise UserError(f'Pass exactly one of `url` and `domain`, got url={url!r}, domain={domain!r}.')
        if url is not None:
            text, key = _url_key(url)
            return await self._answers(sql.CITING_URL, (key, text))
        assert domain is not None
        # An internationalised name: each of its spellings (IDNA 2008 and 2003 may differ) in the index's spelling.
        spellings = list(dict.fromkeys(map(_index_host, host_spellings(_domain_host(domain)))))
        found: dict[str, StoredAnswer] = {}
        for host in spellings:
            under = domain_range(host)
            citing = (
                await self._answers(sql.CITING_HOST, (host_key(host),))
                if under is None
                else await self._answers(sql.CITING_DOMAIN, under)
            )
            for answer in citing:
                found.setdefault(answer.entry_id, answer)
        if len(spellings) == 1:
            return list(found.values())
        return sorted(found.values(), key=lambda a: (a.versions.stored_at, a.entry_id))  # (as `sql.BY_STORED`)

    async def answers_with_problem(self, code: ProblemCode) -> list[StoredAnswer]:
        """Stored answers whose `CitedAnswer.problems` include `code`.

        Raises:
            UserError: `code` is not a `ProblemCode`.
        """
        if code not in PROBLEM_CODES:
            raise UserError(f'Unknown problem code {code!r}; expected one of {", ".join(PROBLEM_CODES)}.')
        return await self._answers(sql.WITH_PROBLEM, (code,))

    async def index_snapshots(self, snapshots: Iterable[PageSnapshot]) -> None:
        """Index the page each Google grounding redirect led to, as page snapshots found it.

        Gemini cites every page through an opaque `vertexaisearch.cloud.google.com/grounding-api-redirect/...` link;
        the store already indexes the domain Gemini names in the source title. A snapshot that followed the redirect
        (`PageSnapshot.final_url`) tells the page's own domain: after this, `answers_citing(domain=...)` finds every
        stored answer citing that redirect by it (and the domains it is under). Other snapshots are ignored; indexing
        one twice adds nothing.

        ```python
        await store.index_snapshots(SnapshotStore('snapshots.db').latest())
        ```
        """
        rows: list[tuple[object, ...]] = []
        for snapshot in snapshots:
            host = url_host(_key(snapshot.final_url)) if snapshot.final_url else None
            if host and host != GROUNDING_HOST and is_grounding_redirect(snapshot.url):
                url, redirect_key = _url_key(snapshot.url)
                page = host_key(_index_host(host))
                rows.append((page, redirect_key, url, page))
        if rows:
            remembered = [(row[2], row[0]) for row in rows]  # for answers stored later that cite them
            await self._write_statements([(sql.INDEX_RESOLVED, rows), (sql.REMEMBER_RESOLVED, remembered)])

    @abstractmethod
    async def _write_statements(self, statements: _Statements) -> None: ...

    async def iter_answers(self, *, batch_size: int = 500) -> AsyncIterator[StoredAnswer]:
        """Every stored answer, by entry id, read `batch_size` at a time: memory stays bounded (audits)."""
        require_at_least(f'{type(self).__name__}.iter_answers', 'batch_size', batch_size, 1, int, 'at least 1 (an int)')
        _require_storable(f'{type(self).__name__}.iter_answers', batch_size=batch_size)
        after = ''
        while True:
            page = await self._answers(sql.AFTER_ENTRY, (after,), order=sql.BY_ENTRY_ID, limit=batch_size)
            for stored in page:
                yield stored
            if len(page) < batch_size:
                return
            after = page[-1].entry_id


class SQLiteConversationStore(_StoredAnswers):
    """Pydantic AI's `ConversationStore` on SQLite, keeping each answer's citations queryable.

    ```python
    store = SQLiteConversationStore('conversations.db')
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)
    await store.answers_citing(domain='docs.pydantic.dev')
    ```

    Messages round-trip exactly (the same JSON bytes). `delete` removes the conversation's record and every entry
    (and stored answer) that no remaining conversation's head or branch reaches.
    """

    def __init__(self, path: str | Path = ':memory:', *, timeout: float = 30.0) -> None:
        """Open (and create or migrate) the database at `path`; `':memory:'` keeps it in memory.

        Args:
            path: The database file.
            timeout: Seconds to wait for another writer's lock before failing.

        Raises:
            UserError: `path` is not a str or path-like, or not a SQLite database, or one a newer version of this
                package wrote; `timeout` is not a number of seconds.
            StoreCorruptionError: The database file is damaged, or its schema is not the one its version says.
        """
        require('SQLiteConversationStore', 'path', path, (str, os.PathLike), 'a str or path-like (or `:memory:`)')
        require_at_least('SQLiteConversationStore', 'timeout', timeout, 0, (int, float), 'a number of seconds (>= 0)')
        if timeout != timeout:  # NaN
            raise UserError(f'SQLiteConversationStore: `timeout` must be a number of seconds (>= 0), got {timeout!r}.')
        self.path = os.fspath(path)
        self._versions = _versions()
        _build_adapters()
        self._lock = threading.Lock()
        self._closed = False
        self._busy_ms = _MAX_BUSY_MS if timeout * 1000 >= _MAX_BUSY_MS else round(timeout * 1000)
        self._writes_since_checkpoint = 0
        self._bytes_since_checkpoint = 0
        """Writes, and bytes saved, since the WAL was last checkpointed (see `_save`)."""
        self._threaded_saves = 0
        """Saves left that go to the worker thread after a slow commit right here."""
        self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            with self._lock:
                self._guarded(self._open)
        except BaseException:
            self._conn.close()
            raise

    def _open(self, conn: sqlite3.Connection) -> None:
        conn.execute('PRAGMA foreign_keys = OFF')
        if self.path != ':memory:':
            conn.execute('PRAGMA journal_mode = WAL')
        migrate(conn)
        if self.path != ':memory:':
            # The store checkpoints the WAL itself, in the worker thread (`_checkpoint_due`), so that a save committed
            # on the event loop's thread never copies pages to the database. Commits are flushed to the WAL as before
            # (`synchronous` is left at FULL).
            conn.execute('PRAGMA wal_autocheckpoint = 0')

    def close(self) -> None:
        """Close the connection. The store cannot be used after this (make a new one)."""
        with self._lock:
            self._conn.close()
            self._closed = True

    def _guarded(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """`fn(connection)` (the lock held), with a database that cannot be read reported as such (`_unreadable`)."""
        if self._closed:
            raise UserError(f'{type(self).__name__}: the store was closed (`close()`); make a new one to go on.')
        try:
            return fn(self._conn)
        except sqlite3.Error as e:
            unreadable = _unreadable(e, self.path)
            if unreadable is None:
                raise
            raise unreadable from e
        except UnicodeDecodeError as e:  # `sqlite3` reading damaged text (an error message quoting the schema, say)
            raise StoreCorruptionError(None, self.path, f'it holds text that is not UTF-8 ({e})') from e

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        def call() -> _T:
            with self._lock:
                return self._guarded(fn)

        return await anyio.to_thread.run_sync(call)

    async def _write(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._write_in_thread(fn, checkpoint=self._checkpoint_due(0))

    async def _write_in_thread(self, fn: Callable[[sqlite3.Connection], _T], *, checkpoint: bool) -> _T:
        """`fn` in one write transaction in the worker thread, then the WAL checkpointed if `checkpoint`."""

        def write(conn: sqlite3.Connection) -> tuple[_T, bool]:
            return _transaction(conn, 'BEGIN IMMEDIATE', fn), checkpoint and _checkpointed(conn)

        result, checkpointed = await self._run(write)
        if checkpointed:  # (else the next write tries again)
            self._writes_since_checkpoint = self._bytes_since_checkpoint = 0
        return result

    def _checkpoint_due(self, size: int) -> bool:
        """Count a write of `size` bytes: whether the WAL is to be checkpointed after it (`CHECKPOINT_WRITES`, ...)."""
        self._writes_since_checkpoint += 1
        self._bytes_since_checkpoint += size
        return self.path != ':memory:' and (
            self._writes_since_checkpoint >= CHECKPOINT_WRITES or self._bytes_since_checkpoint >= CHECKPOINT_BYTES
        )

    async def _save(self, fn: Callable[[sqlite3.Connection], None], size: int) -> None:
        """A save's transaction (`size` bytes of rows): committed right here when it can be, else in the worker thread.

        The trip to the worker thread and back cost a save of 20 messages more than its whole commit (measured: 2.7-2.9x
        the `sqlite3` blob baseline right here, 3.1x through the thread). A save stays here only while that keeps the
        event loop free of long waits: the connection is free (no other write or read under way), the save is small
        (`INLINE_SAVE_BYTES`), no other writer holds the database (the lock is tried once, never waited for), and the
        last save committed here took under `SLOW_COMMIT` seconds (a slow disk sends the next `SLOW_COMMIT_SAVES`
        to the thread). The WAL is checkpointed in the worker thread, after the write that reaches `CHECKPOINT_WRITES`
        writes or `CHECKPOINT_BYTES` bytes saved (SQLite's own checkpoint is off for this connection), so no save
        committed here copies pages to the database.
        """
        checkpoint = self._checkpoint_due(size)
        if self._threaded_saves:
            self._threaded_saves -= 1
        elif not checkpoint and size <= INLINE_SAVE_BYTES and self._lock.acquire(blocking=False):
            try:
                started = time.perf_counter()
                done = self._guarded(lambda conn: _transaction_now(conn, fn, self._busy_ms))
            finally:
                self._lock.release()
            if done:
                if time.perf_counter() - started > SLOW_COMMIT:
                    self._threaded_saves = SLOW_COMMIT_SAVES
                return
        await self._write_in_thread(fn, checkpoint=checkpoint)

    async def _read(
        self, conversation_id: str, *, limit: int | None = None, scope: str | None = None
    ) -> tuple[ConversationRecord, list[ConversationEntry]] | None:
        """`load`'s record and history in one read transaction, without a thread hop when the connection is free."""
        if limit is not None and limit < 0:
            raise UserError('`limit` must not be negative.')

        def read(conn: sqlite3.Connection) -> tuple[ConversationRecord, list[ConversationEntry]] | None:
            return _transaction(conn, 'BEGIN', lambda conn: _read_conversation(conn, conversation_id, limit, scope))

        return await self._read_now(read)

    async def _read_now(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """A few indexed reads, run right here when the connection is free, else in the worker thread after the lock.

        WAL readers never wait for writers, and a trip to a worker thread would cost more than the read.
        """
        if self._lock.acquire(blocking=False):
            try:
                return self._guarded(fn)
            finally:
                self._lock.release()
        return await self._run(fn)

    # --- the five primitives, and a one-query history ---

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        self._require_id('read_record', conversation_id)

        def read(conn: sqlite3.Connection) -> ConversationRecord | None:
            row = conn.execute(sql.RECORD, (conversation_id,)).fetchone()
            return None if row is None else _record_from_row(conversation_id, row[0])

        return await self._read_now(read)

    async def _write_statements(self, statements: _Statements) -> None:
        await self._write(lambda conn: _execute_all(conn, statements))

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        def read(conn: sqlite3.Connection) -> list[ConversationRecord]:
            statement, params = _records_query(scope, limit)
            return [_record_from_row(cid, blob) for cid, blob in conn.execute(statement, params).fetchall()]

        return await self._run(read)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        entry_rows = _entry_rows(record.conversation_id, new_entries)  # serialised before taking the lock
        answer_rows = _answer_rows(record.conversation_id, new_entries)
        record_blob = _dump_record(record)

        def write(conn: sqlite3.Connection) -> None:
            self._check_revision(conn, record.conversation_id, expected_revision)
            new_ids = {row[0] for row in entry_rows}
            if record.head_id is not None and record.head_id not in new_ids and not _has_entry(conn, record.head_id):
                raise ConversationConflict(record.conversation_id)
            inserted = conn.executemany(sql.INSERT_ENTRY_IF_NEW, entry_rows).rowcount
            # Entries are new (fresh ids) unless a caller of this primitive passed stored ones again: only then can
            # an answer have index rows to replace.
            _execute_all(
                conn, _answer_statements(answer_rows, new=inserted == len(entry_rows), versions=self._versions)
            )
            _put_record(conn, record, record_blob, new=expected_revision is None)

        size = len(record_blob) + sum(len(cast(bytes, row[3])) for row in entry_rows)  # (most of what is written)
        await self._save(write, size + sum(len(row.answer) for row in answer_rows if row is not None))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        self._require_id('delete_record', conversation_id, expected_revision=expected_revision)

        def delete(conn: sqlite3.Connection) -> None:
            row = conn.execute(sql.REVISION, (conversation_id,)).fetchone()
            if row is None or row[0] != expected_revision:
                raise ConversationConflict(conversation_id)
            conn.execute(sql.DELETE_RECORD, (conversation_id,))
            conn.execute(sql.DELETE_TIPS, (conversation_id,))
            for statement in sql.COLLECT_GARBAGE:
                conn.execute(statement)
            conn.execute(sql.FORGET_RESOLVED, (_GROUNDING_KEY,))

        await self._write(delete)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        def read(conn: sqlite3.Connection) -> ConversationEntry:
            row = conn.execute(sql.ENTRY, (entry_id,)).fetchone()
            if row is None:
                raise KeyError(entry_id)
            return _entry_from_row(*row)

        return await self._read_now(read)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []
        return await self._read_now(lambda conn: _read_chain(conn, head_id, limit))

    async def _answers(
        self, where: str, params: tuple[object, ...], *, order: str = sql.BY_STORED, limit: int | None = None
    ) -> list[StoredAnswer]:
        def read(conn: sqlite3.Connection) -> list[StoredAnswer]:
            statement = sql.ANSWERS + where + order + (sql.LIMIT if limit is not None else '')
            rows = conn.execute(statement, (*params, limit) if limit is not None else params).fetchall()
            return [_stored_answer(*row) for row in rows]

        return await self._run(read)

    async def _edit_answer(
        self,
        conversation_id: str,
        message_index: int,
        part_index: int,
        new_text: str,
        expected_revision: str | None,
        scope: str | None,
    ) -> tuple[Conversation, list[CitationProblem]]:
        result: list[tuple[Conversation, list[CitationProblem]]] = []

        def edit(conn: sqlite3.Connection) -> None:
            row = conn.execute(sql.RECORD_AND_SCOPE, (conversation_id,)).fetchone()
            if row is None or (scope is not None and row[1] != scope):
                raise UserError(f'Conversation {conversation_id!r} is not in the store.')
            record = _record_from_row(conversation_id, row[0])
            if expected_revision is not None and record.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            history = _read_chain(conn, record.head_id, None) if record.head_id else []
            plan = _plan_edit(record, history, message_index, part_index, new_text)
            _execute_all(conn, plan.statements(self._versions))
            _put_record(conn, plan.record, _dump_record(plan.record))
            result.append((plan.conversation, plan.problems))

        await self._write(edit)
        return result[0]

    @staticmethod
    def _check_revision(conn: sqlite3.Connection, conversation_id: str, expected_revision: str | None) -> None:
        row = conn.execute(sql.REVISION, (conversation_id,)).fetchone()
        if (row[0] if row is not None else None) != expected_revision:
            raise ConversationConflict(conversation_id)


def _has_entry(conn: sqlite3.Connection, entry_id: str) -> bool:
    return conn.execute(sql.HAS_ENTRY, (entry_id,)).fetchone() is not None


def _put_record(conn: sqlite3.Connection, record: ConversationRecord, blob: bytes, *, new: bool = False) -> None:
    _execute_all(conn, _record_statements(record, blob, new=new))


def _read_conversation(
    conn: sqlite3.Connection, conversation_id: str, limit: int | None, scope: str | None
) -> tuple[ConversationRecord, list[ConversationEntry]] | None:
    row = conn.execute(sql.RECORD_AND_SCOPE, (conversation_id,)).fetchone()
    if row is None or (scope is not None and row[1] != scope):
        return None
    record = _record_from_row(conversation_id, row[0])
    if record.head_id is None or limit == 0:
        return record, []
    return record, _read_chain(conn, record.head_id, limit)


def _read_chain(conn: sqlite3.Connection, head_id: str, limit: int | None) -> list[ConversationEntry]:
    walk = _ChainWalk(head_id, limit)
    more = limit is not None or walk.take_runs(conn.execute(sql.CHAIN_RUNS, (head_id,)).fetchall())
    while more:
        more = walk.add(conn.execute(sql.CHAIN, walk.params()).fetchall())
    return walk.entries()


def _stored_answer(
    entry_id: str,
    conversation_id: str,
    answer: bytes,
    raw: bytes,
    package_version: str,
    pydantic_ai_version: str,
    provider_name: str | None,
    model_name: str | None,
    response_time: str | None,
    stored_at: str,
) -> StoredAnswer:
    try:
        cited = cited_answer_ta.validate_json(answer)
        raw_value = _json_ta.validate_json(raw)
        versions = AnswerVersions(
            package_version,
            pydantic_ai_version,
            provider_name=provider_name,
            model_name=model_name,
            response_time=datetime.fromisoformat(response_time) if response_time else None,
            stored_at=datetime.fromisoformat(stored_at),
        )
    except (pydantic.ValidationError, ValueError) as e:
        raise StoreCorruptionError('answers', entry_id, str(e).splitlines()[0]) from e
    return StoredAnswer(entry_id, conversation_id, cited, raw_value, versions)
