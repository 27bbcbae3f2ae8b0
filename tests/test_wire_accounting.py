"""Issue 14 acceptance: 0 silent wire losses, asserted per recording.

For every recording the tests can reach -- each replayable file of the shared corpus, each of the package's own wire
fixtures, and the hand-written recordings in tests/data -- the citation objects on the wire are counted from the raw
bodies (`formats.wire.count_wire_citations` reads what the provider sent; it shares nothing with the tracking code),
and each is sorted by `account_wire` (the seam suite's oracle) into normalised (Pydantic AI alone put it on
`TextPart.citations`), recovered (only with `TrackCitations`), listed (raw-only data or a problem names it) or
unaccounted. The test asserts normalised + recovered + listed == wire, so nothing is unaccounted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart
from pydantic_ai.messages import Citation, ContentCitationAnchor, DocumentCitationSource, WebCitationSource
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from pydantic_ai_citations import (
    CitationProblem,
    CitedAnswer,
    RawCitation,
    TrackCitations,
)
from pydantic_ai_citations._replay import anthropic_tap_for, cohere_tap_for, mistral_tap_for, perplexity_tap_for
from pydantic_ai_citations.formats.wire import count_wire_citations
from pydantic_ai_citations.matrix import FIXTURE_APIS, load_fixture, scenarios
from pydantic_ai_citations.testing import Recording, load_recording
from pydantic_ai_citations.testing._seams import (  # the oracle, shared with the seam suite
    _expected,  # pyright: ignore[reportPrivateUsage]
    account_wire,
    wire_expected,
)

pytestmark = pytest.mark.anyio

CORPUS = Path(__file__).resolve().parents[1].parent / 'shared' / 'corpus'
DATA = Path(__file__).parent / 'data'
NOT_RECORDINGS = ('article-extraction-benchmark',)
"""Corpus folders that hold no provider recordings."""


def _corpus_files() -> list[str]:
    if not CORPUS.is_dir():
        return []
    found = [
        p
        for p in CORPUS.rglob('*')
        if p.is_file()
        and p.name.endswith(('.yaml', '.json', '.chunks.txt'))
        and not any(part in NOT_RECORDINGS for part in p.relative_to(CORPUS).parts)
    ]
    return sorted(str(p.relative_to(CORPUS)) for p in found)


def _params() -> list[object]:
    params: list[object] = [pytest.param('corpus', name, id=f'corpus:{Path(name).name}') for name in _corpus_files()]
    if not params:
        params.append(
            pytest.param(
                'corpus',
                '',
                id='corpus',
                marks=pytest.mark.skip(reason=f'shared corpus not found at {CORPUS} (CI places ../shared beside it)'),
            )
        )
    for api in FIXTURE_APIS:
        params.extend(pytest.param('fixture', f'{api}/{s}', id=f'fixture:{api}/{s}') for s in scenarios(api))
    params.extend(
        pytest.param('data', p.name, id=f'data:{p.name}') for p in sorted(DATA.glob('*')) if p.suffix != '.md'
    )
    return params


@dataclass
class _Run:
    plain: list[ModelMessage]
    tracked: list[ModelMessage]
    answer: CitedAnswer
    problems: list[CitationProblem]
    consumed: int


async def _messages(agent: Agent[None, str], recording: Recording) -> tuple[list[ModelMessage], object]:
    prompt = recording.prompt or 'How tall is K2? Cite your sources.'
    settings = ModelSettings(recording.model_settings)
    if recording.api == 'anthropic-messages':  # a JSON body answers only a request the SDK does not stream
        settings.setdefault('max_tokens', 1024)
    if recording.streamed:
        async with agent.run_stream(prompt, model_settings=settings) as result:
            await result.get_output()
    else:
        result = await agent.run(prompt, model_settings=settings)
    return result.all_messages(), result


async def _run(recording: Recording, make: Callable[[], tuple[Model, TrackCitations]]) -> _Run:
    plain_model, _ = make()
    plain, _ = await _messages(Agent(plain_model), recording)
    model, track = make()
    tracked, result = await _messages(Agent(model, capabilities=[track]), recording)
    report = track.report(result)  # pyright: ignore[reportArgumentType]
    consumed = sum(isinstance(m, ModelResponse) for m in tracked)
    return _Run(plain, tracked, report.answer, report.problems, consumed)


def _load(kind: str, name: str) -> tuple[Recording, Callable[[], tuple[Model, TrackCitations]]]:
    if kind == 'fixture':
        api, scenario = name.split('/')
        recording: Recording = load_fixture(api, scenario)  # pyright: ignore[reportArgumentType]
    else:
        recording = load_recording((CORPUS if kind == 'corpus' else DATA) / name)

    def replayed() -> tuple[Model, TrackCitations]:
        model = recording.model()
        track = TrackCitations(
            perplexity_tap=perplexity_tap_for(model),
            cohere_tap=cohere_tap_for(model),
            anthropic_tap=anthropic_tap_for(model),
            mistral_tap=mistral_tap_for(model),
        )
        return model, track

    return recording, replayed


@pytest.mark.parametrize(('kind', 'name'), _params())
async def test_every_wire_citation_is_accounted(kind: str, name: str):
    recording, make = _load(kind, name)
    if not any(count_wire_citations(recording.api, r.payload) for r in recording.responses):
        return  # nothing on the wire, nothing to lose (structured-output fixtures, uncited follow-ups)
    run = await _run(recording, make)
    expected = wire_expected(recording)(run.consumed, 0)
    outcomes = account_wire(expected, plain=run.plain, tracked=run.tracked, answer=run.answer, problems=run.problems)
    counts = {outcome: len(labels) for outcome, labels in outcomes.items()}
    assert outcomes.get('unaccounted', []) == [], counts
    normalised, recovered, listed = (counts.get(o, 0) for o in ('normalised', 'recovered', 'listed'))
    assert normalised + recovered + listed == len(expected) > 0


# -- the oracle, on values it must sort ------------------------------------------------------------------------


def _response(*citations: Citation, text: str = 'Tides follow the Moon.') -> list[ModelMessage]:
    return [ModelResponse(parts=[TextPart('Intro. '), TextPart(text, citations=list(citations) or None)])]


def test_account_wire_sorts_each_citation_once():
    moon = Citation(
        [WebCitationSource('https://moon.example', title='Moon')], anchor=ContentCitationAnchor(start=0, end=5)
    )
    kb = Citation([DocumentCitationSource(document_id='kb-7')])
    expected = [
        _expected('normalised', url='https://moon.example', title='Moon'),
        _expected('recovered', document_id='kb-7'),
        _expected('raw', url='https://raw.example'),
        _expected('at offsets', offsets=(7, 12)),  # the part's 0-5, counted in the response's joined text
        _expected('told at offsets', offsets=(40, 44)),
        _expected('named', url='https://named.example'),
        _expected('by kind', document_id='0', kind='reference'),
        _expected('shared title only', url='https://other.example', title='Moon'),
        _expected('numeric id', document_id='3'),
    ]
    answer = CitedAnswer(
        text='', raw_only=[RawCitation({'url': 'https://raw.example'}, 'kept for audit', message_index=0, raw_index=0)]
    )
    problems = [
        CitationProblem('unmapped_provider_citation', 'lost: https://named.example'),
        CitationProblem('unmapped_provider_citation', 'Mistral `reference` chunks dropped; see 3'),
        CitationProblem('unresolved_marker', 'marker', start=40, end=44),
    ]
    outcomes = account_wire(
        expected, plain=_response(moon), tracked=_response(moon, kb), answer=answer, problems=problems
    )
    assert outcomes == {
        'normalised': ['normalised', 'at offsets'],
        'recovered': ['recovered'],
        'listed': ['raw', 'told at offsets', 'named', 'by kind'],
        'unaccounted': ['shared title only', 'numeric id'],
    }


def test_a_citation_lost_on_the_way_is_unaccounted():
    moon = Citation([WebCitationSource('https://moon.example')])
    outcomes = account_wire(
        [_expected('moon', url='https://moon.example')],
        plain=_response(moon),
        tracked=_response(),
        answer=CitedAnswer(text=''),
        problems=[],
    )
    assert outcomes == {'unaccounted': ['moon']}
