"""Track, measure, clean and check citations in Pydantic AI agents, on any provider.

The public surface is listed once, here. Submodules: `pydantic_ai_citations.formats` (parsers for formats Pydantic
AI leaves raw), `pydantic_ai_citations.support` (does the cited page back the claim?), `pydantic_ai_citations.matrix`
(the measured capability matrix and its probes), `pydantic_ai_citations.testing` (scripted citing models, replay
of real recordings, the failure-path suite), `pydantic_ai_citations.ui` (UI event streams that carry citations).
"""

from ._answer import CitedAnswer, CitedSpan, PartSegment, RawCitation, SourceRef, cited_answer_ta
from ._evidence import (
    Claim,
    ClaimVerification,
    Evidence,
    EvidenceFailure,
    RetrievedSource,
    UnverifiedEvidenceError,
    VerifyEvidence,
    check_evidence,
    retrieved_sources,
    verify_claims,
    verify_claims_sync,
    verify_evidence,
)
from ._guard import (
    CitationMarkupError,
    CitationsDisabledWarning,
    RemovedMarkup,
    StripCitationMarkup,
    check_output_mode,
    removed_markup,
    scan_citation_markup,
    strip_citation_markup,
    strip_json_markup,
)
from ._history import CleanStaleCitations, edit_text, edit_text_with_report, find_stale, fingerprint_response
from ._models import ApiLabel, ModelInfo, describe_model
from ._problems import PROBLEM_CODES, CitationProblem, ProblemCode
from ._redact import redact
from ._render import render_html, render_markdown
from ._store import AnswerVersions, SQLiteConversationStore, StoreCorruptionError, StoredAnswer
from ._stream import FinalAnswer, TextChunk, stream_cited
from ._track import (
    Arrival,
    CitedRun,
    PartArrival,
    RequestObservation,
    TrackCitations,
    cited_run_ta,
    telemetry_attributes,
)
from .matrix import CapabilityMatrix

__all__ = (
    'PROBLEM_CODES',
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
)
