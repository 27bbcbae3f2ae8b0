"""Track, measure, clean and check citations in Pydantic AI agents, on any provider."""

from ._answer import CitedAnswer, CitedSpan, PartSegment, RawCitation, SourceRef
from ._problems import PROBLEM_CODES, CitationProblem, ProblemCode

__all__ = (
    'PROBLEM_CODES',
    'CitationProblem',
    'CitedAnswer',
    'CitedSpan',
    'PartSegment',
    'ProblemCode',
    'RawCitation',
    'SourceRef',
)
