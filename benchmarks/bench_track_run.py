"""P1 for non-streamed runs: `agent.run` with `TrackCitations` costs ≤ 1.10× the bare run, and with `TrackCitations`,
`StripCitationMarkup` and `CleanStaleCitations` together ≤ 1.15×.

The model is Pydantic AI's real `AnthropicModel` answering, offline, with a real recorded response (Anthropic web
search, five cited text parts plus the search tool call and results: `test_anthropic_web_search_citations.yaml` from
the shared corpus) through an `httpx2.MockTransport`, so a run costs what it costs a user minus the network. The
application takes its report after every tracked run (`TrackCitations.report`), as it would; that call is not part of
`agent.run` and is timed apart (`test_p1_report_cost`: printed, not asserted). For scale, three capabilities that
override nothing are measured the same way and printed (`test_p1_run_with_three_empty_capabilities`): Pydantic AI's
dispatch of every hook to every capability costs that much before any capability does any work.

Noise (the machine may be shared): bare and subject runs alternate one by one inside each round (in alternating order),
each run timed in CPU time with the garbage collector paused, so both sides of a round see the same load. A round's
ratio is its subject time over its bare time; the median over rounds is asserted and printed with its quartiles.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings

from pydantic_ai_citations import CleanStaleCitations, StripCitationMarkup, TrackCitations
from pydantic_ai_citations.testing import load_recording

RECORDING = (
    Path(__file__).resolve().parents[1].parent
    / 'shared/corpus/pydantic-ai-cassettes/tests/models/cassettes/test_anthropic/test_anthropic_web_search_citations.yaml'
)
PROMPT = 'What is the weather in San Francisco today?'
RUNS = 10
"""Runs of each side per round (one run, ~8 ms, is too short to compare on its own)."""
ROUNDS = 41
TARGET_TRACK = 1.10
TARGET_ALL = 1.15


def _agent(*capabilities: AbstractCapability[None]) -> tuple[Agent[None, str], ModelSettings]:
    if not RECORDING.is_file():
        pytest.skip(f'shared corpus not found at {RECORDING}')
    recording = load_recording(RECORDING)
    raw = recording.responses[0]

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(raw.status, headers=list(raw.headers), content=raw.body)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    model = AnthropicModel(recording.model_name, provider=AnthropicProvider(api_key='x', http_client=client))
    agent = Agent(model, deps_type=type(None), capabilities=list(capabilities))
    return agent, recording.model_settings


async def _one(agent: Agent[None, str], settings: ModelSettings) -> AgentRunResult[str]:
    return await agent.run(PROMPT, model_settings=settings)


async def _rounds(
    bare: Agent[None, str], subject: Agent[None, str], settings: ModelSettings, track: TrackCitations | None
) -> list[tuple[float, float]]:
    """(bare, subject) CPU seconds per round, runs alternating one by one."""

    async def timed(agent: Agent[None, str]) -> tuple[float, AgentRunResult[str]]:
        start = time.process_time()
        result = await agent.run(PROMPT, model_settings=settings)
        return time.process_time() - start, result

    for agent in (bare, subject, bare, subject):  # warm up imports and caches
        _, result = await timed(agent)
        if track is not None and agent is subject:
            track.report(result)
    rounds: list[tuple[float, float]] = []
    for _ in range(ROUNDS):
        totals = {id(bare): 0.0, id(subject): 0.0}
        results: list[AgentRunResult[str]] = []
        gc.collect()
        gc.disable()
        try:
            for i in range(RUNS):
                for agent in (bare, subject) if i % 2 else (subject, bare):
                    elapsed, result = await timed(agent)
                    totals[id(agent)] += elapsed
                    if agent is subject:
                        results.append(result)
        finally:
            gc.enable()
        if track is not None:  # the application takes each report (timed apart: see `test_p1_report_cost`)
            for result in results:
                track.report(result)
        rounds.append((totals[id(bare)], totals[id(subject)]))
    return rounds


def _ratio(capabilities: tuple[AbstractCapability[None], ...], label: str) -> float:
    """Median over rounds of subject / bare CPU time, printed with quartiles and per-run times."""
    bare, settings = _agent()
    subject, _ = _agent(*capabilities)
    track = next((c for c in capabilities if isinstance(c, TrackCitations)), None)
    rounds = anyio.run(_rounds, bare, subject, settings, track)
    ratios = [s / b for b, s in rounds]
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    b_ms = statistics.median(b for b, _ in rounds) / RUNS * 1e3
    s_ms = statistics.median(s for _, s in rounds) / RUNS * 1e3
    print(
        f'\nP1 run: {label} / bare = {median:.3f} (quartiles {q1:.3f}..{q3:.3f} over {ROUNDS} rounds; '
        f'{s_ms:.2f} ms vs {b_ms:.2f} ms per run)'
    )
    return median


def test_p1_run_with_track_citations(benchmark: object) -> None:
    ratio = _ratio((TrackCitations(),), 'TrackCitations')
    track = TrackCitations()
    agent, settings = _agent(track)
    benchmark.pedantic(lambda: track.report(anyio.run(_one, agent, settings)), rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET_TRACK, f'TrackCitations costs {ratio:.3f}x on agent.run, target {TARGET_TRACK}x'


def test_p1_run_with_three_capabilities(benchmark: object) -> None:
    ratio = _ratio((TrackCitations(), StripCitationMarkup(), CleanStaleCitations()), 'three capabilities')
    track = TrackCitations()
    agent, settings = _agent(track, StripCitationMarkup(), CleanStaleCitations())
    benchmark.pedantic(lambda: track.report(anyio.run(_one, agent, settings)), rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert ratio <= TARGET_ALL, f'the three capabilities cost {ratio:.3f}x on agent.run, target {TARGET_ALL}x'


@dataclass
class _Empty(AbstractCapability[None]):
    """A capability that overrides nothing: what Pydantic AI's dispatch of every hook costs by itself."""


def test_p1_run_with_three_empty_capabilities(benchmark: object) -> None:
    """For scale (printed, not asserted): three capabilities that do nothing, measured as the three above are.

    Pydantic AI calls every hook of every capability, each with a copy of the run context, whether the capability
    overrides it or not; this is the part of the three capabilities' figure that is not their own work.
    """
    _ratio((_Empty(), _Empty(), _Empty()), 'three empty capabilities (for scale)')
    agent, settings = _agent(_Empty(), _Empty(), _Empty())
    benchmark.pedantic(lambda: anyio.run(_one, agent, settings), rounds=3, iterations=1)  # type: ignore[attr-defined]


def test_p1_report_cost() -> None:
    """How long `TrackCitations.report` takes on this answer, next to one bare run (informational)."""
    agent, settings = _agent()
    track = TrackCitations()
    tracked, _ = _agent(track)

    async def one(a: Agent[None, str]) -> AgentRunResult[str]:
        return await a.run(PROMPT, model_settings=settings)

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
