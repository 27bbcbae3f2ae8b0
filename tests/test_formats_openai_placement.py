"""OpenAI's marker placement guidance, checked over hand-written answers that break each rule."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pydantic_ai_citations.formats.openai_placement import (
    _code_spans,  # pyright: ignore[reportPrivateUsage]
    _emphasis,  # pyright: ignore[reportPrivateUsage]
    check_marker_placement,
)

M = '\ue200cite\ue202turn0file0\ue201'
N = '\ue200cite\ue202turn0file1\ue201'


@pytest.mark.parametrize(
    ('text', 'codes'),
    [
        pytest.param(f'Paris is big.{M} It is old.{N}', [], id='well-placed'),
        pytest.param(f'Paris is big.{M}{N} It is old.', [], id='two-markers-after-one-sentence'),
        pytest.param(f'Paris is big {M}. It is old.{N}', ['marker_not_after_punctuation'], id='before-punctuation'),
        pytest.param(f'Paris{M} is big. It is old.{N}', ['marker_not_after_punctuation'], id='mid-sentence'),
        pytest.param(f'Paris is **big.{M}** It is old.{N}', ['marker_in_emphasis'], id='inside-bold'),
        pytest.param(f'Paris is *big.{M}* It is old.{N}', ['marker_in_emphasis'], id='inside-italics'),
        pytest.param(f'Run `pip install x.{M}` first. Then go.{N}', ['marker_in_code'], id='inline-code'),
        pytest.param(f'Run this:\n```\npip install x{M}\n```\nThen go.{N}', ['marker_in_code'], id='fence'),
        pytest.param(f'Run this:\n```\npip install x\n```{M}\nThen go.{N}', ['marker_on_fence_line'], id='fence-line'),
        pytest.param(
            f'Paris is big. It is old. It is on the Seine.\n\n{M}{N}',
            ['markers_grouped_at_end'],
            id='grouped-at-end',
        ),
        pytest.param(f'Paris is big, see turn0file0. It is old.{N}', ['bare_marker_id'], id='bare-id'),
    ],
)
def test_each_rule(text: str, codes: list[str]):
    problems = check_marker_placement(text)
    assert [p.code for p in problems] == codes
    for problem in problems:
        assert problem.start is not None and problem.end is not None
        assert 0 <= problem.start < problem.end <= len(text)


def test_only_given_ids():
    text = f'Paris is big.{M} It is old.{N}'
    [problem] = check_marker_placement(text, source_ids={'turn0file0'}, part_index=2)
    assert (problem.code, problem.part_index) == ('unknown_source_id', 2)
    assert text[problem.start : problem.end] == N  # type: ignore[misc]
    assert 'turn0file1' in problem.message


def test_offsets_point_at_the_marker():
    text = f'Paris is **big.{M}** It is old.{N}'
    [problem] = check_marker_placement(text)
    assert text[problem.start : problem.end] == M  # type: ignore[misc]


def test_no_markers_no_problems():
    assert check_marker_placement('Plain prose with **bold** and `code`.') == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(['a', ' ', '.', '*', '_', '`', '\n', '~', M, N, 'turn0file3', '\ue200', '\ue201'])).map(
        ''.join
    )
)
def test_never_crashes_and_offsets_inside(text: str):
    for problem in check_marker_placement(text, source_ids=()):
        assert problem.start is not None and problem.end is not None
        assert 0 <= problem.start <= problem.end <= len(text)


@pytest.mark.anyio
async def test_track_citations_reports_placement():
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from pydantic_ai_citations import TrackCitations

    text = f'Paris is **big.{M}** It is old.{N}'
    track = TrackCitations()
    result = await Agent(TestModel(custom_output_text=text), capabilities=[track]).run('q')
    problems = [p for p in track.report(result).problems if p.code == 'marker_in_emphasis']
    assert [(p.part_index, text[p.start : p.end]) for p in problems] == [(0, M)]  # type: ignore[misc]


@pytest.mark.anyio
async def test_matrix_row_shows_placement_counts():
    """An answer that breaks the placement rules: the OpenAI row's anchor cell notes the counts."""
    from pydantic_ai_citations.matrix._fixtures import load_fixture
    from pydantic_ai_citations.matrix._matrix import CapabilityMatrix
    from pydantic_ai_citations.matrix._probes import _probe_answer  # pyright: ignore[reportPrivateUsage]

    recording = load_fixture('openai-chat', 'cited')
    raw = recording.responses[0]
    body = copy.deepcopy(raw.payload)
    message = body['choices'][0]['message']  # type: ignore[index,call-overload]
    message['content'] = f'Gull Point Light is **old.{M}** It was lit in 1791 {N}.'  # type: ignore[index]
    message['annotations'] = []  # type: ignore[index]
    responses = [dataclasses.replace(raw, payload=body, body=json.dumps(body).encode())]
    matrix = CapabilityMatrix()
    await _probe_answer(matrix, 'openai-chat', dataclasses.replace(recording, responses=responses), 'recording')
    notes = matrix.to_dict()['rows'][0]['cells']['anchor']['notes']  # type: ignore[index]
    assert notes == ['recording: OpenAI marker placement: 1 marker_in_emphasis, 1 marker_not_after_punctuation']


# The regular expressions the code and emphasis rules were first written as: their reading is the specification that
# the linear-time scans (`_code_spans`, `_emphasis`) keep, checked against each other here.
INLINE_CODE = re.compile(r'(`+)(?!`)[^\n]*?(?<!`)\1(?!`)')
EMPHASIS = re.compile(
    r'\*\*(?!\s)[^\n]*?(?<!\s)\*\*|__(?!\s)[^\n]*?(?<!\s)__'
    r'|(?<![*\w])\*(?![\s*])[^*\n]*?(?<![\s*])\*(?![*\w])|(?<![_\w])_(?![\s_])[^_\n]*?(?<![\s_])_(?![_\w])'
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(['a', ' ', '\t', '.', '*', '**', '_', '__', '`', '``', '\n', '\u3000'])).map(''.join))
def test_code_and_emphasis_scans_read_as_the_regular_expressions(text: str):
    assert _code_spans(text) == [m.span() for m in INLINE_CODE.finditer(text)]
    assert _emphasis(text) == [m.span() for m in EMPHASIS.finditer(text)]


@pytest.mark.parametrize(
    'unit',
    [
        pytest.param(f'Word word.{M} ', id='many-markers'),
        pytest.param(f'{M} ', id='one-chain-of-markers'),
        pytest.param('**a ', id='bold-never-closed'),
        pytest.param('__a ', id='underscore-bold-never-closed'),
    ],
)
def test_linear_on_hostile_text(unit: str):
    """Four times the input costs at most 8x as much (quadratic code: 16x; these sizes took seconds before)."""

    def cost(n: int) -> float:
        text = unit * n + M
        best = float('inf')
        for _ in range(3):
            start = time.process_time()
            check_marker_placement(text)
            best = min(best, time.process_time() - start)
        return best

    cost(1000)
    assert cost(8000) <= 8 * cost(2000) + 0.05


def test_linear_on_an_unclosed_backtick_run():
    def cost(n: int) -> float:
        text = '`' * n + ' a' * n + M
        start = time.process_time()
        check_marker_placement(text)
        return time.process_time() - start

    cost(500)
    assert cost(8000) <= 8 * cost(2000) + 0.05
