"""Vercel AI: text deltas carry no citation markup, and every citation is anchored on the text the UI received."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from pydantic_ai import Agent, Citation, ContentCitationAnchor, ModelMessage, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.messages import MarkerCitationAnchor
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, TextDeltaChunk, TextEndChunk
from test_ui_ag_ui import (  # the scripted stream (text, thinking, citation deltas) and an in-place change
    MARKED_CITES,
    MARKED_TEXTS,
    TEXT,
    UNRESOLVED,
    ScriptedModel,
    Step,
    _AddCitationInPlace,
)

from pydantic_ai_citations import CitedAnswer, TrackCitations
from pydantic_ai_citations.testing import CITING_STYLES, CitingModel, CitingStyle
from pydantic_ai_citations.ui import CITATIONS_DATA_TYPE, CitedVercelAIEventStream

pytestmark = pytest.mark.anyio

WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border', title='Border')
MARKER = '\ue200cite\ue202turn0search0\ue201'
PRIVATE_USE = ('\ue200', '\ue201', '\ue202')


async def chunks_of(agent: Agent[Any, str]) -> list[BaseChunk]:
    async with agent.run_stream_events('q') as events:
        return [chunk async for chunk in CitedVercelAIEventStream[Any, str]().transform_stream(events)]


def text_of(chunks: Sequence[BaseChunk]) -> str:
    return ''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk))


def anchored(citations: list[Any], text: str) -> list[tuple[str, str]]:
    return [(text[c['anchor']['start'] : c['anchor']['end']], c['sources'][0]['url']) for c in citations if c['anchor']]


def end_citations(chunks: Sequence[BaseChunk]) -> list[Any]:
    end = next(c for c in chunks if isinstance(c, TextEndChunk))
    return [] if end.provider_metadata is None else end.provider_metadata['pydantic_ai']['citations']


@pytest.mark.parametrize('size', [1, 3, 200])
async def test_text_deltas_carry_no_markup_and_text_end_anchors_follow_the_clean_text(size: int):
    raw = f'K2 is 8,611 m tall.{MARKER} It is remote.\ue200cite\ue202turn9search2\ue201 Few climb it.'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for start in range(0, len(raw), size):  # markers split across deltas
            yield raw[start : start + size]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(raw)])

    track = TrackCitations(marker_sources={'turn0search0': WIKI})
    chunks = await chunks_of(Agent(FunctionModel(answer, stream_function=stream), capabilities=[track]))
    deltas = [c.delta for c in chunks if isinstance(c, TextDeltaChunk)]
    assert not any(ch in d for d in deltas for ch in PRIVATE_USE), deltas
    text = text_of(chunks)
    assert text == 'K2 is 8,611 m tall. It is remote. Few climb it.'
    # `TrackCitations` resolves the marker once the response is done: after `text-end`, sent as late citations.
    (data,) = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data.data['citations'], text) == [('K2 is 8,611 m tall.', WIKI.url)]


async def test_anchors_on_raw_markup_move_onto_the_clean_text():
    raw = f'Alpha.{MARKER} Beta is cited.'
    beta = raw.index('Beta')
    cites = [
        Citation([WIKI], anchor=ContentCitationAnchor(start=beta, end=len(raw))),
        Citation([BORDER], anchor=MarkerCitationAnchor(start=6, end=6 + len(MARKER))),
    ]
    script: list[Step] = [('text', 'a', raw), ('cite', 'a', cites)]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    text = text_of(chunks)
    assert text == 'Alpha. Beta is cited.'
    citations = end_citations(chunks)
    assert anchored(citations, text) == [('Beta is cited.', WIKI.url)]
    assert citations[1]['anchor'] is None  # it covered nothing but the removed marker: its source is kept
    assert CITATIONS_DATA_TYPE not in [getattr(c, 'type', '') for c in chunks]  # in time: nothing sent again


async def test_late_citations_after_the_text_ended_follow_the_clean_text():
    raw = f'K2 is tall.{MARKER} Very tall.'
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=raw.index('Very'), end=len(raw)))]
    script: list[Step] = [('text', 'a', raw), ('think', 't', '...'), ('think', 't', 'more'), ('cite', 'a', cite)]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    text = text_of(chunks)
    assert text == 'K2 is tall. Very tall.'
    assert end_citations(chunks) == []
    (data,) = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data.data['citations'], text) == [('Very tall.', WIKI.url)]


async def test_a_held_back_tail_is_sent_before_text_end():
    script: list[Step] = [('text', 'a', 'Few climb it '), ('text', 'a', '(cite')]  # may open a tag: held back
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    types = [getattr(c, 'type', '') for c in chunks]
    assert text_of(chunks) == 'Few climb it (cite'  # at the end it is prose
    assert types.index('text-end') == len(types) - 1 - types[::-1].index('text-delta') + 1


async def test_citations_added_in_place_after_late_ones_reach_the_ui():
    """Google's late citations made new part objects; a capability then changed the response's own part in place:
    the run's final messages are read for the last word, and only the new URL gets a `source-url` chunk."""
    from pydantic_ai.ui.vercel_ai.response_types import SourceUrlChunk

    from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

    model = CitingModel(TEXT, [ScriptedCitation('K2 is 8,611 m tall.', [WIKI])], style='google', part_after_text=True)
    chunks = await chunks_of(Agent(model, capabilities=[_AddCitationInPlace()]))
    data = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data[-1].data['citations'], text_of(chunks)) == [
        ('K2 is 8,611 m tall.', WIKI.url),
        ('China–Pakistan border', BORDER.url),
    ]
    assert [c.url for c in chunks if isinstance(c, SourceUrlChunk)] == [WIKI.url, BORDER.url]


def final_citations(chunks: Sequence[BaseChunk]) -> list[Any]:
    """The citations the UI ends up with: `text-end`'s, replaced by the last late-citations chunk if any."""
    data = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    return data[-1].data['citations'] if data else end_citations(chunks)


@pytest.mark.parametrize('chunk_size', [1, 5, 16])
@pytest.mark.parametrize('text', MARKED_TEXTS)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_a_removed_marker_beside_part_boundaries(style: CitingStyle, text: str, chunk_size: int):
    """Anthropic and Bedrock split the text at each cited stretch, so a removed marker sits at a part's edge: the
    UI receives the answer's own text, and each anchor (on `text-end` or sent late) covers the words `CitedAnswer`
    anchors."""

    def model() -> CitingModel:
        return CitingModel(text, MARKED_CITES, style=style, chunk_size=chunk_size)

    chunks = await chunks_of(Agent(model(), capabilities=[TrackCitations()]))
    answer = CitedAnswer.from_result(await Agent(model(), capabilities=[TrackCitations()]).run('q'))
    received = text_of(chunks)
    assert received == answer.text
    assert UNRESOLVED not in received and '  ' not in received
    spans = [(answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans]
    assert anchored(final_citations(chunks), received) == spans
    if style in ('anthropic', 'bedrock', 'google'):  # these anchor the cited words (the others a marker or nothing)
        assert spans == [
            ('K2 is tall', 'https://en.wikipedia.org/wiki/K2'),
            ('China border', 'https://example.com/border'),
        ]
