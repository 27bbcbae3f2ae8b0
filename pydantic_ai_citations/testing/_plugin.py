"""pytest plugin (entry point `pytest11`): fixtures for testing agents that cite.

Loaded automatically when the package is installed. Fixtures:

- `track_citations`: a fresh `TrackCitations` capability to add to the agent under test.
"""

from __future__ import annotations

import pytest

from .._track import TrackCitations


@pytest.fixture
def track_citations() -> TrackCitations:
    """A fresh `TrackCitations` capability: add it to the agent under test, then call `.report(result)`."""
    return TrackCitations()
