from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
CORPUS = SHARED / 'corpus'


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


@pytest.fixture
def corpus() -> Path:
    """The shared corpus beside the checkout (`../shared/corpus`); tests using it skip when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f'shared corpus not found at {CORPUS} (CI places ../shared beside the checkout)')
    return CORPUS
