from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from _postgres import DSN_VAR, REQUIRE_VAR, NoServer, fresh_schema, throwaway_cluster
from _store_worker import append_many
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Agent,
    BinaryContent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter, NativeToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import (
    CleanStaleCitations,
    PostgresConversationStore,
    SQLiteConversationStore,
    StoreCorruptionError,
    find_stale,
)
from pydantic_ai_citations import _store_sql as sql
from pydantic_ai_citations._checks import require
from pydantic_ai_citations._edit import METADATA_KEY
from pydantic_ai_citations._store import (  # pyright: ignore[reportPrivateUsage]
    SCHEMA_VERSION,
    _ChainWalk,  # pyright: ignore[reportPrivateUsage]
    _message_json,  # pyright: ignore[reportPrivateUsage]
    _require_storable,  # pyright: ignore[reportPrivateUsage]
    migrate,
)
from pydantic_ai_citations._store_sql import POSTGRES
from pydantic_ai_citations._urls import url_host

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


WRONG_TYPES = [
    pytest.param('load', (123,), {}, 'conversation_id', id='load'),
    pytest.param('load', ('c',), {'scope': 5}, 'scope', id='load-scope'),
    pytest.param('load_entries', ('c',), {'limit': '2'}, 'limit', id='load-entries-limit'),
    pytest.param('delete', (123,), {}, 'conversation_id', id='delete'),
    pytest.param('delete', ('c',), {'scope': b'u1'}, 'scope', id='delete-scope'),
    pytest.param('branch', (123,), {'at': 0, 'expected_revision': None}, 'conversation_id', id='branch'),
    pytest.param('branch', ('c',), {'at': True, 'expected_revision': None}, 'at', id='branch-at-bool'),
    pytest.param('branch', ('c',), {'at': 0, 'expected_revision': 7}, 'expected_revision', id='branch-revision'),
    pytest.param('fork', (123,), {}, 'conversation_id', id='fork'),
    pytest.param('fork', ('c',), {'new_conversation_id': 5}, 'new_conversation_id', id='fork-new-id'),
    pytest.param('fork', ('c',), {'from_entry': 5}, 'from_entry', id='fork-from-entry'),
    pytest.param('fork', ('c',), {'scope': 5}, 'scope', id='fork-scope'),
    pytest.param(
        'edit_answer', (123,), {'message_index': 1, 'part_index': 0, 'new_text': 'x'}, 'conversation_id', id='edit'
    ),
    pytest.param(
        'edit_answer',
        ('c',),
        {'message_index': '1', 'part_index': 0, 'new_text': 'x'},
        'message_index',
        id='edit-message-index',
    ),
    pytest.param(
        'edit_answer',
        ('c',),
        {'message_index': 1, 'part_index': True, 'new_text': 'x'},
        'part_index',
        id='edit-part-index-bool',
    ),
    pytest.param(
        'edit_answer', ('c',), {'message_index': 1, 'part_index': 0, 'new_text': 5}, 'new_text', id='edit-new-text'
    ),
    pytest.param('list_conversations', (), {'scope': 5}, 'scope', id='list-scope'),
    pytest.param('read_record', (123,), {}, 'conversation_id', id='read-record'),
    pytest.param('delete_record', (123,), {'expected_revision': 'r'}, 'conversation_id', id='delete-record'),
    pytest.param('answer', (5,), {}, 'entry_id', id='answer'),
]


@pytest.mark.anyio
@pytest.mark.parametrize(('method', 'args', 'kwargs', 'named'), WRONG_TYPES)
async def test_arguments_of_the_wrong_type_are_refused(
    store: Store, method: str, args: tuple[object, ...], kwargs: dict[str, object], named: str
) -> None:
    # Pydantic AI checks none of them: a wrong id or scope found nothing, was stored and made the record unreadable
    # (`fork(new_conversation_id=5)`), or failed with a `TypeError` (`at='1'`); `True` was taken as 1.
    await store.save(await agent().run('q', conversation=Conversation(conversation_id='c')))
    where = re.escape(f'{type(store).__name__}.{method}')
    with pytest.raises(UserError, match=rf'^{where}: `{named}` must be '):
        await getattr(store, method)(*args, **kwargs)
    assert [r.conversation_id for r in await store.list_conversations()] == ['c']


LONE = 'abc\ud800'  # a lone surrogate, as `json.loads('"abc\\ud800"')` gives: not UTF-8 text
UNSTORABLE = [
    pytest.param('load', (LONE,), {}, 'conversation_id', id='load'),
    pytest.param('load', ('c',), {'scope': LONE}, 'scope', id='load-scope'),
    pytest.param('load', ('c',), {'limit': 2**63}, 'limit', id='load-limit'),
    pytest.param('fork', ('c',), {'new_conversation_id': LONE}, 'new_conversation_id', id='fork-new-id'),
    pytest.param('list_conversations', (), {'limit': 2**63}, 'limit', id='list-limit'),
    pytest.param('answers_citing', (), {'url': 'https://x.example/\udc00'}, 'url', id='citing-url'),
    pytest.param('answers_citing', (), {'domain': '\ud800.example'}, 'domain', id='citing-domain'),
    pytest.param('answer', (LONE,), {}, 'entry_id', id='answer'),
]


@pytest.mark.anyio
@pytest.mark.parametrize(('method', 'args', 'kwargs', 'named'), UNSTORABLE)
async def test_arguments_the_database_cannot_take_are_refused(
    store: Store, method: str, args: tuple[object, ...], kwargs: dict[str, object], named: str
) -> None:
    # They raised `UnicodeEncodeError` or `OverflowError` from the driver.
    where = re.escape(f'{type(store).__name__}.{method}')
    with pytest.raises(
        UserError, match=rf'^{where}: `{named}` (holds a lone surrogate|must be at most 9223372036854775807)'
    ):
        await getattr(store, method)(*args, **kwargs)


@pytest.mark.anyio
async def test_save_and_iter_answers_refuse_what_the_database_cannot_take(store: Store) -> None:
    with pytest.raises(UserError, match=r'`conversation_id` holds a lone surrogate'):
        await store.save(Conversation(conversation_id=LONE, messages=[ModelRequest.user_text_prompt('q')]))
    with pytest.raises(UserError, match=r'`batch_size` must be at most 9223372036854775807'):
        async for _ in store.iter_answers(batch_size=2**63):
            pass
    assert await store.list_conversations() == []


@pytest.mark.anyio
async def test_save_refuses_an_id_or_scope_that_would_make_the_record_unreadable(store: Store) -> None:
    where = re.escape(f'{type(store).__name__}.save')
    with pytest.raises(UserError, match=rf'^{where}: `conversation_id` must be a str, got 5\.$'):
        await store.save(Conversation(conversation_id=5, messages=[ModelRequest.user_text_prompt('q')]))  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match=rf'^{where}: `scope` must be a str or None, got 5\.$'):
        await store.save(Conversation(conversation_id='s'), scope=5)  # pyright: ignore[reportArgumentType]
    assert await store.list_conversations() == []


@pytest.mark.anyio
async def test_citations_on_text_the_answer_does_not_show_are_indexed(store: Store) -> None:
    """Text before the last native tool call is not the answer, but the stored response cites its sources too."""
    early = Citation([WebCitationSource('https://a.example/k2')], anchor=ContentCitationAnchor(start=0, end=5))
    spec = Citation([DocumentCitationSource(document_id='spec-1')])
    response = ModelResponse(
        parts=[
            TextPart('K2 is tall.', citations=[early, spec]),
            NativeToolCallPart('web_search', {}, tool_call_id='t1', provider_name='anthropic'),
            TextPart('It lies on the border.'),
        ],
        provider_name='anthropic',
        provider_details={'finish_reason': 'end_turn'},
    )
    await store.save(Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q'), response]))
    (found,) = await store.answers_citing(url='https://a.example/k2')
    assert found.answer.text == 'It lies on the border.'
    assert [r.part_index for r in found.answer.raw_only] == [0, 0]
    assert [a.entry_id for a in await store.answers_citing(domain='a.example')] == [found.entry_id]
    assert [a.entry_id for a in await store.answers_with_problem('citation_outside_answer')] == [found.entry_id]


@pytest.mark.anyio
async def test_an_answer_edited_to_empty_text_keeps_its_unanchored_citation(store: Store) -> None:
    anchored = Citation([WebCitationSource('https://a.example/k2')], anchor=ContentCitationAnchor(start=0, end=5))
    used = Citation([WebCitationSource('https://c.example/used')])
    response = ModelResponse(
        parts=[TextPart('K2 is tall.', citations=[anchored, used])],
        provider_name='anthropic',
        provider_details={'finish_reason': 'end_turn'},
    )
    await store.save(Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q'), response]))
    _, problems = await store.edit_answer('c', message_index=1, part_index=0, new_text='')
    assert [(p.code, p.citation_index) for p in problems] == [('citation_dropped_after_edit', 0)]
    (found,) = [a for a in await store.answers_citing(url='https://c.example/used') if a.answer.text == '']
    assert [p.code for p in found.answer.problems] == ['citation_outside_answer', 'citation_dropped_after_edit']
    assert [r.data for r in found.answer.raw_only] == [
        {'sources': [{'url': 'https://c.example/used', 'title': None, 'excerpts': [], 'kind': 'web'}], 'anchor': None}
    ]


@pytest.mark.anyio
async def test_an_internationalised_domain_is_found_by_either_spelling(store: Store) -> None:
    for n, url in enumerate(
        ('https://www.münchen.de/rathaus', 'https://xn--mnchen-3ya.de/stadt', 'https://berlin.de/')
    ):
        response = ModelResponse(parts=[TextPart(f'Answer {n}.', citations=[Citation([WebCitationSource(url)])])])
        await store.save(Conversation(conversation_id=f'c{n}', messages=[ModelRequest.user_text_prompt('q'), response]))
    for spelling in ('münchen.de', 'MÜNCHEN.DE', 'xn--mnchen-3ya.de', 'https://www.xn--mnchen-3ya.de/x'):
        found = await store.answers_citing(domain=spelling)
        assert [a.conversation_id for a in found] == ['c0', 'c1'], spelling  # each once, in the order stored
    assert [a.conversation_id for a in await store.answers_citing(domain='berlin.de')] == ['c2']
    # `ß`: IDNA 2008 (registries, browsers) keeps it (`xn--fa-hia.de`); IDNA 2003 made it `ss` (`fass.de`)
    for n, url in enumerate(('https://xn--fa-hia.de/a', 'https://faß.de/b', 'https://fass.de/c'), start=3):
        response = ModelResponse(parts=[TextPart(f'Answer {n}.', citations=[Citation([WebCitationSource(url)])])])
        await store.save(Conversation(conversation_id=f'c{n}', messages=[ModelRequest.user_text_prompt('q'), response]))
    assert [a.conversation_id for a in await store.answers_citing(domain='faß.de')] == ['c3', 'c4', 'c5']
    assert [a.conversation_id for a in await store.answers_citing(domain='xn--fa-hia.de')] == ['c3', 'c4']


@pytest.mark.anyio
async def test_a_host_cited_in_mixed_spellings_is_found_by_each(store: Store) -> None:
    """Index keys hold a host in one spelling (IDNA 2008 A-labels), whatever mix of Unicode and `xn--` labels cited
    it: `bücher.xn--mnchen-3ya.de` was keyed as cited and not found by `bücher.münchen.de`."""
    ids = await save_answers(
        store,
        [
            cited('https://bücher.xn--mnchen-3ya.de/a'),
            cited('https://xn--bcher-kva.münchen.de/b'),
            cited('https://x.de/'),
        ],
    )
    for spelling in ('bücher.münchen.de', 'xn--bcher-kva.xn--mnchen-3ya.de', 'bücher.xn--mnchen-3ya.de', 'münchen.de'):
        assert [a.entry_id for a in await store.answers_citing(domain=spelling)] == ids[:2], spelling
    assert [a.entry_id for a in await store.answers_citing(url='https://bücher.xn--mnchen-3ya.de/a')] == ids[:1]
    assert await store.answers_citing(url='https://bücher.münchen.de/a') == []  # a URL is found as it was cited


@pytest.mark.anyio
async def test_migration_v6_rekeys_hosts_and_indexes_citations_outside_answers(
    open_store: Opener, backend: str, target: str
) -> None:
    """A database migrated through v4 lost the index rows of citations on text an answer does not show (v4 rebuilt
    the index from the answers alone), and kept hosts as cited: v6 indexes the first again and re-keys the second."""
    store = await open_store()
    early = Citation([WebCitationSource('https://a.example/k2')], anchor=ContentCitationAnchor(start=0, end=5))
    spec = Citation([DocumentCitationSource(document_id='spec-1')])
    outside = ModelResponse(
        parts=[
            TextPart('K2 is tall.', citations=[early, spec]),
            NativeToolCallPart('web_search', {}, tool_call_id='t1', provider_name='anthropic'),
            TextPart('It lies on the border.', citations=[Citation([WebCitationSource('https://b.example/')])]),
        ],
        provider_name='anthropic',
        provider_details={'finish_reason': 'end_turn'},
    )
    ids = await save_answers(store, [outside, cited('https://bücher.xn--mnchen-3ya.de/a')])
    # as v4 left them: no row for what the answer does not show, the host keyed as cited
    raw_execute(
        backend, target, "DELETE FROM answer_sources WHERE url = 'https://a.example/k2' OR document_id IS NOT NULL"
    )
    raw_execute(
        backend,
        target,
        "UPDATE answer_sources SET host_key = 'de.xn--mnchen-3ya.bücher.' WHERE entry_id = ?",
        (ids[1],),
    )
    assert await store.answers_citing(url='https://a.example/k2') == []
    assert await store.answers_citing(domain='bücher.münchen.de') == []
    for statement in BEFORE_V7:
        raw_execute(backend, target, statement)
    raw_execute(backend, target, 'DELETE FROM schema_migrations WHERE version > 5')
    if backend == 'sqlite':
        raw_execute(backend, target, 'PRAGMA user_version = 5')
    await close(store)
    migrated = await open_store()  # migrates
    assert [a.entry_id for a in await migrated.answers_citing(url='https://a.example/k2')] == ids[:1]
    assert [a.entry_id for a in await migrated.answers_citing(url='https://b.example/')] == ids[:1]
    assert [a.entry_id for a in await migrated.answers_citing(domain='bücher.münchen.de')] == ids[1:]
    documents = raw_execute(backend, target, 'SELECT entry_id FROM answer_sources WHERE document_id IS NOT NULL')
    assert documents == [(ids[0],)]
    rows = raw_execute(backend, target, 'SELECT count(*) FROM answer_sources WHERE entry_id = ?', (ids[0],))
    assert rows == [(3,)]  # nothing twice
    versions = raw_execute(backend, target, 'SELECT version FROM schema_migrations ORDER BY version')
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.anyio
async def test_heads_live_in_their_rows_and_v8_moves_them(open_store: Opener, backend: str, target: str) -> None:
    """A save that leaves no branch writes no row of `tips` (v8: the head is `conversations.head_id`); a database
    from before v8 (heads in `tips`) is migrated, and `delete` still keeps every entry another head or branch reaches."""
    store = await open_store()
    await saved_chain(store, 'a', turns=3)
    assert raw_execute(backend, target, 'SELECT count(*) FROM tips') == [(0,)]
    await store.fork('a', at=2, new_conversation_id='f')
    await store.branch(
        'a',
        at=4,
        expected_revision=(
            await store.read_record('a') or ConversationRecord(conversation_id='a', head_id=None)
        ).revision,
    )
    assert raw_execute(backend, target, 'SELECT count(*) FROM tips') == [(1,)]  # the branch 'a' left
    for statement in BEFORE_V8:
        raw_execute(backend, target, statement)
    raw_execute(backend, target, 'DELETE FROM schema_migrations WHERE version > 7')
    if backend == 'sqlite':
        raw_execute(backend, target, 'PRAGMA user_version = 7')
    await close(store)
    migrated = await open_store()  # migrates
    assert raw_execute(backend, target, 'SELECT count(*) FROM tips') == [(1,)]
    heads = raw_execute(backend, target, 'SELECT count(*) FROM conversations WHERE head_id IS NOT NULL')
    assert heads == [(2,)]
    await migrated.delete('a')
    fork = await migrated.load('f')
    assert fork is not None and len(fork.messages) == 2
    assert raw_execute(backend, target, 'SELECT count(*) FROM entries') == [(2,)]  # what only 'a' reached is gone
    await migrated.delete('f')
    assert raw_execute(backend, target, 'SELECT count(*) FROM entries') == [(0,)]


@pytest.mark.anyio
async def test_an_ipv6_host_is_found_however_it_is_spelled(store: Store) -> None:
    cited = Citation([WebCitationSource('https://[2001:DB8:0::1]:8443/report')])
    response = ModelResponse(parts=[TextPart('A report.', citations=[cited])], model_name='m')
    await store.save(Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q'), response]))
    for spelling in ('2001:db8::1', '[2001:db8::1]', '2001:0db8:0000::1', 'https://[2001:db8::1]/'):
        assert len(await store.answers_citing(domain=spelling)) == 1, spelling
    assert await store.answers_citing(domain='::1') == []


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
    # what the edit dropped stays with the edited answer, and finds it
    assert [(p.code, p.citation_index) for p in new_answer.answer.problems] == [
        (p.code, p.citation_index) for p in problems
    ]
    dropped = await store.answers_with_problem('citation_dropped_after_edit')
    assert [a.entry_id for a in dropped] == [new_answer.entry_id]
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
        for statement in BEFORE_V5:
            raw.execute(statement)
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
        migrated = [r[0] for r in raw.execute('SELECT version FROM schema_migrations ORDER BY version')]
        assert migrated == list(range(1, SCHEMA_VERSION + 1))
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


@dataclasses.dataclass(repr=False)
class _TaggedResponse(ModelResponse):
    """A response subclass an application might use: stored as `ModelMessagesTypeAdapter` writes it too."""


def test_each_message_is_stored_as_its_history_item() -> None:
    image = BinaryContent(b'\x00\xff\x10', media_type='image/png')  # bytes: written as base64, as in a history
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(['Look at this:', image])], instructions='Be brief.'),
        ModelResponse(
            parts=[
                TextPart('A cat.', citations=[Citation([WebCitationSource('https://a.example/')])]),
                ToolCallPart('zoom', {'factor': 2}),
            ],
            model_name='m',
        ),
        ModelRequest(parts=[ToolReturnPart('zoom', image, tool_call_id='c1')]),
        _TaggedResponse(parts=[TextPart('Still a cat.')]),
    ]
    assert [_message_json(m) for m in messages] == [dump([m])[1:-1] for m in messages]


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
    # Each message is stored as the item `ModelMessagesTypeAdapter` writes for it in a history, byte for byte.
    assert [_message_json(m) for m in messages] == [dump([m])[1:-1] for m in messages]
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
        for statement in BEFORE_V5:
            raw_execute('postgres', target, statement)
        raw_execute('postgres', target, 'DELETE FROM schema_migrations WHERE version > 1')
        assert await store.migrate() == SCHEMA_VERSION  # v1 -> v2 backfills the answers
        (found,) = await store.answers_citing(url='https://docs.pydantic.dev/latest/')
        assert found.conversation_id == 'c'
        assert found.answer.text == TEXT
        versions = raw_execute('postgres', target, 'SELECT version FROM schema_migrations ORDER BY version')
        assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
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


# --- hardening: loops, wildcards, unreadable databases, failed rollbacks, unstorable text (issue 15) -----------------


async def saved_chain(store: Store, cid: str = 'c', turns: int = 2) -> list[str]:
    messages: list[ModelMessage] = []
    for t in range(turns):
        messages += [ModelRequest.user_text_prompt(f'q{t}'), ModelResponse(parts=[TextPart(f'a{t}')])]
    return [e.id for e in await store.save(Conversation(conversation_id=cid, messages=messages))]


@pytest.mark.anyio
async def test_history_loop_is_corruption_not_a_hang(store: Store, backend: str, target: str) -> None:
    ids = await saved_chain(store)  # ids[0] <- ids[1] <- ids[2] <- ids[3] (head)
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', (ids[2], ids[1]))  # 1 -> 2 -> 1
    with anyio.fail_after(30):
        with pytest.raises(StoreCorruptionError, match='loop back') as excinfo:
            await store.load('c')
        assert excinfo.value.key in ids
        with pytest.raises(StoreCorruptionError, match='loop back'):
            await store.read_history(ids[3])
        with pytest.raises(StoreCorruptionError, match='loop back'):
            await store.edit_answer('c', message_index=1, part_index=0, new_text='x')
        last_two = await store.load('c', limit=2)  # the window ends before the loop
        assert last_two is not None
        assert len(last_two.messages) == 2
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', (ids[3], ids[3]))  # head -> head
    with pytest.raises(StoreCorruptionError, match='loop back'):
        await store.load('c')
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', (ids[3], ids[0]))  # the run's loop
    with pytest.raises(StoreCorruptionError, match='loop back'):
        await store.load('c')


@pytest.mark.anyio
async def test_history_read_in_pages(store: Store, backend: str, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr('pydantic_ai_citations._store.CHAIN_PAGE', 3)
    ids = await saved_chain(store, turns=4)  # 8 entries: three pages
    loaded = await store.load_entries('c')
    assert loaded is not None
    assert [e.id for e in loaded] == ids
    window = await store.load_entries('c', limit=5)
    assert window is not None
    assert [e.id for e in window] == ids[3:]
    exact = await store.load_entries('c', limit=6)  # a page boundary
    assert exact is not None
    assert [e.id for e in exact] == ids[2:]
    # a loop found across pages, and a chain that breaks in a later page
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', (ids[6], ids[1]))
    with pytest.raises(StoreCorruptionError, match='loop back'):
        await store.load('c')
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', ('gone', ids[1]))
    with pytest.raises(StoreCorruptionError, match="parent entry 'gone' is not stored") as broken:
        await store.load('c')
    assert isinstance(broken.value, KeyError)  # what Pydantic AI's store expects of a broken history
    raw_execute(backend, target, 'UPDATE entries SET parent_id = ? WHERE id = ?', ('gone', ids[5]))  # first page
    with pytest.raises(StoreCorruptionError, match="parent entry 'gone'"):
        await store.load('c')
    with pytest.raises(KeyError):
        await store.read_history('no-such-head')
    raw_execute(
        backend, target, 'UPDATE conversations SET record = ?', (dump_head(ids[7], 'gone-head', backend, target),)
    )
    with pytest.raises(StoreCorruptionError, match="'gone-head' in table 'entries'"):
        await store.load('c')


@pytest.mark.anyio
async def test_histories_read_run_by_run(store: Store, backend: str, target: str) -> None:
    """A run (the entries one write stored, each the parent of the next, their ids rising) is read as one range of
    ids: another conversation's entries whose ids fall inside it, a fork in its middle, ids that do not rise and
    entries stored before schema v5 (no `run_start`) all read back the history their `parent_id`s make."""
    ids = await saved_chain(store, 'c', turns=5)  # one run of 10
    await store.fork('c', at=5, new_conversation_id='f')  # its head is inside the run
    fork = await store.load_entries('f')
    assert fork is not None
    assert [e.id for e in fork] == ids[:5]

    def entry(entry_id: str, parent_id: str | None, text: str) -> ConversationEntry:
        return ConversationEntry(id=entry_id, parent_id=parent_id, message=ModelRequest.user_text_prompt(text))

    # `a`'s run holds `a1` .. `a5`; `b`'s entries `a2`, `a4` fall inside its range
    mine = [entry('a1', None, '1'), entry('a3', 'a1', '3'), entry('a5', 'a3', '5')]
    theirs = [entry('a2', None, '2'), entry('a4', 'a2', '4')]
    await store.write_record(
        ConversationRecord(conversation_id='b', head_id='a4'), new_entries=theirs, expected_revision=None
    )
    await store.write_record(
        ConversationRecord(conversation_id='a', head_id='a5'), new_entries=mine, expected_revision=None
    )
    for cid, expected in (('a', ['a1', 'a3', 'a5']), ('b', ['a2', 'a4'])):
        loaded = await store.load_entries(cid)
        assert loaded is not None
        assert [e.id for e in loaded] == expected
    # ids that fall along the history: each entry a run of its own
    falling = [entry('z9', None, '9'), entry('z8', 'z9', '8'), entry('z7', 'z8', '7')]
    await store.write_record(
        ConversationRecord(conversation_id='z', head_id='z7'), new_entries=falling, expected_revision=None
    )
    loaded = await store.load_entries('z')
    assert loaded is not None
    assert [e.id for e in loaded] == ['z9', 'z8', 'z7']
    # entries stored before v5, or written another way: no run
    raw_execute(backend, target, 'UPDATE entries SET run_start = NULL')
    again = await store.load_entries('c')
    assert again is not None
    assert [e.id for e in again] == ids
    # a run whose start names an entry outside its history: the reader follows `parent_id`s, not the range
    raw_execute(backend, target, "UPDATE entries SET run_start = 'a1' WHERE id = ?", (ids[-1],))
    again = await store.load_entries('c')
    assert again is not None
    assert [e.id for e in again] == ids


@pytest.mark.anyio
async def test_write_record_refuses_entries_that_loop(store: Store) -> None:
    a = ConversationEntry(id='a', parent_id='b', message=ModelRequest.user_text_prompt('q'))
    b = ConversationEntry(id='b', parent_id='a', message=ModelResponse(parts=[TextPart('x')]))
    record = ConversationRecord(conversation_id='l', head_id='b')
    with pytest.raises(UserError, match="form a loop through entry 'a'"):
        await store.write_record(record, new_entries=[a, b], expected_revision=None)
    own = ConversationEntry(id='o', parent_id='o', message=ModelRequest.user_text_prompt('q'))
    with pytest.raises(UserError, match="loop through entry 'o'"):
        await store.write_record(
            ConversationRecord(conversation_id='l', head_id='o'), new_entries=[own], expected_revision=None
        )
    assert await store.load('l') is None


def dump_head(old: str, new: str, backend: str, target: str) -> bytes:
    (blob,) = raw_execute(backend, target, 'SELECT record FROM conversations')[0]
    return bytes(blob).replace(old.encode(), new.encode())


def cited(url: str, title: str | None = None, text: str = 'Cited text.') -> ModelResponse:
    return ModelResponse(
        parts=[TextPart(text, citations=[Citation([WebCitationSource(url, title=title)])])], provider_name='p'
    )


async def save_answers(store: Store, responses: list[ModelResponse]) -> list[str]:
    ids: list[str] = []
    for n, response in enumerate(responses):
        conversation = Conversation(conversation_id=f'd{n}', messages=[ModelRequest.user_text_prompt('q'), response])
        ids.append((await store.save(conversation))[1].id)
    return ids


@pytest.mark.anyio
async def test_domain_query_matches_literally_and_normalises(store: Store) -> None:
    gh, sub, lit, ip = await save_answers(
        store,
        [
            cited('https://github.com/pydantic/pydantic'),
            cited('https://docs.a-b.example.co.uk/x'),
            cited('https://x%y.example.org/'),
            cited('http://127.0.0.1:8000/a'),
        ],
    )

    async def found(domain: str) -> list[str]:
        return [a.entry_id for a in await store.answers_citing(domain=domain)]

    assert await found('%') == []  # `LIKE` wildcards are plain characters
    assert await found('_ithub.com') == []
    assert await found('%.com') == []
    assert await found('x%y.example.org') == [lit]
    assert await found('example.org') == [lit]
    assert await found('https://github.com/') == [gh]  # a URL is taken for its host
    assert await found('https://www.GitHub.com/pydantic?tab=1') == [gh]
    assert await found('github.com:443') == [gh]
    assert await found('www.github.com.') == [gh]
    assert await found('example.co.uk') == [sub]
    assert await found('a-b.example.co.uk') == [sub]
    assert await found('uk') == []  # a top-level domain alone matches nothing
    assert await found('127.0.0.1') == [ip]
    assert await found('0.0.1') == []
    for bad in ('', '  ', 'https://', '/'):
        with pytest.raises(UserError, match='`domain` must name a host'):
            await store.answers_citing(domain=bad)


@pytest.mark.anyio
async def test_gemini_grounding_redirects_found_by_page_domain(store: Store) -> None:
    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQE'
    gemini, plain = await save_answers(
        store, [cited(redirect, title='docs.pydantic.dev'), cited('https://other.org/', title='github.com')]
    )
    assert [a.entry_id for a in await store.answers_citing(domain='pydantic.dev')] == [gemini]
    assert [a.entry_id for a in await store.answers_citing(domain='docs.pydantic.dev')] == [gemini]
    assert [a.entry_id for a in await store.answers_citing(domain='google.com')] == [gemini]  # the URL's own host
    assert await store.answers_citing(domain='github.com') == []  # a title only counts on a grounding redirect
    assert [a.entry_id for a in await store.answers_citing(domain='other.org')] == [plain]


GOOGLE = 'pydantic-ai-cassettes/tests/models/cassettes/test_google'


@pytest.mark.anyio
@pytest.mark.parametrize(
    ('cassette', 'domain'),
    [
        pytest.param('test_google_gemini_web_search_citations.yaml', 'together.ai', id='gemini'),
        pytest.param('test_google_vertex_web_search_citations_stream.yaml', 'github.com', id='vertex-stream'),
    ],
)
async def test_real_gemini_answers_found_by_domain(corpus: Path, cassette: str, domain: str, store: Store) -> None:
    """Real Gemini recordings (grounding redirects titled with their page's domain), saved the documented way: a
    `run_stream` result through the conversation it continued."""
    from pydantic_ai_citations.testing import load_recording

    path = corpus / GOOGLE / cassette
    if not path.is_file():
        pytest.skip(f'recording {cassette} not in the shared corpus')
    recording = load_recording(path)
    replay = Agent(recording.model())
    conversation = Conversation(conversation_id='g')
    if recording.streamed:
        async with replay.run_stream(
            recording.prompt or 'Hello', model_settings=recording.model_settings, conversation=conversation
        ) as run:
            await run.get_output()
        with pytest.raises(
            UserError, match=r'has no `conversation` to save.*conversation.messages = run.all_messages\(\)'
        ):
            await store.save(run)  # type: ignore[arg-type]
        conversation.messages = run.all_messages()
        conversation.usage = run.usage
        await store.save(conversation)
    else:
        result = await replay.run(
            recording.prompt or 'Hello', model_settings=recording.model_settings, conversation=conversation
        )
        await store.save(result)
    loaded = await store.load('g')
    assert loaded is not None
    assert dump(loaded.messages) == dump(conversation.messages if recording.streamed else result.all_messages())  # pyright: ignore[reportPossiblyUnboundVariable]
    (found,) = await store.answers_citing(domain=domain)
    assert found.conversation_id == 'g'
    assert all(s.url and s.url.startswith('https://vertexaisearch.') for s in found.answer.sources)
    assert await store.answers_citing(domain=f'https://{domain}/') == [found]


@pytest.mark.anyio
async def test_stream_result_saved_through_its_conversation(store: Store) -> None:
    """The documented path for `run_stream`, continued over two runs; `save` refuses what is not a conversation."""
    from pydantic_ai.models.function import DeltaToolCalls

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        yield 'Streamed '
        yield 'answer.'

    streaming = Agent(FunctionModel(stream_function=stream))
    conversation = Conversation(conversation_id='s')
    for prompt in ('one', 'two'):
        async with streaming.run_stream(prompt, conversation=conversation) as run:
            await run.get_output()
        conversation.messages = run.all_messages()
        conversation.usage = run.usage
        await store.save(conversation)
        loaded = await store.load('s')
        assert loaded is not None
        assert dump(loaded.messages) == dump(conversation.messages)
        conversation = loaded
    assert len(conversation.messages) == 4
    for wrong in (None, 'text', conversation.messages):
        with pytest.raises(UserError, match='must be a `Conversation` or the result of `agent.run`'):
            await store.save(wrong)  # type: ignore[arg-type]


def test_not_a_database_is_a_clear_user_error(tmp_path: Path) -> None:
    path = tmp_path / 'notes.txt'
    path.write_bytes(b'These are my notes, not a database. ' * 200)
    with pytest.raises(UserError, match="notes.txt' is not a SQLite database"):
        SQLiteConversationStore(path)
    assert path.read_bytes().startswith(b'These are my notes')  # untouched
    other = tmp_path / 'other.db'
    with sqlite3.connect(other) as conn:
        conn.execute('PRAGMA user_version = -7')
    with pytest.raises(UserError, match='another application wrote it'):
        SQLiteConversationStore(other)


async def saved_store_file(path: Path, conversations: int = 3) -> None:
    store = SQLiteConversationStore(path)
    for n in range(conversations):
        await store.save(await agent().run(f'q{n} ' * 40, conversation=Conversation(conversation_id=f'c{n}')))
    store.close()


@pytest.mark.anyio
async def test_damaged_file_and_wrong_schema_are_corruption(tmp_path: Path) -> None:
    path = tmp_path / 's.db'
    await saved_store_file(path)
    # the schema's own rows damaged: the file opens but cannot be read
    data = bytearray(path.read_bytes())
    at = data.index(b'CREATE TABLE conversations')
    data[at : at + 12] = b'CREATE TABLX'
    damaged = tmp_path / 'damaged.db'
    damaged.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptionError, match='damaged.db') as excinfo:
        SQLiteConversationStore(damaged)
    assert excinfo.value.table is None
    assert 'malformed database schema' in excinfo.value.reason
    # a table its version says is there is missing
    with sqlite3.connect(path) as conn:
        conn.execute('DROP TABLE answer_problems')
    store = SQLiteConversationStore(path)
    try:
        assert await store.load('c0') is not None  # what does not need the table still works
        with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says'):
            await store.answers_with_problem('anchor_out_of_range')
    finally:
        store.close()
    # a version that says the tables are not there yet
    with sqlite3.connect(path) as conn:
        conn.execute('PRAGMA user_version = 1')
    with pytest.raises(StoreCorruptionError, match='already exists'):
        SQLiteConversationStore(path)


@pytest.mark.anyio
async def test_text_that_is_not_utf8_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / 's.db'
    await saved_store_file(path, conversations=1)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET parent_id = CAST(X'6162ff' AS TEXT) WHERE parent_id IS NOT NULL")
        conn.execute("UPDATE entries SET message = X'5b7b22ff' WHERE parent_id IS NULL")
    store = SQLiteConversationStore(path)
    try:
        with pytest.raises(StoreCorruptionError, match='Could not decode to UTF-8'):
            await store.load('c0')
        (entry_id,) = raw_execute('sqlite', str(path), 'SELECT id FROM entries WHERE parent_id IS NULL')[0]
        with pytest.raises(StoreCorruptionError, match='the message is not valid') as excinfo:
            await store.read_entry(entry_id)
        assert excinfo.value.key == entry_id
    finally:
        store.close()


@pytest.mark.anyio
async def test_damaged_bytes_only_raise_store_errors(tmp_path: Path) -> None:
    """Random damage to a store file: opening and reading it raise `StoreCorruptionError` or `UserError`, or work."""
    import random

    path = tmp_path / 'good.db'
    await saved_store_file(path, conversations=4)
    data = path.read_bytes()
    rng = random.Random(15)
    outcomes: dict[str, int] = {}
    for trial in range(120):
        damaged = bytearray(data)
        for _ in range(rng.choice((1, 4, 32))):
            damaged[rng.randrange(100, len(damaged))] = rng.randrange(256)  # the 100-byte header: its own test
        bad = tmp_path / f'bad{trial}.db'
        bad.write_bytes(bytes(damaged))
        try:
            store = SQLiteConversationStore(bad)
            try:
                for n in range(4):
                    await store.load(f'c{n}')
                await store.answers_citing(domain='pydantic.dev')
                _ = [a async for a in store.iter_answers()]
            finally:
                store.close()
            outcome = 'read'
        except StoreCorruptionError:
            outcome = 'StoreCorruptionError'
        except UserError:
            outcome = 'UserError'
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {'read', 'StoreCorruptionError', 'UserError'}
    assert outcomes.get('StoreCorruptionError', 0) > 10


class FailingStatement:
    """A connection on which the statements starting with `prefix` fail with `message` (a full disk, a lost file)."""

    def __init__(self, conn: sqlite3.Connection, prefix: str, message: str) -> None:
        self.conn = conn
        self.prefix = prefix
        self.message = message

    def execute(self, statement: str, *args: Any) -> Any:
        if statement.startswith(self.prefix):
            raise sqlite3.OperationalError(self.message)
        return self.conn.execute(statement, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@pytest.mark.anyio
async def test_full_disk_error_not_hidden_by_rollback(tmp_path: Path) -> None:
    store = SQLiteConversationStore(tmp_path / 'full.db')
    try:
        await saved_chain(store, 'small')
        pages = raw_execute('sqlite', str(tmp_path / 'full.db'), 'PRAGMA page_count')[0][0]
        store._conn.execute(f'PRAGMA max_page_count = {pages + 2}')  # pyright: ignore[reportPrivateUsage]
        big = Conversation(
            conversation_id='big',
            messages=[ModelRequest.user_text_prompt('x' * 200_000), ModelResponse(parts=[TextPart('y' * 200_000)])],
        )
        with pytest.raises(sqlite3.OperationalError, match='database or disk is full'):
            await store.save(big)
        assert await store.load('big') is None
        # the rollback itself fails: the original error is still the one raised, the rollback's is noted on it
        loaded = await store.load('small')
        assert loaded is not None
        store._conn = FailingStatement(store._conn, 'ROLLBACK', 'cannot rollback - disk I/O error')  # type: ignore[assignment]  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        record = await store.read_record('small')
        assert record is not None
        with pytest.raises(ConversationConflict) as excinfo:  # found inside the write transaction
            await store.write_record(record, expected_revision='stale')
        assert excinfo.value.__notes__ == [
            '(Rolling the transaction back failed too: cannot rollback - disk I/O error)'
        ]
    finally:
        store.close()


@pytest.mark.anyio
async def test_lone_surrogates_refused_at_save_on_both_backends(store: Store) -> None:
    bad = Conversation(
        conversation_id='s',
        messages=[ModelRequest.user_text_prompt('fine'), ModelResponse(parts=[TextPart('half an emoji: \ud83d')])],
    )
    with pytest.raises(UserError, match="New message 1 of conversation 's' cannot be stored: .*surrogates not allowed"):
        await store.save(bad)
    assert await store.load('s') is None  # nothing half-written
    assert bad.revision is None
    fixed = 'half an emoji: \ud83d'.encode('utf-8', 'replace').decode()
    bad.messages[1] = ModelResponse(parts=[TextPart(fixed)])
    await store.save(bad)  # the fix the message suggests
    loaded = await store.load('s')
    assert loaded is not None
    assert dump(loaded.messages) == dump(bad.messages)


BEFORE_V8 = (
    'INSERT INTO tips (conversation_id, entry_id) SELECT conversation_id, head_id FROM conversations '
    'WHERE head_id IS NOT NULL',
    'ALTER TABLE conversations DROP COLUMN head_id',
)
"""What takes a database back before schema v8 (with its migration log and version cut): heads back in `tips`."""
BEFORE_V7 = (*BEFORE_V8, 'DROP TABLE resolved_redirects')
"""What takes a database back before schema v7: v7 added that table."""
BEFORE_V5 = (*BEFORE_V7, 'ALTER TABLE entries DROP COLUMN run_start')
"""What takes a database back before schema v5: v5 added that column."""


V3_SOURCES = (
    'CREATE TABLE answer_sources (entry_id TEXT NOT NULL, url TEXT, domain TEXT, document_id TEXT)',
    'CREATE INDEX answer_sources_entry ON answer_sources (entry_id)',
    'CREATE INDEX answer_sources_url ON answer_sources (url)',
    'CREATE INDEX answer_sources_domain ON answer_sources (domain)',
)
"""The source index of schema v3 (a row per URL and per domain above its host)."""


@pytest.mark.anyio
async def test_migration_v3_to_v4_reindexes_in_batches(
    open_store: Opener, backend: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v3 database kept a row per URL and per domain above each host: v4 replaces that table with one keyed by
    reversed host, rebuilt from the answers batch by batch; an answer that cannot be read is left for reading it to
    report."""
    monkeypatch.setattr('pydantic_ai_citations._store.BACKFILL_BATCH', 2)
    store = await open_store()
    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/X'
    ids = await save_answers(
        store, [cited(f'https://n{n}.blog.example.com/') for n in range(4)] + [cited(redirect, title='pydantic.dev')]
    )
    raw_execute(backend, target, 'DROP TABLE answer_sources')
    for statement in V3_SOURCES:
        raw_execute(backend, target, statement)
    raw_execute(backend, target, "INSERT INTO answer_sources (entry_id, domain) VALUES ('gone', 'example.com')")
    for statement in BEFORE_V5:
        raw_execute(backend, target, statement)
    raw_execute(backend, target, 'DELETE FROM schema_migrations WHERE version > 3')
    if backend == 'sqlite':
        raw_execute(backend, target, 'PRAGMA user_version = 3')
    raw_execute(backend, target, 'UPDATE answers SET answer = ? WHERE entry_id = ?', (b'{"broken', ids[0]))
    await close(store)
    migrated = await open_store()  # migrates
    assert [a.entry_id for a in await migrated.answers_citing(domain='n1.blog.example.com')] == [ids[1]]
    assert sorted(a.entry_id for a in await migrated.answers_citing(domain='example.com')) == sorted(ids[1:4])
    assert [a.entry_id for a in await migrated.answers_citing(url='https://n2.blog.example.com/')] == [ids[2]]
    assert [a.entry_id for a in await migrated.answers_citing(domain='pydantic.dev')] == [ids[4]]
    # every answer but the unreadable one is indexed again, and the old rows are gone
    rows = raw_execute(backend, target, 'SELECT DISTINCT entry_id FROM answer_sources')
    assert sorted(r[0] for r in rows) == sorted(ids[1:])
    versions = raw_execute(backend, target, 'SELECT version FROM schema_migrations ORDER BY version')
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.anyio
async def test_migration_from_v1_ends_on_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr('pydantic_ai_citations._store.BACKFILL_BATCH', 3)
    path = tmp_path / 'loop.db'
    store = SQLiteConversationStore(path)
    ids = await saved_chain(store, 'c', turns=3)
    await saved_chain(store, 'd', turns=2)
    store.close()
    with sqlite3.connect(path, isolation_level=None) as raw:
        raw.execute('UPDATE entries SET parent_id = ? WHERE id = ?', (ids[4], ids[1]))
        raw.execute("UPDATE entries SET message = X'7b7d' WHERE id = ?", (ids[5],))  # not a message: skipped
        for table in ('answers', 'answer_sources', 'answer_problems'):
            raw.execute(f'DROP TABLE {table}')
        for statement in BEFORE_V5:
            raw.execute(statement)
        raw.execute('DELETE FROM schema_migrations WHERE version > 1')
        raw.execute('PRAGMA user_version = 1')
    store = SQLiteConversationStore(path)
    try:
        answers = [a async for a in store.iter_answers()]
        assert sorted(a.conversation_id for a in answers) == ['c', 'c', 'd', 'd']  # every answer has its owner
        with pytest.raises(StoreCorruptionError, match='loop back'):
            await store.load('c')
        assert await store.load('d') is not None
    finally:
        store.close()


HOST_LABEL = st.text(alphabet='abcdefghijklmnopqrstuvwxyz0123456789-_%', min_size=1, max_size=8)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=3),
    labels=st.lists(HOST_LABEL, min_size=1, max_size=3),
    title=st.one_of(st.none(), st.text(max_size=12)),
    data=st.data(),
)
def test_round_trip_property(
    backend: str, target: str, texts: list[str], labels: list[str], title: str | None, data: st.DataObject
) -> None:
    """Any text round-trips byte-identically, with its answers found by URL and domain, or is refused whole at `save`
    with `UserError` (lone surrogates), the same on both backends."""
    host = '.'.join([*labels, 'test'])
    url = f'https://{host}/p?q={texts[0][:5]}'
    messages: list[ModelMessage] = []
    for text in texts:
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start + 1, len(text)))
        citation = Citation([WebCitationSource(url, title=title)], anchor=ContentCitationAnchor(start=start, end=end))
        messages += [ModelRequest.user_text_prompt(text), ModelResponse(parts=[TextPart(text, citations=[citation])])]
    surrogates = any(0xD800 <= ord(c) <= 0xDFFF for text in texts for c in text)

    async def check() -> None:
        store: Store = SQLiteConversationStore(target) if backend == 'sqlite' else PostgresConversationStore(target)
        cid = str(uuid.uuid4())
        try:
            if surrogates:
                with pytest.raises(UserError, match='surrogates not allowed'):
                    await store.save(Conversation(conversation_id=cid, messages=messages))
                assert await store.load(cid) is None
                return
            entries = await store.save(Conversation(conversation_id=cid, messages=messages))
            loaded = await store.load(cid)
            assert loaded is not None
            assert dump(loaded.messages) == dump(messages)
            answers = {e.id for e in entries[1::2]}
            assert {a.entry_id for a in await store.answers_citing(url=url)} >= answers
            by_domain = {a.entry_id for a in await store.answers_citing(domain=host) if a.conversation_id == cid}
            assert by_domain == (answers if url_host(url) == host else set())
        finally:
            await close(store)

    anyio.run(check)


@pytest.mark.anyio
async def test_missing_table_is_corruption_on_both_backends(store: Store, backend: str, target: str) -> None:
    await saved_chain(store)
    raw_execute(backend, target, 'DROP TABLE answer_problems')
    assert await store.load('c') is not None
    with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says') as excinfo:
        await store.answers_with_problem('anchor_out_of_range')
    assert excinfo.value.table is None
    assert 'password' not in excinfo.value.key
    with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says'):
        await store.save(await agent().run('q', conversation=Conversation(conversation_id='p')))  # stores a problem
    assert await store.load('p') is None


@pytest.mark.anyio
async def test_failed_writes_roll_back_and_leave_the_store_usable(
    store: Store, backend: str, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A write failing on the server (here a table gone) rolls back where it fails: nothing written, no connection
    handed back mid-transaction (psycopg would log it), and the store goes on working."""
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt('q'), cited('https://a.example.com/x')]
    await store.save(Conversation(conversation_id='c', messages=messages))
    raw_execute(backend, target, 'DROP TABLE answer_sources')
    with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says'):
        await store.edit_answer('c', message_index=1, part_index=0, new_text='edited')
    with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says'):
        await store.delete('c')
    with pytest.raises(StoreCorruptionError, match='its schema is not the one its version says'):
        await store.save(Conversation(conversation_id='n', messages=messages))
    loaded = await store.load('c')
    assert loaded is not None
    assert ModelMessagesTypeAdapter.dump_json(loaded.messages) == ModelMessagesTypeAdapter.dump_json(messages)
    assert await store.load('n') is None
    assert [r.getMessage() for r in caplog.records if r.name.startswith('psycopg')] == []


@pytest.mark.anyio
async def test_write_record_with_stored_entries_replaces_their_index(store: Store) -> None:
    """A caller of the primitive passing an entry that is stored already: its answer is indexed once, not twice."""
    (first,) = await save_answers(store, [cited('https://a.example.com/x')])
    entries = await store.load_entries('d0')
    assert entries is not None
    record = await store.read_record('d0')
    assert record is not None
    again = ConversationRecord(conversation_id='again', head_id=entries[-1].id)
    await store.write_record(again, new_entries=entries, expected_revision=None)
    (found,) = await store.answers_citing(domain='example.com')
    assert found.entry_id == first
    assert found.conversation_id == 'again'  # the answer follows its latest writer, as before
    loaded = await store.load('again')
    assert loaded is not None
    assert len(loaded.messages) == 2


@pytest.mark.anyio
async def test_write_record_given_one_entry_twice(store: Store) -> None:
    """One new entry passed twice in a write: stored and indexed once (PostgreSQL cannot upsert a key twice in one
    batched statement, so such a batch goes row by row)."""
    question = ConversationEntry(parent_id=None, message=ModelRequest.user_text_prompt('q'))
    answer = ConversationEntry(parent_id=question.id, message=cited('https://twice.example.com/x'))
    record = ConversationRecord(conversation_id='twice', head_id=answer.id)
    await store.write_record(record, new_entries=[question, answer, answer], expected_revision=None)
    (found,) = await store.answers_citing(domain='example.com')
    assert found.entry_id == answer.id
    loaded = await store.load_entries('twice')
    assert [e.id for e in loaded or []] == [question.id, answer.id]


def test_pg_unnest_only_rewrites_plain_inserts() -> None:
    assert sql.pg_unnest(sql.INSERT_TIP, ('TEXT', 'TEXT')) == (
        'INSERT INTO tips (conversation_id, entry_id) SELECT * FROM unnest(CAST(%b AS TEXT[]), CAST(%b AS TEXT[]))'
    )
    assert sql.pg_unnest(sql.INSERT_TIP, ('TEXT',)) is None  # one type per column
    assert sql.pg_unnest(sql.INDEX_RESOLVED, ('TEXT', 'TEXT', 'TEXT')) is None
    assert sql.pg_unnest(sql.DELETE_TIPS, ('TEXT',)) is None


@pytest.mark.anyio
async def test_record_that_is_not_one_record_is_corruption(store: Store, backend: str, target: str) -> None:
    await saved_chain(store)
    raw_execute(backend, target, 'UPDATE conversations SET record = ?', (b'[]',))
    with pytest.raises(StoreCorruptionError, match="'c' in table 'conversations'"):
        await store.load('c')


@pytest.mark.anyio
async def test_postgres_load_with_a_record_written_another_way(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose JSON text is spelled differently (spaces) still loads; one whose `head_id` column is not its
    head (none, or another entry) too: the one-statement read falls back to reading from the record's head; a history
    that breaks while the record changes is read again."""
    import json

    import pydantic_ai_citations._pgstore as pgstore

    target = fresh_schema(pg_dsn)
    async with PostgresConversationStore(target) as store:
        ids = await saved_chain(store)
        (blob,) = raw_execute('postgres', target, 'SELECT record FROM conversations')[0]
        spaced = json.dumps(json.loads(bytes(blob))).encode()
        assert b'"head_id": "' in spaced
        raw_execute('postgres', target, 'UPDATE conversations SET record = ?', (spaced,))
        loaded = await store.load_entries('c')
        assert loaded is not None
        assert [e.id for e in loaded] == ids
        for column in (None, ids[0]):
            raw_execute('postgres', target, 'UPDATE conversations SET head_id = ?', (column,))
            for limit in (None, 2):
                loaded = await store.load_entries('c', limit=limit)
                assert loaded is not None
                assert [e.id for e in loaded] == ids[-(limit or len(ids)) :]

        real = pgstore._read_chain
        calls: list[int] = []

        async def concurrently_changed(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:  # as if another writer moved the conversation on while its history was read
                raw_execute('postgres', target, "UPDATE conversations SET revision = 'moved'")
                raise KeyError('gone')
            return await real(*args, **kwargs)

        monkeypatch.setattr(pgstore, '_read_chain', concurrently_changed)
        again = await store.load_entries('c')
        assert again is not None
        assert len(calls) == 2


@pytest.mark.anyio
async def test_primitives_and_their_edges(store: Store, backend: str, target: str) -> None:
    ids = await saved_chain(store)
    with pytest.raises(UserError, match='`limit` must not be negative'):
        await store.load('c', limit=-1)
    empty = await store.load('c', limit=0)
    assert empty is not None
    assert empty.messages == []
    assert await store.read_history(None) == []
    assert (await store.read_entry(ids[0])).id == ids[0]
    with pytest.raises(KeyError):
        await store.read_entry('missing')
    record = await store.read_record('c')
    assert record is not None
    with pytest.raises(ConversationConflict):  # the head is neither stored nor new
        await store.write_record(
            ConversationRecord(conversation_id='h', head_id='nowhere'), new_entries=[], expected_revision=None
        )
    with pytest.raises(ConversationConflict):
        await store.delete_record('c', expected_revision='stale')
    raw_execute(backend, target, "UPDATE entries SET kind = 'other' WHERE id = ?", (ids[0],))
    with pytest.raises(StoreCorruptionError, match="unknown entry kind 'other'"):
        await store.read_entry(ids[0])
    # answers: a source without a host, raw data that is not JSON, paging through them one at a time
    odd = ModelResponse(
        parts=[
            TextPart(
                'Odd.',
                citations=[Citation([WebCitationSource('urn:isbn:0451450523')])],
                provider_details={'citations': [{1, 2}]},
            )
        ]
    )
    (entry,) = await save_answers(store, [odd])
    stored = await store.answer(entry)
    assert stored is not None
    assert stored.raw == [{'part_index': 0, 'provider_name': None, 'citations': '[{1, 2}]'}]
    assert [a.entry_id for a in await store.answers_citing(url='urn:isbn:0451450523')] == [entry]
    paged = [a.entry_id async for a in store.iter_answers(batch_size=1)]
    assert paged == sorted(paged)
    assert set(paged) == {entry, ids[1], ids[3]}
    with pytest.raises(UserError, match='`batch_size` must be at least 1'):
        _ = [a async for a in store.iter_answers(batch_size=0)]


@pytest.mark.anyio
async def test_sqlite_reads_wait_for_a_busy_connection(tmp_path: Path) -> None:
    import threading

    store = SQLiteConversationStore(tmp_path / 'busy.db')
    try:
        await saved_chain(store)
        store._lock.acquire()  # pyright: ignore[reportPrivateUsage]
        threading.Timer(0.2, store._lock.release).start()  # pyright: ignore[reportPrivateUsage]
        assert await store.read_record('c') is not None  # in the worker thread, once the lock is free
    finally:
        store.close()


def traced(store: SQLiteConversationStore) -> list[tuple[str, bool]]:
    """`(statement, run on this thread)` of every statement the store's connection runs from now on."""
    import threading

    here = threading.get_ident()
    seen: list[tuple[str, bool]] = []
    store._conn.set_trace_callback(lambda s: seen.append((s, threading.get_ident() == here)))  # pyright: ignore[reportPrivateUsage]
    return seen


def commits(seen: list[tuple[str, bool]]) -> list[str]:
    """Where each save committed (`'here'` or `'thread'`), `+checkpoint` when it checkpointed after."""
    found: list[str] = []
    for statement, here in seen:
        if statement == 'COMMIT':
            found.append('here' if here else 'thread')
        elif statement.startswith('PRAGMA wal_checkpoint'):
            found[-1] += '+checkpoint'
    return found


def checkpointing_every(writes: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteConversationStore:
    """A SQLite store on a file that checkpoints its WAL after every `writes` writes."""
    from pydantic_ai_citations import _store

    monkeypatch.setattr(_store, 'CHECKPOINT_WRITES', writes)
    return SQLiteConversationStore(tmp_path / f'every-{writes}.db')


@pytest.mark.anyio
async def test_sqlite_saves_commit_on_the_loop_and_checkpoint_in_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai_citations import _store

    store = checkpointing_every(3, tmp_path, monkeypatch)
    try:
        seen = traced(store)
        for n in range(7):
            await saved_chain(store, f'c{n}')
        # the saves commit right here, and every third one in the worker thread, checkpointing the WAL after it
        assert commits(seen) == ['here', 'here', 'thread+checkpoint'] * 2 + ['here']
        assert ('PRAGMA busy_timeout = 30000', True) in seen  # set back after the lock was tried
        seen.clear()
        monkeypatch.setattr(_store, 'CHECKPOINT_BYTES', 1)  # every save is due: bytes count too
        await saved_chain(store, 'big')
        assert commits(seen) == ['thread+checkpoint']
        monkeypatch.setattr(_store, 'CHECKPOINT_BYTES', 4 << 20)
        monkeypatch.setattr(_store, 'CHECKPOINT_WRITES', 100)
        seen.clear()
        monkeypatch.setattr(_store, 'INLINE_SAVE_BYTES', 10)  # a large save: in the thread
        await saved_chain(store, 'large')
        monkeypatch.setattr(_store, 'INLINE_SAVE_BYTES', 256 << 10)
        monkeypatch.setattr(_store, 'SLOW_COMMIT', 0.0)  # a slow commit here sends the next saves to the thread
        monkeypatch.setattr(_store, 'SLOW_COMMIT_SAVES', 2)
        for n in range(4):
            await saved_chain(store, f'slow{n}')
        assert commits(seen) == ['thread', 'here', 'thread', 'thread', 'here']
        assert [c.conversation_id for c in await store.list_conversations(limit=3)] == ['slow3', 'slow2', 'slow1']
        # other writes count too, and checkpoint in the thread when due
        monkeypatch.setattr(_store, 'CHECKPOINT_WRITES', 1)
        seen.clear()
        record = await store.read_record('slow0')
        assert record is not None
        await store.delete_record('slow0', expected_revision=record.revision)
        assert commits(seen) == ['thread+checkpoint']
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_failed_checkpoint_does_not_fail_the_committed_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = checkpointing_every(1, tmp_path, monkeypatch)
    real = store._conn  # pyright: ignore[reportPrivateUsage]
    try:
        store._conn = FailingStatement(real, 'PRAGMA wal_checkpoint', 'database or disk is full')  # type: ignore[assignment]  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        await saved_chain(store, 'kept')  # committed: the checkpoint's error is not the save's
        loaded = await store.load('kept')
        assert loaded is not None and len(loaded.messages) == 4
        assert store._writes_since_checkpoint == 1  # pyright: ignore[reportPrivateUsage]  # the next write tries again
        store._conn = real  # pyright: ignore[reportPrivateUsage]
        await saved_chain(store, 'next')
        assert store._writes_since_checkpoint == 0  # pyright: ignore[reportPrivateUsage]
    finally:
        store._conn = real  # pyright: ignore[reportPrivateUsage]
        store.close()


class BusyConnection:
    """A connection whose write lock is taken, with SQLite's extended code `code` (`SQLITE_BUSY_RECOVERY`: 261)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.statements: list[str] = []

    def execute(self, statement: str) -> None:
        self.statements.append(statement)
        if statement == 'BEGIN IMMEDIATE':
            error = sqlite3.OperationalError('database is locked')
            error.sqlite_errorcode = self.code
            raise error


@pytest.mark.parametrize('code', [sqlite3.SQLITE_BUSY, 261, sqlite3.SQLITE_LOCKED])
def test_a_busy_database_in_any_form_sends_the_save_to_the_thread(code: int) -> None:
    from pydantic_ai_citations._store import _transaction_now  # pyright: ignore[reportPrivateUsage]

    conn = BusyConnection(code)
    assert _transaction_now(cast(sqlite3.Connection, conn), lambda c: None, 1500) is False
    assert conn.statements == ['PRAGMA busy_timeout = 0', 'BEGIN IMMEDIATE', 'PRAGMA busy_timeout = 1500']
    conn = BusyConnection(sqlite3.SQLITE_IOERR)
    with pytest.raises(sqlite3.OperationalError):
        _transaction_now(cast(sqlite3.Connection, conn), lambda c: None, 1500)
    assert conn.statements[-1] == 'PRAGMA busy_timeout = 1500'  # set back on every path


def test_sqlite_timeout_bounds(tmp_path: Path) -> None:
    with pytest.raises(UserError, match='`timeout` must be a number of seconds'):
        SQLiteConversationStore(tmp_path / 'nan.db', timeout=float('nan'))
    store = SQLiteConversationStore(tmp_path / 'inf.db', timeout=float('inf'))  # waits as long as SQLite can
    try:
        assert store._busy_ms == 2**31 - 1  # pyright: ignore[reportPrivateUsage]
    finally:
        store.close()


@pytest.mark.anyio
async def test_sqlite_save_never_waits_on_the_loop_for_another_writer(tmp_path: Path) -> None:
    import time

    store = SQLiteConversationStore(tmp_path / 'locked.db')
    other = sqlite3.connect(tmp_path / 'locked.db', isolation_level=None)
    try:
        seen = traced(store)
        other.execute('BEGIN IMMEDIATE')  # another process writing: the save must wait for it, off the loop
        async with anyio.create_task_group() as tg:
            tg.start_soon(saved_chain, store, 'waits')
            started = time.perf_counter()
            await anyio.sleep(0.2)
            assert time.perf_counter() - started < 1.0  # the loop ran on while the save waited
            other.execute('COMMIT')
        assert commits(seen) == ['thread']
        loaded = await store.load('waits')
        assert loaded is not None and len(loaded.messages) == 4
    finally:
        other.close()
        store.close()


@pytest.mark.anyio
async def test_in_memory_sqlite_saves_stay_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai_citations import _store

    monkeypatch.setattr(_store, 'CHECKPOINT_WRITES', 2)
    store = SQLiteConversationStore()
    try:
        seen = traced(store)
        for n in range(4):
            await saved_chain(store, f'c{n}')
        assert commits(seen) == ['here'] * 4  # (no WAL to checkpoint)
    finally:
        store.close()


def test_versions_and_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from pydantic_ai_citations import _store
    from pydantic_ai_citations._urls import domain_range, host_key, is_grounding_redirect, title_domain

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, 'version', missing)
    assert _store._package_version() == '0+unknown'
    assert url_host('http://[bad') is None
    assert is_grounding_redirect('http://[bad') is False
    assert title_domain(None) is None
    assert title_domain('Pydantic docs') is None
    assert title_domain('WWW.Example.COM.') == 'example.com'
    assert host_key('a.b.example.com') == 'com.example.b.a.'
    assert domain_range('example.com') == ('com.example.', 'com.example/')
    low, high = domain_range('example.com') or ('', '')
    under = [
        h
        for h in ('example.com', 'a.b.example.com', 'example-x.com', 'xexample.com', 'example.co')
        if low <= host_key(h) < high
    ]
    assert under == ['example.com', 'a.b.example.com']
    assert domain_range('localhost') is None  # a one-label host (or a top-level domain alone) is only itself
    assert domain_range('10.0.0.1') is None  # as is an IP address
    assert domain_range('::1') is None


def _host_by_urlsplit(url: str) -> str | None:
    """`url_host` as `urlsplit` alone finds it (its fast path for plain URLs must agree)."""
    from urllib.parse import urlsplit

    from pydantic_ai_citations._urls import bare_host

    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return (bare_host(host) or None) if host else None


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(['http://', 'https://', 'HTTPS://', ' https://', 'https:/', 'ftp://', '']),
    st.text(st.sampled_from('aZ09.-_@:[]%/?#\\ \t\r\n\x00\u0130\uff0e\u2100é'), max_size=24),
)
def test_url_host_fast_path_agrees_with_urlsplit(scheme: str, rest: str) -> None:
    url = scheme + rest
    assert url_host(url) == _host_by_urlsplit(url)


def _followed(rows: list[tuple[str, str | None]], head: str) -> tuple[list[tuple[str, str | None]], bool]:
    """What `_ChainWalk.take_runs` finds in `rows` without its fast path: each parent looked up, from the head; and
    whether the history goes on past them."""
    by_id = {row[0]: row for row in rows}
    found: list[tuple[str, str | None]] = []
    current: str | None = head
    while current is not None and (row := by_id.pop(current, None)) is not None:
        found.append(row)
        current = row[1]
    return found, current is not None


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.sampled_from(['e0', 'e2', 'x', 'y']), st.sampled_from([None, 'e0', 'e1', 'x'])), max_size=3),
    st.lists(st.integers(0, 8), max_size=3),
    st.sampled_from(['in order', 'reversed', 'shuffled']),
    st.randoms(use_true_random=False),
)
def test_history_fast_path_agrees_with_following_parents(
    n: int,
    extra: list[tuple[str, str | None]],
    at: list[int],
    order: str,
    rnd: Any,
) -> None:
    """A history's rows in key order (one save's run) are taken whole; any other rows as each parent leads."""
    rows: list[tuple[str, str | None]] = [(f'e{i}', f'e{i - 1}' if i else None) for i in range(n)]
    for row, i in zip(extra, at, strict=False):  # another writer's entries in the range, or a row read twice
        rows.insert(i, rows[int(row[0][1:]) % n] if row[0][0] == 'e' else row)
    if order == 'reversed':
        rows.reverse()
    elif order == 'shuffled':
        rnd.shuffle(rows)
    head = f'e{n - 1}'
    walk = _ChainWalk(head, None)
    more = walk.take_runs(rows)
    assert (walk.rows, more) == _followed(rows, head)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=6),
        st.text(st.sampled_from('a\x00\ud800\u00e9'), max_size=4),
        st.sampled_from(['x' * 2000, 'x' * 2001, '\u00e9' * 1000, '\u00e9' * 1001]),
        st.integers(),
        st.none(),
    )
)
def test_id_check_fast_path_agrees(value: object) -> None:
    """`_require_id` refuses exactly what its checks one by one refuse, with the same message."""
    store = SQLiteConversationStore()
    where = 'SQLiteConversationStore.load'

    def one_by_one() -> None:
        require(where, 'conversation_id', value, str, 'a str')
        _require_storable(where, conversation_id=value)

    outcomes: list[str | None] = []
    for check in (one_by_one, lambda: store._require_id('load', value, scope=None, limit=None)):  # pyright: ignore[reportPrivateUsage]
        try:
            check()
            outcomes.append(None)
        except UserError as e:
            outcomes.append(str(e))
    store.close()
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    'url',
    [
        'https://Docs.Pydantic.dev/latest/',
        'https://www.example.com',
        'https://www.example.com?q#f',
        'http://...',
        'https://a.b.c.',
        'https://example.com\t/x',
        'https://exa\tmple.com/',
        'https://example.com:443/',
        'https://user@example.com/',
        'https://example.com\\@evil.com/',
    ],
)
def test_url_host_fast_path_cases(url: str) -> None:
    assert url_host(url) == _host_by_urlsplit(url)


@pytest.mark.anyio
async def test_snapshots_index_where_grounding_redirects_led(store: Store, backend: str, target: str) -> None:
    from datetime import UTC, datetime

    from pydantic_ai_citations.support import PageSnapshot

    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQH'
    gemini, other = await save_answers(
        store, [cited(redirect, title='A page title, not a domain'), cited('https://plain.example.net/a')]
    )
    assert await store.answers_citing(domain='realpage.org') == []
    now = datetime.now(UTC)
    snapshots = [
        PageSnapshot(redirect, 'https://www.docs.realpage.org/p', 200, 'ok', now),
        PageSnapshot('https://plain.example.net/a', 'https://moved.example.com/', 200, 'ok', now),  # not a redirect
        PageSnapshot(redirect + 'X', None, None, 'timeout', now),  # never resolved
    ]
    await store.index_snapshots(snapshots)
    await store.index_snapshots(snapshots)  # twice: nothing doubled
    count = "SELECT count(*) FROM answer_sources WHERE host_key = 'org.realpage.docs.'"
    assert raw_execute(backend, target, count)[0][0] == 1
    assert [a.entry_id for a in await store.answers_citing(domain='realpage.org')] == [gemini]
    assert [a.entry_id for a in await store.answers_citing(domain='docs.realpage.org')] == [gemini]
    assert await store.answers_citing(domain='moved.example.com') == []
    assert [a.entry_id for a in await store.answers_citing(domain='example.net')] == [other]
    await store.index_snapshots([])


@pytest.mark.anyio
async def test_domains_from_snapshots_stay_with_the_answers_an_edit_stores_again(store: Store) -> None:
    """`edit_answer` stores the messages after the edited one again: their copies had the domains the store was told
    by `index_snapshots` only on the old entries, so the conversation's current answer was no longer found by them."""
    from datetime import UTC, datetime

    from pydantic_ai_citations.support import PageSnapshot

    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQH'
    messages = [
        ModelRequest.user_text_prompt('q1'),
        cited('https://a.example/one'),
        ModelRequest.user_text_prompt('q2'),
        cited(redirect, title='Some title'),
    ]
    await store.save(Conversation(conversation_id='c', messages=messages))
    await store.index_snapshots([PageSnapshot(redirect, 'https://realpage.org/p', 200, 'ok', datetime.now(UTC))])
    conversation, _ = await store.edit_answer('c', message_index=1, part_index=0, new_text='Edited.')
    entries = await store.load_entries('c')
    assert entries is not None and conversation.messages[3] == entries[3].message
    found = [a.entry_id for a in await store.answers_citing(domain='realpage.org')]
    assert entries[3].id in found and len(found) == 2  # the current copy, and the old branch's answer


@pytest.mark.anyio
async def test_deleting_the_last_answer_citing_a_redirect_forgets_where_it_led(
    store: Store, backend: str, target: str
) -> None:
    """Where a grounding redirect led is kept for answers stored later that cite it; once no stored answer cites it,
    a delete removes it with the conversation (it told something of what that conversation looked up)."""
    from datetime import UTC, datetime

    from pydantic_ai_citations.support import PageSnapshot

    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQH'
    for cid in ('c', 'd'):
        messages = [ModelRequest.user_text_prompt('q'), cited(redirect, title='Some title')]
        await store.save(Conversation(conversation_id=cid, messages=messages))
    await store.index_snapshots([PageSnapshot(redirect, 'https://realpage.org/p', 200, 'ok', datetime.now(UTC))])
    remembered = 'SELECT count(*) FROM resolved_redirects'
    assert raw_execute(backend, target, remembered)[0][0] == 1
    await store.delete('c')
    assert raw_execute(backend, target, remembered)[0][0] == 1  # conversation 'd' still cites it
    assert len(await store.answers_citing(domain='realpage.org')) == 1
    await store.delete('d')
    assert raw_execute(backend, target, remembered)[0][0] == 0
    assert await store.answers_citing(domain='realpage.org') == []


@pytest.mark.anyio
async def test_domains_from_snapshots_reach_the_answers_a_rewritten_history_stores_again(store: Store) -> None:
    """Pydantic AI's `save` stores the messages of a rewritten history again from the first one that differs: the new
    entries of an answer citing a grounding redirect are indexed by where `index_snapshots` found it led."""
    from datetime import UTC, datetime

    from pydantic_ai_citations.support import PageSnapshot

    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQH'
    answer = cited(redirect, title='Some title')
    conversation = Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q'), answer])
    await store.save(conversation)
    await store.index_snapshots([PageSnapshot(redirect, 'https://realpage.org/p', 200, 'ok', datetime.now(UTC))])
    conversation.messages = [ModelRequest.user_text_prompt('q, again'), answer]
    conversation.new_message_index = None  # compared with the stored history, not appended
    entries = await store.save(conversation)
    assert len(entries) == 2  # both stored again, branching off the start
    found = [a.entry_id for a in await store.answers_citing(domain='realpage.org')]
    assert entries[1].id in found and len(found) == 2  # the new answer, and the old branch's
    # a later answer citing it in another conversation is found by it too
    (later,) = await save_answers(store, [cited(redirect)])
    assert later in [a.entry_id for a in await store.answers_citing(domain='realpage.org')]


def test_nul_characters_round_trip_and_are_found_on_both_backends(backend: str, target: str) -> None:
    """PostgreSQL text cannot hold NUL: the lookup columns store it as U+FFFD on both backends, and the messages and
    answer keep it (JSON escapes it). A NUL in the conversation id is refused at `save`, before anything is written."""
    url = 'https://a.test/p?q=x\x00y'
    text = 'K2\x00 is tall'
    citation = Citation([WebCitationSource(url, title='t\x00')], anchor=ContentCitationAnchor(start=0, end=2))
    messages: list[ModelMessage] = [
        ModelRequest.user_text_prompt(text),
        ModelResponse(parts=[TextPart(text, citations=[citation])], model_name='m\x00', provider_name='p\x00'),
    ]

    async def check() -> None:
        store: Store = SQLiteConversationStore(target) if backend == 'sqlite' else PostgresConversationStore(target)
        cid = str(uuid.uuid4())
        try:
            entries = await store.save(Conversation(conversation_id=cid, messages=messages))
            loaded = await store.load(cid)
            assert loaded is not None
            assert dump(loaded.messages) == dump(messages)
            found = await store.answers_citing(url=url)
            assert [a.entry_id for a in found] == [entries[1].id]
            assert found[0].answer.text == text
            assert [a.entry_id for a in await store.answers_citing(domain='a.test')] == [entries[1].id]
            with pytest.raises(UserError, match='`conversation_id` holds a NUL character'):
                await store.save(Conversation(conversation_id='a\x00b', messages=messages))
            assert await store.load('a\x00b'.replace('\x00', '')) is None
        finally:
            await close(store)

    anyio.run(check)


INDEXED_QUERIES = [
    pytest.param(sql.RECORD_AND_SCOPE, ('c',), id='load: the record'),
    pytest.param(sql.CHAIN, ('e', 5), id='load: the history'),
    pytest.param(sql.CHAIN_RUNS, ('e',), id='load: the history, run by run'),
    pytest.param(sql.REVISION, ('c',), id='revision'),
    pytest.param(sql.HAS_ENTRY, ('e',), id='entry stored'),
    pytest.param(sql.ENTRY, ('e',), id='read_entry'),
    pytest.param(sql.RECORDS + sql.RECORDS_IN_SCOPE + sql.RECORDS_ORDER + sql.LIMIT, ('s', 3), id='records in scope'),
    pytest.param(sql.ANSWERS + sql.BY_ENTRY + sql.BY_STORED, ('e',), id='answer'),
    pytest.param(
        sql.ANSWERS + sql.CITING_URL + sql.BY_STORED, ('example.a.', 'https://a.example/'), id='answers citing a URL'
    ),
    pytest.param(
        sql.ANSWERS + sql.CITING_DOMAIN + sql.BY_STORED, ('com.example.', 'com.example/'), id='answers citing a domain'
    ),
    pytest.param(sql.ANSWERS + sql.CITING_HOST + sql.BY_STORED, ('localhost.',), id='answers citing a one-label host'),
    pytest.param(sql.ANSWERS + sql.WITH_PROBLEM + sql.BY_STORED, ('unresolved_marker',), id='answers with a problem'),
    pytest.param(sql.ANSWERS + sql.AFTER_ENTRY + sql.BY_ENTRY_ID + sql.LIMIT, ('e', 3), id='iter_answers'),
    pytest.param(sql.DELETE_SOURCES, ('e',), id="an answer's sources replaced"),
    pytest.param(sql.DELETE_PROBLEMS, ('e',), id="an answer's problems replaced"),
    pytest.param(sql.DELETE_TIPS, ('c',), id='tips replaced'),
    pytest.param(
        sql.INDEX_RESOLVED, ('com.example.', 'example.a.', 'https://a.example/', 'com.example.'), id='index_snapshots'
    ),
]
"""Every statement a read or a write runs, but `delete`'s garbage collection (which reads what is left whole) and
the listing of all records (`read_records` without a scope: newest first, along its index)."""
CTES = ('c', 'r', 'u', 'chain', 'reach', 'runs')


def query_plan(backend: str, target: str, statement: str, params: tuple[object, ...]) -> list[str]:
    """The plan of `statement` on the test's database; PostgreSQL's with sequential scans priced out (it would scan
    a small table whole even when an index serves the query)."""
    if backend == 'sqlite':
        with sqlite3.connect(target) as conn:
            return [row[3] for row in conn.execute(f'EXPLAIN QUERY PLAN {statement}', params)]
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute('SET enable_seqscan = off')
        rows = conn.execute(f'EXPLAIN {POSTGRES.sql(statement)}', params).fetchall()  # pyright: ignore[reportArgumentType]
        return [row[0] for row in rows]


def whole_reads(backend: str, plan: list[str]) -> list[str]:
    """The steps of `plan` that read a table, or an index, whole instead of looking keys up."""
    if backend == 'sqlite':  # `SEARCH` looks keys up; `SCAN` reads a table (or an index) whole
        return [line for line in plan if line.startswith('SCAN ') and line.split()[1] not in CTES]
    found: list[str] = []
    node = ''
    for line in [*plan, '->']:  # a node's line starts with `->` (but the first), its details follow it
        if '->' in line or not node:
            if 'Seq Scan' in node or ('Index' in node and 'Scan' in node and 'Index Cond' not in node):
                found.append(node.splitlines()[0])  # read whole (an index scan without a condition: filtered)
            node = line
        else:
            node += '\n' + line
    return found


@pytest.mark.anyio
@pytest.mark.parametrize(('statement', 'params'), INDEXED_QUERIES)
async def test_every_query_is_indexed(store: Store, backend: str, target: str, statement: str, params: Any) -> None:
    assert whole_reads(backend, query_plan(backend, target, statement, params)) == []


@pytest.mark.anyio
async def test_latest_records_walk_their_index(store: Store, backend: str, target: str) -> None:
    """`read_records` without a scope lists records newest first along `conversations_updated`: no sort of them all."""
    plan = query_plan(backend, target, sql.RECORDS + sql.RECORDS_ORDER + sql.LIMIT, (3,))
    assert [line for line in plan if 'conversations_updated' in line] != [], plan
    assert [line for line in plan if 'TEMP B-TREE' in line or 'Sort' in line] == [], plan


@pytest.mark.anyio
async def test_query_plans_tell_a_whole_read(store: Store, backend: str, target: str) -> None:
    """The check above sees a query that no index serves (here: the URL index dropped)."""
    raw_execute(backend, target, 'DROP INDEX answer_sources_host')
    plan = query_plan(backend, target, sql.ANSWERS + sql.CITING_URL, ('example.a.', 'https://a.example/'))
    assert whole_reads(backend, plan) != [], plan


@pytest.mark.anyio
async def test_postgres_load_and_save_checks_are_indexed(pg_dsn: str) -> None:
    target = fresh_schema(pg_dsn)
    store = PostgresConversationStore(target)
    try:
        await store.open()
        for statement, params in (
            (sql.PG_LOAD, ('c', 5, 'c')),
            (sql.PG_LOAD_RUNS, ('c', 'c')),
            (sql.PG_SAVE_CHECKS, ('c', 'e')),
        ):
            plan = query_plan('postgres', target, statement, params)
            assert whole_reads('postgres', plan) == [], plan
    finally:
        await store.close()


@pytest.mark.anyio
async def test_deleting_a_fork_of_a_long_conversation_is_linear(store: Store, backend: str, target: str) -> None:
    """The garbage collection walks every history one entry a step. On PostgreSQL, for a table without statistics,
    the planner joined each step with a hash of the whole table, built again every step: deleting a fork of 20,000
    messages took 105 s with the write lock held. The walk now runs by the primary key, into a table of its own."""
    import time

    n = 12_000
    messages: list[ModelMessage] = []
    for i in range(n // 2):
        messages.append(ModelRequest.user_text_prompt(f'q{i}'))
        messages.append(ModelResponse(parts=[TextPart(f'Answer {i}.')], model_name='m'))
    await store.save(Conversation(conversation_id='c', messages=messages))
    await store.fork('c', at=n // 2, new_conversation_id='f')
    start = time.perf_counter()
    await store.delete('f')
    assert time.perf_counter() - start < 8  # (quadratic: about 40 s here)
    loaded = await store.load('c')
    assert loaded is not None and len(loaded.messages) == n
    assert raw_execute(backend, target, 'SELECT count(*) FROM entries')[0][0] == n  # (shared with 'c': kept)


@pytest.mark.anyio
async def test_ids_and_scopes_the_database_cannot_hold_are_refused_alike(store: Store) -> None:
    """A NUL character reached PostgreSQL raw (`DataError`) from every method but `save`, where SQLite took it, and
    an id or scope past PostgreSQL's index key size failed there only: both backends now refuse them the same way."""
    await store.save(Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q')]))
    nul, long = 'a\x00b', 'x' * 2_001
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ('load', lambda: store.load(nul)),
        ('load', lambda: store.load('c', scope=nul)),
        ('delete', lambda: store.delete(nul)),
        ('list_conversations', lambda: store.list_conversations(scope=nul)),
        ('answer', lambda: store.answer(nul)),
        ('fork', lambda: store.fork('c', new_conversation_id=nul)),
        ('fork', lambda: store.fork('c', new_conversation_id='f', scope=nul)),
        ('save', lambda: store.save(Conversation(conversation_id=long, messages=[]))),
        ('save', lambda: store.save(Conversation(conversation_id='d', messages=[]), scope=long)),
    ]
    for method, call in calls:
        with pytest.raises(UserError, match=rf'{type(store).__name__}\.{method}: `\w+` (holds a NUL|is longer than)'):
            await call()
    assert [c.conversation_id for c in await store.list_conversations()] == ['c']


@pytest.mark.anyio
async def test_a_very_long_cited_url_is_stored_and_found_on_both_backends(store: Store) -> None:
    """A URL past PostgreSQL's index key size (about 2.7 kB) failed the whole save there: it is keyed by its first
    characters and a hash of all of it, on both backends, and found by itself."""
    url = 'https://example.com/search?q=' + 'k2' * 1_500
    response = ModelResponse(parts=[TextPart('K2 is tall.', citations=[Citation([WebCitationSource(url)])])])
    await store.save(Conversation(conversation_id='c', messages=[ModelRequest.user_text_prompt('q'), response]))
    assert [a.conversation_id for a in await store.answers_citing(url=url)] == ['c']
    assert await store.answers_citing(url=url[:-1] + '3') == []
    assert [a.conversation_id for a in await store.answers_citing(domain='example.com')] == ['c']


@pytest.mark.anyio
async def test_a_closed_store_says_so(open_store: Opener) -> None:
    store = await open_store()
    await close(store)
    with pytest.raises(UserError, match='the store was closed'):
        await store.load('c')
