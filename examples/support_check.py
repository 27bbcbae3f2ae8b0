"""Check that cited pages back an answer's claims: snapshot the pages, then score every citation.

Runs offline: the "web" is an `httpx2.MockTransport` serving one tiny hand-written page, and the model is a
`FunctionModel` that answers with citations the way a provider would.

    python examples/support_check.py
"""

from __future__ import annotations

import asyncio
import tempfile

import httpx2
from pydantic_ai import Agent, Citation, MarkerCitationAnchor, TextPart, WebCitationSource
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations.support import SnapshotStore, capture_answer, check_support

PAGE = b"""<!DOCTYPE html><html><head><title>Solar school</title><script>track()</script></head><body>
<nav><a href="/">Home</a> / <a href="/news">News</a></nav>
<h1>Solar panels on the school roof</h1>
<p>The school installed 120 solar panels in March, covering the roof of the sports hall.</p>
<p>The panels produce about 40 percent of the electricity the school uses in a year.</p>
<footer><p>Subscribe for more news about solar panels, schools and electricity.</p></footer>
</body></html>"""

ANSWER = (
    'The school put 120 solar panels on its sports hall roof in March [1]. '
    'They supply roughly 40 percent of its electricity [1]. '
    'The project was paid for by a national lottery grant [2].'
)


def fake_web(request: httpx2.Request) -> httpx2.Response:
    if request.url.path == '/solar':
        return httpx2.Response(200, content=PAGE, headers={'Content-Type': 'text/html; charset=utf-8'})
    return httpx2.Response(404)


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    cites = [
        ('https://school.test/solar', '[1]', 0),
        ('https://school.test/solar', '[1]', 1),
        ('https://school.test/grant', '[2]', 0),
    ]
    citations: list[Citation] = []
    for url, marker, nth in cites:
        start = -1
        for _ in range(nth + 1):
            start = ANSWER.index(marker, start + 1)
        citations.append(
            Citation([WebCitationSource(url)], anchor=MarkerCitationAnchor(start=start, end=start + len(marker)))
        )
    return ModelResponse(parts=[TextPart(ANSWER, citations=citations)], provider_name='example')


async def main() -> list[str]:
    result = await Agent(FunctionModel(model)).run('Tell me about the solar school.')
    answer = CitedAnswer.from_result(result)
    with tempfile.TemporaryDirectory() as folder:
        store = SnapshotStore(folder)
        await capture_answer(store, answer, transport=httpx2.MockTransport(fake_web))
        report = await check_support(answer, store)
    lines = [
        f'[{c.source}] {c.verdict:<12} score={c.score if c.score is None else round(c.score, 2)!s:<5} {c.claim!r}'
        + (f'\n      best passage: {c.passage.text!r}' if c.passage else f'\n      {c.reason}')
        for c in report.checks
    ]
    curve = ', '.join(f'{p.threshold:.1f}: {p.supported_share:.0%}' for p in report.summary.threshold_curve)
    lines.append(f'threshold curve: {curve}')
    lines.append(f'dead links: {report.summary.dead_links}')
    return lines


if __name__ == '__main__':
    print('\n'.join(asyncio.run(main())))
