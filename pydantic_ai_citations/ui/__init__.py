"""UI event streams that carry citations, next to Pydantic AI's own `pydantic_ai.ui.*` adapters.

Importing this package imports Pydantic AI's Vercel AI adapter; `import pydantic_ai_citations` does not.
"""

from ._vercel_ai import (
    CITATIONS_DATA_TYPE,
    CITED_ANSWER_DATA_TYPE,
    CitedVercelAIAdapter,
    CitedVercelAIEventStream,
    cited_answer_chunk,
)

__all__ = (
    'CITATIONS_DATA_TYPE',
    'CITED_ANSWER_DATA_TYPE',
    'CitedVercelAIAdapter',
    'CitedVercelAIEventStream',
    'cited_answer_chunk',
)
