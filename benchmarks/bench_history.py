"""P4: the stale-citation pass over a long history costs a small fraction of serialising it.

Baseline: one `ModelMessagesTypeAdapter.dump_json` of a 10,000-message agent history (2,500 turns: question, tool
call, tool result, cited answer), measured in the same run, in interleaved rounds (CPU time, best of `ROUNDS`).
One answer in eight (313 parts) carries raw citation markup from another provider (OpenAI private-use markers,
Anthropic-style cite tags, xAI `[[N]](url)` markers a citation is anchored on).

- `find_stale`: at most 0.1x the baseline.
- `CleanStaleCitations`' first pass (the check for edits before a request, then stripping the 313 parts for the
  model serving it): at most 0.1x the baseline.

Both are plain passes (nothing is cached between calls), so every pass is a first pass. The answers were
fingerprinted when they were made (`fingerprint_response`, as `CleanStaleCitations` does), which also records where
their markup is: the pass hashes each answer and cuts the recorded ranges, it does not scan the text again. For scale, a plain Python
pass that only hashes each cited part is measured in the same run and printed (about 0.04x on an idle machine).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.test import TestModel

from pydantic_ai_citations import find_stale
from pydantic_ai_citations._edit import fingerprint_response, repair_history
from pydantic_ai_citations._history import _strip_for  # pyright: ignore[reportPrivateUsage]

N_MESSAGES = 10_000
TARGET = 0.1
MARKUP_EVERY = 8
"""One answer in `MARKUP_EVERY` carries markup to strip: 313 of 2,500."""
N_MARKED = -(-N_MESSAGES // 4 // MARKUP_EVERY)
ROUNDS = 7

MARKUP = (
    ' \ue200cite\ue202turn0search0\ue201',
    ' (cite index="0-1">Logfire observes it.</cite>',
    ' [[1]](https://x.ai/news/{i})',
)


def build_history() -> list[ModelMessage]:
    """An agent conversation: each turn is a question, a search tool call, its result, and a cited answer."""
    messages: list[ModelMessage] = []
    for i in range(N_MESSAGES // 4):
        messages.extend(build_turn(i))
    return messages


def build_turn(i: int) -> list[ModelMessage]:
    """One turn: a question, a search tool call, its result, and a cited answer."""
    messages: list[ModelMessage] = []
    text = (
        f'Answer {i}: Pydantic validates data with type hints and is fast ([docs](https://docs.pydantic.dev/{i})). '
        'It serialises models to JSON and validates JSON directly, which keeps round trips cheap. '
        'Logfire observes applications built on it.'
    )
    markup = MARKUP[(i // MARKUP_EVERY) % len(MARKUP)].format(i=i) if i % MARKUP_EVERY == 0 else ''
    text += markup
    marker = text.index('([docs]')
    end = text.index(')).') + 2
    response = ModelResponse(
        parts=[
            TextPart(
                text,
                id=f'msg_{i}',
                provider_name='openai',
                provider_details={
                    'citations': [
                        {
                            'type': 'url_citation',
                            'url': f'https://docs.pydantic.dev/{i}',
                            'title': 'Docs',
                            'start_index': marker,
                            'end_index': end,
                        }
                    ]
                },
                citations=[
                    Citation(
                        [WebCitationSource(f'https://docs.pydantic.dev/{i}', title='Docs')],
                        anchor=MarkerCitationAnchor(start=marker, end=end),
                    ),
                    Citation([WebCitationSource('https://logfire.dev')], anchor=ContentCitationAnchor(start=0, end=9)),
                    *xai_citation(text, markup),
                ],
            )
        ],
        provider_name='openai',
        model_name='gpt-5',
    )
    fingerprint_response(response)
    messages.append(ModelRequest(parts=[UserPromptPart(f'Question {i}: what does Pydantic do, and how fast is it?')]))
    messages.append(
        ModelResponse(
            parts=[ToolCallPart('search_docs', {'query': f'pydantic speed {i}'}, tool_call_id=f'call_{i}')],
            provider_name='openai',
            model_name='gpt-5',
        )
    )
    messages.append(
        ModelRequest(
            parts=[
                ToolReturnPart(
                    'search_docs',
                    [{'url': f'https://docs.pydantic.dev/{i}', 'snippet': 'Pydantic is fast and extensible.'}],
                    tool_call_id=f'call_{i}',
                )
            ]
        )
    )
    messages.append(response)
    return messages


def xai_citation(text: str, markup: str) -> list[Citation]:
    if not markup.startswith(' [['):
        return []
    start = text.index('[[')
    return [Citation([WebCitationSource('https://x.ai/news')], anchor=MarkerCitationAnchor(start=start, end=len(text)))]


def ratio(fn: Callable[[], Any], baseline: Callable[[], Any], setup: Callable[[], None] | None = None) -> float:
    """min(fn) / min(baseline), CPU time, measured in interleaved rounds so machine load hits both alike."""
    best_fn = best_base = float('inf')
    for _ in range(ROUNDS):
        start = time.process_time()
        baseline()
        best_base = min(best_base, time.process_time() - start)
        if setup is not None:
            setup()
        start = time.process_time()
        fn()
        best_fn = min(best_fn, time.process_time() - start)
    return best_fn / best_base


@pytest.fixture(scope='module')
def history() -> list[ModelMessage]:
    # Loaded from JSON, as an app reading a stored conversation would have it.
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(build_history()))


def dump(history: list[ModelMessage]) -> Callable[[], Any]:
    return lambda: ModelMessagesTypeAdapter.dump_json(history)


def before_request(history: list[ModelMessage], model: TestModel) -> None:
    """What `CleanStaleCitations` does before each request: check for edits, then clean for the serving model."""
    marked: list[Any] = []
    replaced, _ = repair_history(history, 'realign', marked)  # `before_model_request`
    assert not replaced
    cleaned, problems = _strip_for(model, history, marked)  # `prepare_model_request`
    assert cleaned is not None
    assert len(problems) == N_MARKED


def plain_pass(history: list[ModelMessage]) -> None:
    """For scale: a plain Python pass that only hashes each cited part."""
    for message in history:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart) and part.citations:
                    hashlib.sha256(part.content.encode()).hexdigest()[:16]


def test_first_passes(benchmark: Any, history: list[ModelMessage]) -> None:
    """P4: both figures, as ratios to `dump_json` measured in the same run."""
    model = TestModel()
    reference = ratio(lambda: plain_pass(history), dump(history))
    stale = ratio(lambda: find_stale(history), dump(history))
    clean = ratio(lambda: before_request(history, model), dump(history))
    print(f'\nP4 for scale, a plain hashing pass: {reference:.3f}x dump_json (about 0.04x on an idle machine)')
    print(f'P4 find_stale: {stale:.3f}x dump_json (target <= {TARGET}x)')
    print(f'P4 CleanStaleCitations first pass, {N_MARKED} parts stripped: {clean:.3f}x dump_json (target <= {TARGET}x)')
    benchmark.pedantic(lambda: before_request(history, model), rounds=3, iterations=1)
    assert stale <= TARGET
    assert clean <= TARGET


def test_find_stale_is_correct_on_the_benchmark_history(benchmark: Any, history: list[ModelMessage]) -> None:
    benchmark.pedantic(lambda: find_stale(history), rounds=1, iterations=1)
    assert find_stale(history) == []
    edited = list(history)
    response = edited[-1]
    assert isinstance(response, ModelResponse)
    part = response.parts[0]
    assert isinstance(part, TextPart)
    edited[-1] = ModelResponse(
        parts=[TextPart(part.content.replace('fast', 'quick'), citations=part.citations)], metadata=response.metadata
    )
    assert [p.code for p in find_stale(edited)] == ['stale_after_edit']


def test_stripped_history_has_no_markup(history: list[ModelMessage]) -> None:
    cleaned, _ = _strip_for(TestModel(), history)
    assert cleaned is not None
    texts = [p.content for m in cleaned if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart)]
    assert not [t for t in texts if '\ue200' in t or 'cite' in t or '[[1]]' in t]
