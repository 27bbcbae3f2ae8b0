"""Structured output without citation markup: `StripCitationMarkup` removes it and keeps what it removed.

With tool, native or prompted output Pydantic AI does not ask providers for citations, yet some models still write
their citation markup (Anthropic `<cite index="0-1">…</cite>`, OpenAI `\\ue200cite\\ue202turn0search1\\ue201`,
`【4:0†source】`) into tool arguments and JSON fields. Runs offline: the model is a `FunctionModel` that does just that.

    python examples/structured_output.py
"""

from __future__ import annotations

import asyncio
import warnings

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.capabilities import Citations
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitationsDisabledWarning, StripCitationMarkup, TrackCitations, removed_markup

OPEN = '\x3ccite index="0-1">'  # `<cite index="0-1">`, as Claude writes it
MARKER = '\ue200cite\ue202turn0search1\ue201'  # an OpenAI private-use citation marker


class City(BaseModel):
    name: str
    fact: str


class Report(BaseModel):
    title: str
    cities: list[City]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:  # first a function tool call, with markup in its arguments
        return ModelResponse(parts=[ToolCallPart('population', {'city': f'{OPEN}Paris</cite>'}, tool_call_id='t1')])
    args = {
        'title': 'Two cities 【4:0†source】',
        'cities': [
            {'name': 'Paris', 'fact': f'{OPEN}Paris has 2.1 million inhabitants</cite>.'},
            {'name': 'Lyon', 'fact': f'Lyon is known for its food {MARKER}.'},
        ],
    }
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args, tool_call_id='out')])


track = TrackCitations()  # its report lists the problems every capability of the package recorded in the run
agent = Agent(FunctionModel(model), output_type=Report, capabilities=[Citations(), StripCitationMarkup(), track])


@agent.tool_plain
def population(city: str) -> str:
    """Look up a city's population."""
    print(f'tool called with city={city!r}')
    return '2.1 million'


async def main() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', CitationsDisabledWarning)
        result = await agent.run('Tell me about Paris and Lyon.')
    for warning in caught:
        print(f'warning: {type(warning.message).__name__}: {str(warning.message)[:90]}...')
    print(result.output.model_dump_json(indent=2))
    print('removed:')
    for removed in removed_markup(agent, result):
        path = ''.join(f'[{key}]' if isinstance(key, int) else f'.{key}' for key in removed.path).lstrip('.')
        print(f'  {removed.target:9} {path:15} {removed.kind:14} ids={list(removed.source_ids)}')
    print('problems:', [p.code for p in track.report(result).problems])


if __name__ == '__main__':
    asyncio.run(main())
