"""UI event streams that carry citations, next to Pydantic AI's own `pydantic_ai.ui.*` adapters.

- Vercel AI (AI SDK UI): `CitedVercelAIAdapter` / `CitedVercelAIEventStream`, `cited_answer_chunk`.
- AG-UI: `CitedAGUIAdapter` / `CitedAGUIEventStream`, `cited_answer_event` (needs the `ag-ui` extra).

Each name is imported from its module on first use, so using one protocol never imports the other's adapter (nor
its optional dependency); `import pydantic_ai_citations` imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._ag_ui import (
        CITATIONS_EVENT_NAME,
        CITED_ANSWER_EVENT_NAME,
        CitedAGUIAdapter,
        CitedAGUIEventStream,
        cited_answer_event,
    )
    from ._vercel_ai import (
        CITATIONS_DATA_TYPE,
        CITED_ANSWER_DATA_TYPE,
        STEPS_METADATA_KEY,
        CitedVercelAIAdapter,
        CitedVercelAIEventStream,
        cited_answer_chunk,
    )

_HOMES = {
    **dict.fromkeys(
        (
            'CITATIONS_DATA_TYPE',
            'CITED_ANSWER_DATA_TYPE',
            'STEPS_METADATA_KEY',
            'CitedVercelAIAdapter',
            'CitedVercelAIEventStream',
        ),
        '_vercel_ai',
    ),
    'cited_answer_chunk': '_vercel_ai',
    **dict.fromkeys(
        ('CITATIONS_EVENT_NAME', 'CITED_ANSWER_EVENT_NAME', 'CitedAGUIAdapter', 'CitedAGUIEventStream'), '_ag_ui'
    ),
    'cited_answer_event': '_ag_ui',
}

__all__ = (
    'CITATIONS_DATA_TYPE',
    'CITATIONS_EVENT_NAME',
    'CITED_ANSWER_DATA_TYPE',
    'CITED_ANSWER_EVENT_NAME',
    'STEPS_METADATA_KEY',
    'CitedAGUIAdapter',
    'CitedAGUIEventStream',
    'CitedVercelAIAdapter',
    'CitedVercelAIEventStream',
    'cited_answer_chunk',
    'cited_answer_event',
)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
