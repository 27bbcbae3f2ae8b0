"""`StripCitationMarkup`, the markup scanner and `check_output_mode`, through `Agent` + `FunctionModel`."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, cast

import pytest
from inline_snapshot import snapshot
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput, PromptedOutput, ToolOutput
from pydantic_ai.capabilities import Citations
from pydantic_ai.exceptions import UnexpectedModelBehavior, UserError

# `RetryPromptPart` is deprecated in Pydantic AI but still what older supported versions send for an output retry.
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import (
    CitationMarkupError,
    CitationProblem,
    CitationsDisabledWarning,
    RemovedMarkup,
    StripCitationMarkup,
    TrackCitations,
    removed_markup,
)
from pydantic_ai_citations._json_markup import (
    clean_partial_output,
    format_path,
    removed_markup_ta,
    strip_json_markup,
)
from pydantic_ai_citations.formats.markup import scan_markup, strip_markup

# Built from parts: an opening cite tag written literally is easy to mangle in editors and tooling.
CITE = '\x3ccite'
OPEN = CITE + ' index="0-1">'
CLOSE = '</cite>'
OAI = '\ue200cite\ue202turn0search1\ue202turn0file2\ue201'
BRACKET = '【4:0†source】'


# --- the scanner on strings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('text', 'expected'),
    [
        pytest.param(f'Paris {OPEN}is big{CLOSE}.', 'Paris is big.', id='cite-tag-keeps-text'),
        pytest.param(f'Paris is big {OAI}.', 'Paris is big.', id='openai-marker-before-period'),
        pytest.param(f'Paris is big.{OAI} Next.', 'Paris is big. Next.', id='openai-marker-after-period'),
        pytest.param(f'Paris is big {OAI} and old', 'Paris is big and old', id='openai-marker-between-words'),
        pytest.param(f'Paris is big {BRACKET}.', 'Paris is big.', id='bracket-marker'),
        pytest.param('【重要】 CJK brackets stay', '【重要】 CJK brackets stay', id='cjk-brackets-not-markup'),
        pytest.param(f'a {OAI}{BRACKET}, b', 'a, b', id='adjacent-markers'),
        pytest.param(f'{OPEN}Paris is big {OAI}{CLOSE}.', 'Paris is big.', id='marker-inside-cite'),
        pytest.param('(cite index="2">old form</cite>', 'old form', id='paren-open-form'),
        pytest.param(f'x\n{OAI}\ny', 'x\n\ny', id='newline-kept'),
        pytest.param(f'{OAI}start', 'start', id='at-start'),
    ],
)
def test_strip_text(text: str, expected: str):
    assert strip_markup(text).text == expected


def test_scan_reports_ids_and_offsets():
    text = f'A {OPEN}b{CLOSE} c {OAI} d\ue200cite\ue202turn1news3\ue202L10-L12\ue201 {BRACKET}'
    scan = scan_markup(text)
    assert [(m.kind, text[m.start : m.end], m.source_ids) for m in scan.matches] == [
        ('cite_tag', f'{OPEN}b{CLOSE}', ('0-1',)),
        ('openai_marker', OAI, ('turn0search1', 'turn0file2')),
        ('openai_marker', '\ue200cite\ue202turn1news3\ue202L10-L12\ue201', ('turn1news3',)),
        ('bracket_marker', BRACKET, ('4:0',)),
    ]
    assert scan.issues == ()
    assert text[scan.matches[0].kept_start : scan.matches[0].kept_end] == 'b'


def test_cite_index_lists_several_ids():
    scan = scan_markup(CITE + ' index="0-1, 2-3">x' + CLOSE)
    assert scan.matches[0].source_ids == ('0-1', '2-3')
    assert scan_markup(CITE + '>x' + CLOSE).matches[0].source_ids == ()


@pytest.mark.parametrize(
    ('text', 'codes', 'clean'),
    [
        pytest.param(CITE + ' index="1">text', ['unterminated_marker'], 'text', id='cite-unterminated'),
        pytest.param('(cite index="1">text', ['unterminated_marker'], 'text', id='paren-cite-unterminated'),
        pytest.param('see \ue200cite\ue202turn0', ['unterminated_marker'], 'see', id='openai-unterminated'),
        pytest.param('see 【4:0†source', ['unterminated_marker'], 'see', id='bracket-unterminated'),
        pytest.param(f'{OPEN}a {OPEN}b{CLOSE} c{CLOSE}', ['malformed_marker'], 'a b c', id='cite-nested'),
        pytest.param(
            f'{OPEN}a {OPEN}{OPEN}b{CLOSE}{CLOSE} c{CLOSE}', ['malformed_marker'], 'a b c', id='cite-nested-twice'
        ),
        pytest.param(f'text{CLOSE}', ['malformed_marker'], 'text', id='stray-close'),
        pytest.param('text\ue201', ['malformed_marker'], 'text', id='stray-openai-end'),
        pytest.param('\ue200\ue201', ['malformed_marker'], '', id='openai-empty'),
        pytest.param('\ue200cite\ue201', ['malformed_marker'], '', id='openai-no-ids'),
        pytest.param('\ue200cite\ue202a b\ue201', ['malformed_marker'], '', id='openai-bad-id'),
    ],
)
def test_bad_markup_is_reported_and_its_markup_removed(text: str, codes: list[str], clean: str):
    # Was: left exactly as it is. A reader must never see half a cite tag or a private-use character (issue 12), so
    # the markup characters go and the words stay; what was removed is reported.
    stripped = strip_markup(text)
    assert [i.code for i in stripped.scan.issues] == codes
    assert stripped.text == clean
    for issue in stripped.scan.issues:
        assert 0 <= issue.start < issue.end <= len(text)


def test_markup_after_an_unterminated_opening_is_still_markup():
    text = f'{OPEN}a {OPEN}b{CLOSE} end'
    stripped = strip_markup(text)
    assert stripped.text == 'a b end'
    assert [i.code for i in stripped.scan.issues] == ['unterminated_marker']
    text2 = f'\ue200cite\ue202t0 then {OAI}.'
    assert strip_markup(text2).text == ' then.'


@pytest.mark.parametrize(
    'text',
    [
        pytest.param('Always (cite sources) when the error rate is > 5%.', id='paren-prose'),
        pytest.param('We (cite them) all, as 3 > 2.', id='paren-prose-2'),
        pytest.param('Quote <cite the author> below', id='angle-no-attribute-syntax'),
    ],
)
def test_prose_is_not_markup(text: str):
    assert not scan_markup(text).found
    assert strip_markup(text).text == text


@pytest.mark.anyio
@pytest.mark.parametrize('policy', ['strip', 'retry', 'error'])
async def test_prose_in_structured_output_is_not_flagged(policy: Any):
    prose = 'Always (cite sources) when the error rate is > 5%.'
    calls: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'title': prose, 'items': []})])

    agent = Agent(
        FunctionModel(model), output_type=Report, capabilities=[StripCitationMarkup(policy=policy), TrackCitations()]
    )
    result = await agent.run('q')
    assert result.output.title == prose
    assert calls == [1]  # no retry burnt
    assert problems_of(agent, result) == []  # nothing recorded


def test_paren_cite_tag_removed_whole():
    # The guard removed it whole while history cleaning left the opening tag; one grammar now decides for both.
    stripped = strip_markup('(cite index="0-1">x</cite> and more')
    assert stripped.text == 'x and more'
    assert [(m.kind, m.source_ids) for m in stripped.scan.matches] == [('cite_tag', ('0-1',))]


# --- JSON values ----------------------------------------------------------------------------------------------------


def test_strip_json_paths_and_keys_left_alone():
    value: Any = {
        'title': f'Paris {OPEN}is big{CLOSE}',
        'items': [{'body': 'one'}, {'body': 'two'}, {'body': f'three {OAI}.', 'n': 3}],
        f'key{OAI}': 'value',
        'flag': True,
        'none': None,
    }
    result = strip_json_markup(value)
    assert result.value == {
        'title': 'Paris is big',
        'items': [{'body': 'one'}, {'body': 'two'}, {'body': 'three.', 'n': 3}],
        f'key{OAI}': 'value',
        'flag': True,
        'none': None,
    }
    assert [(r.path, r.kind, r.source_ids, r.kept) for r in result.removed] == [
        (('title',), 'cite_tag', ('0-1',), 'is big'),
        (('items', 2, 'body'), 'openai_marker', ('turn0search1', 'turn0file2'), ''),
    ]
    assert [p.code for p in result.problems] == ['malformed_marker']
    assert 'keys are never rewritten' in result.problems[0].message
    assert [format_path(p) for p in result.fields] == ['title', 'items[2].body', f'key{OAI}']
    assert value['items'][2]['body'] == f'three {OAI}.'  # input not mutated
    untouched: Any = {'a': [1, {'b': 'plain'}]}
    assert strip_json_markup(untouched).value is untouched


def test_markup_split_across_keys_is_reported():
    result = strip_json_markup({'a': f'{OPEN}first half', 'b': f'second half{CLOSE}'})
    assert result.value == {'a': 'first half', 'b': 'second half'}
    assert result.changed
    assert [(p.code, path) for p, path in zip(result.problems, result.problem_paths, strict=True)] == [
        ('unterminated_marker', ('a',)),
        ('malformed_marker', ('b',)),
    ]
    assert 'split across fields a and b' in result.problems[1].message
    oai = strip_json_markup({'a': 'x \ue200cite\ue202turn0', 'b': '\ue201 y'})
    assert oai.value == {'a': 'x', 'b': ' y'}
    assert [p.code for p in oai.problems] == ['unterminated_marker', 'malformed_marker']
    assert 'split across fields' in oai.problems[1].message


def test_format_path():
    assert format_path(()) == '<root>'
    assert format_path(('items', 2, 'body')) == 'items[2].body'
    assert format_path((0, 'a')) == '[0].a'


def test_removed_markup_json_round_trip():
    removed = [RemovedMarkup(('a', 1), OAI, ('t0',), 'openai_marker', start=0, end=5, target='output', tool_name='x')]
    assert removed_markup_ta.validate_json(removed_markup_ta.dump_json(removed)) == removed


def test_policy_is_checked():
    with pytest.raises(UserError, match="policy='drop'"):
        StripCitationMarkup(policy='drop')  # pyright: ignore[reportArgumentType]


# --- through the agent ----------------------------------------------------------------------------------------------


class Item(BaseModel):
    body: str


class Report(BaseModel):
    title: str
    items: list[Item]


def _tool_then_text(args: dict[str, Any] | str):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart('lookup', args, tool_call_id='call_1')])
        return ModelResponse(parts=[TextPart('done')])

    return model


def _agent_with_tool(model: FunctionModel, cap: StripCitationMarkup, seen: list[str]) -> Agent[None, str]:
    agent = Agent(model, capabilities=[cap, TrackCitations()])

    @agent.tool_plain
    def lookup(query: str) -> str:  # pyright: ignore[reportUnusedFunction]
        seen.append(query)
        return 'ok'

    return agent


@pytest.mark.anyio
@pytest.mark.parametrize('as_json', [False, True], ids=['dict-args', 'json-args'])
async def test_tool_args_stripped_and_recorded(as_json: bool):
    args: dict[str, Any] = {'query': f'Paris {OPEN}population{CLOSE} {OAI}'}
    seen: list[str] = []
    agent = _agent_with_tool(
        FunctionModel(_tool_then_text(json.dumps(args) if as_json else args)), StripCitationMarkup(), seen
    )
    result = await agent.run('q')
    assert seen == ['Paris population']
    removed = removed_markup(agent, result)
    assert [(r.path, r.kind, r.target, r.tool_name, r.tool_call_id) for r in removed] == [
        (('query',), 'cite_tag', 'tool_args', 'lookup', 'call_1'),
        (('query',), 'openai_marker', 'tool_args', 'lookup', 'call_1'),
    ]
    problems = problems_of(agent, result)
    assert [p.code for p in problems] == ['markup_in_output']
    assert problems[0].detail == 'query'
    assert 'turn0search1' in problems[0].message
    # The history keeps what the model wrote.
    call = result.all_messages()[1].parts[0]
    assert isinstance(call, ToolCallPart)
    assert OAI in call.args_as_json_str()


@pytest.mark.anyio
async def test_invalid_json_args_left_to_pydantic_ai_retry():
    calls: list[str | dict[str, Any] | None] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart('lookup', '{"query": "Paris ' + OAI + '"', tool_call_id='c1')])
        if len(messages) == 3:
            retry = messages[-1].parts[0]
            # Pydantic AI's own invalid-JSON retry: the raw args reached its validator untouched.
            assert isinstance(retry, ToolReturnPart)
            assert retry.outcome == 'retried'
            assert 'json_invalid' in str(retry.content)
            calls.append('retried')
            return ModelResponse(parts=[ToolCallPart('lookup', {'query': 'Paris'}, tool_call_id='c2')])
        return ModelResponse(parts=[TextPart('done')])

    seen: list[str] = []
    agent = _agent_with_tool(FunctionModel(model), StripCitationMarkup(), seen)
    result = await agent.run('q')
    assert calls == ['retried']
    assert seen == ['Paris']
    assert removed_markup(agent, result) == []


@pytest.mark.anyio
async def test_retry_policy_names_fields():
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart('lookup', {'query': f'Paris {OAI}'}, tool_call_id='c1')])
        if len(messages) == 3:
            retry = messages[-1].parts[0]
            assert isinstance(retry, ToolReturnPart)
            assert retry.outcome == 'retried'
            assert isinstance(retry.content, str)
            assert '`query`' in retry.content
            return ModelResponse(parts=[ToolCallPart('lookup', {'query': 'Paris'}, tool_call_id='c2')])
        return ModelResponse(parts=[TextPart('done')])

    seen: list[str] = []
    agent = _agent_with_tool(FunctionModel(model), StripCitationMarkup(policy='retry'), seen)
    result = await agent.run('q')
    assert seen == ['Paris']
    assert removed_markup(agent, result) == []  # nothing was removed: the model resent
    problems = problems_of(agent, result)
    assert [p.code for p in problems] == ['markup_in_output']
    assert 'model asked to retry' in problems[0].message


@pytest.mark.anyio
async def test_error_policy_raises_named_user_error():
    seen: list[str] = []
    args = {'query': f'Paris {OAI}', 'extra': {'note': f'{OPEN}x{CLOSE}'}}
    agent = _agent_with_tool(FunctionModel(_tool_then_text(args)), StripCitationMarkup(policy='error'), seen)
    with pytest.raises(CitationMarkupError) as exc_info:
        await agent.run('q')
    assert isinstance(exc_info.value, UserError)
    assert exc_info.value.fields == ['query', 'extra.note']
    assert '`extra.note`' in str(exc_info.value)
    assert '`query`' in str(exc_info.value)
    assert [r.kind for r in exc_info.value.removed] == ['openai_marker', 'cite_tag']
    assert seen == []


@pytest.mark.anyio
async def test_bad_markup_in_tool_args_reported_and_removed():
    seen: list[str] = []
    args = {'query': f'{OPEN}Paris', 'other': f'{OPEN}a {OPEN}b{CLOSE}{CLOSE}'}
    agent = Agent(FunctionModel(_tool_then_text(args)), capabilities=[StripCitationMarkup(), TrackCitations()])

    @agent.tool_plain
    def lookup(query: str, other: str) -> str:  # pyright: ignore[reportUnusedFunction]
        seen.append(query)
        seen.append(other)
        return 'ok'

    result = await agent.run('q')
    assert seen == ['Paris', 'a b']
    assert sorted(p.code for p in problems_of(agent, result)) == ['malformed_marker', 'unterminated_marker']
    # What went of it is listed too (was: nothing), each with the problem it was reported as.
    removed = removed_markup(agent, result)
    assert [(r.path, r.markup, r.issue) for r in removed] == [
        (('query',), OPEN, 'unterminated_marker'),
        (('other',), f'{OPEN}{OPEN}{CLOSE}{CLOSE}', 'malformed_marker'),
    ]
    assert [r.kept for r in removed] == ['', 'a b']


def problems_of(agent: Agent[Any, Any], result: Any) -> list[CitationProblem]:
    return TrackCitations.of(agent).report(result).problems


def _output_model(args: dict[str, Any]):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args, tool_call_id='out_1')])

    return model


REPORT_ARGS: dict[str, Any] = {
    'title': f'Cities {BRACKET}',
    'items': [{'body': 'one'}, {'body': 'two'}, {'body': f'{OPEN}Paris is big{CLOSE} {OAI}.'}],
}


@pytest.mark.anyio
async def test_tool_output_stripped():
    agent = Agent(
        FunctionModel(_output_model(REPORT_ARGS)),
        output_type=Report,
        capabilities=[StripCitationMarkup(), TrackCitations()],
    )
    result = await agent.run('q')
    assert result.output == Report(
        title='Cities', items=[Item(body='one'), Item(body='two'), Item(body='Paris is big.')]
    )
    assert [
        (format_path(r.path), r.markup, r.target, r.tool_call_id) for r in removed_markup(agent, result)
    ] == snapshot(
        [
            ('title', '【4:0†source】', 'output', 'out_1'),
            ('items[2].body', '\x3ccite index="0-1">Paris is big</cite>', 'output', 'out_1'),
            ('items[2].body', '\ue200cite\ue202turn0search1\ue202turn0file2\ue201', 'output', 'out_1'),
        ]
    )
    assert [p.detail for p in problems_of(agent, result)] == ['title', 'items[2].body']


@pytest.mark.anyio
@pytest.mark.parametrize('wrap', [NativeOutput, PromptedOutput], ids=['native', 'prompted'])
async def test_json_text_output_stripped(wrap: Any):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('```json\n' + json.dumps(REPORT_ARGS) + '\n```')])

    agent = Agent(FunctionModel(model), output_type=wrap(Report), capabilities=[StripCitationMarkup()])
    result = await agent.run('q')
    assert result.output.items[2].body == 'Paris is big.'
    assert len(removed_markup(agent, result)) == 3
    assert {r.target for r in removed_markup(agent, result)} == {'output'}


@pytest.mark.anyio
async def test_output_retry_policy():
    attempts: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        attempts.append(len(messages))
        args: dict[str, Any] = REPORT_ARGS if len(attempts) == 1 else {'title': 'Cities', 'items': []}
        if len(attempts) > 1:
            retry = messages[-1].parts[0]
            assert isinstance(retry, ToolReturnPart | RetryPromptPart)  # pyright: ignore[reportDeprecated]
            assert 'items[2].body' in str(retry.content)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args, tool_call_id=f'o{len(attempts)}')])

    agent = Agent(FunctionModel(model), output_type=Report, capabilities=[StripCitationMarkup(policy='retry')])
    result = await agent.run('q')
    assert result.output == Report(title='Cities', items=[])
    assert len(attempts) == 2


@pytest.mark.anyio
async def test_output_checks_can_be_switched_off():
    agent = Agent(
        FunctionModel(_output_model(REPORT_ARGS)), output_type=Report, capabilities=[StripCitationMarkup(output=False)]
    )
    result = await agent.run('q')
    assert result.output.title == f'Cities {BRACKET}'
    seen: list[str] = []
    args = {'query': f'Paris {OAI}'}
    agent2 = _agent_with_tool(FunctionModel(_tool_then_text(args)), StripCitationMarkup(tools=False), seen)
    await agent2.run('q')
    assert seen == [args['query']]


@pytest.mark.anyio
async def test_streamed_output_stripped():
    from pydantic_ai.models.function import DeltaToolCall, DeltaToolCalls

    async def stream(messages: list[ModelMessage], info: AgentInfo):
        text = json.dumps(REPORT_ARGS)
        name = info.output_tools[0].name
        for i in range(0, len(text), 17):
            delta: DeltaToolCalls = {0: DeltaToolCall(name=name if i == 0 else None, json_args=text[i : i + 17])}
            yield delta

    agent = Agent(FunctionModel(stream_function=stream), output_type=Report, capabilities=[StripCitationMarkup()])
    async with agent.run_stream('q') as run:
        output = await run.get_output()
    assert output.items[2].body == 'Paris is big.'
    assert len(removed_markup(agent, run.run_id)) == 3  # partial validations are not recorded


PRIVATE_OR_TAG = re.compile('[\ue200-\ue202]|[<(]cite[^>]*>|</cite>|【[^】]*†')


@pytest.mark.anyio
@pytest.mark.parametrize('step', [3, 7, 17])
@pytest.mark.parametrize('mode', ['tool', 'native'])
async def test_every_streamed_partial_is_clean(step: int, mode: str):
    from pydantic_ai.models.function import DeltaToolCall, DeltaToolCalls

    text = json.dumps(REPORT_ARGS, ensure_ascii=False)

    async def stream(messages: list[ModelMessage], info: AgentInfo):
        for i in range(0, len(text), step):
            if mode == 'tool':
                name = info.output_tools[0].name if i == 0 else None
                delta: DeltaToolCalls = {0: DeltaToolCall(name=name, json_args=text[i : i + step])}
                yield delta
            else:
                yield text[i : i + step]

    output_type: Any = Report if mode == 'tool' else NativeOutput(Report)
    agent = Agent(FunctionModel(stream_function=stream), output_type=output_type, capabilities=[StripCitationMarkup()])
    partials: list[Report] = []
    async with agent.run_stream('q') as run:
        async for partial in run.stream_output(debounce_by=None):
            partials.append(partial)
    assert len(partials) > 3
    # Every partial, not only the last one, is free of markup (most of them used to show it).
    dirty = [p for p in partials if PRIVATE_OR_TAG.search(p.model_dump_json())]
    assert dirty == []
    assert partials[-1].items[2].body == 'Paris is big.'


# --- citations disabled by the output mode --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_disabled_citations_warn_once_per_agent_and_are_recorded():
    modes: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        modes.append(info.model_request_parameters.output_mode)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'title': 't', 'items': []})])

    agent = Agent(
        FunctionModel(model), output_type=Report, capabilities=[Citations(), StripCitationMarkup(), TrackCitations()]
    )
    with pytest.warns(CitationsDisabledWarning, match='verify_claims') as caught:
        first = await agent.run('q')
    assert len(caught) == 1
    second = await agent.run('q')  # no second warning (warnings are errors in this suite)
    for result in (first, second):
        problems = [p for p in problems_of(agent, result) if p.code == 'citations_disabled_by_output_mode']
        assert len(problems) == 1
        assert 'VerifyEvidence' in problems[0].message
    assert modes == ['tool', 'tool']


@pytest.mark.anyio
async def test_disabled_by_setting_and_by_tool_output():
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'title': 't', 'items': []})])

    agent = Agent(
        FunctionModel(model),
        output_type=ToolOutput(Report),
        model_settings={'citations': True},
        capabilities=[StripCitationMarkup()],
    )
    with pytest.warns(CitationsDisabledWarning):
        await agent.run('q')


@pytest.mark.anyio
async def test_no_warning_when_text_or_not_asked_or_overridden():
    def text_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('plain')])

    agent = Agent(FunctionModel(text_model), capabilities=[Citations(), StripCitationMarkup(), TrackCitations()])
    result = await agent.run('q')
    assert problems_of(agent, result) == []

    structured = Agent(FunctionModel(_output_model({'title': 't', 'items': []})), output_type=Report)
    track = TrackCitations()
    result = await structured.run('q', capabilities=[StripCitationMarkup(), track])
    assert track.report(result).problems == []

    overridden = Agent(
        FunctionModel(_output_model({'title': 't', 'items': []})),
        output_type=Report,
        capabilities=[Citations(), StripCitationMarkup(), TrackCitations()],
    )
    result = await overridden.run('q', model_settings={'citations': False})
    assert problems_of(overridden, result) == []

    quiet = Agent(
        FunctionModel(_output_model({'title': 't', 'items': []})),
        output_type=Report,
        capabilities=[Citations(), StripCitationMarkup(warn_when_disabled=False)],
    )
    await quiet.run('q')  # no warning (warnings are errors in this suite)


@pytest.mark.anyio
async def test_check_output_mode_callable_from_another_capability():
    from dataclasses import dataclass

    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import RunContext

    from pydantic_ai_citations._guard import check_output_mode

    found: list[str | None] = []

    @dataclass
    class Other(AbstractCapability[object]):
        async def prepare_model_request(
            self, ctx: RunContext[object], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            problem = check_output_mode(ctx, request_context)
            found.append(problem.code if problem else None)
            return request_context

    agent = Agent(
        FunctionModel(_output_model({'title': 't', 'items': []})),
        output_type=PromptedOutput(Report),
        capabilities=[Citations(), Other(), StripCitationMarkup(), TrackCitations()],
    )

    def prompted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('{"title": "t", "items": []}')])

    with pytest.warns(CitationsDisabledWarning):
        result = await agent.run('q', model=FunctionModel(prompted))
    assert found == ['citations_disabled_by_output_mode']
    assert len(problems_of(agent, result)) == 1  # two callers, one problem per run


@pytest.mark.anyio
async def test_retries_exhausted_error_is_pydantic_ais():
    # Under 'retry', a model that never stops writing markup ends in Pydantic AI's own retries-exhausted error.
    seen: list[str] = []
    agent = _agent_with_tool(
        FunctionModel(lambda m, i: ModelResponse(parts=[ToolCallPart('lookup', {'query': f'x {OAI}'})])),
        StripCitationMarkup(policy='retry'),
        seen,
    )
    with pytest.raises(UnexpectedModelBehavior, match='exceeded max retries'):
        await agent.run('q')
    assert seen == []


def test_bracket_unterminated_stops_at_line_end_and_next_bracket():
    scan = scan_markup('a 【1†x\nb 【2†y 【3†z】')
    assert [(i.code, i.start, i.end) for i in scan.issues] == [
        ('unterminated_marker', 2, 6),
        ('unterminated_marker', 9, 14),
    ]
    assert [m.source_ids for m in scan.matches] == [('3',)]


def test_raw_args_shapes():
    from pydantic_ai_citations._json_markup import strip_raw_markup

    array = json.dumps([f'x {OAI}.'])  # JSON that is not an object, not fenced
    new, result = strip_raw_markup(array)
    assert new == '["x."]'
    assert result is not None
    assert result.removed[0].path == (0,)
    fenced = '```\n{"a": "x ' + OAI.replace('\ue200', '\\ue200') + '"}\n```'
    stripped = strip_raw_markup(fenced)[0]
    assert isinstance(stripped, str)
    assert json.loads(stripped) == {'a': 'x'}
    no_markup = '{"a": "cite me"}'
    assert strip_raw_markup(no_markup) == (no_markup, strip_json_markup({'a': 'cite me'}))
    deep = '[' * 100_000 + ']' * 100_000  # deeper than Python's recursion limit: left for Pydantic AI
    assert strip_raw_markup('\\u' + deep)[0] == '\\u' + deep


def test_errors_pickle():
    import pickle

    error = CitationMarkupError('m', fields=['a'], removed=[], problems=[])
    again = pickle.loads(pickle.dumps(error))
    assert (again.message, again.fields) == ('m', ['a'])


@pytest.mark.anyio
async def test_retry_policy_counts_malformed_markup_and_partial_outputs_are_cleaned():
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.output import OutputContext
    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RunUsage

    cap = StripCitationMarkup(policy='retry')
    octx = OutputContext(mode='tool', output_type=Report, object_def=None, has_function=False)
    ctx = RunContext[object](deps=None, model=TestModel(), usage=RunUsage(), run_id=None)
    with pytest.raises(ModelRetry, match='`a`'):
        await cap.before_output_validate(ctx, output_context=octx, output={'a': f'{OPEN}unclosed'})
    partial = RunContext[object](deps=None, model=TestModel(), usage=RunUsage(), partial_output=True)
    raw = {'a': f'x {OAI}'}
    # Partials are cleaned for display whatever the policy; the policy applies to the complete output.
    assert await cap.before_output_validate(partial, output_context=octx, output=raw) == {'a': 'x'}
    strip = StripCitationMarkup()
    assert await strip.before_output_validate(partial, output_context=octx, output=raw) == {'a': 'x'}
    assert await strip.before_output_validate(ctx, output_context=octx, output='{"a": "plain"}') == '{"a": "plain"}'


def test_markup_after_an_unterminated_marker_is_removed_too():
    # Was: everything after an unterminated marker left as it is; the markup in it is markup all the same.
    text = f'\ue200cite\ue202x {BRACKET} {OPEN}y{CLOSE}'
    stripped = strip_markup(text)
    assert stripped.text == ' y'
    assert [i.code for i in stripped.scan.issues] == ['unterminated_marker']
    assert [m.kind for m in stripped.scan.matches] == ['bracket_marker', 'cite_tag']


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = {'a': value}
    return value


def test_raw_values_too_deep_to_walk_are_left_for_pydantic_ai(monkeypatch: pytest.MonkeyPatch):
    from pydantic_ai_citations import _json_markup

    deep_dict = cast(dict[str, object], _nested(sys.getrecursionlimit() + 10, 'x ' + OAI))
    assert _json_markup.strip_raw_markup(deep_dict) == (deep_dict, None)
    assert clean_partial_output(deep_dict) is deep_dict

    # JSON text that parses but whose walk runs out of stack (the parser and the walk need about the same depth, so
    # the walk is made to fail here): the text is left as it is for Pydantic AI's own validation.
    def too_deep(value: object) -> object:
        raise RecursionError

    monkeypatch.setattr(_json_markup, 'strip_json_markup', too_deep)
    text = '{"a": "x ' + OAI.replace('\ue200', '\\ue200') + '"}'
    assert _json_markup.strip_raw_markup(text) == (text, None)


def test_clean_partial_output_shapes():
    assert clean_partial_output('no markup here') == 'no markup here'
    assert clean_partial_output('cite but no object') == 'cite but no object'
    fenced = 'Here:\n```json\n{"a": "x ' + OAI.replace('\ue200', '\\ue200') + '", "b": "y \\ue200cit'
    assert json.loads(cast(str, clean_partial_output(fenced))) == {'a': 'x', 'b': 'y'}
    broken = '{"a": "cite", ]'
    assert clean_partial_output(broken) == broken
    assert clean_partial_output({'a': ['x ' + OAI, 3], 'b': None}) == {'a': ['x', 3], 'b': None}


@pytest.mark.parametrize(
    ('text', 'clean'),
    [
        pytest.param('Tall\ue200cite\ue202turn0search0. The summit.', 'Tall. The summit.', id='openai-before-period'),
        pytest.param('Tall\ue200cite\ue202turn0search0: then', 'Tall: then', id='openai-before-colon'),
        pytest.param('Tall\ue200cite\ue202turn0search0.', 'Tall.', id='openai-period-at-end'),
        pytest.param('Tall\ue200cite\ue202turn0.search0 x', 'Tall x', id='openai-dot-inside-an-id'),
        pytest.param('Tall【4:0†source. The summit.', 'Tall. The summit.', id='bracket-before-period'),
        pytest.param('Tall【4:0†a.b c', 'Tall c', id='bracket-dot-inside-title'),
        pytest.param('Tall【4:0†source!? Yes', 'Tall!? Yes', id='bracket-before-two-marks'),
    ],
)
def test_an_unterminated_marker_leaves_the_sentence_punctuation(text: str, clean: str):
    # Was: `.` and `:` may be id characters, and a bracket marker's title any character, so the period that ended
    # the sentence went with the marker ('Tall The summit.').
    stripped = strip_markup(text)
    assert stripped.text == clean
    assert [i.code for i in stripped.scan.issues] == ['unterminated_marker']


@pytest.mark.anyio
async def test_removed_markup_lists_what_went_of_bad_markup_in_text_order():
    # Was: only well-formed markup was listed; without `TrackCitations`, what went of an unterminated or malformed
    # one left no trace.
    body = f'A {CITE} index="1">b {BRACKET} c \ue200cite\ue202turn0search0. D {OAI} e\ue201.'

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, json.dumps({'body': body}))])

    class Out(BaseModel):
        body: str

    agent = Agent(FunctionModel(model), output_type=Out, capabilities=[StripCitationMarkup()])
    result = await agent.run('q')
    assert result.output.body == 'A b c. D e.'
    removed = removed_markup(agent, result)
    assert [(r.markup, r.kind, r.issue) for r in removed] == [
        (f'{CITE} index="1">', 'cite_tag', 'unterminated_marker'),
        (BRACKET, 'bracket_marker', None),
        ('\ue200cite\ue202turn0search0', 'openai_marker', 'unterminated_marker'),
        (OAI, 'openai_marker', None),
        ('\ue201', 'openai_marker', 'malformed_marker'),
    ]
    for r in removed:
        assert body[r.start : r.end] == r.markup
    assert removed_markup_ta.validate_json(removed_markup_ta.dump_json(removed)) == removed
