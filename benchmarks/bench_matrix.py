"""P5: the default capability matrix in a fresh process (`pydantic-ai-citations matrix`) takes under 5 s of wall time.

Measured as a user meets it: the console script (`pydantic-ai-citations matrix`, which `python3 dev.py matrix` runs;
`python -m pydantic_ai_citations matrix` where the script is not installed), default arguments (the table on stdout,
progress lines on stderr), each run in a fresh process, after one warm-up run. Asserted: the median wall time of
`ROUNDS` runs is under `GOAL_S`.

The command probes its rows in two processes on a machine with two cores or more (`--jobs 2`, the default: see
`pydantic_ai_citations/matrix/_split.py`); its CPU time below counts both.

Printed beside it, as context only (nothing is asserted on them), each measured the same way in the same run:

- the same command in one process (`--jobs 1`);

- CPU time (user + system) of the matrix runs: on a shared machine wall time also counts waiting for a core, so the
  load average (before and after) is printed too; the goal is met on this 2-core machine when it is not loaded;
- the import floor: `python -c 'import pydantic_ai'`;
- the SDK floor: importing the Pydantic AI model classes and provider SDKs the default matrix runs (Anthropic,
  Bedrock/boto3, Cohere, Google, Groq, Mistral, OpenAI, OpenRouter, xAI), which any offline matrix through the real
  model classes pays before its first probe (with the garbage collector set as the console script sets it).

The fresh processes read bytecode from a private cache filled by the warm-up run (`PYTHONPYCACHEPREFIX`), as an
installed package has its `.pyc` files: an environment with `PYTHONDONTWRITEBYTECODE` would otherwise compile the
package's sources in every run.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

GOAL_S = 5.0
ROUNDS = 5
FLOOR_ROUNDS = 3

IMPORT_FLOOR = ['-c', 'import pydantic_ai']
SDK_FLOOR = [
    '-c',
    # With the cyclic collector set as the console script sets it (`cli.one_process_run`), so that the two compare.
    'import atexit, gc; gc.set_threshold(10_000, 10, 10); atexit.register(gc.freeze); '
    'import pydantic_ai, pydantic_ai.models.anthropic, pydantic_ai.models.bedrock, pydantic_ai.models.cohere, '
    'pydantic_ai.models.google, pydantic_ai.models.groq, pydantic_ai.models.mistral, pydantic_ai.models.openai, '
    'pydantic_ai.models.openrouter, pydantic_ai.models.xai, pydantic_ai.providers.google_cloud, xai_sdk.aio.chat',
]


def _matrix_command() -> list[str]:
    """The console script beside this interpreter (a checkout on `PYTHONPATH` is what it imports), else `-m`."""
    script = Path(sys.executable).with_name('pydantic-ai-citations')
    return [str(script), 'matrix'] if script.exists() else [sys.executable, '-m', 'pydantic_ai_citations', 'matrix']


def _fresh(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    env['PYTHONPYCACHEPREFIX'] = str(tmp_path / 'pycache')
    return env


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f'{one:.1f} (1 min), {five:.1f} (5 min)'


def test_p5_default_matrix_in_a_fresh_process(benchmark: object, fresh_env: dict[str, str]) -> None:
    command = _matrix_command()
    python = [sys.executable]
    _fresh(command, fresh_env)  # warm-up: fills the bytecode cache (and the OS file cache)
    load_before = _load()
    runs: list[tuple[float, float]] = []

    def once() -> None:
        runs.append(_fresh(command, fresh_env))

    benchmark.pedantic(once, rounds=ROUNDS, iterations=1)  # type: ignore[attr-defined]
    one = [_fresh([*command, '--jobs', '1'], fresh_env) for _ in range(FLOOR_ROUNDS)]
    floor = [_fresh([*python, *IMPORT_FLOOR], fresh_env) for _ in range(FLOOR_ROUNDS)]
    sdks = [_fresh([*python, *SDK_FLOOR], fresh_env) for _ in range(FLOOR_ROUNDS)]
    load_after = _load()
    wall, cpu = _median(runs)
    one_wall, one_cpu = _median(one)
    floor_wall, floor_cpu = _median(floor)
    sdk_wall, sdk_cpu = _median(sdks)
    verdict = 'within' if wall < GOAL_S else 'over'
    print(
        f'\nP5: `{" ".join(Path(c).name for c in command)}` in a fresh process: median {wall:.2f} s wall '
        f'({verdict} the {GOAL_S:.0f} s goal), {cpu:.2f} s CPU, over {ROUNDS} runs\n'
        f'    runs (wall / CPU s): {", ".join(f"{w:.2f}/{c:.2f}" for w, c in runs)}\n'
        f'    load average before {load_before}, after {load_after}, on {os.cpu_count()} CPUs\n'
        f'    context: in one process (`--jobs 1`): {one_wall:.2f} s wall, {one_cpu:.2f} s CPU; import floor (`import pydantic_ai`): {floor_wall:.2f} s wall, {floor_cpu:.2f} s CPU; '
        f'SDK floor (the model classes and SDKs it runs): {sdk_wall:.2f} s wall, {sdk_cpu:.2f} s CPU'
    )
    assert wall < GOAL_S, (
        f'median wall time {wall:.2f} s >= {GOAL_S} s ({cpu:.2f} s CPU; load average before {load_before}, '
        f'after {load_after})'
    )
