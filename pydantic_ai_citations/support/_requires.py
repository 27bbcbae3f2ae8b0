"""Fail early, with the fix in the message, when the `[support]` extra is not installed."""

from __future__ import annotations

import importlib.util

_EXTRA = ('selectolax', 'snowballstemmer', 'httpx2')

missing = [name for name in _EXTRA if importlib.util.find_spec(name) is None]
if missing:
    raise ImportError(
        f'pydantic_ai_citations.support needs {", ".join(missing)}: install the extra with '
        '`pip install "pydantic-ai-citations[support]"`.'
    )
