"""What the package's capabilities add to each request: no model wrapper for a request that is not streamed, one
`StreamWatch` layer (shared by `TrackCitations` and `CleanStaleCitations`) for a streamed one, no per-run copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Agent, ModelResponse, RunContext, WebCitationSource
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel

from pydantic_ai_citations import CleanStaleCitations, StripCitationMarkup, TrackCitations, VerifyEvidence
from pydantic_ai_citations._edit import _HEAD, _SECOND, METADATA_KEY, _anchor_print  # pyright: ignore[reportPrivateUsage]
from pydantic_ai_citations._wrappers import StreamWatch
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

pytestmark = pytest.mark.anyio

TEXT = 'Pydantic validates data. It is fast.'


@dataclass
class _SeeServingModel(AbstractCapability[Any]):
    """Listed first, so it wraps last: records the model the other capabilities' wrappers made for each attempt."""

    seen: list[Model] = field(default_factory=list[Model])

    def get_wrapper_model(self, model: Model) -> Model | None:
        self.seen.append(model)
        return None


def _agent(*capabilities: AbstractCapability[Any]) -> tuple[Agent[None, str], CitingModel, _SeeServingModel]:
    # Google style: citations arrive once the response finished, which only the watched stream can tell.
    model = CitingModel(
        TEXT, [ScriptedCitation('It is fast.', [WebCitationSource('https://example.com/a')])], style='google'
    )
    see = _SeeServingModel()
    return Agent(model, capabilities=[see, *capabilities]), model, see


async def test_a_request_that_is_not_streamed_gets_no_wrapper() -> None:
    track = TrackCitations()
    agent, model, see = _agent(track, CleanStaleCitations())
    result = await agent.run('q')
    assert see.seen == [model]
    assert [p.arrival for p in track.report(result).requests[0].parts if p.citations] == ['response']


@pytest.mark.parametrize('order', ['track_first', 'clean_first'])
async def test_a_streamed_request_gets_one_shared_stream_watch(order: str) -> None:
    track, clean = TrackCitations(), CleanStaleCitations()
    agent, model, see = _agent(*((track, clean) if order == 'track_first' else (clean, track)))
    async with agent.run_stream('q') as run:
        await run.get_output()
    [served] = see.seen
    assert isinstance(served, StreamWatch)
    assert served.wrapped is model
    assert len(served.on_stream) == 2
    report = track.report(run)
    assert report.answer.complete
    assert [p.arrival for p in report.requests[0].parts if p.citations] == ['response_end']  # the stream was seen
    [response] = [m for m in run.all_messages() if isinstance(m, ModelResponse)]
    assert response.metadata is not None and METADATA_KEY in response.metadata  # fingerprinted through the stream


async def test_each_run_uses_the_agents_instances_and_keeps_its_own_state() -> None:
    # No per-run copies: a capability that returns a new instance from `for_run` makes Pydantic AI rebuild the run's
    # capability tree on every run. Each run's state is kept by the instance under the run's id instead.
    track = TrackCitations(recover_raw=False)
    strip = StripCitationMarkup(policy='retry')
    clean = CleanStaleCitations(on_edit='clear')
    agent, _, _ = _agent(track, strip, clean)
    runs: list[AbstractCapability[Any]] = []

    @dataclass
    class _Collect(AbstractCapability[Any]):
        async def before_run(self, ctx: RunContext[Any]) -> None:
            runs.extend(ctx.capabilities.values())

    verify = VerifyEvidence()
    agent = Agent(agent.model, capabilities=[_Collect(), track, strip, clean, verify])
    first, second = await agent.run('q'), await agent.run('q')
    ours = [
        c for c in runs if isinstance(c, TrackCitations | StripCitationMarkup | CleanStaleCitations | VerifyEvidence)
    ]
    assert [id(c) for c in ours] == [id(track), id(strip), id(clean), id(verify)] * 2
    assert len(track._runs) == 2  # pyright: ignore[reportPrivateUsage]  # until each report is taken
    assert track.report(first).requests[0] is not track.report(second).requests[0]
    assert len(track._runs) == 0  # pyright: ignore[reportPrivateUsage]
    assert len(clean._runs) == 0  # pyright: ignore[reportPrivateUsage]  # released when each run ended
    assert len(clean._attempt) == len(track._watch) == 0  # pyright: ignore[reportPrivateUsage]


@dataclass
class _Interleave(AbstractCapability[Any]):
    """Listed last: yields to the event loop between the others' `prepare_model_request` and `get_wrapper_model`."""

    async def prepare_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        await anyio.sleep(0.01)
        return request_context


async def test_concurrent_runs_of_one_agent_each_watch_their_own_stream() -> None:
    track, clean = TrackCitations(), CleanStaleCitations()
    agent, _, see = _agent(track, clean, _Interleave())
    reports: dict[str, Any] = {}

    async def one(name: str, stream: bool) -> None:
        if stream:
            async with agent.run_stream('q') as run:
                await run.get_output()
        else:
            run = await agent.run('q')
        reports[name] = (track.report(run), run.all_messages())

    async with anyio.create_task_group() as tg:
        for n in range(6):
            tg.start_soon(one, f'run{n}', n % 2 == 0)
    assert sum(isinstance(m, StreamWatch) for m in see.seen) == 3
    for name, (report, messages) in reports.items():
        streamed = int(name[-1]) % 2 == 0
        assert [p.arrival for p in report.requests[0].parts if p.citations] == (
            ['response_end'] if streamed else ['response']
        )
        assert report.answer.complete
        [response] = [m for m in messages if isinstance(m, ModelResponse)]
        assert response.metadata is not None and METADATA_KEY in response.metadata
    assert len(track._runs) == len(clean._runs) == 0  # pyright: ignore[reportPrivateUsage]


def _poly_per_character(text: str) -> str:
    base, modulus = _SECOND
    h = 0
    for code in map(ord, text):
        h = (h * base + code) % modulus
    return f'{h:x}'


@given(st.text(st.characters(codec=None), min_size=1, max_size=700))
def test_the_anchor_hashes_are_the_per_character_polynomial(text: str) -> None:
    for anchored in (text, text * 3, text + '\ud800'):  # lone surrogates, e.g. from JSON escapes
        _, length, head, whole, _ = _anchor_print(anchored, None)
        assert (length, head, whole) == (
            len(anchored),
            _poly_per_character(anchored[:_HEAD]),
            _poly_per_character(anchored),
        )


async def test_a_streamed_fallback_request_is_cleaned_and_watched_through_one_layer() -> None:
    # `TrackCitations` listed after `CleanStaleCitations` wraps the `FallbackModel` first: `CleanStaleCitations` copies
    # that layer around its cleaned copy of the `FallbackModel`, then joins it.
    first, second = (
        CitingModel(
            TEXT, [ScriptedCitation('It is fast.', [WebCitationSource(f'https://example.com/{n}')])], style='google'
        )
        for n in 'ab'
    )
    fallback = FallbackModel(first, second)
    track = TrackCitations()
    see = _SeeServingModel()
    agent = Agent(fallback, capabilities=[see, CleanStaleCitations(), track])
    async with agent.run_stream('q') as run:
        await run.get_output()
    [served] = see.seen
    assert isinstance(served, StreamWatch) and len(served.on_stream) == 2
    assert isinstance(served.wrapped, FallbackModel) and served.wrapped is not fallback  # a cleaned copy
    assert fallback.models == [first, second]  # the agent's model is left as it is
    report = track.report(run)
    assert [p.arrival for p in report.requests[0].parts if p.citations] == ['response_end']
