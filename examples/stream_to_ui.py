"""Stream an answer to a UI and deliver its citations once the response has really completed.

Runs offline with `CitingModel` imitating Gemini with Google Search grounding: the citations arrive at the very end,
after the text part's `PartEndEvent` (another part started in between).

1. `stream_cited`: text chunks as they arrive, then one `FinalAnswer` with the citations.
2. A stream that breaks: an incomplete `FinalAnswer` (never a complete-looking one), then the error.
3. The Vercel AI data stream: `CitedVercelAIEventStream` sends the late citations as a `data-pydantic-ai-citations`
   chunk and `source-url` chunks; Pydantic AI's stock `VercelAIEventStream` would drop them.

    python examples/stream_to_ui.py
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent, WebCitationSource

from pydantic_ai_citations import FinalAnswer, TextChunk, render_markdown, stream_cited
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation
from pydantic_ai_citations.ui import CitedVercelAIEventStream

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
CITATIONS = [
    ScriptedCitation('K2 is 8,611 m tall.', [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2')]),
    ScriptedCitation(
        'China–Pakistan border',
        [
            WebCitationSource(
                'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbC123', title='britannica.com'
            )
        ],
    ),
]


def gemini(break_stream_after: int | None = None) -> Agent[None, str]:
    model = CitingModel(
        TEXT, CITATIONS, style='google', part_after_text=True, chunk_size=8, break_stream_after=break_stream_after
    )
    return Agent(model)


async def stream_to_terminal() -> None:
    print('--- 1. stream_cited ---')
    async with stream_cited(gemini(), 'How tall is K2?') as stream:
        async for item in stream:
            if isinstance(item, TextChunk):
                print(f'text: {item.text!r}')
            else:
                print(f'final (complete={item.complete}):')
                print(render_markdown(item.answer, 'footnotes'))


async def broken_stream() -> None:
    print('--- 2. a stream that breaks ---')
    try:
        async with stream_cited(gemini(break_stream_after=2), 'How tall is K2?') as stream:
            async for item in stream:
                if isinstance(item, FinalAnswer):
                    print(f'final (complete={item.complete}): {item.answer.text!r}')
                    print('problems:', [p.code for p in item.answer.problems])
    except ConnectionError as error:
        print(f'then the error is raised: {error!r}')


async def vercel_data_stream() -> None:
    print('--- 3. Vercel AI data stream ---')
    async with gemini().run_stream_events('How tall is K2?') as events:
        async for chunk in CitedVercelAIEventStream().transform_stream(events):
            print(CitedVercelAIEventStream().encode_event(chunk).strip()[:160])


async def main() -> None:
    await stream_to_terminal()
    await broken_stream()
    await vercel_data_stream()


if __name__ == '__main__':
    asyncio.run(main())
