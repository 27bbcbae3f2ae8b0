from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from inline_snapshot import snapshot

import pydantic_ai_citations
import pydantic_ai_citations.formats
import pydantic_ai_citations.matrix
import pydantic_ai_citations.support
import pydantic_ai_citations.testing
import pydantic_ai_citations.ui


def test_root_all_is_pinned():
    assert sorted(pydantic_ai_citations.__all__) == snapshot(
        [
            'AnthropicTap',
            'Arrival',
            'CapabilityMatrix',
            'CitationMarkupError',
            'CitationProblem',
            'CitationsDisabledWarning',
            'CitedAnswer',
            'CitedRun',
            'CitedSpan',
            'Claim',
            'ClaimVerification',
            'CleanStaleCitations',
            'CohereTap',
            'Evidence',
            'FinalAnswer',
            'MistralTap',
            'PartArrival',
            'PerplexityTap',
            'PostgresConversationStore',
            'ProblemCode',
            'RawCitation',
            'RemovedMarkup',
            'RequestObservation',
            'SQLiteConversationStore',
            'SourceRef',
            'StoreCorruptionError',
            'StoredAnswer',
            'StripCitationMarkup',
            'TextChunk',
            'TrackCitations',
            'UnverifiedEvidenceError',
            'VerifyEvidence',
            'anthropic_http_client',
            'cohere_http_client',
            'edit_response',
            'edit_text',
            'edit_text_with_problems',
            'find_stale',
            'mistral_http_client',
            'perplexity_http_client',
            'redact',
            'removed_markup',
            'render_html',
            'render_markdown',
            'stream_cited',
            'verify_claims',
            'verify_claims_sync',
        ]
    )


def test_testing_all_is_pinned():
    assert sorted(pydantic_ai_citations.testing.__all__) == snapshot(
        [
            'AnswerSubject',
            'CITING_STYLES',
            'CitingAgentFactory',
            'CitingModel',
            'CitingStyle',
            'RawResponse',
            'Recording',
            'RecordingApi',
            'RecordingError',
            'RecordingLayout',
            'RunCitationScenario',
            'SCENARIOS',
            'SEAM_PATHS',
            'SEAM_PROPERTIES',
            'Scenario',
            'ScenarioFailed',
            'ScenarioOutcome',
            'ScenarioResult',
            'ScenarioSkipped',
            'ScriptedCitation',
            'ScriptedStreamError',
            'SeamFailure',
            'SeamPath',
            'SeamProperty',
            'SeamReport',
            'SeamSkip',
            'SeamSubject',
            'SeamsBroken',
            'WireSubject',
            'assert_cites',
            'assert_clean_output',
            'assert_complete',
            'assert_no_lost_citations',
            'assert_no_raw_markup',
            'assert_seams',
            'check_seams',
            'check_seams_sync',
            'load_recording',
            'replay_recording',
            'run_scenarios',
            'scenario_params',
        ]
    )


def test_ui_all_is_pinned():
    assert sorted(pydantic_ai_citations.ui.__all__) == snapshot(
        [
            'CITATIONS_DATA_TYPE',
            'CITATIONS_EVENT_NAME',
            'CITED_ANSWER_DATA_TYPE',
            'CITED_ANSWER_EVENT_NAME',
            'CitedAGUIAdapter',
            'CitedAGUIEventStream',
            'CitedVercelAIAdapter',
            'CitedVercelAIEventStream',
            'STEPS_METADATA_KEY',
            'cited_answer_chunk',
            'cited_answer_event',
        ]
    )


def test_each_ui_protocol_loads_only_its_own_adapter():
    """The AG-UI adapter needs the optional `ag-ui-protocol`: using the Vercel AI one must not import it."""
    vercel = _new_modules('from pydantic_ai_citations.ui import CitedVercelAIAdapter')
    assert 'pydantic_ai_citations.ui._vercel_ai' in vercel
    assert [
        m for m in vercel if m.startswith(('ag_ui', 'pydantic_ai.ui.ag_ui', 'pydantic_ai_citations.ui._ag_ui'))
    ] == []
    ag_ui = _new_modules('from pydantic_ai_citations.ui import CitedAGUIAdapter')
    assert 'pydantic_ai_citations.ui._ag_ui' in ag_ui
    assert [m for m in ag_ui if m.startswith(('pydantic_ai.ui.vercel_ai', 'pydantic_ai_citations.ui._vercel_ai'))] == []


PUBLIC_MODULES = (
    pydantic_ai_citations,
    pydantic_ai_citations.testing,
    pydantic_ai_citations.matrix,
    pydantic_ai_citations.ui,
)


def test_every_public_name_exists_and_is_documented():
    for module in PUBLIC_MODULES:
        assert sorted(set(module.__all__)) == sorted(module.__all__), module.__name__
        assert set(module.__all__) <= set(dir(module)), module.__name__
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                assert inspect.getdoc(value), f'{module.__name__}.{name} has no docstring'


def _package_definitions() -> set[str]:
    """Names of the functions and classes defined at the top of any of the package's modules (read from the source)."""
    root = Path(pydantic_ai_citations.__file__).parent
    return {
        node.name
        for path in root.rglob('*.py')
        for node in ast.parse(path.read_text(encoding='utf-8')).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _importable_names() -> set[str]:
    """Every name a user can import from a public module, and every public attribute of those classes."""
    formats = pydantic_ai_citations.formats
    modules = [
        *PUBLIC_MODULES,
        pydantic_ai_citations.support,
        *(importlib.import_module(f'{formats.__name__}.{m.name}') for m in pkgutil.iter_modules(formats.__path__)),
    ]
    names: set[str] = set()
    for module in modules:
        for name in getattr(module, '__all__', ()):
            names.add(name)
            value = getattr(module, name)
            if inspect.isclass(value):
                names.update(attribute for attribute in dir(value) if not attribute.startswith('_'))
    return names


def _docstrings(value: object) -> Iterator[str]:
    """The docstring of `value` and, for a class, of each of its public methods and properties."""
    yield inspect.getdoc(value) or ''
    if inspect.isclass(value):
        for name, member in vars(value).items():
            if name.startswith('_') and name != '__init__':
                continue
            function = member.fget if isinstance(member, property) else getattr(member, '__func__', member)
            if callable(function):
                yield inspect.getdoc(function) or ''


_BACKTICKED_NAME = re.compile(r'`([A-Za-z_]\w*)(?:\([^`]*\))?`')
"""A backticked bare name, maybe called: `` `edit_text` ``, `` `edit_text(part, new_text)` ``."""


def test_root_docstrings_name_only_importable_package_functions():
    """A backticked name in the docs of a root name, if it is one of the package's functions or classes, is public."""
    defined, importable = _package_definitions(), _importable_names()
    hidden = {
        (name, mentioned)
        for name in pydantic_ai_citations.__all__
        for doc in _docstrings(getattr(pydantic_ai_citations, name))
        for mentioned in _BACKTICKED_NAME.findall(doc)
        if mentioned in defined and mentioned not in importable
    }
    assert sorted(hidden) == []


def _new_modules(code: str) -> list[str]:
    """The modules a fresh interpreter has after running `code` (pytest already imported, as in a session)."""
    probe = f'import sys, pytest; before = set(sys.modules); {code}; print(sorted(set(sys.modules) - before))'
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout
    return ast.literal_eval(out.strip())


def test_importing_the_root_imports_nothing_else():
    assert _new_modules('import pydantic_ai_citations') == ['pydantic_ai_citations', 'pydantic_ai_citations._lazy']


def test_the_pytest_plugin_imports_nothing_until_used():
    assert _new_modules('import pydantic_ai_citations.testing._plugin') == [
        'pydantic_ai_citations',
        'pydantic_ai_citations._lazy',
        'pydantic_ai_citations.testing',
        'pydantic_ai_citations.testing._plugin',
    ]


def test_the_public_names_load_no_testing_matrix_probes_or_ui():
    loaded = _new_modules('from pydantic_ai_citations import *')
    unwanted = ('pydantic_ai_citations.testing', 'pydantic_ai_citations.ui', 'pydantic_ai.ui')
    assert [m for m in loaded if m.startswith(unwanted)] == []
    assert 'pydantic_ai_citations.matrix._probes' not in loaded
    assert 'pydantic_ai_citations.matrix._fixtures' not in loaded


def test_unknown_root_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'fingerprint_response'"):
        pydantic_ai_citations.fingerprint_response  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]


def test_importing_the_root_loads_no_provider_sdk():
    code = (
        'import sys; from pydantic_ai_citations import *; '
        "print(sorted(m for m in ('anthropic', 'openai', 'google.genai', 'boto3', 'xai_sdk', 'cohere', 'mistralai', "
        "'groq', 'yaml', 'selectolax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == '[]'


def test_formats_modules_import():
    for name in ('openai_markers', 'numbered', 'anthropic_search_results', 'perplexity', 'unmapped', 'wire'):
        importlib.import_module(f'pydantic_ai_citations.formats.{name}')


def test_lazy_tables_list_exactly_the_public_names():
    for module in (pydantic_ai_citations, pydantic_ai_citations.testing, pydantic_ai_citations.matrix):
        homes: dict[str, str] = vars(module)['_HOMES']
        assert sorted(homes) == sorted(module.__all__), module.__name__
