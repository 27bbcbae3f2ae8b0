"""P1 for non-streamed runs: `agent.run` with `TrackCitations` costs ≤ 1.10× the bare run, and with `TrackCitations`,
`StripCitationMarkup` and `CleanStaleCitations` together ≤ 1.15×.

The model is Pydantic AI's real `AnthropicModel` answering, offline, with a real recorded response (Anthropic web
search, five cited text parts plus the search tool call and results: `test_anthropic_web_search_citations.yaml` from
the shared corpus) through an `httpx2.MockTransport`, so a run costs what it costs a user minus the network. The
application takes its report after every tracked run (`TrackCitations.report`), as it would; that call is not part of
`agent.run` and is timed apart (`test_p1_report_cost`: printed, not asserted). Bare and subject rounds
alternate in the same process, back to back and in alternating order; CPU time of each round is measured with the
garbage collector paused (the machine may be shared), and the median of the per-pair ratios is asserted and printed.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.run import AgentRunResult

from pydantic_ai_citations import CleanStaleCitations, StripCitationMarkup, TrackCitations
from pydantic_ai_citations.testing import load_recording

RECORDING = (
    Path(__file__).resolve().parents[1].parent
    / 'shared/corpus/pydantic-ai-cassettes/tests/models/cassettes/test_anthropic/test_anthropic_web_search_citations.yaml'
)
RUNS = 10
"""Runs per timed round (one run is too short to time on its own)."""
ROUNDS = 31
TARGET_TRACK = 1.10
TARGET_ALL = 1.15


def _agent(*capabilities: AbstractCapability[None]) -> tuple[Agent[None, str], dict[str, object]]:
    if not RECORDING.is_file():
        pytest.skip(f'shared corpus not found at {RECORDING}')
    recording = load_recording(RECORDING)
    raw = recording.responses[0]

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(raw.status, headers=list(raw.headers), content=raw.body)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    model = AnthropicModel(recording.model_name, provider=AnthropicProvider(api_key='x', http_client=client))
    agent = Agent(model, deps_type=type(None), capabilities=list(capabilities))
    return agent, dict(recording.model_settings)


def _runner(capabilities: tuple[AbstractCapability[None], ...], track: TrackCitations | None) -> Callable[[], None]:
    agent, settings = _agent(*capabilities)
    results: list[AgentRunResult[str]] = []

    async def runs() -> None:
        for _ in range(RUNS):
            results.append(await agent.run('What is the weather in San Francisco today?', model_settings=settings))  # type: ignore[arg-type]

    def run() -> None:
        anyio.run(runs)

    def settle() -> None:
        if track is not None:  # the application takes each report (timed apart: see `test_p1_report_cost`)
            for result in results:
                track.report(result)
        results.clear()

    run.settle = settle  # type: ignore[attr-defined]
    return run


def _time(run: Callable[[], None]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        run()
        return time.process_time() - start
    finally:
        gc.enable()
        run.settle()  # type: ignore[attr-defined]


def _ratio(base: Callable[[], None], subject: Callable[[], None]) -> tuple[float, float, float]:
    """Median over rounds of subject / base, each pair timed back to back (so both see the same machine load)."""
    for run in (base, subject):  # warm up imports and caches
        run()
    ratios: list[float] = []
    base_times: list[float] = []
    subject_times: list[float] = []
    for i in range(ROUNDS):
        first, second = (base, subject) if i % 2 else (subject, base)
        t1, t2 = _time(first), _time(second)
        b, s = (t1, t2) if first is base else (t2, t1)
        base_times.append(b)
        subject_times.append(s)
        ratios.append(s / b)
    return statistics.median(ratios), statistics.median(subject_times), statistics.median(base_times)


def test_p1_run_with_track_citations(benchmark: object) -> None:
    track = TrackCitations()
    subject = _runner((track,), track)
    ratio, s, b = _ratio(_runner((), None), subject)
    print(f'\nP1 run: TrackCitations / bare = {ratio:.3f} ({s / RUNS * 1e3:.2f} ms vs {b / RUNS * 1e3:.2f} ms per run)')
    benchmark.pedantic(subject, rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET_TRACK, f'TrackCitations costs {ratio:.3f}x on agent.run, target {TARGET_TRACK}x'


def test_p1_run_with_three_capabilities(benchmark: object) -> None:
    track = TrackCitations()
    subject = _runner((track, StripCitationMarkup(), CleanStaleCitations()), track)
    ratio, s, b = _ratio(_runner((), None), subject)
    print(f'\nP1 run: three capabilities / bare = {ratio:.3f} ({s / RUNS * 1e3:.2f} ms vs {b / RUNS * 1e3:.2f} ms/run)')
    benchmark.pedantic(subject, rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET_ALL, f'the three capabilities cost {ratio:.3f}x on agent.run, target {TARGET_ALL}x'


def test_p1_report_cost() -> None:
    """How long `TrackCitations.report` takes on this answer, next to one bare run (informational)."""
    agent, settings = _agent()
    track = TrackCitations()
    tracked, _ = _agent(track)

    async def one(a: Agent[None, str]) -> AgentRunResult[str]:
        return await a.run('What is the weather in San Francisco today?', model_settings=settings)  # type: ignore[arg-type]

    results = [anyio.run(one, tracked) for _ in range(50)]
    start = time.process_time()
    for result in results:
        track.report(result)
    report = (time.process_time() - start) / len(results)
    start = time.process_time()
    for _ in range(20):
        anyio.run(one, agent)
    bare = (time.process_time() - start) / 20
    print(f'\nP1 run: TrackCitations.report takes {report * 1e3:.2f} ms ({report / bare:.1%} of a bare run)')
