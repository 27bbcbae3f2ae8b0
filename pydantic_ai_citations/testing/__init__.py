"""Testing helpers: scripted citing models, replay of real recordings, and a pytest plugin.

- `CitingModel`: a scripted `Model` that answers with citations the way a named provider does.
- `replay_recording` / `load_recording`: Pydantic AI's real model classes answered offline from recordings.
- The pytest plugin (loaded automatically): the `track_citations` fixture and the failure-path scenarios.

Each name is imported from its module on first use: the plugin is loaded by every pytest session of a project that
installs the package, and must cost nothing there until used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
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

_HOMES = {
    **dict.fromkeys(
        ('CITING_STYLES', 'CitingModel', 'CitingStyle', 'ScriptedCitation', 'ScriptedStreamError'), '_citing_model'
    ),
    **dict.fromkeys(
        (
            'RawResponse',
            'Recording',
            'RecordingApi',
            'RecordingError',
            'RecordingLayout',
            'load_recording',
            'replay_recording',
        ),
        '._replay',
    ),
    **dict.fromkeys(
        (
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
        ),
        '_scenarios',
    ),
}

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

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
