"""Run the citation failure-path scenarios against *your* agent: copy this file into your tests.

The pytest plugin `pydantic-ai-citations` registers gives the fixtures; you give one, `citing_agent_factory`, that
builds your agent (instructions, tools, deps, your own capabilities) around the model and the capabilities each
scenario injects. Put the factory fixture in your `conftest.py`; it is here so the file runs on its own:

    pytest examples/failure_paths_test.py

The one test below is parametrised by the plugin over every scenario and every `CitingModel` provider style (ids like
`test_citation_failure_paths[no_sources[anthropic]]`); combinations a style cannot express are skipped with the
reason. A failing scenario says what must hold, what was expected, what happened, and usually why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model

# Once exported: `from pydantic_ai_citations.testing import CitingStyle, Scenario, run_scenarios, ...`.
from pydantic_ai_citations.testing import CitingAgentFactory, CitingStyle, RunCitationScenario, Scenario, run_scenarios


# --- your agent -----------------------------------------------------------------------------------------------------
@dataclass
class TravelDeps:
    traveller: str


def city_facts(city: str) -> str:
    """Look up facts about a city."""
    return f'{city}: capital, about 2.1 million residents.'


def build_agent(model: Model, capabilities: Sequence[AbstractCapability[object]] = ()) -> Agent[TravelDeps, str]:
    """How the application builds its agent; the scenarios pass a scripted model and extra capabilities."""
    agent = Agent(
        model,
        deps_type=TravelDeps,
        tools=[city_facts],
        capabilities=[*capabilities],  # your own capabilities go here too: [*mine, *capabilities]
    )

    @agent.instructions
    def greet(ctx: RunContext[TravelDeps]) -> str:
        return f'You help {ctx.deps.traveller} plan trips. Answer briefly and cite your sources.'

    return agent


# --- conftest.py ----------------------------------------------------------------------------------------------------
@pytest.fixture
def citing_agent_factory() -> CitingAgentFactory:
    return build_agent


@pytest.fixture
def citing_agent_deps() -> TravelDeps:
    return TravelDeps(traveller='Ada')


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


# --- the tests ------------------------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_citation_failure_paths(
    run_citation_scenario: RunCitationScenario, citation_scenario: Scenario, citing_style: CitingStyle
):
    result = await run_citation_scenario(citation_scenario, citing_style)
    assert result.outcome == 'passed'


@pytest.mark.anyio
async def test_all_scenarios_without_the_plugin():
    # The same suite as a plain coroutine: runs everything, then raises one ScenarioFailed listing every failure.
    results = await run_scenarios(build_agent, styles=['anthropic', 'openrouter'], deps=TravelDeps('Ada'))
    assert {r.outcome for r in results} <= {'passed', 'skipped'}
