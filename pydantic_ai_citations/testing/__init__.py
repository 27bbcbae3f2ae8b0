"""Testing helpers: scripted citing models, replay of real recordings, and a pytest plugin.

- `CitingModel`: a scripted `Model` that answers with citations the way a named provider does.
- `replay_recording` / `load_recording`: Pydantic AI's real model classes answered offline from recordings.
- The pytest plugin (loaded automatically): the `track_citations` fixture and the failure-path scenarios.
- `check_seams` / `assert_seams`: the package's promises (clean, honest about completeness, nothing lost) checked on
  every path that produces or shows an answer, for a recording or a model of yours.
- `assert_cites`, `assert_no_raw_markup`, `assert_complete`, `assert_no_lost_citations`, `assert_clean_output`:
  assertions for your agent's tests, on a run's result or a `CitedAnswer`.

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
    from ._assertions import (
        AnswerSubject,
        WireSubject,
        assert_cites,
        assert_clean_output,
        assert_complete,
        assert_no_lost_citations,
        assert_no_raw_markup,
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
    from ._seams import (
        SEAM_PATHS,
        SEAM_PROPERTIES,
        SeamFailure,
        SeamPath,
        SeamProperty,
        SeamReport,
        SeamsBroken,
        SeamSkip,
        SeamSubject,
        assert_seams,
        check_seams,
        check_seams_sync,
    )

_HOMES = {
    **dict.fromkeys(
        (
            'AnswerSubject',
            'WireSubject',
            'assert_cites',
            'assert_clean_output',
            'assert_complete',
            'assert_no_lost_citations',
            'assert_no_raw_markup',
        ),
        '_assertions',
    ),
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
    **dict.fromkeys(
        (
            'SEAM_PATHS',
            'SEAM_PROPERTIES',
            'SeamFailure',
            'SeamPath',
            'SeamProperty',
            'SeamReport',
            'SeamSkip',
            'SeamSubject',
            'SeamsBroken',
            'assert_seams',
            'check_seams',
            'check_seams_sync',
        ),
        '_seams',
    ),
}

__all__ = (
    'AnswerSubject',
    'WireSubject',
    'assert_cites',
    'assert_clean_output',
    'assert_complete',
    'assert_no_lost_citations',
    'assert_no_raw_markup',
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
    'SEAM_PATHS',
    'SEAM_PROPERTIES',
    'SeamFailure',
    'SeamPath',
    'SeamProperty',
    'SeamReport',
    'SeamSkip',
    'SeamSubject',
    'SeamsBroken',
    'assert_seams',
    'check_seams',
    'check_seams_sync',
)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
