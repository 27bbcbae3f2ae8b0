"""The built-in probes in two processes: what `pydantic-ai-citations matrix` runs on a machine with two or more cores.

A default matrix run is mostly imports and first uses of the provider SDKs that Pydantic AI's model classes need
(about 4 of its 7-8 seconds of CPU on a 2-core machine), and each row needs only a few of them. So the rows are split
in two halves whose SDKs barely overlap: the command starts a second Python process for one half (`CHILD_APIS`)
before it imports anything costly itself, probes the other half, and merges the rows the second process sends back.
The second process leaves its rows' hand-off probes (their cited histories sent to OpenAI Chat or Anthropic) to this
one, which has those SDKs loaded anyway, and the gaps are explained on the merged matrix.

The result is the same matrix, cell for cell, as `build_matrix` in one process (a test compares them). The second
process's progress lines are shown when its rows arrive. If it fails, dies or sends nothing readable, its half is
probed in this process and a note says why, so no row is lost.

This module is imported before the probes are: it imports nothing costly at module level.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from .._models import ApiLabel
    from ._matrix import CapabilityMatrix
    from ._probes import DeferredHandoff, Progress

__all__ = ('CHILD_APIS', 'measure_matrix', 'start_child')

CHILD_APIS: frozenset[ApiLabel] = frozenset(
    {'bedrock-converse', 'google-gemini', 'google-vertex', 'xai', 'mistral', 'cohere', 'groq'}
)
"""The rows the second process probes: boto3, google-genai, xai-sdk, mistral, cohere and groq are imported there only.
This process keeps the rows on the Anthropic and OpenAI SDKs (which every hand-off targets), runs the second process's
hand-offs, and probes any recordings and live models. Chosen so that the two halves take about as long."""


def start_child(processes: int, *, probes: bool = True) -> subprocess.Popen[bytes] | None:
    """Start the process that probes `CHILD_APIS`, if `processes` >= 2, there are probes and two cores or more."""
    if processes < 2 or not probes or (os.cpu_count() or 1) < 2 or not sys.executable:
        return None
    # The same package as this process, wherever the working directory is.
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get('PYTHONPATH')
    env = {**os.environ, 'PYTHONPATH': root + (os.pathsep + path if path else '')}
    try:
        return subprocess.Popen(
            [sys.executable, '-m', __name__],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except OSError:  # no process can be started here: every row is probed in this one
        return None


def measure_matrix(
    *,
    probes: bool = True,
    recordings: Sequence[str | Path] = (),
    live: Sequence[str] = (),
    progress: Progress | None = None,
    child: subprocess.Popen[bytes] | None = None,
) -> CapabilityMatrix:
    """`build_matrix` from synchronous code; with `child` (from `start_child`), its rows are probed there.

    Args:
        probes: Run the built-in probes over the package's wire fixtures.
        recordings: Recording files or folders (probed in this process).
        live: `provider:model` names to probe live (in this process).
        progress: Called with a short line as each step starts (the child's lines when its rows arrive).
        child: The process started by `start_child`, or `None` to probe every row here.
    """
    import anyio

    from ._fixtures import FIXTURE_APIS
    from ._probes import build_matrix, explain_gaps, run_handoffs

    if child is None or not probes:
        return anyio.run(lambda: build_matrix(probes=probes, recordings=recordings, live=live, progress=progress))
    own: list[ApiLabel] = [api for api in FIXTURE_APIS if api not in CHILD_APIS]
    theirs_apis: list[ApiLabel] = [api for api in FIXTURE_APIS if api in CHILD_APIS]
    try:
        matrix = anyio.run(lambda: build_matrix(apis=own, recordings=recordings, live=live, progress=progress))
    except BaseException:  # interrupted, or a bug: the second process is not left running
        child.kill()
        child.communicate()
        raise
    received, failure = _collect(child)
    say: Progress = progress or (lambda _line: None)
    if received is None:
        say(f'note: the second probing process failed ({failure}); probing its rows here')
        lines, theirs, handoffs = [], anyio.run(lambda: build_matrix(apis=theirs_apis, progress=progress)), []
    else:
        lines, theirs, handoffs = received
    for line in lines:
        say(line)
    merged = matrix.merge(theirs)
    anyio.run(run_handoffs, merged, handoffs)  # the second process leaves its hand-offs to this one
    explain_gaps(merged)
    return merged


def _collect(
    child: subprocess.Popen[bytes],
) -> tuple[tuple[list[str], CapabilityMatrix, list[DeferredHandoff]] | None, str]:
    """The child's progress lines, matrix and hand-offs left to run, or `None` and why there are none."""
    from ._matrix import CapabilityMatrix

    out, err = child.communicate()
    if child.returncode != 0:
        last = err.decode(errors='replace').strip().splitlines()[-1:] or ['no message']
        return None, f'exit status {child.returncode}: {last[0][:200]}'
    try:
        # Trusted data: written by this package's own code in a process this one started a moment ago.
        lines, matrix, handoffs = pickle.loads(out)
    except Exception as e:
        return None, f'unreadable result: {type(e).__name__}'
    if not (isinstance(matrix, CapabilityMatrix) and isinstance(lines, list) and isinstance(handoffs, list)):
        return None, 'unreadable result'
    return (
        [str(line) for line in cast('list[object]', lines)],
        matrix,
        cast(list['DeferredHandoff'], handoffs),
    ), ''


def _child_main() -> None:  # pragma: no cover  # runs in the second process; tests check what it sends
    import anyio

    from ..cli import one_process_run
    from ._fixtures import FIXTURE_APIS
    from ._probes import build_matrix, deferring_handoffs

    lines: list[str] = []
    with one_process_run(), deferring_handoffs() as handoffs:
        apis: list[ApiLabel] = [api for api in FIXTURE_APIS if api in CHILD_APIS]
        matrix = anyio.run(lambda: build_matrix(apis=apis, progress=lines.append))
        sys.stdout.buffer.write(pickle.dumps((lines, matrix, handoffs), protocol=pickle.HIGHEST_PROTOCOL))
        sys.stdout.flush()


if __name__ == '__main__':  # pragma: no cover  # the second process
    _child_main()
