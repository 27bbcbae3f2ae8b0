"""P4: the stale-citation pass over a long history costs a small fraction of serialising it, and is not paid twice.

Baseline: one `ModelMessagesTypeAdapter.dump_json` of a 10,000-message agent history (2,500 turns: question, tool
call, tool result, cited answer), measured in the same run, in interleaved rounds (CPU time, best of `ROUNDS`).

- First pass (`find_stale`, and what `CleanStaleCitations` does before each request): at most 0.1x the baseline.
  The brief calibrates that budget on an idle machine where a plain Python pass hashing each cited part measures
  about 0.04x, i.e. 2.5x that pass. The same reference pass is measured in this run; when the machine runs Python
  loops slower relative to `dump_json` than that (a loaded CI box), the target scales with it. Both figures print.
- Second pass over the same, already checked history (with `dump_json` in between, so CPU caches are cold, as
  between two model requests): no part is hashed again, only identity checks run (C-level passes over the
  objects, memory-bound); at most 0.8x the first pass measured in this run. Also measured: the pass after the
  conversation grew by one turn, which looks only at the new messages.
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

from pydantic_ai_citations import _history
from pydantic_ai_citations._history import _clean_history, _strip_for, find_stale, fingerprint_response

N_MESSAGES = 10_000
FIRST_PASS_TARGET = 0.1

REFERENCE_AT_TARGET = 0.04
"""The plain hashing pass's ratio on the machine the 0.1x budget was set on."""
ROUNDS = 7


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
    if i % 50 == 0:  # a few answers from another provider still carry raw private-use markers
        text += ' \ue200cite\ue202turn0search0\ue201'
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


def clear_caches() -> None:
    _history._cache.clear()  # pyright: ignore[reportPrivateUsage]
    _history._marker_cache.clear()  # pyright: ignore[reportPrivateUsage]
    _history._snapshots.clear()  # pyright: ignore[reportPrivateUsage]


@pytest.fixture(scope='module')
def history() -> list[ModelMessage]:
    # Loaded from JSON, as an app reading a stored conversation would have it.
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(build_history()))


def dump(history: list[ModelMessage]) -> Callable[[], Any]:
    return lambda: ModelMessagesTypeAdapter.dump_json(history)


def before_request(history: list[ModelMessage], model: TestModel) -> None:
    """What `CleanStaleCitations` does before each request: check for edits, then clean for the serving model."""
    marked: list[Any] = []
    replaced, _ = _clean_history(history, 'realign', marked)  # `before_model_request`
    assert not replaced
    cleaned, problems = _strip_for(model, history, marked)  # `prepare_model_request`
    assert cleaned is not None
    assert len(problems) >= N_MESSAGES // 4 // 50


def plain_pass(history: list[ModelMessage]) -> None:
    """The reference: a plain Python pass that hashes each cited part."""
    for message in history:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart) and part.citations:
                    hashlib.sha256(part.content.encode()).hexdigest()[:16]


PASSES: list[Any] = [
    pytest.param('find_stale', id='find_stale'),
    pytest.param('clean', id='clean_stale_citations'),
]


def run_pass(which: str, history: list[ModelMessage]) -> Callable[[], Any]:
    model = TestModel()
    return (lambda: find_stale(history)) if which == 'find_stale' else (lambda: before_request(history, model))


def report(name: str, value: float, target: float) -> None:
    print(f'\nP4 {name}: {value:.3f}x dump_json (target <= {target:.3f}x)')


@pytest.fixture(scope='module')
def first_target(history: list[ModelMessage]) -> float:
    reference = ratio(lambda: plain_pass(history), dump(history))
    # The figure, fixed: both sides are measured in this run, so machine load cancels out of the ratio.
    target = FIRST_PASS_TARGET
    print(
        f'\nP4 reference plain hashing pass: {reference:.3f}x dump_json (about {REFERENCE_AT_TARGET}x on an idle '
        f'machine); first-pass target {target:.3f}x'
    )
    return target


FIRST_PASSES: dict[str, float] = {}


def test_reference_plain_pass(benchmark: Any, history: list[ModelMessage], first_target: float) -> None:
    benchmark.pedantic(lambda: plain_pass(history), rounds=3, iterations=1)
    assert first_target >= FIRST_PASS_TARGET


@pytest.mark.parametrize('which', PASSES)
def test_first_pass(benchmark: Any, history: list[ModelMessage], which: str, first_target: float) -> None:
    fn = run_pass(which, history)
    value = ratio(fn, dump(history), setup=clear_caches)
    FIRST_PASSES[which] = value
    report(f'{which}, first pass', value, first_target)
    if which == 'clean':  # where the time goes (printed only): the survey with its marker check, then the strip
        model = TestModel()
        marked: list[Any] = []

        def survey() -> None:
            clear_caches()
            marked.clear()
            _clean_history(history, 'realign', marked)

        strip = ratio(lambda: _strip_for(model, history, marked), dump(history), setup=survey)
        print(f'P4 clean, first pass: of which `_strip_for` (50 parts realigned) {strip:.3f}x dump_json')
    benchmark.pedantic(fn, setup=clear_caches, rounds=3, iterations=1)
    assert value <= first_target


def second_target(which: str, first_target: float) -> float:
    first = FIRST_PASSES.get(which, first_target)
    return min(0.8 * first, first_target)


@pytest.mark.parametrize('which', PASSES)
def test_second_pass(benchmark: Any, history: list[ModelMessage], which: str, first_target: float) -> None:
    fn = run_pass(which, history)
    clear_caches()
    fn()  # the first pass: every part checked once
    hashed: list[str] = []
    real_hash = _history._hash  # pyright: ignore[reportPrivateUsage]
    value = ratio(fn, dump(history))
    target = second_target(which, first_target)
    report(f'{which}, second pass (same history)', value, target)
    benchmark.pedantic(fn, rounds=5, iterations=1)
    assert value <= target
    try:  # nothing is hashed again
        _history._hash = lambda text: hashed.append(text) or real_hash(text)  # type: ignore[assignment]
        fn()
    finally:
        _history._hash = real_hash  # pyright: ignore[reportPrivateUsage]
    assert hashed == []


@pytest.mark.parametrize('which', PASSES)
def test_second_pass_after_a_new_turn(
    benchmark: Any, history: list[ModelMessage], which: str, first_target: float
) -> None:
    """The conversation grew by a turn since the last pass: only the new messages are looked at."""
    clear_caches()
    run_pass(which, history)()
    grown: list[list[ModelMessage]] = []

    def setup() -> None:
        run_pass(which, history)()  # the last request's pass, over the history before this turn
        grown.append([*history, *build_turn(len(grown))])

    value = ratio(lambda: run_pass(which, grown[-1])(), dump(history), setup=setup)
    target = second_target(which, first_target)
    report(f'{which}, second pass (history + one new turn)', value, target)
    benchmark.pedantic(lambda: run_pass(which, grown[-1])(), setup=setup, rounds=3, iterations=1)
    assert value <= target


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
