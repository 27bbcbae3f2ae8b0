"""Issue 15 point 5: every path hostile input can reach runs in time linear in its input.

For each path, twice the input must cost at most 2.2x the time of the input, measured in the same run. The sizes are
those the issue measured (where the old code took seconds to minutes), halved where a round would take too long:

- `MarkerScanner(escaped=True)` with one unclosed escaped opener, then 16,000 deltas (old code: 27 s, x4 per
  doubling);
- `AgentStreamCollector` with 4,000 text deltas after `response.completed` (old: 28 s);
- `render_html` and `render_markdown` (inline and footnotes) with 16,000 spans, each citing its own source (old:
  33 s for 32,000);
- repairing an edited 200,000-character part with 100 citations (`CleanStaleCitations(on_edit='realign')`'s
  repair, old: 16.7 s); both the text and the number of citations double;
- the SSE decoder (Perplexity tap, recordings) on 80,000 events in one chunk (old: 3.2 s);
- OpenAI marker placement (`check_marker_placement`, which `TrackCitations` runs on OpenAI answers) on 10,000 markers,
  one after each sentence (old: 6.2 s; 22.8 s for a 20,000-marker answer through `TrackCitations`).
- the support check of a whole answer (a source cited without a position) against a long page: `PassageIndex` and
  `best` for a claim of half the words of every 16th passage, against 250 passages, both doubled (old: 2.5x at this
  size, 3.4x at 1,000 passages; a 16 KB answer against 2,000 passages took 4.7 s, against 8,000 120 s). Each 250
  passages have a vocabulary of their own, so twice the input is twice the same kind of text (with one vocabulary
  for the whole page, a longer claim holds more of each passage's words, and the work grows with that share). At
  1,000 passages the ratio is about 2.3x: the index's bit sets (an int per word, as wide as the page) and a working
  set outgrowing the CPU's caches.

Times are CPU times of this process, best of several rounds, the single and double input measured alternately with
the garbage collector off, warm and cold (see `bench_formats.best_ratio`); the larger ratio counts.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_formats import best_ratio, report
from pydantic_ai import Citation, ContentCitationAnchor, ModelResponse, TextPart, WebCitationSource

from pydantic_ai_citations import CitedAnswer, render_html, render_markdown
from pydantic_ai_citations._edit import fingerprint_response, repair_part
from pydantic_ai_citations.formats._sse import sse_data
from pydantic_ai_citations.formats.openai_markers import MarkerScanner
from pydantic_ai_citations.formats.openai_placement import check_marker_placement
from pydantic_ai_citations.formats.perplexity import AgentStreamCollector
from pydantic_ai_citations.support import Passage, PassageIndex

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests'))
from _long_page import long_page_texts

LIMIT = 2.2


def escaped_scanner(n: int) -> Callable[[], object]:
    deltas = [f'word{i % 10} ' for i in range(n)]

    def run() -> object:
        scanner = MarkerScanner(escaped=True)
        scanner.feed('See \\ue200cite\\ue202turn0search1')
        for delta in deltas:
            scanner.feed(delta)
        return scanner.close()

    return run


def collector_after_completed(n: int) -> Callable[[], object]:
    events: list[dict[str, Any]] = [
        {'type': 'response.output_text.delta', 'item_id': 'msg_1', 'content_index': 0, 'delta': f' more {i} [1]'}
        for i in range(n)
    ]

    def run() -> object:
        collector = AgentStreamCollector()
        collector.feed_event(events[0])
        collector.feed_event({'type': 'response.completed', 'response': {'id': 'resp_1', 'output': []}})
        for event in events:
            collector.feed_event(event)
        collector.close()
        return collector.markers

    return run


def many_spans(n: int) -> CitedAnswer:
    text = 'word ' * n
    citations = [
        Citation(
            [WebCitationSource(f'https://s{i}.example/page', title=f'Source {i}')],
            anchor=ContentCitationAnchor(start=5 * i, end=5 * i + 4),
        )
        for i in range(n)
    ]
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations)])])


def renderer(render: Callable[[CitedAnswer], str]) -> Callable[[int], Callable[[], object]]:
    def make(n: int) -> Callable[[], object]:
        answer = many_spans(n)
        return lambda: render(answer)

    return make


def repair(n: int) -> Callable[[], object]:
    """An `n`-character cited part with `n // 2000` citations, edited (a prefix added) without `edit_text`."""
    rng = random.Random(n)
    text = ' '.join(f'w{rng.randrange(1_000_000)}' for _ in range(n // 5))[:n]
    k = n // 2000
    step = n // k
    citations = [
        Citation(
            [WebCitationSource(f'https://s{i}.example/')],
            anchor=ContentCitationAnchor(start=step * i, end=step * i + 40),
        )
        for i in range(k)
    ]
    response = ModelResponse(parts=[TextPart(text, citations=citations)])
    fingerprint_response(response)
    edited = TextPart('Note: ' + text, citations=citations)

    def run() -> object:
        part, problems = repair_part(response, 0, edited, 'realign')
        assert len(part.citations or ()) == k
        assert not problems
        return part

    return run


def sse_one_chunk(n: int) -> Callable[[], object]:
    body = b''.join(b'event: response.output_text.delta\ndata: {"type": "delta", "n": %d}\n\n' % i for i in range(n))
    return lambda: sse_data(body)


def placement(n: int) -> Callable[[], object]:
    """OpenAI marker placement (`TrackCitations` checks every OpenAI answer) on `n` markers, one after each sentence."""
    text = 'Word word.\ue200cite\ue202turn0search0\ue201 ' * n
    return lambda: check_marker_placement(text)


def long_page_and_answer(n: int) -> tuple[list[Passage], str]:
    """`n` passages and a whole-answer claim (`tests/_long_page.py`, shared with the linear-time test)."""
    texts, claim = long_page_texts(n)
    return [Passage(text, i, i / n, 40) for i, text in enumerate(texts)], claim


def whole_answer(n: int) -> Callable[[], object]:
    """A whole answer checked against a page of `n` passages: index the page, then the best passage."""
    passages, claim = long_page_and_answer(n)
    return lambda: PassageIndex(passages).best(claim)


PATHS = [
    pytest.param(escaped_scanner, 16_000, 7, id='escaped-scanner-16k-deltas'),
    pytest.param(collector_after_completed, 4_000, 9, id='collector-4k-deltas-after-completed'),
    pytest.param(renderer(render_html), 16_000, 7, id='render-html-16k-spans'),
    pytest.param(renderer(render_markdown), 16_000, 7, id='render-markdown-16k-spans'),
    pytest.param(renderer(lambda a: render_markdown(a, style='footnotes')), 16_000, 7, id='render-footnotes-16k-spans'),
    pytest.param(repair, 200_000, 9, id='repair-200k-chars-100-citations'),
    pytest.param(sse_one_chunk, 80_000, 11, id='sse-80k-events-one-chunk'),
    pytest.param(placement, 10_000, 7, id='openai-placement-10k-markers'),
    pytest.param(whole_answer, 250, 9, id='support-whole-answer-250-passages'),
]


@pytest.mark.parametrize(('make', 'size', 'rounds'), PATHS)
def test_linear(
    benchmark: Any, request: Any, make: Callable[[int], Callable[[], object]], size: int, rounds: int
) -> None:
    single, double = make(size), make(2 * size)
    benchmark.pedantic(double, rounds=1, iterations=1, warmup_rounds=1)
    subject, baseline = best_ratio(double, single, rounds=rounds)
    name = request.node.callspec.id
    assert report(f'{name}: twice the input / the input ({size:,})', subject, baseline) <= LIMIT
