from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No per-example deadline (a loaded CI machine is slow, not wrong); in CI, the same examples every run.
settings.register_profile(
    'default', deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=bool(os.environ.get('CI'))
)
settings.load_profile('default')

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
