"""The capability matrix: what each provider API does with citations, measured through Pydantic AI's real model classes.

`CapabilityMatrix` alone does not import the probes, the wire fixtures or the replay machinery: each name is imported
from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._fixtures import FIXTURE_APIS, load_fixture, scenarios
    from ._matrix import API_TITLES, COLUMNS, EVIDENCE, SCHEMA_VERSION, CapabilityMatrix, Column, Evidence, Failure
    from ._probes import KNOWN_UNMAPPED, LIVE_KEYS, build_matrix, probe_api, probe_live, probe_recording

_HOMES = {
    **dict.fromkeys(('FIXTURE_APIS', 'load_fixture', 'scenarios'), '_fixtures'),
    **dict.fromkeys(
        ('API_TITLES', 'COLUMNS', 'EVIDENCE', 'SCHEMA_VERSION', 'CapabilityMatrix', 'Column', 'Evidence', 'Failure'),
        '_matrix',
    ),
    **dict.fromkeys(
        ('KNOWN_UNMAPPED', 'LIVE_KEYS', 'build_matrix', 'probe_api', 'probe_live', 'probe_recording'), '_probes'
    ),
}

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

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
