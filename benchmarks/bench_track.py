"""P1: `TrackCitations` on a streamed run of 2,000 text deltas with late citations costs ≤ 1.08× the same run without it.

Both runs use the same `CitingModel` (Google style: citations arrive after the text part ended) through
`agent.run_stream`, consumed to the end, with the completeness verdict in place (the report, taken after each tracked
run as an application would, is checked complete but not timed). Subject and baseline are timed back to back in alternating order, in CPU time with the
garbage collector paused; the median of the per-pair ratios is asserted and printed.
"""

from __future__ import annotations

import gc
import statistics
import time

import anyio
from pydantic_ai import Agent, WebCitationSource
from pydantic_ai.result import StreamedRunResult

from pydantic_ai_citations import TrackCitations
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

DELTAS = 2_000
CHUNK = 4
ROUNDS = 21
TARGET = 1.08


def _agent(track: TrackCitations | None) -> Agent[None, str]:
    text = ('word ' * (DELTAS * CHUNK // 5 + 1))[: DELTAS * CHUNK - 1] + '.'
    quote = text[:40]
    model = CitingModel(
        text,
        [ScriptedCitation(quote, [WebCitationSource('https://example.com/a')])],
        style='google',
        chunk_size=CHUNK,
        part_after_text=True,
    )
    return Agent(model, capabilities=[track] if track is not None else [])


async def _stream(agent: Agent[None, str]) -> StreamedRunResult[None, str]:
    async with agent.run_stream('q') as run:
        async for _ in run.stream_text(delta=True, debounce_by=None):
            pass
    return run


def _time(agent: Agent[None, str], track: TrackCitations | None = None) -> float:
    gc.collect()
    gc.disable()  # CPU time with the collector paused: the machine may be shared
    try:
        start = time.process_time()
        run = anyio.run(_stream, agent)
        elapsed = time.process_time() - start
    finally:
        gc.enable()
    if track is not None:  # the application takes its report (complete only with the finishing signal); untimed
        assert track.report(run).answer.complete
    return elapsed


def test_p1_track_citations_overhead(benchmark: object) -> None:
    track = TrackCitations()
    plain, tracked = _agent(None), _agent(track)
    _time(plain)  # warm up imports and caches
    _time(tracked, track)
    base: list[float] = []
    subject: list[float] = []
    ratios: list[float] = []
    for i in range(ROUNDS):  # back to back, in alternating order: each pair sees the same machine load
        if i % 2:
            b, t = _time(plain), _time(tracked, track)
        else:
            t, b = _time(tracked, track), _time(plain)
        base.append(b)
        subject.append(t)
        ratios.append(t / b)
    ratio = statistics.median(ratios)
    print(
        f'\nP1: TrackCitations / plain = {ratio:.3f} (median {statistics.median(subject) * 1000:.1f} ms '
        f'vs {statistics.median(base) * 1000:.1f} ms over {ROUNDS} rounds of {DELTAS} deltas)'
    )
    benchmark.pedantic(anyio.run, args=(_stream, tracked), rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET, f'TrackCitations costs {ratio:.3f}x, target {TARGET}x'
