"""P6: the package's import costs, each measured in fresh interpreters, ratios against a baseline from the same run.

- (a) The pytest plugin (entry point `pytest11`, loaded by every pytest session of a project that installs the
  package) adds <= 20 ms: a fresh interpreter imports pytest, then the time to import the plugin module is taken.
  The whole-session figure (`pytest --collect-only` on an empty directory with and without `-p
  no:pydantic_ai_citations`) is printed beside it; it is too noisy on a shared machine to assert.
- (b) `import pydantic_ai_citations` <= 1.2x `import pydantic_ai`.
- (c) `from pydantic_ai_citations import *` (every public name, which imports Pydantic AI itself) <= 1.2x
  `import pydantic_ai`.

Each figure is the fastest of several fresh interpreters, taken alternately with its baseline (the fastest run is
the one least disturbed by other processes on the machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 7
PLUGIN_BUDGET_S = 0.020
IMPORT_TARGET = 1.2

_TIMED = 'import time; {setup}; t = time.perf_counter(); {code}; print(time.perf_counter() - t)'


# Bytecode is cached as an installed package has it (pip compiles it), in a private tree so that the checkout stays
# clean: every module, Pydantic AI's too, is read from there, written by a warm-up run before any timing.
_ENV = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
_ENV['PYTHONPYCACHEPREFIX'] = tempfile.mkdtemp(prefix='bench-import-pycache-')


def _fresh(code: str, setup: str = 'pass') -> float:
    """Seconds `code` takes in a fresh interpreter, after `setup` (not timed)."""
    out = subprocess.run(
        [sys.executable, '-c', _TIMED.format(setup=setup, code=code)],
        capture_output=True,
        text=True,
        check=True,
        env=_ENV,
    )
    return float(out.stdout)


def _fastest_pair(subject: str, baseline: str, setup: str = 'pass') -> tuple[float, float]:
    _fresh(f'{baseline}; {subject}', setup)  # warm-up: writes the bytecode caches
    subjects: list[float] = []
    baselines: list[float] = []
    for _ in range(ROUNDS):
        baselines.append(_fresh(baseline, setup))
        subjects.append(_fresh(subject, setup))
    return min(subjects), min(baselines)


def _pytest_session(tmp: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider', *args, str(tmp)],
        capture_output=True,
        cwd=tmp,
        env=_ENV,
    )
    return time.perf_counter() - start


def test_p6a_pytest_plugin_import(benchmark: object, tmp_path: Path) -> None:
    plugin, nothing = _fastest_pair('import pydantic_ai_citations.testing._plugin', 'pass', setup='import pytest')
    _pytest_session(tmp_path)  # warm-up
    with_plugin = min(_pytest_session(tmp_path) for _ in range(3))
    without = min(_pytest_session(tmp_path, '-p', 'no:pydantic_ai_citations') for _ in range(3))
    print(
        f'\nP6a: the pytest plugin imports in {plugin * 1000:.1f} ms ({plugin / PLUGIN_BUDGET_S:.2f}x the '
        f'{PLUGIN_BUDGET_S * 1000:.0f} ms budget; an empty statement {nothing * 1000:.2f} ms); an empty pytest session '
        f'{with_plugin * 1000:.0f} ms with it, {without * 1000:.0f} ms without'
    )
    benchmark.pedantic(_fresh, args=('import pydantic_ai_citations.testing._plugin', 'import pytest'), rounds=1)  # type: ignore[attr-defined]
    assert plugin <= PLUGIN_BUDGET_S


def test_p6b_import_package(benchmark: object) -> None:
    package, pydantic_ai = _fastest_pair('import pydantic_ai_citations', 'import pydantic_ai')
    ratio = package / pydantic_ai
    print(
        f'\nP6b: import pydantic_ai_citations {package * 1000:.1f} ms, import pydantic_ai {pydantic_ai * 1000:.0f} ms: '
        f'{ratio:.3f}x (<= {IMPORT_TARGET})'
    )
    benchmark.pedantic(_fresh, args=('import pydantic_ai_citations',), rounds=1)  # type: ignore[attr-defined]
    assert ratio <= IMPORT_TARGET


def test_p6c_import_every_public_name(benchmark: object) -> None:
    everything, pydantic_ai = _fastest_pair('from pydantic_ai_citations import *', 'import pydantic_ai')
    ratio = everything / pydantic_ai
    print(
        f'\nP6c: from pydantic_ai_citations import * {everything * 1000:.0f} ms, import pydantic_ai '
        f'{pydantic_ai * 1000:.0f} ms: {ratio:.3f}x (<= {IMPORT_TARGET})'
    )
    benchmark.pedantic(_fresh, args=('from pydantic_ai_citations import *',), rounds=1)  # type: ignore[attr-defined]
    assert ratio <= IMPORT_TARGET
