"""Testing helpers: scripted citing models, replay of real recordings, and a pytest plugin.

- `CitingModel`: a scripted `Model` that answers with citations the way a named provider does.
- `replay_recording` / `load_recording`: Pydantic AI's real model classes answered offline from recordings.
- The pytest plugin (loaded automatically): the `track_citations` fixture and the failure-path scenarios.
"""

from .._replay import (
    RawResponse,
    Recording,
    RecordingApi,
    RecordingError,
    RecordingLayout,
    load_recording,
    replay_recording,
)
from ._citing_model import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation, ScriptedStreamError
from ._scenarios import (
    SCENARIOS,
    CitingAgentFactory,
    RunCitationScenario,
    Scenario,
    ScenarioFailed,
    ScenarioOutcome,
    ScenarioResult,
    ScenarioSkipped,
    run_scenarios,
    scenario_params,
)

__all__ = (
    'CITING_STYLES',
    'SCENARIOS',
    'CitingAgentFactory',
    'RunCitationScenario',
    'Scenario',
    'ScenarioFailed',
    'ScenarioOutcome',
    'ScenarioResult',
    'ScenarioSkipped',
    'run_scenarios',
    'scenario_params',
    'CitingModel',
    'CitingStyle',
    'RawResponse',
    'Recording',
    'RecordingApi',
    'RecordingError',
    'RecordingLayout',
    'ScriptedCitation',
    'ScriptedStreamError',
    'load_recording',
    'replay_recording',
)
