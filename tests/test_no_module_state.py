"""No module of the package keeps per-run state: runs leave nothing behind once their reports are taken."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CleanStaleCitations, StripCitationMarkup, TrackCitations, removed_markup

MARKER = '\ue200cite\ue202turn0search1\ue201'
RUNS = 30


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart('lookup', {'query': f'Paris {MARKER}'})])
    return ModelResponse(parts=[TextPart(f'Paris is big. {MARKER}')])


def _containers() -> Iterator[tuple[str, Any]]:
    """Every mutable container held at module level by a module of the package."""
    for name, module in list(sys.modules.items()):
        if name != 'pydantic_ai_citations' and not name.startswith('pydantic_ai_citations.'):
            continue
        for attr, value in list(vars(module).items()):
            held: object = value
            if isinstance(held, dict | list | set | bytearray) and not attr.startswith('__'):
                yield f'{name}.{attr}', held
            elif callable(getattr(value, 'cache_info', None)):  # pyright: ignore[reportUnknownArgumentType]
                yield f'{name}.{attr}()', held


def _size(value: Any) -> int:
    info = getattr(value, 'cache_info', None)
    return info().currsize if info is not None else len(value)


def _holds(value: Any, run_id: str) -> bool:
    if isinstance(value, dict):
        return run_id in value or any(isinstance(v, str) and v == run_id for v in value.values())  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | set):
        return run_id in value
    return False


@pytest.mark.anyio
async def test_runs_leave_no_module_level_state() -> None:
    track, strip, clean = TrackCitations(), StripCitationMarkup(), CleanStaleCitations[object]()
    agent = Agent(FunctionModel(_model), capabilities=[track, strip, clean])

    @agent.tool_plain
    def lookup(query: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'ok'

    async def one_run() -> str:
        result = await agent.run('q')
        assert removed_markup(agent, result)
        assert [p.code for p in track.report(result).problems].count('markup_in_output') == 1
        return result.run_id

    await one_run()  # warm up: imports, compiled patterns, caches
    before = {name: _size(value) for name, value in _containers()}
    run_ids = [await one_run() for _ in range(RUNS)]
    grown = {
        name: (before.get(name, 0), _size(value)) for name, value in _containers() if _size(value) > before.get(name, 0)
    }
    assert grown == {}
    holding = [name for name, value in _containers() for run_id in run_ids if _holds(value, run_id)]
    assert holding == []
    assert len(track._runs) == 0  # pyright: ignore[reportPrivateUsage]  # every report was taken
