"""Misuse gets a clear error at the call that caused it: the exception type, and a message naming the argument and
what was expected. Public API only (issue 14 point 4)."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, AgentRunResult, ModelMessage, ModelResponse, RunContext, TextPart, WebCitationSource
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from pydantic_ai_citations import (
    AnthropicTap,
    CapabilityMatrix,
    CitedAnswer,
    CleanStaleCitations,
    CohereTap,
    MistralTap,
    PerplexityTap,
    SQLiteConversationStore,
    StripCitationMarkup,
    TrackCitations,
    VerifyEvidence,
    anthropic_http_client,
    cohere_http_client,
    find_stale,
    mistral_http_client,
    perplexity_http_client,
    redact,
    removed_markup,
    render_html,
    render_markdown,
    verify_claims,
)
from pydantic_ai_citations.support import check_support, check_support_sync
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation
from pydantic_ai_citations.ui import cited_answer_chunk, cited_answer_event

pytestmark = pytest.mark.anyio

K2 = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2')
PUBLIC_MODULES = (
    'pydantic_ai_citations',
    'pydantic_ai_citations.formats',
    'pydantic_ai_citations.matrix',
    'pydantic_ai_citations.support',
    'pydantic_ai_citations.testing',
    'pydantic_ai_citations.ui',
)


async def _answer() -> CitedAnswer:
    model = CitingModel('K2 is 8,611 m tall.', [ScriptedCitation('K2 is 8,611 m tall.', [K2])])
    return CitedAnswer.from_result(await Agent(model).run('How tall is K2?'))


# --- capability constructors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('build', 'named'),
    [
        pytest.param(lambda: TrackCitations(matrix='x'), 'matrix', id='track-matrix-str'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(marker_sources=[1, 2]), 'marker_sources', id='track-marker-sources-list'),  # pyright: ignore[reportArgumentType]
        pytest.param(
            lambda: TrackCitations(marker_sources={'s1': 'https://x.test'}),  # pyright: ignore[reportArgumentType]
            'marker_sources',
            id='track-marker-sources-str-value',
        ),
        pytest.param(lambda: TrackCitations(perplexity_tap=CohereTap()), 'perplexity_tap', id='track-perplexity-tap'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(cohere_tap='tap'), 'cohere_tap', id='track-cohere-tap'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(anthropic_tap=CohereTap()), 'anthropic_tap', id='track-anthropic-tap'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(mistral_tap=AnthropicTap()), 'mistral_tap', id='track-mistral-tap'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(recover_raw='no'), 'recover_raw', id='track-recover-raw'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(observe_stream_end=None), 'observe_stream_end', id='track-observe'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: TrackCitations(id=3), 'id', id='track-id'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: CleanStaleCitations(on_edit='drop'), 'on_edit', id='clean-on-edit'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: CleanStaleCitations(description=1), 'description', id='clean-description'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: StripCitationMarkup(policy='drop'), 'policy', id='strip-policy'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: StripCitationMarkup(tools='yes'), 'tools', id='strip-tools'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: StripCitationMarkup(defer_loading=1), 'defer_loading', id='strip-defer-loading'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: VerifyEvidence(check_quotes='no'), 'check_quotes', id='evidence-check-quotes'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: VerifyEvidence(extra_sources={'a': 1}), 'extra_sources', id='evidence-extra-sources'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: VerifyEvidence(extra_sources=['a']), 'extra_sources', id='evidence-extra-list'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: VerifyEvidence(max_listed_ids='5'), 'max_listed_ids', id='evidence-max-ids-str'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: VerifyEvidence(max_listed_ids=-1), 'max_listed_ids', id='evidence-max-ids-negative'),
    ],
)
def test_capability_arguments_are_checked_at_construction(build: Any, named: str):
    with pytest.raises(UserError, match=f'`?{named}`?'):
        build()


def test_track_citations_from_spec_fails_when_the_agent_is_built():
    spec = {'model': 'test', 'capabilities': [{'TrackCitations': {'matrix': 'x'}}]}
    with pytest.raises(ValueError, match='`matrix` must be a `CapabilityMatrix`') as caught:
        Agent.from_spec(spec, custom_capability_types=[TrackCitations])
    assert isinstance(caught.value.__cause__, UserError)

    spec = {'model': 'test', 'capabilities': [{'TrackCitations': {'marker_sources': [1, 2]}}]}
    with pytest.raises(ValueError, match='`marker_sources` must be a mapping'):
        Agent.from_spec(spec, custom_capability_types=[TrackCitations])


def test_valid_capability_arguments_pass():
    TrackCitations(matrix=CapabilityMatrix(), marker_sources={'s1': K2}, perplexity_tap=PerplexityTap())
    TrackCitations(marker_sources=lambda ctx: {'s1': K2}, cohere_tap=CohereTap(), id=None)
    VerifyEvidence(extra_sources={'doc': 'text'}, max_listed_ids=0)


@pytest.mark.parametrize(
    ('build', 'named'),
    [
        pytest.param(lambda: PerplexityTap(hosts='api.perplexity.ai'), 'hosts', id='perplexity-one-host-str'),
        pytest.param(lambda: CohereTap(hosts=[1]), 'hosts', id='cohere-host-int'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: AnthropicTap(hosts='api.anthropic.com'), 'hosts', id='anthropic-one-host-str'),
        pytest.param(lambda: MistralTap(max_responses=0), 'max_responses', id='mistral-max-responses'),
        pytest.param(lambda: CohereTap(max_responses='5'), 'max_responses', id='cohere-max-responses'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: PerplexityTap(strict='yes'), 'strict', id='perplexity-strict'),  # pyright: ignore[reportArgumentType]
    ],
)
def test_tap_arguments_are_checked(build: Any, named: str):
    with pytest.raises(UserError, match=f'`{named}` must be'):
        build()


# --- for_run keeps every field ----------------------------------------------------------------------------------------

NON_DEFAULTS: dict[str, dict[str, object]] = {
    'TrackCitations': {
        'matrix': CapabilityMatrix(),
        'perplexity_tap': PerplexityTap(),
        'cohere_tap': CohereTap(),
        'anthropic_tap': AnthropicTap(),
        'mistral_tap': MistralTap(),
        'marker_sources': {'s1': K2},
        'recover_raw': False,
        'observe_stream_end': False,
        'id': 'track-2',
        'description': 'tracks',
        'defer_loading': True,
    },
    'CleanStaleCitations': {
        'on_edit': 'clear',
        'on_provider_switch': 'keep',
        'id': 'clean-2',
        'description': 'cleans',
        'defer_loading': True,
    },
    'StripCitationMarkup': {
        'policy': 'retry',
        'tools': False,
        'output': False,
        'warn_when_disabled': False,
        'id': 'strip-2',
        'description': 'strips',
        'defer_loading': True,
    },
    'VerifyEvidence': {
        'check_quotes': False,
        'require_sources': False,
        'extra_sources': {'doc': 'text'},
        'max_listed_ids': 3,
        'id': 'verify-2',
        'description': 'verifies',
        'defer_loading': True,
    },
}
"""A value other than the default for every constructor field of every capability the package exports."""


def _exported_capabilities() -> dict[str, type[AbstractCapability[Any]]]:
    found: dict[str, type[AbstractCapability[Any]]] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, '__all__', ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, AbstractCapability):
                found[name] = value
    return found


async def test_for_run_keeps_every_field_of_every_capability():
    capabilities = _exported_capabilities()
    assert sorted(capabilities) == sorted(NON_DEFAULTS), 'add the new capability to NON_DEFAULTS'
    ctx = RunContext[Any](deps=None, model=TestModel(), usage=RunUsage(), run_id='run-1')
    for name, cls in capabilities.items():
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        values = NON_DEFAULTS[name]
        assert sorted(values) == sorted(fields), f'{name}: give NON_DEFAULTS a value for each field'
        for field_name, value in values.items():
            assert value != fields[field_name].default, f'{name}.{field_name}: pick a value other than the default'
        capability = cls(**values)
        run = await capability.for_run(ctx)
        assert type(run) is cls
        for field_name in fields:
            assert getattr(run, field_name) == getattr(capability, field_name), f'{name}.for_run lost {field_name!r}'


# --- the run's result where one is expected ---------------------------------------------------------------------------


def _messages() -> list[ModelMessage]:
    return [ModelResponse(parts=[TextPart('hi')])]


@pytest.mark.parametrize(
    ('given', 'hint'),
    [
        pytest.param(None, '', id='none'),
        pytest.param('run-1', 'report_run', id='run-id'),
        pytest.param(_messages(), 'from_messages', id='messages'),
    ],
)
def test_report_wants_a_run_result(given: object, hint: str):
    with pytest.raises(UserError, match='`result` must be the result of `agent.run`') as caught:
        TrackCitations().report(given)  # pyright: ignore[reportArgumentType]
    assert 'TrackCitations.report' in str(caught.value)
    assert hint in str(caught.value)


async def test_report_run_wants_a_run_id():
    result = await Agent(TestModel()).run('q')
    with pytest.raises(UserError, match='`run_id` must be'):
        TrackCitations().report_run(result)  # pyright: ignore[reportArgumentType]


def test_from_result_wants_a_run_result():
    with pytest.raises(UserError, match=r'CitedAnswer\.from_result: `result` must be the result of `agent.run`'):
        CitedAnswer.from_result(None)  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='from_messages'):
        CitedAnswer.from_result(_messages())  # pyright: ignore[reportArgumentType]


async def test_messages_where_messages_are_expected():
    result = await Agent(TestModel()).run('q')
    with pytest.raises(UserError, match=r'CitedAnswer\.from_messages: `messages` must be a list.*all_messages\(\)'):
        CitedAnswer.from_messages(result)  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='find_stale: `messages` must be a list of messages, got None'):
        find_stale(None)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ('given', 'bad'),
    [
        pytest.param([1, 2], '(item 0: 1)', id='ints'),
        pytest.param([*_messages(), 'hi'], "(item 1: 'hi')", id='str-after-a-message'),
        pytest.param([{'kind': 'response', 'parts': 'stored JSON'}], '`ModelMessagesTypeAdapter', id='json-dict'),
    ],
)
def test_messages_must_be_messages(given: list[object], bad: str):
    expected = r'`messages` must be a list of messages \(`ModelRequest` / `ModelResponse`\)'
    with pytest.raises(UserError, match=rf'CitedAnswer\.from_messages: {expected}') as caught:
        CitedAnswer.from_messages(given)  # pyright: ignore[reportArgumentType]
    assert bad in str(caught.value)
    with pytest.raises(UserError, match=rf'find_stale: {expected}') as caught:
        find_stale(given)  # pyright: ignore[reportArgumentType]
    assert bad in str(caught.value)


def test_subclasses_of_messages_pass():
    @dataclasses.dataclass
    class AppResponse(ModelResponse):
        pass

    messages = [AppResponse(parts=[TextPart('hi')])]
    assert CitedAnswer.from_messages(messages).text == 'hi'
    assert find_stale(messages) == []


# --- agents where an agent is expected --------------------------------------------------------------------------------


def _removed_markup_of(owner: Any) -> object:
    return removed_markup(owner, 'run-1')


@pytest.mark.parametrize(
    ('call', 'where', 'named'),
    [
        pytest.param(TrackCitations.of, 'TrackCitations.of', 'agent', id='track-of'),
        pytest.param(StripCitationMarkup.of, 'StripCitationMarkup.of', 'agent', id='strip-of'),
        pytest.param(_removed_markup_of, 'removed_markup', 'owner', id='removed-markup'),
    ],
)
async def test_an_agent_where_an_agent_is_expected(call: Any, where: str, named: str):
    with pytest.raises(UserError, match=rf'{re.escape(where)}: `{named}` must be an agent \(`Agent`.*got None\.'):
        call(None)
    result = await Agent(TestModel()).run('q')
    with pytest.raises(UserError, match=f"`{named}` must be an agent.*That is a run's result: pass the agent"):
        call(result)


@pytest.mark.parametrize('given', [None, 123], ids=['none', 'int'])
def test_removed_markup_wants_a_result_or_run_id(given: object):
    strip = StripCitationMarkup()
    agent = Agent(TestModel(), capabilities=[strip])
    with pytest.raises(
        UserError, match=rf"^removed_markup: `result` must be the run's result or its `run_id`.*{given}"
    ):
        removed_markup(agent, given)  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match=r'^StripCitationMarkup\.removed_markup: `result` must be'):
        strip.removed_markup(given)  # pyright: ignore[reportArgumentType]
    assert removed_markup(agent, 'run-1') == []


@pytest.mark.parametrize(
    ('client', 'tap', 'wanted'),
    [
        pytest.param(anthropic_http_client, MistralTap(), 'AnthropicTap', id='anthropic-given-mistral'),
        pytest.param(mistral_http_client, AnthropicTap(), 'MistralTap', id='mistral-given-anthropic'),
        pytest.param(perplexity_http_client, None, 'PerplexityTap', id='perplexity-given-none'),
        pytest.param(cohere_http_client, PerplexityTap(), 'CohereTap', id='cohere-given-perplexity'),
    ],
)
def test_http_clients_want_their_own_tap(client: Any, tap: object, wanted: str):
    # Another tap has a `transport` too: its client was built, and fed a tap `TrackCitations` never reads.
    with pytest.raises(UserError, match=rf'^{client.__name__}: `tap` must be an? `{wanted}`'):
        client(tap)


async def test_check_support_wants_a_cited_answer():
    result = await Agent(TestModel()).run('q')
    with pytest.raises(UserError, match=r'`answer` must be a `CitedAnswer`.*CitedAnswer\.from_result\(result\)'):
        await check_support(result, {})  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='`answer` must be a `CitedAnswer`'):
        check_support_sync('K2 is tall.', {})  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='`pages` must be a mapping of URL to page or a `SnapshotStore`'):
        check_support_sync(await _answer(), ['https://x.test'])  # pyright: ignore[reportArgumentType]


# --- answers ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('number', [0, -1, 2, True, '1'])
async def test_source_numbers_are_one_based_and_in_range(number: object):
    answer = await _answer()
    assert answer.source(1).url == K2.url
    with pytest.raises(UserError, match=r'`number` must be a source number \(1-based.*1 source\(s\): numbered 1 to 1'):
        answer.source(number)  # pyright: ignore[reportArgumentType]


def test_source_of_an_answer_without_sources():
    answer = CitedAnswer.from_messages(_messages())
    with pytest.raises(UserError, match=r'0 source\(s\): none'):
        answer.source(1)


# --- flags where a flag is expected -----------------------------------------------------------------------------------


def _flag_calls(answer: CitedAnswer, result: AgentRunResult[str]) -> list[tuple[str, str, Callable[[Any], object]]]:
    """(where, argument, call with the value) for every `bool` / `bool | None` argument of the public API."""
    track = TrackCitations()
    return [
        ('render_html', 'redact', lambda v: render_html(answer, redact=v)),
        ('render_html', 'document', lambda v: render_html(answer, document=v)),
        ('render_markdown', 'redact', lambda v: render_markdown(answer, redact=v)),
        ('redact', 'documents', lambda v: redact(answer, documents=v)),
        ('redact', 'web', lambda v: redact(answer, web=v)),
        ('CitedAnswer.from_messages', 'complete', lambda v: CitedAnswer.from_messages(_messages(), complete=v)),
        ('TrackCitations.report_run', 'complete', lambda v: track.report_run('run-1', complete=v)),
        ('cited_answer_event', 'redact', lambda v: cited_answer_event(result, redact=v)),
        ('cited_answer_chunk', 'redact', lambda v: cited_answer_chunk(result, redact=v)),
    ]


@pytest.mark.parametrize('value', ['yes', '', 'no', 1, None], ids=['yes', 'empty', 'no', 'one', 'none'])
async def test_flags_must_be_bools(value: object):
    # A string's truth is not the caller's intent: `redact=''` would have sent document excerpts unredacted.
    answer = await _answer()
    result = await Agent(TestModel()).run('q')
    for where, named, call in _flag_calls(answer, result):
        if value is None and named == 'complete':  # `bool | None`: None is the default
            continue
        with pytest.raises(UserError, match=rf'^{re.escape(where)}: `{named}` must be `True`(,| or) `False`'):
            call(value)


def test_render_and_redact_want_an_answer():
    for where, call in (('render_html', render_html), ('render_markdown', render_markdown), ('redact', redact)):
        with pytest.raises(UserError, match=rf'^{where}: `answer` must be a `CitedAnswer`.*from_messages\(messages\)'):
            call(_messages())  # pyright: ignore[reportArgumentType]


async def test_report_run_wants_messages():
    with pytest.raises(UserError, match=r'TrackCitations\.report_run: `messages` must be a list of messages'):
        TrackCitations().report_run('run-1', await Agent(TestModel()).run('q'))  # pyright: ignore[reportArgumentType]


async def test_ui_answer_events_want_a_run_result():
    for where, call in (('cited_answer_event', cited_answer_event), ('cited_answer_chunk', cited_answer_chunk)):
        with pytest.raises(UserError, match=rf'^{where}: `result` must be the result of `agent.run`'):
            call(await _answer())  # pyright: ignore[reportArgumentType]


# --- testing ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('build', 'named'),
    [
        pytest.param(lambda: ScriptedCitation('K2', ['https://x.test']), 'sources', id='urls'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: ScriptedCitation('K2', 'https://x.test'), 'sources', id='one-url'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: ScriptedCitation('K2', K2), 'sources', id='one-source'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: ScriptedCitation(2, [K2]), 'quote', id='quote'),  # pyright: ignore[reportArgumentType]
    ],
)
def test_scripted_citation_wants_sources(build: Any, named: str):
    with pytest.raises(UserError, match=f'ScriptedCitation: `{named}` must be'):
        build()


def test_scripted_citation_wants_a_quote_and_a_source_when_made():
    with pytest.raises(UserError, match=r'ScriptedCitation: `sources` must be a non-empty list.*got \[\]'):
        ScriptedCitation('K2', [])
    with pytest.raises(UserError, match=r'ScriptedCitation: `quote` must be the cited words \(a non-empty str\)'):
        ScriptedCitation('', [K2])


@pytest.mark.parametrize(
    ('build', 'named'),
    [
        pytest.param(lambda: CitingModel(123), 'text', id='text-int'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: CitingModel('K2', ScriptedCitation('K2', [K2])), 'citations', id='one-citation'),  # pyright: ignore[reportArgumentType]
        pytest.param(lambda: CitingModel('K2', ['K2']), 'citations', id='quotes'),  # pyright: ignore[reportArgumentType]
    ],
)
def test_citing_model_checks_its_script(build: Any, named: str):
    with pytest.raises(UserError, match=f'CitingModel: `{named}` must be'):
        build()


# --- verify_claims ----------------------------------------------------------------------------------------------------


async def test_verify_claims_takes_a_string_as_one_claim():
    prompts: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(str(messages[-1]))
        return ModelResponse(parts=[TextPart('SUPPORTED\nIt says so.')])

    results = await verify_claims('Revenue grew.', {'doc': 'Revenue grew.'}, model=FunctionModel(reply))
    assert [r.claim.text for r in results] == ['Revenue grew.']
    assert len(prompts) == 1


@pytest.mark.parametrize(
    ('claims', 'documents', 'named'),
    [
        pytest.param([1], {'doc': 'text'}, 'claims', id='claims-ints'),
        pytest.param(None, {'doc': 'text'}, 'claims', id='claims-none'),
        pytest.param(['claim'], ['text'], 'documents', id='documents-list'),
        pytest.param(['claim'], {'doc': 3}, 'documents', id='documents-bad-value'),
    ],
)
async def test_verify_claims_checks_its_arguments(claims: object, documents: object, named: str):
    with pytest.raises(UserError, match=f'verify_claims: `{named}` must be'):
        await verify_claims(claims, documents, model=TestModel())  # pyright: ignore[reportArgumentType]


# --- stores -----------------------------------------------------------------------------------------------------------


def test_sqlite_store_wants_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match='`path` must be a str or path-like'):
        SQLiteConversationStore(123)  # pyright: ignore[reportArgumentType]
    assert os.listdir(tmp_path) == []
    store = SQLiteConversationStore(tmp_path / 'ok.db')
    assert store.path == str(tmp_path / 'ok.db')
    store.close()


@pytest.mark.parametrize('timeout', ['x', -1, None, True])
def test_sqlite_store_wants_a_timeout_in_seconds(timeout: object):
    with pytest.raises(UserError, match=r'SQLiteConversationStore: `timeout` must be a number of seconds \(>= 0\)'):
        SQLiteConversationStore(timeout=timeout)  # pyright: ignore[reportArgumentType]
    SQLiteConversationStore(timeout=0).close()


async def test_sqlite_store_queries_check_their_arguments():
    store = SQLiteConversationStore()
    try:
        for kwargs, named in (({'url': 5}, 'url'), ({'domain': 5}, 'domain')):
            with pytest.raises(UserError, match=rf'SQLiteConversationStore\.answers_citing: `{named}` must be a'):
                await store.answers_citing(**kwargs)  # pyright: ignore[reportArgumentType]
        with pytest.raises(UserError, match=r'SQLiteConversationStore\.load: `conversation_id` must be a str, got 123'):
            await store.load(123)  # pyright: ignore[reportArgumentType]
        with pytest.raises(UserError, match=r'SQLiteConversationStore\.load_entries: `conversation_id` must be a str'):
            await store.load_entries(None)  # pyright: ignore[reportArgumentType]
        assert await store.load('missing') is None
        assert await store.load_entries('missing') is None
    finally:
        store.close()


async def test_sqlite_store_save_wants_a_conversation():
    store = SQLiteConversationStore()
    try:
        with pytest.raises(UserError, match=r'SQLiteConversationStore\.save: `conversation` must be a `Conversation`'):
            await store.save(None)  # pyright: ignore[reportArgumentType]
        with pytest.raises(UserError, match='`conversation` must be'):
            await store.save(_messages())  # pyright: ignore[reportArgumentType]
    finally:
        store.close()


async def test_postgres_store_misuse():
    # Neither check reaches the server: the pool opens on first use, after them.
    pytest.importorskip('psycopg_pool')
    from pydantic_ai_citations import PostgresConversationStore

    with pytest.raises(UserError, match='`conninfo` must be a libpq connection string'):
        PostgresConversationStore(123)  # pyright: ignore[reportArgumentType]
    dsn = 'postgresql://nobody@127.0.0.1:1/none'
    for kwargs, expected in (
        ({'timeout': 'x'}, '`timeout` must be a number of seconds'),
        ({'min_size': '1'}, r'`min_size` must be a number of connections \(an int >= 0\)'),
        ({'min_size': -1}, '`min_size` must be'),
        ({'max_size': 0}, r'`max_size` must be a number of connections \(an int >= 1\), got 0'),
        ({'min_size': 5, 'max_size': 2}, r'`max_size` must be a number of connections \(an int >= 5\), got 2'),
    ):
        with pytest.raises(UserError, match=f'PostgresConversationStore: {expected}'):
            PostgresConversationStore(dsn, **kwargs)  # pyright: ignore[reportArgumentType]
    store = PostgresConversationStore('postgresql://nobody@127.0.0.1:1/none')
    with pytest.raises(UserError, match=r'PostgresConversationStore\.save: `conversation` must be a `Conversation`'):
        await store.save(None)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize('adapter', ['vercel', 'ag-ui'])
@pytest.mark.parametrize('method', ['dump_messages', 'load_messages'])
@pytest.mark.parametrize('given', ['hello', None, 5, [1], [{'role': 'user', 'parts': []}]])
def test_ui_adapters_refuse_what_is_not_messages(adapter: str, method: str, given: object) -> None:
    """Pydantic AI's adapters fail on these with `AttributeError`, `TypeError`, an assertion, or (AG-UI) load nothing."""
    from pydantic_ai_citations.ui import CitedAGUIAdapter, CitedVercelAIAdapter

    cls = CitedVercelAIAdapter if adapter == 'vercel' else CitedAGUIAdapter
    with pytest.raises(UserError, match=rf'^{cls.__name__}\.{method}: `messages'):
        getattr(cls, method)(given)


def _capture_misuse() -> list[Any]:
    from pydantic_ai_citations.support import SnapshotStore, capture, capture_answer, decode_body, split_passages

    answer = CitedAnswer('x')
    urls = ['https://example.com/page']

    def store(tmp: Path) -> SnapshotStore:
        return SnapshotStore(tmp / 'snaps.db')

    cases: list[tuple[str, Callable[[Path], object], str]] = [
        (
            'capture-one-str',
            lambda tmp: capture('https://example.com/page'),  # pyright: ignore[reportArgumentType]
            "not one str: pass ['https",
        ),
        ('capture-not-iterable', lambda tmp: capture(3), '`urls` must be a list'),  # pyright: ignore[reportArgumentType]
        ('capture-none-url', lambda tmp: capture([None], store=store(tmp)), 'every URL must be a str'),  # pyright: ignore[reportArgumentType]
        ('capture-unhashable-url', lambda tmp: capture([['https://a.example/']]), 'every URL must be a str'),  # pyright: ignore[reportArgumentType]
        ('capture-timeout-str', lambda tmp: capture(urls, timeout='5'), '`timeout` must be a number'),  # pyright: ignore[reportArgumentType]
        ('capture-timeout-zero', lambda tmp: capture(urls, timeout=0), 'more than 0 seconds'),
        ('capture-conc', lambda tmp: capture(urls, concurrency='8'), '`concurrency` must be an int'),  # pyright: ignore[reportArgumentType]
        ('capture-redirects', lambda tmp: capture(urls, max_redirects=-1), '`max_redirects`'),
        (
            'capture-store',
            lambda tmp: capture(urls, store='snaps.db'),  # pyright: ignore[reportArgumentType]
            '`store` must be a `SnapshotStore`',
        ),
        ('capture-transport', lambda tmp: capture(urls, transport=object()), '`transport`'),  # pyright: ignore[reportArgumentType]
        ('capture-hosts-str', lambda tmp: capture(urls, allow_hosts='localhost'), '`allow_hosts`'),
        ('answer-str', lambda tmp: capture_answer(store(tmp), 'x'), '`answer` must be a `CitedAnswer`'),  # pyright: ignore[reportArgumentType]
        (
            'answer-store',
            lambda tmp: capture_answer('s.db', answer),  # pyright: ignore[reportArgumentType]
            '`store` must be a `SnapshotStore`',
        ),
        (
            'answer-timeout',
            lambda tmp: capture_answer(store(tmp), answer, timeout=None),  # pyright: ignore[reportArgumentType]
            'capture_answer: `timeout`',
        ),
        ('snapshot-store-int', lambda tmp: SnapshotStore(123), '`path` must be a str or path-like'),  # pyright: ignore[reportArgumentType]
        ('split-none', lambda tmp: split_passages(None), '`html_or_text` must be the page as a str'),  # pyright: ignore[reportArgumentType]
        ('split-words', lambda tmp: split_passages('x', min_words='5'), '`min_words` must be an int'),  # pyright: ignore[reportArgumentType]
        ('decode-str', lambda tmp: decode_body('<p>x</p>'), '`body` must be the raw body as bytes'),  # pyright: ignore[reportArgumentType]
        ('decode-content-type', lambda tmp: decode_body(b'x', 3), '`content_type`'),  # pyright: ignore[reportArgumentType]
    ]
    return [pytest.param(call, message, id=name) for name, call, message in cases]


@pytest.mark.anyio
@pytest.mark.parametrize(('call', 'message'), _capture_misuse())
async def test_capture_and_page_arguments_are_checked_before_anything_is_fetched(
    call: Callable[[Path], Any], message: str, tmp_path: Path
) -> None:
    """Misuse raises `UserError` at the call, before any page is fetched: a str for `urls` was read as one URL per
    character, a path for `store` raised only after the pages were fetched (and lost)."""
    with pytest.raises(UserError, match=re.escape(message)):
        await _called(call, tmp_path)


async def _called(call: Callable[[Path], Any], tmp_path: Path) -> object:
    result = call(tmp_path)
    return await result if hasattr(result, '__await__') else result


def _testing_misuse() -> list[Any]:
    from pydantic_ai_citations.testing import ScriptedCitation, assert_cites, check_seams

    cited = [ScriptedCitation('K2', [WebCitationSource('https://k2.example/')])]

    def model(**kwargs: Any) -> CitingModel:
        return CitingModel('K2 is tall.', cited, **kwargs)

    answer = CitedAnswer('K2 is tall.')
    cases: list[tuple[str, Callable[[], object], str]] = [
        ('chunk-size-str', lambda: model(chunk_size='4'), '`chunk_size` must be an int'),
        ('chunk-size-float', lambda: model(chunk_size=2.5), '`chunk_size` must be an int'),
        ('break-after-str', lambda: model(break_stream_after='3'), '`break_stream_after` must be an int'),
        ('end-after-str', lambda: model(end_stream_after='3'), '`end_stream_after` must be an int'),
        ('seams-paths-str', lambda: check_seams(model(), paths='run'), '`paths` must be a list'),  # pyright: ignore[reportArgumentType]
        ('seams-max-cuts-str', lambda: check_seams(model(), max_cuts='3'), '`max_cuts` must be an int'),  # pyright: ignore[reportArgumentType]
        ('seams-resend-to', lambda: check_seams(model(), resend_to='gemini'), 'unknown `resend_to` style'),  # pyright: ignore[reportArgumentType]
        ('cites-url-none', lambda: assert_cites(answer, None), '`url` must be the URL'),  # pyright: ignore[reportArgumentType]
        ('cites-quote-int', lambda: assert_cites(answer, 'https://k2.example/', quote=3), '`quote` must be'),  # pyright: ignore[reportArgumentType]
    ]
    return [pytest.param(call, message, id=name) for name, call, message in cases]


@pytest.mark.anyio
@pytest.mark.parametrize(('call', 'message'), _testing_misuse())
async def test_testing_kit_arguments_are_checked_at_the_call(call: Callable[[], Any], message: str) -> None:
    """A str where an int goes raised a raw `TypeError` (or, for `break_stream_after`, surfaced as a seam failure);
    `paths='run'` was read as the paths `r`, `u`, `n`."""
    with pytest.raises(UserError, match=re.escape(message)):
        await _called(lambda _: call(), Path())
