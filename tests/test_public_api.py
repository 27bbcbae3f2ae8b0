from __future__ import annotations

import importlib
import inspect

from inline_snapshot import snapshot

import pydantic_ai_citations
import pydantic_ai_citations.testing


def test_root_all_is_pinned():
    assert sorted(pydantic_ai_citations.__all__) == snapshot(
        [
            'AnswerVersions',
            'ApiLabel',
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
            'Evidence',
            'EvidenceFailure',
            'FinalAnswer',
            'ModelInfo',
            'PROBLEM_CODES',
            'PartArrival',
            'PartSegment',
            'ProblemCode',
            'RawCitation',
            'RemovedMarkup',
            'RequestObservation',
            'RetrievedSource',
            'SQLiteConversationStore',
            'SourceRef',
            'StoreCorruptionError',
            'StoredAnswer',
            'StripCitationMarkup',
            'TextChunk',
            'TrackCitations',
            'UnverifiedEvidenceError',
            'VerifyEvidence',
            'check_evidence',
            'check_output_mode',
            'cited_answer_ta',
            'cited_run_ta',
            'describe_model',
            'edit_text',
            'edit_text_with_report',
            'find_stale',
            'fingerprint_response',
            'redact',
            'removed_markup',
            'render_html',
            'render_markdown',
            'retrieved_sources',
            'scan_citation_markup',
            'stream_cited',
            'strip_citation_markup',
            'strip_json_markup',
            'telemetry_attributes',
            'verify_claims',
            'verify_claims_sync',
            'verify_evidence',
        ]
    )


def test_testing_all_is_pinned():
    assert sorted(pydantic_ai_citations.testing.__all__) == snapshot(
        [
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
            'Scenario',
            'ScenarioFailed',
            'ScenarioOutcome',
            'ScenarioResult',
            'ScenarioSkipped',
            'ScriptedCitation',
            'ScriptedStreamError',
            'load_recording',
            'replay_recording',
            'run_scenarios',
            'scenario_params',
        ]
    )


def test_every_public_name_exists_and_is_documented():
    for module in (pydantic_ai_citations, pydantic_ai_citations.testing, pydantic_ai_citations.matrix):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                assert inspect.getdoc(value), f'{module.__name__}.{name} has no docstring'


def test_importing_the_root_loads_no_provider_sdk():
    import subprocess
    import sys

    code = (
        'import sys, pydantic_ai_citations; '
        "print(sorted(m for m in ('anthropic', 'openai', 'google.genai', 'boto3', 'xai_sdk', 'cohere', 'mistralai', "
        "'groq', 'yaml', 'selectolax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == '[]'


def test_formats_modules_import():
    for name in ('openai_markers', 'numbered', 'anthropic_search_results', 'perplexity', 'unmapped', 'wire'):
        importlib.import_module(f'pydantic_ai_citations.formats.{name}')
