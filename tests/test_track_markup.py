"""Readers never see raw citation markup: OpenAI private-use markers in an answer, with default settings.

Markers that were resolved (`TrackCitations(marker_sources=...)`) become citations; the rest are removed from every
text a reader gets (`stream_cited` chunks, the `FinalAnswer`, `CitedAnswer`, `TrackCitations.report`) and recorded as
problems with their offsets into the part's text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer, FinalAnswer, TextChunk, TrackCitations, stream_cited

pytestmark = pytest.mark.anyio

RESOLVED = '\ue200cite\ue202turn0search0\ue201'
UNKNOWN = '\ue200cite\ue202turn9search2\ue201'
TEXT = f'K2 is 8,611 m tall.{RESOLVED} It is remote.{UNKNOWN} Few climb it \ue200cite\ue202turn1'
CLEAN = 'K2 is 8,611 m tall. It is remote. Few climb it'
PRIVATE_USE = ('\ue200', '\ue201', '\ue202')
WEB = WebCitationSource('https://example.com/k2', title='K2')


def _no_private_use(text: str) -> bool:
    return not any(c in text for c in PRIVATE_USE)


def _agent(*capabilities: Any, delta: int = 3) -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(TEXT)])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for start in range(0, len(TEXT), delta):  # markers split across deltas
            yield TEXT[start : start + delta]

    return Agent(FunctionModel(answer, stream_function=stream), capabilities=list(capabilities))


@pytest.mark.parametrize('via', ['events', 'run_stream'])
@pytest.mark.parametrize('delta', [1, 3, 7, 200])
async def test_stream_cited_chunks_and_final_answer_carry_no_markers(via: Any, delta: int):
    chunks: list[str] = []
    final: FinalAnswer | None = None
    async with stream_cited(_agent(delta=delta), 'q', via=via) as items:
        async for item in items:
            if isinstance(item, TextChunk):
                chunks.append(item.text)
            else:
                final = item
    assert all(_no_private_use(c) for c in chunks), chunks
    assert ''.join(chunks) == CLEAN
    assert final is not None
    assert final.answer.text == CLEAN
    assert final.complete
    problems = [(p.code, p.part_index, p.start, p.end) for p in final.answer.problems]
    first = TEXT.index(RESOLVED)
    second = TEXT.index(UNKNOWN)
    third = TEXT.index('\ue200cite\ue202turn1')
    assert problems == [
        ('unresolved_marker', 0, first, first + len(RESOLVED)),
        ('unresolved_marker', 0, second, second + len(UNKNOWN)),
        ('unterminated_marker', 0, third, len(TEXT)),
    ]


async def test_cited_answer_and_report_carry_no_markers():
    track = TrackCitations()
    result = await _agent(track).run('q')
    for answer in (CitedAnswer.from_result(result), track.report(result).answer):
        assert answer.text == CLEAN
        assert [p.code for p in answer.problems] == ['unresolved_marker', 'unresolved_marker', 'unterminated_marker']


async def test_resolved_markers_become_citations_the_rest_are_removed_and_reported():
    track = TrackCitations(marker_sources={'turn0search0': WEB})
    async with stream_cited(_agent(track), 'q') as items:
        chunks = [item.text async for item in items if isinstance(item, TextChunk)]
        final = items.final
    assert final is not None
    answer = final.answer
    assert all(_no_private_use(c) for c in chunks)
    assert answer.text == CLEAN
    assert [(answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans] == [
        ('K2 is 8,611 m tall.', 'https://example.com/k2')
    ]
    # converted in place by `TrackCitations`: the unresolved ones are the run's problems
    track = TrackCitations(marker_sources={'turn0search0': WEB})
    run = track.report(await _agent(track).run('q'))
    assert run.answer.text == CLEAN
    assert len(run.answer.spans) == 1
    assert [p.code for p in run.problems] == ['unresolved_marker', 'unterminated_marker']


async def test_anchors_are_shifted_past_removed_markers():
    from pydantic_ai import Citation
    from pydantic_ai.messages import ContentCitationAnchor

    text = f'Alpha.{UNKNOWN} Beta is cited.'
    start = text.index('Beta')
    part = TextPart(text, citations=[Citation([WEB], anchor=ContentCitationAnchor(start=start, end=len(text)))])
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert answer.text == 'Alpha. Beta is cited.'
    assert [answer.span_text(s) for s in answer.spans] == ['Beta is cited.']
    assert [(s.start, s.end) for s in answer.segments] == [(0, len(answer.text))]


_K2 = {'turn0search0': WebCitationSource('https://k2.example/height')}
_M = '\ue200cite\ue202turn0search0\ue201'


@pytest.mark.anyio
@pytest.mark.parametrize(
    'text',
    [
        f'K2 is 8,611 m tall.\n{_M}\nIt was first climbed in 1954.',
        f'K2 is 8,611 m tall  {_M}. First climbed in 1954.',
        f'{_M} K2 is 8,611 m tall.',
        f'K2 is 8,611 m tall. {_M}',
    ],
    ids=['alone-on-a-line', 'spaces-before-punctuation', 'at-the-start', 'at-the-end'],
)
async def test_resolved_markers_leave_the_text_a_stream_shows(text: str) -> None:
    """`marker_sources` turns markers into citations and removes them with the grammar's one spacing rule, so the
    streamed chunks, the stream's final answer and the non-streamed answer are the same text at every split, and the
    span is on the same words (a second whitespace repair made them differ, and put UI anchors on the wrong words)."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    def agent(split: int) -> Agent[None, str]:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            for piece in (text[:split], text[split:]):
                if piece:
                    yield piece

        return Agent(FunctionModel(model, stream_function=stream), capabilities=[TrackCitations(marker_sources=_K2)])

    whole = CitedAnswer.from_result(await agent(0).run('q'))
    assert '\ue200' not in whole.text
    assert [source.url for source in whole.sources] == ['https://k2.example/height']
    assert all(whole.text[s.start : s.end].startswith('K2 is 8,611 m tall') for s in whole.spans)
    for split in range(len(text) + 1):
        chunks: list[str] = []
        final: CitedAnswer | None = None
        async with stream_cited(agent(split), 'q') as run:
            async for item in run:
                if isinstance(item, TextChunk):
                    chunks.append(item.text)
                else:
                    final = item.answer
        assert final is not None
        assert ''.join(chunks) == final.text == whole.text, split
        assert [(s.start, s.end) for s in final.spans] == [(s.start, s.end) for s in whole.spans]
