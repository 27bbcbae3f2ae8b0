"""`StripCitationMarkup` through the real `AnthropicModel`, HTTP answered by hand-written Messages API bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import pytest
from pydantic_ai import Agent, BinaryContent, ModelRequest, UserPromptPart
from pydantic_ai.capabilities import AbstractCapability, Citations
from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition

from pydantic_ai_citations import StripCitationMarkup, TrackCitations, removed_markup

CITE = '\x3ccite'
DOC = BinaryContent(b'Paris has 2.1 million inhabitants. Lyon has 0.5 million.', media_type='text/plain')
SETTINGS: ModelSettings = {'max_tokens': 1024}  # small max_tokens: the SDK sends and reads plain JSON, not SSE


def _message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        'id': 'msg_1',
        'type': 'message',
        'role': 'assistant',
        'model': 'claude-sonnet-4-5',
        'content': content,
        'stop_reason': stop_reason,
        'stop_sequence': None,
        'usage': {'input_tokens': 10, 'output_tokens': 10},
    }


def _model(bodies: list[dict[str, Any]], sent: list[dict[str, Any]]) -> AnthropicModel:
    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json=bodies[len(sent) - 1])

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return AnthropicModel('claude-sonnet-4-5', provider=AnthropicProvider(api_key='test', http_client=client))


def _documents(body: dict[str, Any]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for message in body['messages']:
        for block in message['content']:
            if isinstance(block, dict) and cast(dict[str, Any], block).get('type') == 'document':
                documents.append(cast(dict[str, Any], block))
    return documents


@pytest.mark.anyio
async def test_forced_tool_choice_with_cited_documents_raises_before_http():
    sent: list[dict[str, Any]] = []
    model = _model([], sent)
    params = ModelRequestParameters(
        function_tools=[ToolDefinition(name='lookup', parameters_json_schema={'type': 'object', 'properties': {}})],
        output_mode='text',
        allow_text_output=True,
    )
    with pytest.raises(UserError, match='writes its citation markup into the tool'):
        await model_request(
            model,
            [ModelRequest(parts=[UserPromptPart(['Population?', DOC])])],
            model_settings={'citations': True, 'tool_choice': 'required', **SETTINGS},
            model_request_parameters=params,
        )
    assert sent == []


@pytest.mark.anyio
async def test_forced_tool_choice_per_step_through_the_agent_raises_before_http():
    @dataclass
    class ForceFirstStep(AbstractCapability[object]):
        def get_model_settings(self) -> Callable[[RunContext[object]], ModelSettings]:
            def settings(ctx: RunContext[object]) -> ModelSettings:
                return {'tool_choice': 'required'} if ctx.run_step <= 1 else {}

            return settings

    sent: list[dict[str, Any]] = []
    agent = Agent(_model([], sent), capabilities=[Citations(), ForceFirstStep(), StripCitationMarkup()])

    @agent.tool_plain
    def lookup(query: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return query  # pragma: no cover

    with pytest.raises(UserError, match='writes its citation markup into the tool'):
        await agent.run(['Population?', DOC], model_settings=SETTINGS)
    assert sent == []


@pytest.mark.anyio
async def test_non_forced_tool_call_with_markup_is_stripped():
    query = f'{CITE} index="0-0">Paris has 2.1 million inhabitants</cite> \ue200cite\ue202turn0file0\ue201'
    bodies = [
        _message(
            [
                {'type': 'text', 'text': 'Let me look that up.'},
                {'type': 'tool_use', 'id': 'toolu_1', 'name': 'lookup', 'input': {'query': query}},
            ],
            'tool_use',
        ),
        _message([{'type': 'text', 'text': 'Done.'}], 'end_turn'),
    ]
    sent: list[dict[str, Any]] = []
    agent = Agent(_model(bodies, sent), capabilities=[Citations(), StripCitationMarkup(), TrackCitations()])
    seen: list[str] = []

    @agent.tool_plain
    def lookup(query: str) -> str:  # pyright: ignore[reportUnusedFunction]
        seen.append(query)
        return 'ok'

    result = await agent.run(['Population of Paris?', DOC], model_settings=SETTINGS)
    assert result.output == 'Done.'
    assert seen == ['Paris has 2.1 million inhabitants']
    # Text output: the document was sent with citations on, and the model still wrote markup into the tool input.
    assert _documents(sent[0])[0]['citations'] == {'enabled': True}
    removed = removed_markup(agent, result)
    assert [(r.path, r.kind, r.source_ids, r.tool_name, r.tool_call_id) for r in removed] == [
        (('query',), 'cite_tag', ('0-0',), 'lookup', 'toolu_1'),
        (('query',), 'openai_marker', ('turn0file0',), 'lookup', 'toolu_1'),
    ]
    assert [p.code for p in TrackCitations.of(agent).report(result).problems] == ['markup_in_output']
    # The replayed history keeps what the model wrote (Pydantic AI sends back the original tool input).
    assert sent[1]['messages'][1]['content'][1]['input'] == {'query': query}
