"""`CitationProblem`: the one way this package reports citation data it could not use.

Bad input data is never dropped silently and never crashes a run: every module reports what it could not
resolve as a `CitationProblem` with a code from a closed set, a message for humans and, where known, where
the problem sits (message, part, citation, character offsets).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Literal

from pydantic import TypeAdapter

from ._lazy import lazy_adapter

__all__ = ('CitationProblem', 'ProblemCode', 'PROBLEM_CODES')

ProblemCode = Literal[
    # anchors and citations on parts
    'anchor_out_of_range',
    'anchor_not_on_marker',
    'overlapping_citations',
    'duplicate_citation',
    'source_without_content',
    'unreadable_raw_data',
    'unmapped_provider_citation',
    'citation_outside_answer',
    # streaming
    'stream_incomplete',
    'provider_error',
    # raw formats
    'unresolved_marker',
    'malformed_marker',
    'unterminated_marker',
    'conflicting_source_id',
    'search_result_index_out_of_range',
    'invalid_search_result',
    # marker placement (OpenAI's guidance, `formats.openai_placement`)
    'marker_not_after_punctuation',
    'marker_in_emphasis',
    'marker_in_code',
    'marker_on_fence_line',
    'markers_grouped_at_end',
    'bare_marker_id',
    # structured output and evidence
    'markup_in_output',
    'citations_disabled_by_output_mode',
    'unknown_source_id',
    'quote_not_found',
    # history
    'stale_after_edit',
    'citation_dropped_after_edit',
    'markers_stripped_for_provider',
    # rendering
    'disallowed_url_scheme',
]
"""Closed set of problem codes. Adding a code is a public API change: note it in the CHANGELOG."""

PROBLEM_CODES: tuple[ProblemCode, ...] = ProblemCode.__args__  # pyright: ignore[reportAttributeAccessIssue]


@dataclass(frozen=True)
class CitationProblem:
    """Something about citation data that could not be used as it stands.

    Positions are optional: set those that apply. Offsets are `str` indices into the text named by the
    context (a `TextPart.content`, a `CitedAnswer.text`, or a raw string given to a format parser).
    """

    code: ProblemCode
    """What kind of problem this is (closed set, see `ProblemCode`)."""
    message: str
    """A sentence for humans: what was wrong and, where useful, what was done about it."""
    _: KW_ONLY
    message_index: int | None = None
    """Index of the message in the history the problem was found in, if any."""
    part_index: int | None = None
    """Index of the part in its message, if any."""
    citation_index: int | None = None
    """Index of the citation in `TextPart.citations` (or in the raw list), if any."""
    start: int | None = None
    """Start offset in the text the problem refers to, if any."""
    end: int | None = None
    """End offset in the text the problem refers to, if any."""
    detail: str | None = None
    """The offending raw value, shortened, when it helps (a marker, an id, a field path)."""


problems_ta: TypeAdapter[list[CitationProblem]] = lazy_adapter(list[CitationProblem])
"""JSON round trip for lists of problems."""


def shorten(text: str, limit: int = 200) -> str:
    """`text` cut to at most `limit` characters, ending with `…` when cut (for problem details and labels)."""
    return text if len(text) <= limit else text[: limit - 1] + '…'
