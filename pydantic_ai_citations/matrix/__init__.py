"""The capability matrix: what each provider API does with citations, measured through Pydantic AI's real model classes.

`CapabilityMatrix` alone does not import the probes, the wire fixtures or the replay machinery: each name is imported
from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._fixtures import FIXTURE_APIS, fixture_families, load_fixture, scenarios
    from ._matrix import (
        API_TITLES,
        COLUMNS,
        EVIDENCE,
        SCHEMA_VERSION,
        CapabilityMatrix,
        Column,
        Evidence,
        Failure,
        MatrixRow,
    )
    from ._probes import GATEWAY_KEYS, KNOWN_UNMAPPED, LIVE_KEYS, build_matrix, probe_api, probe_live, probe_recording

_HOMES = {
    **dict.fromkeys(('FIXTURE_APIS', 'fixture_families', 'load_fixture', 'scenarios'), '_fixtures'),
    **dict.fromkeys(
        (
            'API_TITLES',
            'COLUMNS',
            'EVIDENCE',
            'SCHEMA_VERSION',
            'CapabilityMatrix',
            'Column',
            'Evidence',
            'Failure',
            'MatrixRow',
        ),
        '_matrix',
    ),
    **dict.fromkeys(
        ('GATEWAY_KEYS', 'KNOWN_UNMAPPED', 'LIVE_KEYS', 'build_matrix', 'probe_api', 'probe_live', 'probe_recording'),
        '_probes',
    ),
}

__all__ = (
    'API_TITLES',
    'COLUMNS',
    'EVIDENCE',
    'FIXTURE_APIS',
    'GATEWAY_KEYS',
    'KNOWN_UNMAPPED',
    'LIVE_KEYS',
    'SCHEMA_VERSION',
    'CapabilityMatrix',
    'Column',
    'Evidence',
    'Failure',
    'MatrixRow',
    'build_matrix',
    'fixture_families',
    'load_fixture',
    'probe_api',
    'probe_live',
    'probe_recording',
    'scenarios',
)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
