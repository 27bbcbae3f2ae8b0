"""The capability matrix: what each provider API does with citations, measured through Pydantic AI's real model classes."""

from ._fixtures import FIXTURE_APIS, load_fixture, scenarios
from ._matrix import API_TITLES, COLUMNS, EVIDENCE, SCHEMA_VERSION, CapabilityMatrix, Column, Evidence, Failure
from ._probes import KNOWN_UNMAPPED, LIVE_KEYS, build_matrix, probe_api, probe_live, probe_recording

__all__ = (
    'API_TITLES',
    'COLUMNS',
    'EVIDENCE',
    'FIXTURE_APIS',
    'KNOWN_UNMAPPED',
    'LIVE_KEYS',
    'SCHEMA_VERSION',
    'CapabilityMatrix',
    'Column',
    'Evidence',
    'Failure',
    'build_matrix',
    'load_fixture',
    'probe_api',
    'probe_live',
    'probe_recording',
    'scenarios',
)
