"""A user's own runs as matrix evidence (`TrackCitations(matrix=...)` calls `add_observation`): incomplete runs and
structured output are left out, cited parts fill the anchor / sources / stream cells, and the terminal table shows
each row's models and cells.
"""

from __future__ import annotations

import io
import json

import pytest

from pydantic_ai_citations import PartArrival, RequestObservation
from pydantic_ai_citations.matrix import CapabilityMatrix


def _observation(
    *, complete: bool = True, output_mode: str = 'text', parts: list[PartArrival] | None = None
) -> RequestObservation:
    return RequestObservation(
        'anthropic-messages',
        'anthropic',
        'claude-sonnet-4-5',
        streamed=True,
        output_mode=output_mode,
        citations_requested=True,
        complete=complete,
        parts=parts or [],
    )


CITED = PartArrival(0, 'after_part_end', 1, anchor_kinds=['none'], source_kinds=[])


def test_incomplete_run_is_left_out_with_a_note() -> None:
    matrix = CapabilityMatrix()
    matrix.add_observation(_observation(complete=False, parts=[CITED]))
    assert matrix.evidence('anthropic-messages', 'citations') == {}
    [row] = json.loads(matrix.to_json())['rows']
    assert row['models'] == ['claude-sonnet-4-5']
    assert row['cells']['stream']['notes'] == ['an incomplete observed run was left out']


def test_structured_output_run_fills_no_cell() -> None:
    matrix = CapabilityMatrix()
    matrix.add_observation(_observation(output_mode='tool', parts=[CITED]))
    assert matrix.cell('anthropic-messages', 'citations') == 'n/a'
    assert matrix.evidence('anthropic-messages', 'citations') == {}
    assert matrix.evidence('anthropic-messages', 'stream') == {}


def test_cited_run_fills_citations_anchor_sources_and_stream() -> None:
    matrix = CapabilityMatrix()
    matrix.add_observation(_observation(parts=[CITED]))
    assert [matrix.cell('anthropic-messages', c) for c in ('citations', 'anchor', 'sources', 'stream')] == [
        'yes',
        'none',
        'none',  # a citation without sources
        'after_part_end',
    ]


def test_terminal_table_shows_models_cells_and_unusable_inputs() -> None:
    pytest.importorskip('rich', reason='the terminal table needs the cli extra')
    from rich.console import Console

    matrix = CapabilityMatrix()
    matrix.add_observation(_observation(parts=[CITED]))
    matrix.unusable('recording', 'broken[1].yaml', 'malformed YAML')
    out = io.StringIO()
    Console(file=out, width=300).print(matrix.to_rich_table())
    table = out.getvalue()
    assert 'claude-sonnet-4-5' in table
    assert 'after_part_end' in table
    assert 'broken[1].yaml' in table  # rich markup in user input is escaped, not interpreted
