"""P1: `TrackCitations` on a streamed run of 2,000 text deltas with late citations costs ≤ 1.08× the same run without it.

Both runs use the same `CitingModel` (Google style: citations arrive after the text part ended) through
`agent.run_stream`, consumed to the end. Subject and baseline are timed alternately in the same process; the ratio of
their medians is asserted and printed.
"""

from __future__ import annotations

import statistics
import time

import anyio
from pydantic_ai import Agent, WebCitationSource

from pydantic_ai_citations import TrackCitations
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

DELTAS = 2_000
CHUNK = 4
ROUNDS = 21
TARGET = 1.08


def _agent(track: bool) -> Agent[None, str]:
    text = ('word ' * (DELTAS * CHUNK // 5 + 1))[: DELTAS * CHUNK - 1] + '.'
    quote = text[:40]
    model = CitingModel(
        text,
        [ScriptedCitation(quote, [WebCitationSource('https://example.com/a')])],
        style='google',
        chunk_size=CHUNK,
        part_after_text=True,
    )
    return Agent(model, capabilities=[TrackCitations()] if track else [])


async def _stream(agent: Agent[None, str]) -> None:
    async with agent.run_stream('q') as run:
        async for _ in run.stream_text(delta=True, debounce_by=None):
            pass


def _time(agent: Agent[None, str]) -> float:
    start = time.perf_counter()
    anyio.run(_stream, agent)
    return time.perf_counter() - start


def test_p1_track_citations_overhead(benchmark: object) -> None:
    plain, tracked = _agent(False), _agent(True)
    for agent in (plain, tracked):  # warm up imports and caches
        _time(agent)
    base: list[float] = []
    subject: list[float] = []
    for _ in range(ROUNDS):
        base.append(_time(plain))
        subject.append(_time(tracked))
    ratio = statistics.median(subject) / statistics.median(base)
    print(
        f'\nP1: TrackCitations / plain = {ratio:.3f} (median {statistics.median(subject) * 1000:.1f} ms '
        f'vs {statistics.median(base) * 1000:.1f} ms over {ROUNDS} rounds of {DELTAS} deltas)'
    )
    benchmark.pedantic(anyio.run, args=(_stream, tracked), rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET, f'TrackCitations costs {ratio:.3f}x, target {TARGET}x'
