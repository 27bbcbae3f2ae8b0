"""The `pydantic-ai-citations` command's entry points: `audit` through the main parser (with and without the
support extra), the table format without `rich`, and the console script's exit code.

`matrix` and `render` themselves are tested in `test_matrix.py`; `audit`'s report in `test_support_cli.py`.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations.cli import main, run


def test_audit_runs_through_the_main_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip('pydantic_ai_citations.support._cli', reason='`audit` needs the support extra')
    answer = tmp_path / 'answer.json'
    answer.write_bytes(CitedAnswer('Nothing cited here.').to_json())
    (tmp_path / 'snapshots').mkdir()
    assert run(['audit', str(answer), '--snapshots', str(tmp_path / 'snapshots')]) == 0
    out = capsys.readouterr().out
    assert out.startswith('# Citation support audit')
    assert 'No citations.' in out


def test_audit_without_the_support_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, 'pydantic_ai_citations.support._cli', None)  # importing it raises ImportError
    assert run(['audit']) == 2
    assert capsys.readouterr().err == (
        'error: `audit` needs the support extra: pip install "pydantic-ai-citations[support]"\n'
    )


def test_table_without_rich_prints_markdown_with_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, 'rich.console', None)
    assert run(['matrix', '--no-probes', '-q']) == 0
    captured = capsys.readouterr()
    assert captured.err == 'note: `rich` is not installed (extra [cli]); printing Markdown\n'
    assert '| API |' in captured.out


def test_table_to_a_file_is_written_as_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip('rich', reason='the table format needs the cli extra')
    out = tmp_path / 'matrix.md'
    assert run(['matrix', '--no-probes', '-q', '-o', str(out)]) == 0
    assert '| API |' in out.read_text()
    assert capsys.readouterr().err == f'wrote {out}\n'


def test_console_script_exits_with_the_command_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, 'argv', ['pydantic-ai-citations', 'render', str(tmp_path / 'missing.json')])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(f'error: cannot read {str(tmp_path / "missing.json")!r}')


def test_console_script_restores_the_collector_thresholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The console script runs a command with larger cyclic-collector thresholds (a one-shot process); a caller that
    # runs it in process (this test session) gets its own back.
    before = gc.get_threshold()
    monkeypatch.setattr(sys, 'argv', ['pydantic-ai-citations', 'render', str(tmp_path / 'missing.json')])
    with pytest.raises(SystemExit):
        main()
    assert gc.get_threshold() == before
    capsys.readouterr()
