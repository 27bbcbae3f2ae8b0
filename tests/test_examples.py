"""Every example in `examples/` runs offline (the ones with their own dedicated tests are run there too)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / 'examples'
SCRIPTS = sorted(p for p in EXAMPLES.glob('*.py') if not p.name.endswith('_test.py'))


@pytest.fixture(autouse=True)
def plain_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples run as scripts: they must not see pytest's own arguments (one writes to `sys.argv[1]`)."""
    monkeypatch.setattr('sys.argv', ['example.py'])


@pytest.mark.parametrize('path', SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]):
    runpy.run_path(str(path), run_name='__main__')
    assert capsys.readouterr().out.strip()


def test_track_run_example_output(capsys: pytest.CaptureFixture[str]):
    runpy.run_path(str(EXAMPLES / 'track_run.py'), run_name='__main__')
    out = capsys.readouterr().out
    assert "google-gemini: streamed=True [(0, 'after_part_end')]" in out
    assert '| Google Gemini API <sub>citing-google</sub> | yes <sub>observed 1</sub> | content' in out
