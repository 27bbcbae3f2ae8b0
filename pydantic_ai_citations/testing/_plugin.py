"""pytest plugin (entry point `pytest11`): fixtures for testing agents that cite.

Loaded automatically when the package is installed. Fixtures:

- `track_citations`: a fresh `TrackCitations` capability to add to the agent under test.
- `citing_agent_factory`: **yours to define** in your `conftest.py`: builds your agent around the model and the
  capabilities a failure-path scenario injects (see `CitingAgentFactory`). The plugin's own version fails the test
  with a message saying so.
- `citing_agent_deps`: the `deps` passed to each scenario run; `None` unless you override it.
- `citation_scenarios`: the tuple of failure-path scenarios (`SCENARIOS`).
- `run_citation_scenario`: `await run_citation_scenario(scenario, style)` runs one scenario (a `Scenario` or its id)
  against your factory; a combination the style cannot express is skipped with the reason.

A test that asks for both `citation_scenario` and `citing_style` is parametrised over every scenario and
`CitingModel` style (ids like `no_sources[anthropic]`); one that asks only for `citation_scenario` over every
scenario; one that parametrises `citation_scenario` itself (`@pytest.mark.parametrize(('citation_scenario',
'citing_style'), scenario_params(styles=[...]))`) is left alone. Scenario runs are async: mark the test `@pytest.mark.anyio` (or use your async plugin).

```python
# conftest.py
@pytest.fixture
def citing_agent_factory():
    def make_agent(model, capabilities):
        return Agent(model, instructions='...', tools=[...], capabilities=[*mine, *capabilities])

    return make_agent


# test_citations.py
@pytest.mark.anyio
async def test_citation_failure_paths(run_citation_scenario, citation_scenario, citing_style):
    await run_citation_scenario(citation_scenario, citing_style)
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

# Nothing of the package (nor Pydantic AI) is imported until a fixture is used: this plugin is loaded in every pytest
# session of a project that installs the package (`benchmarks/bench_import.py` holds it to <= 20 ms).
if TYPE_CHECKING:
    from .._track import TrackCitations
    from ._citing_model import CitingStyle
    from ._scenarios import CitingAgentFactory, RunCitationScenario, Scenario, ScenarioResult


_MISSING_FACTORY = (
    'The citation failure-path scenarios need a `citing_agent_factory` fixture. Define it in your conftest.py, '
    'returning a function (model, capabilities) -> Agent that builds your agent with that model and with every '
    'injected capability, for example:\n\n'
    '    @pytest.fixture\n'
    '    def citing_agent_factory():\n'
    '        def make_agent(model, capabilities):\n'
    "            return Agent(model, instructions='...', tools=[...], capabilities=[*mine, *capabilities])\n\n"
    '        return make_agent\n'
)


@pytest.fixture
def track_citations() -> TrackCitations:
    """A fresh `TrackCitations` capability: add it to the agent under test, then call `.report(result)`."""
    from .._track import TrackCitations

    return TrackCitations()


@pytest.fixture
def citing_agent_factory() -> CitingAgentFactory:
    """Override in your conftest.py: `(model, capabilities) -> Agent`. This default fails the test, saying so."""
    pytest.fail(_MISSING_FACTORY, pytrace=False)


@pytest.fixture
def citing_agent_deps() -> object:
    """The `deps` each scenario run passes to your agent. Default `None`; override it when your agent needs deps."""
    return None


@pytest.fixture
def citation_scenarios() -> tuple[Scenario, ...]:
    """The failure-path scenarios (`SCENARIOS`)."""
    from ._scenarios import SCENARIOS

    return SCENARIOS


@pytest.fixture
def run_citation_scenario(request: pytest.FixtureRequest) -> RunCitationScenario:
    """An async callable running one scenario (a `Scenario` or its id) on one style against your factory.

    Raises `ScenarioFailed` (an `AssertionError`) with a readable message when a check does not hold; a combination
    the style cannot express is skipped with the reason.
    """
    from ._scenarios import SCENARIOS, ScenarioSkipped

    async def run(scenario: Scenario | str, style: CitingStyle = 'anthropic') -> ScenarioResult:
        __tracebackhide__ = True  # the scenario's own message says what failed
        if isinstance(scenario, str):
            known = {s.id: s for s in SCENARIOS}
            if scenario not in known:
                pytest.fail(f'Unknown citation scenario {scenario!r}; known ids: {", ".join(known)}.', pytrace=False)
            scenario = known[scenario]
        # Looked up only when a scenario runs, so a missing factory fails this test with the message above.
        factory: CitingAgentFactory = request.getfixturevalue('citing_agent_factory')
        deps: object = request.getfixturevalue('citing_agent_deps')
        try:
            return await scenario.run(factory, style, deps=deps)
        except ScenarioSkipped as skip:
            pytest.skip(skip.reason)

    return run


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise tests asking for `citation_scenario` (and `citing_style`) over the scenarios (and styles)."""
    names = metafunc.fixturenames
    if 'citation_scenario' not in names:
        return
    own: set[str] = set()  # what the test parametrises itself
    for marker in metafunc.definition.iter_markers('parametrize'):
        argnames = marker.args[0] if marker.args else marker.kwargs.get('argnames', ())
        own.update(argnames.replace(' ', '').split(',') if isinstance(argnames, str) else argnames)
    if 'citation_scenario' in own:
        return  # (e.g. with `scenario_params(...)`)
    from ._citing_model import CITING_STYLES
    from ._scenarios import SCENARIOS, scenario_params

    if 'citing_style' in names and 'citing_style' not in own:
        metafunc.parametrize(('citation_scenario', 'citing_style'), scenario_params(styles=CITING_STYLES))
    else:  # (styles the test chose itself: a combination a style cannot express is skipped when it runs)
        metafunc.parametrize('citation_scenario', [pytest.param(s, id=s.id) for s in SCENARIOS])
