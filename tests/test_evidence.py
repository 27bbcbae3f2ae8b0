"""Evidence as fields: `Claim` / `Evidence`, `retrieved_sources`, `check_evidence`, `VerifyEvidence`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai import Agent, Citation, ContentCitationAnchor, DocumentCitationSource, WebCitationSource
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import Claim, Evidence, TrackCitations, UnverifiedEvidenceError, VerifyEvidence
from pydantic_ai_citations._evidence import (
    RetrievedSource,
    check_evidence,
    normalize_quote,
    retrieved_sources,
    verify_evidence,
)

DOCS = [
    {'id': 'doc-1', 'title': 'Paris', 'text': 'Paris has 2.1\u00a0million inhabitants and the “Louvre”.'},
    {'id': 'doc-2', 'title': 'Lyon', 'text': 'Lyon is known for its food.'},
]


class Answer(BaseModel):
    summary: str
    claims: list[Claim]


# --- quotes ---------------------------------------------------------------------------------------------------------


def test_normalize_quote():
    assert normalize_quote('  a\u00a0\u00a0b\n\tc ') == 'a b c'
    assert normalize_quote('‘x’ “y” „z‟') == '\'x\' "y" "z"'
    assert normalize_quote('Case') != normalize_quote('case')
    assert normalize_quote('e\u0301') == normalize_quote('\u00e9')


# --- sources --------------------------------------------------------------------------------------------------------


class Hit(BaseModel):
    source_id: str
    snippet: str


@dataclass
class Row:
    id: int
    body: str


def _request(*parts: Any, run_id: str | None = None) -> ModelRequest:
    return ModelRequest(parts=list(parts), run_id=run_id)


def test_retrieved_sources_accepted_shapes():
    messages: list[ModelMessage] = [
        _request(UserPromptPart('q')),
        _request(
            ToolReturnPart('search', DOCS, tool_call_id='1'),
            ToolReturnPart('hits', [Hit(source_id='h1', snippet='Hit one.')], tool_call_id='2'),
            ToolReturnPart('rows', Row(id=7, body='Row seven.'), tool_call_id='3'),
            ToolReturnPart('nested', {'results': [{'id': 'n1', 'content': 'Nested.'}], 'total': 1}, tool_call_id='4'),
            ToolReturnPart('json', '[{"id": "j1", "excerpt": "From JSON."}]', tool_call_id='5'),
            ToolReturnPart('web', {'url': 'https://ex.com/a', 'page_content': 'A page.'}, tool_call_id='6'),
            ToolReturnPart('plain', 'no sources here', tool_call_id='7'),
            ToolReturnPart('flags', {'id': True, 'source_id': None}, tool_call_id='8'),
        ),
        ModelResponse(
            parts=[
                NativeToolCallPart('web_search', {'query': 'x'}, tool_call_id='ws', provider_name='anthropic'),
                NativeToolReturnPart(
                    'web_search',
                    [{'type': 'web_search_result', 'url': 'https://ex.com/b', 'title': 'B', 'encrypted_content': 'E'}],
                    tool_call_id='ws',
                    provider_name='anthropic',
                ),
                TextPart(
                    'Cited.',
                    citations=[
                        Citation(
                            [
                                WebCitationSource('https://ex.com/c', excerpts=['C excerpt.']),
                                DocumentCitationSource(document_id='file_9', excerpts=['Nine.']),
                                DocumentCitationSource(title='no id'),
                            ],
                            anchor=ContentCitationAnchor(start=0, end=6),
                        )
                    ],
                ),
            ]
        ),
    ]
    sources = retrieved_sources(messages, extra={'prompt-doc': 'Given in the prompt.'})
    assert {k: (v.origin, v.texts, v.tool_name) for k, v in sources.items()} == {
        'doc-1': ('tool_return', (DOCS[0]['text'], 'Paris'), 'search'),
        'doc-2': ('tool_return', (DOCS[1]['text'], 'Lyon'), 'search'),
        'h1': ('tool_return', ('Hit one.',), 'hits'),
        '7': ('tool_return', ('Row seven.',), 'rows'),
        'n1': ('tool_return', ('Nested.',), 'nested'),
        'j1': ('tool_return', ('From JSON.',), 'json'),
        'https://ex.com/a': ('tool_return', ('A page.',), 'web'),
        'https://ex.com/b': ('native_tool_return', ('B',), 'web_search'),
        'https://ex.com/c': ('text_citation', ('C excerpt.',), None),
        'file_9': ('text_citation', ('Nine.',), None),
        'prompt-doc': ('extra', ('Given in the prompt.',), None),
    }


def test_retrieved_sources_only_this_run():
    messages: list[ModelMessage] = [
        _request(ToolReturnPart('search', {'id': 'old', 'text': 'x'}, tool_call_id='1'), run_id='run-1'),
        _request(ToolReturnPart('search', {'id': 'new', 'text': 'y'}, tool_call_id='2'), run_id='run-2'),
        _request(ToolReturnPart('search', {'id': 'unknown-run', 'text': 'z'}, tool_call_id='3')),
    ]
    assert list(retrieved_sources(messages, run_id='run-2')) == ['new', 'unknown-run']
    assert list(retrieved_sources(messages)) == ['old', 'new', 'unknown-run']


def test_same_id_twice_keeps_both_texts():
    messages: list[ModelMessage] = [
        _request(ToolReturnPart('a', [{'id': 'x', 'text': 'first'}, {'id': 'x', 'text': 'second'}], tool_call_id='1'))
    ]
    assert retrieved_sources(messages)['x'].texts == ('first', 'second')


# --- checking -------------------------------------------------------------------------------------------------------


SOURCES = {d['id']: RetrievedSource(d['id'], 'tool_return', texts=(d['text'],)) for d in DOCS}


def test_check_evidence_finds_claims_anywhere():
    @dataclass
    class Wrapper:
        inner: dict[str, list[Evidence]]

    output = Answer(
        summary='s',
        claims=[
            Claim(text='ok', source_ids=['doc-1'], quote='2.1 million inhabitants and the "Louvre"'),
            Claim(text='bad id', source_ids=['doc-1', 'doc-9']),
            Claim(text='bad quote', source_ids=['doc-2'], quote='Lyon is known for its wine'),
            Claim(text='case', source_ids=['doc-2'], quote='lyon is known'),
            Claim(text='none', source_ids=[]),
            Claim(text='quote in other source', source_ids=['doc-2'], quote='Paris has'),
        ],
    )
    failures = check_evidence([output, Wrapper({'k': [Evidence(source_id='zzz', quote='q')]})], SOURCES)
    assert [(f.code, f.path, f.value) for f in failures] == [
        ('unknown_source_id', (0, 'claims', 1, 'source_ids', 1), 'doc-9'),
        ('quote_not_found', (0, 'claims', 2, 'quote'), 'Lyon is known for its wine'),
        ('quote_not_found', (0, 'claims', 3, 'quote'), 'lyon is known'),
        ('unknown_source_id', (0, 'claims', 4, 'source_ids'), ''),
        ('quote_not_found', (0, 'claims', 5, 'quote'), 'Paris has'),
        ('unknown_source_id', (1, 'inner', 'k', 0, 'source_id'), 'zzz'),
    ]
    relaxed = check_evidence(output, SOURCES, check_quotes=False, require_sources=False)
    assert [(f.path, f.value) for f in relaxed] == [(('claims', 1, 'source_ids', 1), 'doc-9')]
    problem = failures[0].to_problem()
    assert problem.code == 'unknown_source_id'
    assert problem.detail == '[0].claims[1].source_ids[1]: doc-9'


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_passage_of_a_source_is_found_after_whitespace_and_quote_changes(data: st.DataObject):
    text = data.draw(st.text(min_size=1, max_size=60))
    a = data.draw(st.integers(0, len(text) - 1))
    b = data.draw(st.integers(a + 1, len(text)))
    quote = text[a:b].replace(' ', '\u00a0').replace('"', '”')
    sources = {'s': RetrievedSource('s', 'tool_return', texts=(text,))}
    failures = check_evidence(Claim(text='c', source_ids=['s'], quote=quote), sources)
    if normalize_quote(quote):
        assert failures == [] or normalize_quote(quote) not in normalize_quote(text)
    # never crashes on arbitrary ids and quotes
    check_evidence(Evidence(source_id=data.draw(st.text(max_size=5)), quote=data.draw(st.text(max_size=5))), sources)


# --- through the agent ----------------------------------------------------------------------------------------------


def _search_then_answer(answers: list[dict[str, Any]], seen_retries: list[str]):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart('search', {'query': 'cities'}, tool_call_id='s1')])
        retry = next((p for p in last.parts if isinstance(p, ToolReturnPart) and p.outcome == 'retried'), None)
        if retry is not None:
            seen_retries.append(str(retry.content))
        index = min(len(seen_retries), len(answers) - 1)
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, answers[index], tool_call_id=f'o{len(messages)}')]
        )

    return model


def _agent(model: FunctionModel, **kwargs: Any) -> Agent[None, Answer]:
    agent = Agent(model, output_type=Answer, **kwargs)

    @agent.tool_plain
    def search(query: str) -> list[dict[str, str]]:  # pyright: ignore[reportUnusedFunction]
        return DOCS

    return agent


GOOD = {
    'summary': 's',
    'claims': [{'text': 'Paris is big', 'source_ids': ['doc-1'], 'quote': '2.1 million inhabitants'}],
}
BAD_ID = {'summary': 's', 'claims': [{'text': 'Paris is big', 'source_ids': ['doc-9']}]}
BAD_QUOTE = {'summary': 's', 'claims': [{'text': 'Paris', 'source_ids': ['doc-1'], 'quote': '3 million people'}]}


@pytest.mark.anyio
async def test_unknown_id_is_retried_with_valid_ids_then_accepted():
    retries: list[str] = []
    track = TrackCitations()
    agent = _agent(FunctionModel(_search_then_answer([BAD_ID, GOOD], retries)), capabilities=[VerifyEvidence(), track])
    result = await agent.run('q')
    assert result.output.claims[0].source_ids == ['doc-1']
    assert len(retries) == 1
    assert "claims[0].source_ids[0]: 'doc-9' is not the id of a source retrieved" in retries[0]
    assert "Valid source ids: 'doc-1', 'doc-2'." in retries[0]
    assert [p.code for p in track.report(result).problems] == ['unknown_source_id']


@pytest.mark.anyio
async def test_quote_not_found_is_retried():
    retries: list[str] = []
    agent = _agent(FunctionModel(_search_then_answer([BAD_QUOTE, GOOD], retries)), capabilities=[VerifyEvidence()])
    await agent.run('q')
    assert "the quote '3 million people' does not appear word for word in 'doc-1'" in retries[0]


@pytest.mark.anyio
async def test_retries_exhausted_error_names_the_ids():
    retries: list[str] = []
    agent = _agent(FunctionModel(_search_then_answer([BAD_ID], retries)), capabilities=[VerifyEvidence()])
    with pytest.raises(UnverifiedEvidenceError, match="'doc-9' is not the id of a source") as exc_info:
        await agent.run('q')
    assert [f.value for f in exc_info.value.failures] == ['doc-9']
    assert len(retries) == 1  # one retry (the default output_retries), then the clear error


@pytest.mark.anyio
async def test_no_sources_retrieved_says_so():
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, GOOD)])

    agent = Agent(FunctionModel(model), output_type=Answer, capabilities=[VerifyEvidence()], retries=0)
    with pytest.raises(UnverifiedEvidenceError, match="'doc-1' is not the id"):
        await agent.run('q')


@pytest.mark.anyio
async def test_extra_sources_and_options():
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, GOOD)])

    agent = Agent(
        FunctionModel(model),
        output_type=Answer,
        capabilities=[VerifyEvidence(extra_sources={'doc-1': 'Paris has 2.1 million inhabitants.'})],
    )
    assert (await agent.run('q')).output.claims[0].quote == '2.1 million inhabitants'


@pytest.mark.anyio
async def test_previous_runs_sources_do_not_count():
    retries: list[str] = []
    agent = _agent(FunctionModel(_search_then_answer([GOOD], retries)), capabilities=[VerifyEvidence()])
    first = await agent.run('q')

    def answer_only(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, GOOD)])

    with pytest.raises(UnverifiedEvidenceError):
        await agent.run('again', message_history=first.all_messages(), model=FunctionModel(answer_only))


@pytest.mark.anyio
async def test_output_validator_function():
    retries: list[str] = []
    agent = _agent(FunctionModel(_search_then_answer([BAD_ID, GOOD], retries)))
    agent.output_validator(verify_evidence)
    result = await agent.run('q')
    assert result.output.claims[0].source_ids == ['doc-1']
    assert 'Valid source ids' in retries[0]


@pytest.mark.anyio
async def test_streamed_partial_outputs_are_not_checked():
    from pydantic_ai.models.function import DeltaToolCall, DeltaToolCalls

    async def stream(messages: list[ModelMessage], info: AgentInfo):
        if len(messages) == 1:
            yield {0: DeltaToolCall(name='search', json_args='{"query": "x"}', tool_call_id='s1')}
            return
        import json

        text = json.dumps(GOOD)
        for i in range(0, len(text), 7):
            delta: DeltaToolCalls = {
                1: DeltaToolCall(name=info.output_tools[0].name if i == 0 else None, json_args=text[i : i + 7])
            }
            yield delta

    agent = _agent(FunctionModel(stream_function=stream), capabilities=[VerifyEvidence()])
    async with agent.run_stream('q') as run:
        output = await run.get_output()
    assert output.claims[0].source_ids == ['doc-1']


def test_evidence_quotes_depth_and_error_pickle():
    import pickle

    assert check_evidence(Evidence(source_id='doc-2', quote='known for'), SOURCES) == []
    failures = check_evidence({'e': Evidence(source_id='doc-2', quote='unknown')}, SOURCES)
    assert [(f.code, f.path) for f in failures] == [('quote_not_found', ('e', 'quote'))]
    assert check_evidence(Claim(text='c', source_ids=['doc-1'], quote='  '), SOURCES) == []
    deep: Any = Claim(text='c', source_ids=['nope'])
    for _ in range(100):
        deep = [deep]
    (failure,) = check_evidence(deep, SOURCES)  # checked at any depth (a limit let it pass unchecked)
    assert failure.code == 'unknown_source_id' and failure.path[-2:] == ('source_ids', 0)
    error = pickle.loads(pickle.dumps(UnverifiedEvidenceError('m', failures)))
    assert (error.message, error.failures) == ('m', failures)


def test_sources_from_deep_or_odd_tool_returns():
    deep: Any = {'id': 'bottom', 'text': 't'}
    for _ in range(20):
        deep = {'wrap': deep}
    messages: list[ModelMessage] = [
        _request(
            ToolReturnPart('deep', deep, tool_call_id='1'),
            ToolReturnPart('bad-json', '[{"id": ', tool_call_id='2'),
            ToolReturnPart('empty', [{'id': 'e', 'text': ''}], tool_call_id='3'),
        )
    ]
    sources = retrieved_sources(messages)
    assert sources['bottom'].texts == ('t',)  # found at any depth
    assert sources['e'].texts == ()


def test_deep_and_self_holding_structures_are_walked_in_linear_time():
    """Claims and sources at any depth are checked and found (a depth limit let a claim 24 levels down pass
    unchecked, and missed a source 13 levels down in a tool return); a structure that holds itself ends; 4x the
    depth costs about 4x the time (paths are built only for what is reported)."""
    import time

    loop: dict[str, Any] = {'id': 'kb-1', 'text': 'Pydantic validates data.'}
    loop['self'] = loop
    listed: list[Any] = [{'id': 'kb-2', 'text': 'x'}]
    listed.append(listed)
    sources = retrieved_sources([_request(ToolReturnPart('t', [loop, listed], tool_call_id='1'))])
    assert set(sources) == {'kb-1', 'kb-2'}

    def nested(depth: int) -> tuple[Any, list[ModelMessage]]:
        output: Any = Claim(text='c', source_ids=['kb-9', 'made-up'])
        found: Any = {'id': 'kb-9', 'text': 'c'}
        for _ in range(depth):
            output, found = [output], {'wrap': found}
        return output, [_request(ToolReturnPart('t', found, tool_call_id='1'))]

    output, messages = nested(30)
    (failure,) = check_evidence(output, retrieved_sources(messages))
    assert failure.value == 'made-up' and len(failure.path) == 32

    def cost(depth: int) -> float:
        output, messages = nested(depth)
        start = time.process_time()
        check_evidence(output, retrieved_sources(messages))
        return time.process_time() - start

    cost(2_000)
    assert cost(20_000) <= 8 * cost(5_000) + 0.05


@pytest.mark.anyio
async def test_a_deeply_nested_made_up_source_is_rejected_in_a_run():
    class Section(BaseModel):
        claims: list[Claim] = []
        sections: list[Section] = []

    section = Section(claims=[Claim(text='K2 is tall.', source_ids=['invented'])])
    for _ in range(30):
        section = Section(sections=[section])
    payload = section.model_dump_json()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, payload, tool_call_id='out')])

    agent = Agent(FunctionModel(model), output_type=Section, capabilities=[VerifyEvidence()], retries=0)
    with pytest.raises(UnverifiedEvidenceError, match='invented'):
        await agent.run('q')
