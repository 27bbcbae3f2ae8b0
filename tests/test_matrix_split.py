"""The built-in probes split over two processes (`pydantic-ai-citations matrix`, `--jobs 2`, the default).

The split must give the same matrix as one process, cell for cell, and a second process that fails must cost no row.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from pydantic_ai_citations import CapabilityMatrix
from pydantic_ai_citations.cli import run
from pydantic_ai_citations.matrix import FIXTURE_APIS, build_matrix
from pydantic_ai_citations.matrix import _split as split  # the split itself, tested on purpose


@pytest.fixture(scope='module')
def serial() -> str:
    """The default matrix measured in one process, as JSON."""
    return anyio.run(build_matrix).to_json()


def _fake_child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, '-c', code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason='the probes are split only on two cores or more')
def test_two_processes_measure_the_same_matrix(
    serial: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    started: list[subprocess.Popen[bytes] | None] = []
    start = split.start_child

    def spy(processes: int, *, probes: bool = True) -> subprocess.Popen[bytes] | None:
        started.append(start(processes, probes=probes))
        return started[-1]

    monkeypatch.setattr(split, 'start_child', spy)
    out = tmp_path / 'm.json'
    assert run(['matrix', '--format', 'json', '-o', str(out)]) == 0
    assert len(started) == 1 and started[0] is not None and started[0].returncode == 0
    assert out.read_text() == serial
    err = capsys.readouterr().err
    # Progress from both processes: this one's rows, then the second process's when they arrive.
    assert 'probing anthropic-messages' in err and 'probing cohere' in err
    assert 'note:' not in err
    assert {row['api'] for row in json.loads(serial)['rows']} >= split.CHILD_APIS


@pytest.mark.parametrize(
    ('code', 'why'),
    [
        pytest.param('import sys; sys.stderr.write("boom\\n"); sys.exit(3)', 'exit status 3: boom', id='fails'),
        pytest.param('import sys; sys.exit(4)', 'exit status 4: no message', id='fails-silently'),
        pytest.param(
            'import sys; sys.stdout.write("not a pickle")', 'unreadable result: UnpicklingError', id='garbage'
        ),
        pytest.param(
            'import pickle, sys; sys.stdout.buffer.write(pickle.dumps(([], {}, [])))',
            'unreadable result',
            id='not-a-matrix',
        ),
        pytest.param('pass', 'unreadable result: EOFError', id='nothing'),
    ],
)
def test_what_a_failed_second_process_says(code: str, why: str):
    assert split._collect(_fake_child(code)) == (None, why)  # pyright: ignore[reportPrivateUsage]


def test_a_failed_second_process_loses_no_row(serial: str):
    lines: list[str] = []
    matrix = split.measure_matrix(child=_fake_child('import sys; sys.exit(3)'), progress=lines.append)
    assert matrix.to_json() == serial
    notes = [line for line in lines if line.startswith('note:')]
    assert notes == ['note: the second probing process failed (exit status 3: no message); probing its rows here']
    assert sorted(line.removeprefix('probing ') for line in lines if line.startswith('probing ')) == sorted(
        FIXTURE_APIS
    )


def test_one_process_when_asked_or_nothing_to_probe():
    assert split.start_child(1) is None
    assert split.start_child(2, probes=False) is None
    with pytest.raises(SystemExit):
        run(['matrix', '--jobs', '3'])  # argparse: 1 or 2


def test_cli_one_process(tmp_path: Path, serial: str):
    out = tmp_path / 'm.json'
    assert run(['matrix', '--jobs', '1', '-q', '--format', 'json', '-o', str(out)]) == 0
    assert out.read_text() == serial


def test_a_matrix_pickles_with_its_rows_and_a_new_lock(serial: str):
    matrix = CapabilityMatrix.from_json(serial)
    copy = pickle.loads(pickle.dumps(matrix))
    assert copy.to_json() == matrix.to_json()
    copy.add('cohere', 'citations', 'yes', 'observed')  # the lock works
    assert copy.to_json() != matrix.to_json()


def test_no_second_process_where_none_can_start(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, 'executable', '')
    assert split.start_child(2) is None
    monkeypatch.undo()

    def refuse(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        raise OSError('no processes here')

    monkeypatch.setattr(subprocess, 'Popen', refuse)
    assert split.start_child(2) is None


def test_the_second_process_is_not_left_running_when_this_one_fails(monkeypatch: pytest.MonkeyPatch):
    from pydantic_ai_citations.matrix import _probes

    async def broken(**kwargs: object) -> CapabilityMatrix:
        raise RuntimeError('probing failed')

    monkeypatch.setattr(_probes, 'build_matrix', broken)
    child = _fake_child('import time; time.sleep(60)')
    with pytest.raises(RuntimeError, match='probing failed'):
        split.measure_matrix(child=child)
    assert child.returncode is not None  # killed and reaped, not waited for
