#!/usr/bin/env python3
"""Developer entry point that needs only Python 3.11+ and pip: makes `.venv`, installs what is needed, runs a task.

    python3 dev.py matrix [ARGS...]   # the capability matrix on the embedded default (the package's main job)
    python3 dev.py test [ARGS...]     # the test suite
    python3 dev.py lint | typecheck | bench | ci | install | test-latest

Installs are pinned by `constraints.txt`, so a new Pydantic AI release cannot break CI silently; `test-latest` tests
against the newest releases the version ranges allow, in a separate `.venv-latest`.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
EXTRAS = '.[all,dev]'
_SUMMARY = re.compile(
    r'^=*\s*(\d+ (passed|failed|skipped|errors?|xfailed|xpassed|warnings?)(, )?)+ in [\d.]+s\b|no tests ran'
)


def _venv(latest: bool = False) -> Path:
    path = ROOT / ('.venv-latest' if latest else '.venv')
    python = path / 'bin' / 'python'
    if not python.exists():
        print(f'creating {path.name} ...', flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    # What the install depends on: the metadata and the pins.
    inputs = (ROOT / 'pyproject.toml').read_bytes()
    inputs += b'' if latest else (ROOT / 'constraints.txt').read_bytes()
    stamp = path / '.installed'
    digest = hashlib.sha256(inputs).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        print(f'installing into {path.name} ...', flush=True)
        pip = [str(python), '-m', 'pip', 'install', '--disable-pip-version-check', '-q']
        if latest:
            _run([*pip, '--upgrade', '-e', EXTRAS])
        else:
            _run([*pip, '-c', str(ROOT / 'constraints.txt'), '-e', EXTRAS])
        stamp.write_text(digest)
    return path / 'bin'


def _run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(result.returncode)


def _run_tee(cmd: list[str]) -> str | None:
    """Run `cmd`, echoing its output; exit on failure; return pytest's closing summary line."""
    summary: str | None = None
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            stripped = line.strip()
            if _SUMMARY.match(stripped):
                summary = stripped
    sys.stdout.flush()
    if proc.returncode:
        sys.exit(proc.returncode)
    return summary


def main(argv: list[str]) -> None:
    """Run one task (see the module docstring)."""
    task, args = (argv[0], argv[1:]) if argv else ('test', [])
    if task == 'install':
        _venv()
    elif task == 'matrix':
        _run([str(_venv() / 'pydantic-ai-citations'), 'matrix', *args])
    elif task == 'test':
        # Branch coverage is measured from the first import (the pytest plugin imports the package early) and enforced.
        bin_ = _venv()
        summary = _run_tee([str(bin_ / 'python'), '-m', 'coverage', 'run', '-m', 'pytest', *args])
        # The floor (pyproject `fail_under`) applies to the whole suite; a subset (`dev.py test tests/x.py`) only reports.
        _run([str(bin_ / 'python'), '-m', 'coverage', 'report', *(['--fail-under=0'] if args else [])])
        if summary:
            print(summary, flush=True)  # pytest's closing line last, after the coverage table
    elif task == 'test-latest':
        _run([str(_venv(latest=True) / 'pytest'), *args])
    elif task == 'lint':
        bin_ = _venv()
        _run([str(bin_ / 'ruff'), 'check', '.'])
        _run([str(bin_ / 'ruff'), 'format', '--check', '.'])
    elif task == 'typecheck':
        _run([str(_venv() / 'pyright')])
    elif task == 'bench':
        _run([str(_venv() / 'pytest'), 'benchmarks', '--benchmark-only', '-p', 'no:cacheprovider', *args])
    elif task == 'ci':
        main(['lint'])
        main(['typecheck'])
        main(['test', *args])
    else:
        sys.exit(f'unknown task {task!r}; see the docstring of dev.py')


if __name__ == '__main__':
    os.environ.setdefault('PYTHONDONTWRITEBYTECODE', '1')
    main(sys.argv[1:])
