"""The optional C scan loop (`formats/_speedups.c`) against the pure-Python loop it replaces."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations._problems import CitationProblem
from pydantic_ai_citations.formats import openai_markers
from pydantic_ai_citations.formats.openai_markers import Marker, MarkerScanner, extract_markers_with_problems

S, E, P = '\ue200', '\ue201', '\ue202'
C_SCANNER = openai_markers._CScanner  # pyright: ignore[reportPrivateUsage]
needs_c = pytest.mark.skipif(
    C_SCANNER is None, reason='the C scan loop is not built here (no C compiler at install time)'
)


def test_built_when_required() -> None:
    """`.ci/run` sets PYDANTIC_AI_CITATIONS_REQUIRE_SPEEDUPS: there, a failed build must fail the tests."""
    if not os.environ.get('PYDANTIC_AI_CITATIONS_REQUIRE_SPEEDUPS'):
        pytest.skip('PYDANTIC_AI_CITATIONS_REQUIRE_SPEEDUPS is not set (only CI requires the C scan loop)')
    assert C_SCANNER is not None, 'the optional C extension was not built: is a C compiler installed?'


def test_pure_python_switch() -> None:
    code = 'from pydantic_ai_citations.formats import openai_markers as m; print(m._CScanner is None)'
    env = {**os.environ, 'PYDANTIC_AI_CITATIONS_PURE_PYTHON': '1'}
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == 'True'


@contextmanager
def implementation(c: bool) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openai_markers, '_CScanner', C_SCANNER if c else None)
        yield


def run(chunks: list[str], families: tuple[str, ...]) -> tuple[list[Marker], list[CitationProblem], list[int]]:
    scanner = MarkerScanner(families)
    markers: list[Marker] = []
    counts: list[int] = []  # how many markers each delta completed
    for chunk in chunks:
        found = scanner.feed(chunk)
        assert type(found) is list
        counts.append(len(found))
        markers += found
    return markers, scanner.close(), counts


PIECES = [
    S,
    E,
    P,
    'cite',
    'nav',
    'turn0search1',
    'b-5',
    'L3',
    'L2-L9',
    'L0',
    'L9-L2',
    'L12345678901',
    ' ',
    '.',
    '\n',
    'x',
    'é',
    '\U0001f600',
    'ünï',
]


@st.composite
def split_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.one_of(st.lists(st.sampled_from(PIECES), max_size=60).map(''.join), st.text()))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@needs_c
@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(split_texts(), st.sampled_from([('cite',), ('cite', 'nav')]))
def test_c_loop_equals_python_loop(case: tuple[str, list[str]], families: tuple[str, ...]) -> None:
    """Same markers (same objects' fields, same deltas) and same problems, for any text and any split."""
    text, chunks = case
    with implementation(c=True):
        c_result = run(chunks, families)
        c_batch = extract_markers_with_problems(text, families)
    with implementation(c=False):
        py_result = run(chunks, families)
        py_batch = extract_markers_with_problems(text, families)
    assert c_result == py_result
    assert (c_batch.markers, c_batch.problems) == (py_batch.markers, py_batch.problems)
    assert (c_result[0], c_result[1]) == (c_batch.markers, c_batch.problems)


@needs_c
def test_c_feed_errors() -> None:
    with implementation(c=True):
        scanner = MarkerScanner()
    feed = scanner.feed  # the C method, held past close()
    with pytest.raises(TypeError, match='takes a str, not bytes'):
        feed(b'x')  # type: ignore[arg-type]
    scanner.close()
    with pytest.raises(UserError, match='after close'):
        feed('x')
    with pytest.raises(UserError, match='after close'):
        scanner.feed('x')


def c_scanner(**overrides: Any) -> Any:
    assert C_SCANNER is not None
    problems: list[CitationProblem] = []
    args: dict[str, Any] = {
        'families': frozenset({'cite'}),
        'cache': {},
        'problems': problems,
        'parse': openai_markers._scan_parse,  # pyright: ignore[reportPrivateUsage]
        'unterminated': openai_markers._unterminated,  # pyright: ignore[reportPrivateUsage]
        'malformed': openai_markers._malformed,  # pyright: ignore[reportPrivateUsage]
        'closed_error': openai_markers._closed_error,  # pyright: ignore[reportPrivateUsage]
        'marker_type': Marker,
    }
    return C_SCANNER(**{**args, **overrides})


@needs_c
def test_c_callbacks_errors_propagate() -> None:
    def boom(*args: object) -> Any:
        raise RuntimeError('callback failed')

    marker = S + 'cite' + P + 'a' + E
    with pytest.raises(RuntimeError, match='callback failed'):
        c_scanner(parse=boom).feed(marker)
    with pytest.raises(RuntimeError, match='callback failed'):
        c_scanner(malformed=boom).feed(S + 'nope' + E)
    with pytest.raises(RuntimeError, match='callback failed'):
        c_scanner(unterminated=boom).feed(S + S + E)
    scanner = c_scanner(unterminated=boom)
    scanner.feed('text ' + S + 'cite')
    with pytest.raises(RuntimeError, match='callback failed'):
        scanner.close()
    with pytest.raises(TypeError, match='4-tuples or messages'):
        c_scanner(parse=lambda raw, families, cache: 42).feed(marker)  # type: ignore[misc]
    with pytest.raises(TypeError):
        c_scanner(cache=[])  # not a dict
    scanner = c_scanner()
    scanner.close()
    scanner.close()  # closing twice is a no-op


@needs_c
def test_c_loop_does_not_leak() -> None:
    text = ''.join(f'Claim {n}.{S}cite{P}turn0search{n % 7}{P}L{n % 5 + 1}{E} {S}bad{E} {S}open ' for n in range(200))
    chunks = [text[i : i + 37] for i in range(0, len(text), 37)]

    def once() -> None:
        with implementation(c=True):
            scanner = MarkerScanner()
        for chunk in chunks:
            scanner.feed(chunk)
        scanner.close()

    for _ in range(5):
        once()
    tracemalloc.start()
    try:
        once()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(50):
            once()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 20_000, f'{grown} bytes left behind by 50 scans'
