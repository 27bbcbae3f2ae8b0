"""Text that ends in what may be the opening of citation markup is held back while streaming, then released at the
end: as plain text when it never became markup, dropped (and reported) when it is an unterminated marker. Either way
the streamed chunks add up to the final answer's text.
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic_ai import Agent

from pydantic_ai_citations import FinalAnswer, TextChunk, stream_cited
from pydantic_ai_citations.testing import CitingModel

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize('via', ['events', 'run_stream'])
@pytest.mark.parametrize(
    ('text', 'shown', 'problems'),
    [
        pytest.param('Lyon is big 【', 'Lyon is big 【', [], id='lone-bracket'),
        pytest.param('Lyon is big (cite', 'Lyon is big (cite', [], id='cite-word'),
        pytest.param('Lyon \ue200cite', 'Lyon', ['unterminated_marker'], id='unterminated-openai-marker'),
    ],
)
async def test_markup_held_at_the_end_is_released_or_dropped(
    via: Literal['events', 'run_stream'], text: str, shown: str, problems: list[str]
) -> None:
    agent = Agent(CitingModel(text, [], style='google', chunk_size=3))
    async with stream_cited(agent, 'q', via=via) as stream:
        items = [item async for item in stream]
    final = items[-1]
    assert isinstance(final, FinalAnswer)
    assert final.complete
    assert ''.join(item.text for item in items if isinstance(item, TextChunk)) == final.answer.text == shown
    assert [p.code for p in final.answer.problems] == problems


@pytest.mark.parametrize('via', ['events', 'run_stream'])
@pytest.mark.parametrize('chunk_size', [1, 3, 17])
@pytest.mark.parametrize(
    ('text', 'shown'),
    [
        pytest.param(
            'Big \ue200cite\ue202turn9.\ue200cite\ue202turn0search1\ue201 More.', 'Big More.', id='openai-period'
        ),
        pytest.param(
            'Big \ue200cite\ue202turn9\ue200cite\ue202turn0search1\ue201x more.', 'Big x more.', id='openai-space'
        ),
        pytest.param('Big 【4:0†x.【4:0†source】 More.', 'Big More.', id='bracket-period'),
    ],
)
async def test_unterminated_marker_followed_by_a_marker_streams_as_the_answer(
    via: Literal['events', 'run_stream'], chunk_size: int, text: str, shown: str
) -> None:
    """How much of an unterminated marker goes depends on the marker that follows it: it is held back with it (the
    stream kept the period, and the space before the marker, that the answer drops)."""
    agent = Agent(CitingModel(text, [], style='google', chunk_size=chunk_size))
    async with stream_cited(agent, 'q', via=via) as stream:
        items = [item async for item in stream]
    final = items[-1]
    assert isinstance(final, FinalAnswer)
    assert ''.join(item.text for item in items if isinstance(item, TextChunk)) == final.answer.text == shown
    assert 'unterminated_marker' in [p.code for p in final.answer.problems]
