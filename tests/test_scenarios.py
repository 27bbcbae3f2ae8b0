"""The failure-path scenario suite: passes on a correct agent on every style, fails readably on broken ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CleanStaleCitations, StripCitationMarkup
from pydantic_ai_citations.testing import (
    CITING_STYLES,
    SCENARIOS,
    CitingStyle,
    Scenario,
    ScenarioFailed,
    ScenarioResult,
    ScenarioSkipped,
    run_scenarios,
    scenario_params,
)

pytest_plugins = ['pytester']

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'failure_paths_test.py'
Caps = Sequence[AbstractCapability[object]]


def good_factory(model: Model, capabilities: Caps) -> Agent[None, str]:
    def lookup(city: str) -> str:
        """Facts about a city."""
        return f'{city} facts'

    return Agent(model, instructions='Answer briefly, with sources.', tools=[lookup], capabilities=[*capabilities])


def _failures(results: list[ScenarioResult]) -> dict[str, str]:
    """`scenario id -> the 'expected:' line` of each failed result."""
    out: dict[str, str] = {}
    for r in results:
        if r.outcome == 'failed':
            assert r.message is not None
            line = next(x for x in r.message.splitlines() if x.strip().startswith('expected:'))
            out[r.scenario_id] = line.split('expected:', 1)[1].strip()
    return out


# --- the catalogue --------------------------------------------------------------------------------------------------


def test_catalogue():
    assert [s.id for s in SCENARIOS] == snapshot(
        [
            'no_sources',
            'sources_without_positions',
            'merged_text_parts',
            'stream_cancelled',
            'markup_in_tool_args',
            'structured_output_with_citations',
            'history_to_another_provider',
            'edited_and_resent',
        ]
    )
    for scenario in SCENARIOS:
        assert scenario.title
        assert scenario.what_must_hold.endswith('.')
        with pytest.raises(dataclasses.FrozenInstanceError):
            scenario.id = 'other'  # type: ignore[misc]


def test_scenario_params_ids_and_skips():
    params = scenario_params(styles=['anthropic', 'openrouter'], only=['sources_without_positions', 'no_sources'])
    assert [p.id for p in params] == snapshot(
        [
            'sources_without_positions[anthropic]',
            'sources_without_positions[openrouter]',
            'no_sources[anthropic]',
            'no_sources[openrouter]',
        ]
    )
    skipped = {p.id: [m.kwargs['reason'] for m in p.marks] for p in params if p.marks}
    assert skipped == snapshot(
        {
            'sources_without_positions[anthropic]': [
                "'anthropic' always pins its citations to a position in the text; only OpenRouter (web) and OpenAI Responses (file citations) cite without one"
            ]
        }
    )


def test_bad_arguments():
    with pytest.raises(UserError, match="Unknown citation scenario 'nope'"):
        scenario_params(only=['nope'])
    with pytest.raises(UserError, match="Unknown CitingModel style 'cohere'"):
        scenario_params(styles=['cohere'])  # type: ignore[list-item]


# --- a correct agent passes on every style --------------------------------------------------------------------------


@pytest.mark.parametrize(('scenario', 'style'), scenario_params())
@pytest.mark.anyio
async def test_scenario_passes(scenario: Scenario, style: CitingStyle):
    result = await scenario.run(good_factory, style)
    assert result.outcome == 'passed'
    assert (result.scenario_id, result.style) == (scenario.id, style)
    assert result.checked


@pytest.mark.anyio
async def test_skipped_combination_raises_scenario_skipped():
    scenario = next(s for s in SCENARIOS if s.id == 'merged_text_parts')
    with pytest.raises(ScenarioSkipped, match='no citation positions') as info:
        await scenario.run(good_factory, 'openrouter')
    assert (info.value.scenario_id, info.value.style) == ('merged_text_parts', 'openrouter')


@pytest.mark.anyio
async def test_run_scenarios_over_every_style():
    results = await run_scenarios(good_factory)
    assert len(results) == len(SCENARIOS) * len(CITING_STYLES)
    assert {(r.scenario_id, r.style) for r in results if r.outcome == 'skipped'} == snapshot(
        {
            ('sources_without_positions', 'anthropic'),
            ('sources_without_positions', 'bedrock'),
            ('sources_without_positions', 'openai-chat'),
            ('sources_without_positions', 'google'),
            ('sources_without_positions', 'xai'),
            ('merged_text_parts', 'openrouter'),
        }
    )
    assert {r.outcome for r in results} == {'passed', 'skipped'}
    # What a passing run checked, for one scenario: the list reads as the scenario's contract.
    merged = next(r for r in results if (r.scenario_id, r.style) == ('merged_text_parts', 'anthropic'))
    assert merged.checked == snapshot(
        [
            'the agent sends its requests to the injected model',
            'the injected capabilities run (TrackCitations saw the model request)',
            'the answer is joined from several text parts',
            'result.output equals the CitedAnswer text (citations offsets point into what you show)',
            'one span per cited quote (2)',
            "the content span covers exactly 'Paris is the capital of France'",
            "the content span covers exactly 'about 2.1 million residents'",
            'no problems are reported',
        ]
    )
    assert merged.answer is not None
    assert merged.answer.complete


@pytest.mark.anyio
async def test_deps_reach_the_agent():
    from dataclasses import dataclass

    from pydantic_ai import RunContext

    @dataclass
    class Deps:
        name: str

    def factory(model: Model, capabilities: Caps) -> Agent[Deps, str]:
        agent = Agent(model, deps_type=Deps, capabilities=[*capabilities])

        @agent.instructions
        def who(ctx: RunContext[Deps]) -> str:
            return f'You help {ctx.deps.name}.'

        return agent

    results = await run_scenarios(factory, styles=['google'], deps=Deps('Ada'))
    assert {r.outcome for r in results} == {'passed', 'skipped'}
    with pytest.raises(ScenarioFailed, match='the agent run completes'):
        await SCENARIOS[0].run(factory, 'google')  # no deps: the instructions function fails


# --- broken factories fail the right scenarios, readably ------------------------------------------------------------


@pytest.mark.anyio
async def test_factory_dropping_the_capabilities_fails_every_scenario():
    def factory(model: Model, capabilities: Caps) -> Agent[None, str]:
        return Agent(model)  # forgets `capabilities`

    results = await run_scenarios(factory, styles=['anthropic'], raise_on_failure=False)
    assert _failures(results) == snapshot(
        {
            'no_sources': 'the injected capabilities run (TrackCitations saw the model request)',
            'merged_text_parts': 'the injected capabilities run (TrackCitations saw the model request)',
            'stream_cancelled': 'the injected capabilities run (TrackCitations saw the model request)',
            'markup_in_tool_args': "the injected tool 'citation_scenario_save_note' is offered to the model",
            'structured_output_with_citations': 'the injected capabilities run (TrackCitations saw the model request)',
            'history_to_another_provider': 'the injected capabilities run (TrackCitations saw the model request)',
            'edited_and_resent': 'the injected capabilities run (TrackCitations saw the model request)',
        }
    )
    message = next(r.message for r in results if r.scenario_id == 'no_sources')
    assert message == snapshot("""\
citation scenario 'no_sources' [anthropic] failed: The model answers without citations
  must hold: The answer is complete, equals result.output, has no spans, no unanchored sources and no problems, and renders without a sources list.
  expected:  the injected capabilities run (TrackCitations saw the model request)
  actual:    TrackCitations saw no model request: the injected capabilities were not applied
  hint:      Pass every injected capability to the agent: Agent(model, ..., capabilities=[*yours, *capabilities]) (or agent spec / run-level capabilities that end up on the same run).\
""")


@pytest.mark.parametrize(
    ('dropped', 'failing'),
    [
        pytest.param(
            StripCitationMarkup,
            {'markup_in_tool_args': "the tool receives clean arguments: body='Paris is the capital of France.'"},
            id='without-StripCitationMarkup',
        ),
        pytest.param(
            CleanStaleCitations,
            {
                'history_to_another_provider': "second run: the 'openai-chat' model receives no raw citation markers from 'anthropic'",
                'edited_and_resent': 'find_stale reports stale_after_edit for each of the 2 edited cited part(s)',
            },
            id='without-CleanStaleCitations',
        ),
    ],
)
@pytest.mark.anyio
async def test_factory_dropping_one_capability_fails_its_scenarios(dropped: type, failing: dict[str, str]):
    def factory(model: Model, capabilities: Caps) -> Agent[None, str]:
        return Agent(model, capabilities=[c for c in capabilities if not isinstance(c, dropped)])

    results = await run_scenarios(factory, styles=['anthropic'], raise_on_failure=False)
    assert _failures(results) == failing


@pytest.mark.anyio
async def test_factory_ignoring_the_model_fails_every_scenario():
    def own_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('Paris.')])

    def factory(model: Model, capabilities: Caps) -> Agent[None, str]:
        return Agent(FunctionModel(own_model), capabilities=[*capabilities])

    results = await run_scenarios(
        factory,
        styles=['openai-chat'],
        only=['no_sources', 'stream_cancelled', 'edited_and_resent'],
        raise_on_failure=False,
    )
    assert set(_failures(results).values()) == {'the agent sends its requests to the injected model'}
    assert all('Build the agent with the `model` the factory receives' in (r.message or '') for r in results)


@pytest.mark.anyio
async def test_agent_rewriting_its_output_fails_the_text_scenarios():
    def factory(model: Model, capabilities: Caps) -> Agent[None, str]:
        agent = Agent(model, capabilities=[*capabilities])

        @agent.output_validator
        def shout(output: str) -> str:  # an output step that rewrites the text: offsets now point elsewhere
            return output.upper()

        return agent

    results = await run_scenarios(factory, styles=['google', 'openrouter'], raise_on_failure=False)
    failed = {(r.scenario_id, r.style) for r in results if r.outcome == 'failed'}
    skipped = {r.scenario_id: r.message for r in results if r.outcome == 'skipped' and r.style == 'google'}
    assert skipped == snapshot(
        {
            'sources_without_positions': "'google' always pins its citations to a position in the text; only OpenRouter (web) and OpenAI Responses (file citations) cite without one",
            'structured_output_with_citations': 'a structured run cannot be made from this agent: Cannot set a custom run `output_type` when the agent has output validators',
        }
    )
    assert failed == snapshot(
        {
            ('no_sources', 'google'),
            ('no_sources', 'openrouter'),
            ('sources_without_positions', 'openrouter'),
            ('merged_text_parts', 'google'),
        }
    )
    message = next(r.message for r in results if (r.scenario_id, r.style) == ('merged_text_parts', 'google'))
    assert message is not None
    assert 'expected:  result.output equals the CitedAnswer text' in message
    assert "result.output = 'PARIS IS THE CAPITAL OF FRANCE." in message
    assert "answer.text   = 'Paris is the capital of France." in message


@pytest.mark.anyio
async def test_factory_returning_something_else():
    def factory(model: Model, capabilities: Caps) -> object:
        return model

    with pytest.raises(ScenarioFailed, match='the factory returns a Pydantic AI agent') as info:
        await SCENARIOS[0].run(factory, 'xai')  # type: ignore[arg-type]
    assert isinstance(info.value, AssertionError)
    assert (info.value.scenario_id, info.value.style) == ('no_sources', 'xai')

    def raising(model: Model, capabilities: Caps) -> Agent[None, str]:
        raise RuntimeError('no config')

    with pytest.raises(ScenarioFailed, match='it raised RuntimeError: no config'):
        await SCENARIOS[0].run(raising, 'xai')


@pytest.mark.anyio
async def test_run_scenarios_raises_one_summary():
    def factory(model: Model, capabilities: Caps) -> Agent[None, str]:
        return Agent(model)

    with pytest.raises(ScenarioFailed) as info:
        await run_scenarios(
            factory, styles=['bedrock'], only=['no_sources', 'sources_without_positions', 'edited_and_resent']
        )
    message = str(info.value)
    assert message.startswith('2 of 3 citation scenario runs failed:')
    assert "citation scenario 'no_sources' [bedrock] failed" in message
    assert "citation scenario 'edited_and_resent' [bedrock] failed" in message
    assert info.value.scenario_id == 'no_sources'


# --- the pytest plugin in a user's project --------------------------------------------------------------------------

CONFTEST = """
import pytest
from pydantic_ai import Agent


@pytest.fixture
def anyio_backend():
    return 'asyncio'


@pytest.fixture
def citing_agent_factory():
    def make_agent(model, capabilities):
        return Agent(model, instructions='Answer briefly.', capabilities=[*capabilities])

    return make_agent
"""

USER_TEST = """
import pytest

from pydantic_ai_citations.testing._scenarios import scenario_params


@pytest.mark.anyio
async def test_citation_failure_paths(run_citation_scenario, citation_scenario, citing_style):
    result = await run_citation_scenario(citation_scenario, citing_style)
    assert result.outcome == 'passed'


def test_scenarios_fixture(citation_scenarios):
    assert len(citation_scenarios) == 8


@pytest.mark.anyio
async def test_by_id(run_citation_scenario):
    result = await run_citation_scenario('stream_cancelled', 'google')
    assert result.checked


@pytest.mark.parametrize(('citation_scenario', 'citing_style'), scenario_params(styles=['xai'], only=['no_sources']))
@pytest.mark.anyio
async def test_own_parametrisation(run_citation_scenario, citation_scenario, citing_style):
    await run_citation_scenario(citation_scenario, citing_style)
"""


def test_plugin_in_a_user_project(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_citations=USER_TEST)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-rs')
    result.assert_outcomes(passed=len(SCENARIOS) * len(CITING_STYLES) - 6 + 3, skipped=6)
    result.stdout.fnmatch_lines(["SKIPPED*: 'openrouter' gives no citation positions, so there are no spans to shift"])


def test_plugin_leaves_a_style_the_test_chose_itself(pytester: pytest.Pytester):
    """A test narrowing `citing_style` with its own parametrize, asking for `citation_scenario`: the plugin
    parametrised the style a second time, and the whole session stopped on the collection error."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_google="""
import pytest

@pytest.mark.anyio
@pytest.mark.parametrize('citing_style', ['google', 'openrouter'])
async def test_two_styles(run_citation_scenario, citation_scenario, citing_style):
    await run_citation_scenario(citation_scenario, citing_style)
"""
    )
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-rs')
    skipped = sum(1 for s in SCENARIOS for style in ('google', 'openrouter') if s.skip_reason(style) is not None)
    result.assert_outcomes(passed=2 * len(SCENARIOS) - skipped, skipped=skipped)


def test_plugin_without_a_factory(pytester: pytest.Pytester):
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n")
    pytester.makepyfile(test_citations=USER_TEST)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-k', 'no_sources and anthropic')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ['*The citation failure-path scenarios need a `citing_agent_factory` fixture. Define it in your conftest.py*']
    )


def test_plugin_reports_a_broken_factory(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST.replace('capabilities=[*capabilities]', 'capabilities=[]'))
    pytester.makepyfile(test_citations=USER_TEST)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-k', 'failure_paths and xai')
    result.assert_outcomes(failed=7, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "E *ScenarioFailed: citation scenario 'no_sources' ?xai? failed: The model answers without citations",
            '*expected:  the injected capabilities run (TrackCitations saw the model request)',
        ]
    )


def test_example_runs_as_a_user_test_module(pytester: pytest.Pytester):
    # Another module name than the example's: in-process runs share `sys.modules` with this session.
    pytester.makepyfile(test_copied_failure_paths=EXAMPLE.read_text())
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', 'test_copied_failure_paths.py')
    result.assert_outcomes(passed=len(SCENARIOS) * len(CITING_STYLES) - 6 + 1, skipped=6)


PLUGIN_EDGES_TEST = """
import pytest

from pydantic_ai_citations import TrackCitations


def test_track_citations_fixture(track_citations):
    assert isinstance(track_citations, TrackCitations)


@pytest.mark.anyio
async def test_unknown_id(run_citation_scenario):
    await run_citation_scenario('no_such_scenario')


@pytest.mark.anyio
async def test_skipped_by_id(run_citation_scenario):
    await run_citation_scenario('merged_text_parts', 'openrouter')


@pytest.mark.parametrize('x', [1])
@pytest.mark.anyio
async def test_scenarios_only(run_citation_scenario, citation_scenario, x):
    result = await run_citation_scenario(citation_scenario)
    assert result.outcome == 'passed'
"""


def test_plugin_edges_in_a_user_project(pytester: pytest.Pytester):
    # The fixture handing out a capability, an unknown scenario id, a skip by id, and `citation_scenario` alone
    # (one run per scenario on the default style) next to a parametrisation of another argument.
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_edges=PLUGIN_EDGES_TEST)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-rs')
    # `sources_without_positions` cannot be expressed on the default style (anthropic): skipped with its reason.
    result.assert_outcomes(passed=len(SCENARIOS), failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*Unknown citation scenario 'no_such_scenario'; known ids: no_sources, *",
            "SKIPPED*: 'openrouter' gives no citation positions, so there are no spans to shift",
            "SKIPPED*: 'anthropic' always pins its citations to a position in the text*",
        ]
    )
