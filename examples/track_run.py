"""Track a run's citations and build one `CitedAnswer`, offline.

`CitingModel` answers the way Google Gemini does (content anchors; citations sent after the text part ended), so
this runs without a key. Swap in `'google:gemini-3.1-flash-lite'` with `NativeTool(WebSearchTool())` for the real thing.

    python examples/track_run.py
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent, WebCitationSource

from pydantic_ai_citations import CapabilityMatrix, TrackCitations, render_markdown
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

SOURCES = [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')]


async def main() -> None:
    matrix = CapabilityMatrix()  # your own runs become 'observed' evidence
    track = TrackCitations(matrix=matrix)
    model = CitingModel(
        'K2 is 8,611 m tall. It is the second-highest mountain on Earth.',
        [ScriptedCitation('K2 is 8,611 m tall.', SOURCES)],
        style='google',
        part_after_text=True,
    )
    agent = Agent(model, capabilities=[track])

    async with agent.run_stream('How tall is K2?') as stream:
        async for _ in stream.stream_text(delta=True):
            pass
    run = track.report(stream)

    print(render_markdown(run.answer, style='footnotes'))
    for request in run.requests:
        print(f'{request.api}: streamed={request.streamed}', [(p.part_index, p.arrival) for p in request.parts])
    print('problems:', [p.code for p in run.problems] or 'none')
    print(matrix.to_markdown().split('\n\nLegend:')[0])


if __name__ == '__main__':
    asyncio.run(main())
