"""Render a cited answer as Markdown and HTML, and redact it for logs.

Runs offline: the model is `CitingModel`, a scripted model that cites the way Anthropic does (each cited sentence
its own text part, anchored over the whole part, with web and document sources).

    python examples/render_answer.py            # prints Markdown, writes answer.html to a temporary directory
    python examples/render_answer.py out.html   # writes the HTML page there
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent, DocumentCitationSource, WebCitationSource

from pydantic_ai_citations import CitedAnswer, render_html, render_markdown
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

TEXT = (
    'K2 is 8,611 m tall, the second-highest mountain on Earth. '
    'It lies on the China–Pakistan border, in the Karakoram range. '
    'The first ascent was in 1954 by an Italian expedition.'
)
CITATIONS = [
    ScriptedCitation(
        'K2 is 8,611 m tall, the second-highest mountain on Earth.',
        [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')],
    ),
    ScriptedCitation(
        'It lies on the China–Pakistan border, in the Karakoram range.',
        # A hostile source: its URL is not a link, its title is escaped.
        [WebCitationSource('javascript:alert(1)', title='<img src=x onerror=alert(1)>')],
    ),
    ScriptedCitation(
        'The first ascent was in 1954 by an Italian expedition.',
        [DocumentCitationSource(document_id='file_011', title='Expedition notes.pdf', excerpts=['Private notes…'])],
    ),
]


async def main(html_path: Path) -> None:
    agent = Agent(CitingModel(TEXT, CITATIONS, style='anthropic'))
    answer = CitedAnswer.from_result(await agent.run('Tell me about K2'))

    print('--- Markdown, inline links ---')
    print(render_markdown(answer))
    print('--- Markdown, footnotes ---')
    print(render_markdown(answer, 'footnotes'))
    print('--- For logs: document excerpts redacted ---')
    print(render_markdown(answer, 'footnotes', redact=True))

    html_path.write_text(render_html(answer, document=True), encoding='utf-8')
    print(f'HTML page written to {html_path}')


if __name__ == '__main__':
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / 'answer.html'
    asyncio.run(main(target))
