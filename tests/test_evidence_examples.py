"""The structured-output examples run offline and print what the docs say they print."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / 'examples'


@pytest.mark.parametrize(
    ('name', 'expected'),
    [
        pytest.param(
            'structured_output.py',
            [
                "tool called with city='Paris'",
                'warning: CitationsDisabledWarning',
                '"fact": "Lyon is known for its food."',
                "output    cities[1].fact  openai_marker  ids=['turn0search1']",
            ],
            id='structured_output',
        ),
        pytest.param(
            'evidence_fields.py',
            ["'kb-999' is not the id of a source", "Valid source ids: 'kb-101', 'kb-205'.", "['unknown_source_id']"],
            id='evidence_fields',
        ),
        pytest.param(
            'two_step_verification.py',
            ['verdict: supported, supported: True', "cited documents: ['press-release']", 'verdict: not_supported'],
            id='two_step_verification',
        ),
    ],
)
def test_example_runs(name: str, expected: list[str], capsys: pytest.CaptureFixture[str]):
    runpy.run_path(str(EXAMPLES / name), run_name='__main__')
    out = capsys.readouterr().out
    for line in expected:
        assert line in out
