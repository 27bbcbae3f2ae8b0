"""Track, measure, clean and check citations in Pydantic AI agents, on any provider.

The public surface is listed once, here. Submodules: `pydantic_ai_citations.formats` (parsers for formats Pydantic
AI leaves raw), `pydantic_ai_citations.support` (does the cited page back the claim?), `pydantic_ai_citations.matrix`
(the measured capability matrix and its probes), `pydantic_ai_citations.testing` (scripted citing models, replay
of real recordings, the failure-path suite), `pydantic_ai_citations.ui` (UI event streams that carry citations).

Importing the package is free: each name is imported from its module on first use (as Pydantic does), because the
package's pytest plugin makes every pytest session of a project that installs it import this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._answer import CitedAnswer, CitedSpan, RawCitation, SourceRef
    from ._edit import edit_response, edit_text, edit_text_with_problems, find_stale
    from ._evidence import (
        Claim,
        ClaimVerification,
        Evidence,
        UnverifiedEvidenceError,
        VerifyEvidence,
        verify_claims,
        verify_claims_sync,
    )
    from ._guard import (
        CitationMarkupError,
        CitationsDisabledWarning,
        StripCitationMarkup,
        removed_markup,
    )
    from ._history import CleanStaleCitations
    from ._json_markup import RemovedMarkup
    from ._pgstore import PostgresConversationStore
    from ._problems import CitationProblem, ProblemCode
    from ._redact import redact
    from ._render import render_html, render_markdown
    from ._store import SQLiteConversationStore, StoreCorruptionError, StoredAnswer
    from ._stream import FinalAnswer, TextChunk, stream_cited
    from ._tap import (
        AnthropicTap,
        CohereTap,
        MistralTap,
        PerplexityTap,
        anthropic_http_client,
        cohere_http_client,
        mistral_http_client,
        perplexity_http_client,
    )
    from ._track import Arrival, CitedRun, PartArrival, RequestObservation, TrackCitations
    from .matrix import CapabilityMatrix

_HOMES: dict[str, str] = {
    # capabilities
    'TrackCitations': '_track',
    'CleanStaleCitations': '_history',
    'StripCitationMarkup': '_guard',
    'PerplexityTap': '_tap',
    'perplexity_http_client': '_tap',
    'CohereTap': '_tap',
    'cohere_http_client': '_tap',
    'AnthropicTap': '_tap',
    'anthropic_http_client': '_tap',
    'MistralTap': '_tap',
    'mistral_http_client': '_tap',
    'VerifyEvidence': '_evidence',
    # the answer
    'CitedAnswer': '_answer',
    'CitedSpan': '_answer',
    'RawCitation': '_answer',
    'SourceRef': '_answer',
    'CitationProblem': '_problems',
    'ProblemCode': '_problems',
    # a run's report
    'CitedRun': '_track',
    'RequestObservation': '_track',
    'PartArrival': '_track',
    'Arrival': '_track',
    # showing it
    'render_html': '_render',
    'render_markdown': '_render',
    'redact': '_redact',
    'stream_cited': '_stream',
    'TextChunk': '_stream',
    'FinalAnswer': '_stream',
    # structured output
    'removed_markup': '_guard',
    'RemovedMarkup': '_json_markup',
    'CitationMarkupError': '_guard',
    'CitationsDisabledWarning': '_guard',
    'Claim': '_evidence',
    'Evidence': '_evidence',
    'UnverifiedEvidenceError': '_evidence',
    'verify_claims': '_evidence',
    'verify_claims_sync': '_evidence',
    'ClaimVerification': '_evidence',
    # history
    'edit_text': '_edit',
    'edit_text_with_problems': '_edit',
    'edit_response': '_edit',
    'find_stale': '_edit',
    'SQLiteConversationStore': '_store',
    'PostgresConversationStore': '_pgstore',
    'StoredAnswer': '_store',
    'StoreCorruptionError': '_store',
    # the capability matrix
    'CapabilityMatrix': 'matrix',
}

__all__ = (
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
)


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
