from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from _postgres import DSN_VAR, REQUIRE_VAR, NoServer, fresh_schema, throwaway_cluster
from _store_worker import append_many
from pydantic_ai import (
    Agent,
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
from pydantic_ai.conversation_store import ConversationConflict, InMemoryConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import (
    CleanStaleCitations,
    PostgresConversationStore,
    SQLiteConversationStore,
    StoreCorruptionError,
    find_stale,
)
from pydantic_ai_citations._edit import METADATA_KEY
from pydantic_ai_citations._store import SCHEMA_VERSION, migrate
from pydantic_ai_citations._store_sql import POSTGRES

TEXT = 'Pydantic validates data. It is fast.'


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[
            TextPart(
                TEXT,
                provider_name='function',
                provider_details={'citations': [{'type': 'raw', 'n': 1}]},
                citations=[
                    Citation(
                        [WebCitationSource('https://docs.pydantic.dev/latest/', title='Docs')],
                        anchor=ContentCitationAnchor(start=0, end=23),
                    ),
                    Citation(
                        [WebCitationSource('https://www.Blog.Example.com/fast')],
                        anchor=ContentCitationAnchor(start=25, end=99),  # out of range: a problem is stored
                    ),
                    Citation([DocumentCitationSource(document_id='file-1', title='Spec')]),
                ],
            )
        ],
        provider_name='function',
        model_name='function-model',
    )


def agent() -> Agent[None, str]:
    return Agent(FunctionModel(answer), capabilities=[CleanStaleCitations()])


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


Store = SQLiteConversationStore | PostgresConversationStore
Opener = Callable[[], Awaitable[Store]]


@pytest.fixture(scope='session')
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server: CI's (`PYDANTIC_AI_CITATIONS_POSTGRES_DSN`), else a throw-away cluster, else skip."""
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


@pytest.fixture(params=['sqlite', 'postgres'])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where a test's store lives: a fresh SQLite file, or a fresh schema on the PostgreSQL server."""
    if backend == 'sqlite':
        return str(tmp_path / 'c.db')
    return fresh_schema(request.getfixturevalue('pg_dsn'))


async def close(s: Store) -> None:
    if isinstance(s, PostgresConversationStore):
        await s.close()
    else:
        s.close()


@pytest.fixture
async def open_store(backend: str, target: str) -> AsyncIterator[Opener]:
    """Opens stores on the test's database (several can share it); closes them after the test."""
    opened: list[Store] = []

    async def opener() -> Store:
        s: Store = SQLiteConversationStore(target) if backend == 'sqlite' else PostgresConversationStore(target)
        if isinstance(s, PostgresConversationStore):
            await s.open()
        opened.append(s)
        return s

    yield opener
    for s in opened:
        await close(s)


@pytest.fixture
async def store(open_store: Opener) -> Store:
    return await open_store()


def raw_execute(backend: str, target: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (shared `?` text) on the test's database, behind the store's back."""
    if backend == 'sqlite':
        with sqlite3.connect(target) as conn:
            return conn.execute(statement, params).fetchall()
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        cur = conn.execute(POSTGRES.sql(statement), params)  # pyright: ignore[reportArgumentType]
        return cur.fetchall() if cur.description else []


@pytest.mark.anyio
async def test_save_load_byte_identical_and_answers(store: Store) -> None:
    conversation = Conversation(conversation_id='c1')
    result = await agent().run('What is Pydantic?', conversation=conversation)
    entries = await store.save(result)
    assert len(entries) == 2
    loaded = await store.load('c1')
    assert loaded is not None
    assert dump(loaded.messages) == dump(result.all_messages())
    response = loaded.messages[-1]
    assert isinstance(response, ModelResponse)
    assert response.metadata
    assert METADATA_KEY in response.metadata

    (stored,) = await store.answers_citing(url='https://docs.pydantic.dev/latest/')
    assert stored.entry_id == entries[1].id
    assert stored.conversation_id == 'c1'
    assert stored.answer.text == TEXT
    assert [s.url or s.document_id for s in stored.answer.sources] == [
        'https://docs.pydantic.dev/latest/',
        'https://www.Blog.Example.com/fast',
        'file-1',
    ]
    assert stored.raw == [{'part_index': 0, 'provider_name': 'function', 'citations': [{'type': 'raw', 'n': 1}]}]
    assert stored.versions.provider_name == 'function'
    assert stored.versions.model_name == 'function:answer:'
    assert stored.versions.pydantic_ai.startswith('2.')
    assert [a.entry_id for a in await store.answers_citing(domain='example.com')] == [stored.entry_id]
    assert [a.entry_id for a in await store.answers_citing(domain='www.blog.example.com')] == [stored.entry_id]
    assert await store.answers_citing(domain='pydantic.dev') != []
    assert await store.answers_citing(domain='other.org') == []
    assert [a.entry_id for a in await store.answers_with_problem('anchor_out_of_range')] == [stored.entry_id]
    assert await store.answers_with_problem('stale_after_edit') == []
    assert await store.answer(stored.entry_id) == stored
    with pytest.raises(UserError, match='got url=None, domain=None'):
        await store.answers_citing()
    with pytest.raises(UserError, match="'nope'"):
        await store.answers_with_problem('nope')  # type: ignore[arg-type]

    # Continue the conversation and save again: only the new messages are appended.
    result2 = await agent().run('More?', conversation=loaded)
    assert len(await store.save(result2)) == 2
    again = await store.load('c1')
    assert again is not None
    assert dump(again.messages) == dump(result2.all_messages())
    last_two = await store.load('c1', limit=2)
    assert last_two is not None
    assert dump(last_two.messages) == dump(result2.all_messages()[-2:])


@pytest.mark.anyio
async def test_behaves_like_in_memory_store(store: Store) -> None:
    """The same sequence of operations gives the same histories, branches and errors on both stores."""
    outcomes: list[list[Any]] = []
    for s in (InMemoryConversationStore(), store):
        seen: list[Any] = []
        r1 = await agent().run('one', conversation=Conversation(conversation_id='x'))
        await s.save(r1, scope='u1')
        loaded = await s.load('x', scope='u1')
        assert loaded is not None
        seen.append(await s.load('x', scope='other'))
        r2 = await agent().run('two', conversation=loaded)
        await s.save(r2)
        branched = await s.branch('x', at=2, expected_revision=r2.conversation.revision)
        seen.append(len(branched.messages))
        r3 = await agent().run('three', conversation=branched)
        await s.save(r3)
        record = await s.read_record('x')
        assert record is not None
        seen.append(len(record.branches))
        fork = await s.fork('x', at=2, new_conversation_id='y')
        seen.append(len(fork.messages))
        seen.append([r.conversation_id for r in await s.list_conversations()])
        seen.append([r.conversation_id for r in await s.list_conversations(scope='u1', limit=5)])
        with pytest.raises(ConversationConflict):
            await s.save(r2)  # stale revision
        with pytest.raises(ConversationConflict):
            await s.save(Conversation(conversation_id='x'))  # exists, not loaded
        await s.delete('x')
        seen.append(await s.load('x'))
        y = await s.load('y')
        assert y is not None
        seen.append(dump(y.messages) == dump(r1.all_messages()))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]


@pytest.mark.anyio
async def test_concurrent_writers_one_wins(open_store: Opener) -> None:
    a, b = await open_store(), await open_store()  # two writers, one database
    first = await agent().run('one', conversation=Conversation(conversation_id='c'))
    await a.save(first)
    loaded_a, loaded_b = await a.load('c'), await b.load('c')
    assert loaded_a is not None
    assert loaded_b is not None
    ra = await agent().run('from a', conversation=loaded_a)
    rb = await agent().run('from b', conversation=loaded_b)
    outcomes: list[str] = []

    async def save(store: Store, result: Any, name: str) -> None:
        try:
            await store.save(result)
            outcomes.append(f'{name} won')
        except ConversationConflict as e:
            outcomes.append(f'{name} conflict {e.conversation_id}')

    async with anyio.create_task_group() as tg:
        tg.start_soon(save, a, ra, 'a')
        tg.start_soon(save, b, rb, 'b')
    assert sorted(o.split(maxsplit=1)[1] for o in outcomes) == ['conflict c', 'won']
    final = await b.load('c')
    assert final is not None
    assert len(final.messages) == 4
    # also two tasks on one store instance
    again_a, again_b = await a.load('c'), await a.load('c')
    assert again_a is not None
    assert again_b is not None
    outcomes.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(save, a, await agent().run('x', conversation=again_a), 'a')
        tg.start_soon(save, a, await agent().run('y', conversation=again_b), 'b')
    assert sorted(o.split(maxsplit=1)[1] for o in outcomes) == ['conflict c', 'won']


@pytest.mark.anyio
async def test_corrupt_row_raises_clearly_and_loses_nothing_else(store: Store, backend: str, target: str) -> None:
    for cid in ('good', 'bad'):
        await store.save(await agent().run('q', conversation=Conversation(conversation_id=cid)))
    entries = await store.load_entries('bad')
    assert entries is not None
    bad_id = entries[1].id
    raw_execute(
        backend, target, 'UPDATE entries SET message = ? WHERE id = ?', (b'{"kind": "response", "parts": [', bad_id)
    )
    with pytest.raises(StoreCorruptionError, match=f"'{bad_id}' in table 'entries'") as excinfo:
        await store.load('bad')
    assert excinfo.value.key == bad_id
    good = await store.load('good')
    assert good is not None
    assert len(good.messages) == 2
    assert len(await store.answers_citing(domain='pydantic.dev')) == 2  # the answers index is intact
    assert raw_execute(backend, target, 'SELECT count(*) FROM entries')[0][0] == 4  # the bad row is kept
    raw_execute(backend, target, "UPDATE conversations SET record = ? WHERE conversation_id = 'good'", (b'nope',))
    with pytest.raises(StoreCorruptionError, match="'good' in table 'conversations'"):
        await store.load('good')


@pytest.mark.anyio
async def test_edit_answer(store: Store) -> None:
    result = await agent().run('q', conversation=Conversation(conversation_id='c'))
    await store.save(result)
    loaded = await store.load('c')
    assert loaded is not None
    edited, problems = await store.edit_answer(
        'c', message_index=1, part_index=0, new_text='In short: ' + TEXT, expected_revision=loaded.revision
    )
    assert [(p.code, p.citation_index, p.detail) for p in problems] == [
        ('citation_dropped_after_edit', 1, None),  # its anchor did not fit the old text
        ('citation_dropped_after_edit', None, "provider_details['citations']"),  # raw data cannot follow
    ]
    part = edited.messages[1].parts[0]  # type: ignore[union-attr]
    assert isinstance(part, TextPart)
    assert part.content == 'In short: ' + TEXT
    assert part.citations is not None
    assert part.citations[0].anchor == ContentCitationAnchor(start=10, end=33)
    assert find_stale(edited.messages) == []  # fingerprint refreshed
    reloaded = await store.load('c')
    assert reloaded is not None
    assert dump(reloaded.messages) == dump(edited.messages)
    record = await store.read_record('c')
    assert record is not None
    assert len(record.branches) == 1
    # the stored answer follows the edit
    (new_answer,) = [a for a in await store.answers_citing(domain='pydantic.dev') if a.answer.text.startswith('In')]
    assert new_answer.answer.spans[0].start == 10
    # conflicts and misuse
    with pytest.raises(ConversationConflict):
        await store.edit_answer('c', message_index=1, part_index=0, new_text='x', expected_revision=loaded.revision)
    with pytest.raises(UserError, match='`message_index` 0'):
        await store.edit_answer('c', message_index=0, part_index=0, new_text='x')
    with pytest.raises(UserError, match='`part_index` 5'):
        await store.edit_answer('c', message_index=1, part_index=5, new_text='x')
    with pytest.raises(UserError, match="'missing'"):
        await store.edit_answer('missing', message_index=1, part_index=0, new_text='x')
    # the edited conversation continues and saves normally
    more = await agent().run('more', conversation=edited)
    assert len(await store.save(more)) == 2


@pytest.mark.anyio
async def test_migrations_from_v0_and_v1(tmp_path: Path) -> None:
    path = tmp_path / 'm.db'
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, target=0) == 0
    assert migrate(conn, target=1) == 1
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {
        'schema_migrations',
        'conversations',
        'entries',
        'tips',
    }
    conn.close()
    # A v1 database holding a conversation: opening it migrates to the current version and backfills answers.
    store = SQLiteConversationStore(tmp_path / 'full.db')
    await store.save(await agent().run('q', conversation=Conversation(conversation_id='c')))
    store.close()
    with sqlite3.connect(tmp_path / 'full.db', isolation_level=None) as raw:
        for table in ('answers', 'answer_sources', 'answer_problems'):
            raw.execute(f'DROP TABLE {table}')
        raw.execute('DELETE FROM schema_migrations WHERE version > 1')
        raw.execute('PRAGMA user_version = 1')
    store = SQLiteConversationStore(tmp_path / 'full.db')
    try:
        (found,) = await store.answers_citing(url='https://docs.pydantic.dev/latest/')
        assert found.conversation_id == 'c'
        assert found.answer.text == TEXT
        loaded = await store.load('c')
        assert loaded is not None
        assert len(loaded.messages) == 2
    finally:
        store.close()
    with sqlite3.connect(tmp_path / 'full.db') as raw:
        assert raw.execute('PRAGMA user_version').fetchone()[0] == SCHEMA_VERSION
        assert [r[0] for r in raw.execute('SELECT version FROM schema_migrations ORDER BY version')] == [1, 2]
        raw.execute(f'PRAGMA user_version = {SCHEMA_VERSION + 1}')
    with pytest.raises(UserError, match='newer than this package supports'):
        SQLiteConversationStore(tmp_path / 'full.db')
    with pytest.raises(UserError, match='`target` must be between'):
        migrate(sqlite3.connect(':memory:'), target=99)


@pytest.mark.anyio
async def test_in_memory_database() -> None:
    store = SQLiteConversationStore()
    await store.save(await agent().run('q', conversation=Conversation(conversation_id='m')))
    assert (await store.load('m')) is not None
    store.close()


# --- every shared recording round-trips byte-identically ---------------------------------------------------------------

CASSETTES = 'pydantic-ai-cassettes/tests/models/cassettes'


def recordings() -> list[Any]:
    from conftest import CORPUS

    root = CORPUS / CASSETTES
    if not root.is_dir():
        return [pytest.param(None, id='corpus-absent')]
    return [pytest.param(p.relative_to(root).as_posix(), id=p.stem) for p in sorted(root.rglob('*.yaml'))]


@pytest.mark.anyio
@pytest.mark.filterwarnings('ignore:The model .* is deprecated:DeprecationWarning')
@pytest.mark.parametrize('relative', recordings())
async def test_recording_round_trip_byte_identical(corpus: Path, relative: str | None, open_store: Opener) -> None:
    from pydantic_ai_citations.testing import load_recording

    assert relative is not None
    recording = load_recording(corpus / CASSETTES / relative)
    replay_agent = Agent(recording.model(), capabilities=[CleanStaleCitations()])
    prompt = recording.prompt or 'Hello'
    conversation = Conversation(conversation_id='rec')
    if recording.streamed:
        async with replay_agent.run_stream(
            prompt, model_settings=recording.model_settings, conversation=conversation
        ) as run:
            await run.get_output()
        messages = run.all_messages()
    else:
        result = await replay_agent.run(prompt, model_settings=recording.model_settings, conversation=conversation)
        messages = result.all_messages()
    store = await open_store()
    await store.save(Conversation(conversation_id='rec', messages=messages))
    loaded = await store.load('rec')
    assert loaded is not None
    assert dump(loaded.messages) == dump(messages)
    cited = [
        p for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart) and p.citations
    ]
    if cited:
        response_entries = [e for e in (await store.load_entries('rec') or []) if isinstance(e.message, ModelResponse)]
        stored = [await store.answer(e.id) for e in response_entries]
        assert any(s is not None and (s.answer.spans or s.answer.unanchored) for s in stored)


@pytest.mark.anyio
async def test_postgres_migrations_from_v0_and_v1(pg_dsn: str) -> None:
    target = fresh_schema(pg_dsn)
    store = PostgresConversationStore(target)
    try:
        assert await store.open(target=1) == 1
        tables = raw_execute('postgres', target, 'SELECT tablename FROM pg_tables WHERE schemaname = current_schema()')
        assert {t for (t,) in tables} == {'schema_migrations', 'conversations', 'entries', 'tips'}
        assert await store.migrate() == SCHEMA_VERSION
        await store.save(await agent().run('q', conversation=Conversation(conversation_id='c')))
        for table in ('answers', 'answer_sources', 'answer_problems'):
            raw_execute('postgres', target, f'DROP TABLE {table}')
        raw_execute('postgres', target, 'DELETE FROM schema_migrations WHERE version > 1')
        assert await store.migrate() == SCHEMA_VERSION  # v1 -> v2 backfills the answers
        (found,) = await store.answers_citing(url='https://docs.pydantic.dev/latest/')
        assert found.conversation_id == 'c'
        assert found.answer.text == TEXT
        versions = raw_execute('postgres', target, 'SELECT version FROM schema_migrations ORDER BY version')
        assert [v for (v,) in versions] == [1, 2]
        raw_execute(
            'postgres', target, 'INSERT INTO schema_migrations VALUES (?, ?, ?)', (SCHEMA_VERSION + 1, 'x', 'x')
        )
        with pytest.raises(UserError, match='newer than this package supports'):
            await store.migrate()
        with pytest.raises(UserError, match='`target` must be between'):
            await store.migrate(target=99)
    finally:
        await store.close()


@pytest.mark.anyio
async def test_postgres_store_opens_on_first_use(pg_dsn: str) -> None:
    async with PostgresConversationStore(fresh_schema(pg_dsn)) as s:
        assert await s.read_records() == []
    lazy = PostgresConversationStore(fresh_schema(pg_dsn))
    try:
        await lazy.save(Conversation(conversation_id='z', messages=[ModelRequest.user_text_prompt('hi')]))
        assert [r.conversation_id for r in await lazy.list_conversations()] == ['z']
        assert [a async for a in lazy.iter_answers()] == []
    finally:
        await lazy.close()


WORKERS, ROUNDS = 3, 6


@pytest.mark.anyio
async def test_processes_append_concurrently(backend: str, target: str, open_store: Opener) -> None:
    """Several processes append to one shared and to their own conversations: nothing lost, nothing doubled,
    every conflict reported as `ConversationConflict` (and retried)."""
    await open_store()  # creates the schema before the workers race
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context('spawn')) as pool:
        futures = [pool.submit(append_many, backend, target, w, ROUNDS) for w in range(WORKERS)]
        outcomes = [f.result(timeout=300) for f in futures]
    assert [o['errors'] for o in outcomes] == [[]] * WORKERS
    saved = [tag for o in outcomes for tag in o['saved']]
    assert len(saved) == 2 * WORKERS * ROUNDS
    reader = await open_store()
    stored: list[str] = []
    for cid in ['shared', *(f'own-{w}' for w in range(WORKERS))]:
        conversation = await reader.load(cid)
        assert conversation is not None
        requests = [m for m in conversation.messages if isinstance(m, ModelRequest)]
        assert len(conversation.messages) == 2 * len(requests)
        stored += [str(r.parts[0].content) for r in requests]  # type: ignore[union-attr]
    lost = set(saved) - set(stored)
    duplicated = len(stored) - len(set(stored))
    assert (lost, duplicated, len(stored)) == (set(), 0, len(saved))
    print(f'{backend}: {sum(o["conflicts"] for o in outcomes)} conflicts, all ConversationConflict')
