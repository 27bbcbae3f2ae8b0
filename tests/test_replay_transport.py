"""Replay never touches the network: a request to another endpoint, or one more request than the recording holds,
is answered with an HTTP 500 naming the cause (which the model class raises; a `RecordingError` for xAI gRPC), and
every sent body is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError

from pydantic_ai_citations._replay import ReplayTransport
from pydantic_ai_citations.testing import RecordingError, load_recording

pytestmark = pytest.mark.anyio

CHAT_COMPLETION: dict[str, Any] = {
    'id': 'chatcmpl-1',
    'object': 'chat.completion',
    'created': 1,
    'model': 'gpt-4o',
    'choices': [
        {'index': 0, 'finish_reason': 'stop', 'message': {'role': 'assistant', 'content': 'Paris.'}},
    ],
}


def _recording_file(tmp_path: Path) -> Path:
    path = tmp_path / 'chat.yaml'
    interaction = {
        'request': {'method': 'POST', 'uri': 'https://api.openai.com/v1/chat/completions', 'body': '{}'},
        'response': {
            'status': {'code': 200},
            'headers': {'content-type': ['application/json']},
            'body': {'string': json.dumps(CHAT_COMPLETION)},
        },
    }
    path.write_text(yaml.safe_dump({'interactions': [interaction]}))
    return path


async def test_request_past_the_end_of_the_recording_fails_with_its_count(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    agent = Agent(load_recording(_recording_file(tmp_path)).model(sent=sent))
    assert (await agent.run('Capital of France?')).output == 'Paris.'
    with pytest.raises(ModelHTTPError) as info:
        await agent.run('And of Italy?')
    assert info.value.status_code == 500
    assert 'recording exhausted: chat.yaml holds 1 model response(s), this is request #2' in str(info.value)
    assert len(sent) == 2
    assert sent[1]['messages'][-1] == {'role': 'user', 'content': 'And of Italy?'}


def test_request_to_another_endpoint_is_refused_without_counting(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    transport = ReplayTransport(load_recording(_recording_file(tmp_path)), sent)
    status, _headers, body = transport.answer('GET', 'https://api.openai.com/v1/models', b'')
    assert status == 500
    assert json.loads(body)['message'] == (
        'unexpected request GET https://api.openai.com/v1/models: not a openai-chat model endpoint; '
        'replay of chat.yaml never touches the network'
    )
    assert sent == []
    status, _headers, body = transport.answer('POST', 'https://api.openai.com/v1/chat/completions', b'')
    assert (status, json.loads(body)) == (200, CHAT_COMPLETION)


@pytest.mark.parametrize(
    ('body', 'kept'),
    [
        pytest.param(b'', {}, id='empty'),
        pytest.param(b'{"model": "m"}', {'model': 'm'}, id='object'),
        pytest.param(b'[1, 2]', {'body': [1, 2]}, id='json-not-object'),
        pytest.param(b'a=1&b=2', {'body': 'a=1&b=2'}, id='not-json'),
    ],
)
def test_sent_bodies_are_kept_in_json_form(tmp_path: Path, body: bytes, kept: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []
    transport = ReplayTransport(load_recording(_recording_file(tmp_path)), sent)
    transport.answer('POST', 'https://api.openai.com/v1/chat/completions', body)
    assert sent == [kept]


def _xai_file(tmp_path: Path) -> Path:
    response = {
        'id': 'r-1',
        'model': 'grok-4',
        'outputs': [
            {'finish_reason': 'REASON_STOP', 'message': {'role': 'ROLE_ASSISTANT', 'content': 'Paris.'}},
        ],
    }
    path = tmp_path / 'chat.xai.yaml'
    interaction = {'request_sample': {'json': {'model': 'grok-4'}}, 'response_sample': {'json': response}}
    path.write_text(yaml.safe_dump({'interactions': [interaction]}))
    return path


async def test_xai_replay_past_the_end_or_in_the_wrong_mode_is_a_recording_error(tmp_path: Path) -> None:
    pytest.importorskip('xai_sdk', reason='xAI replay needs the xai-sdk extra')
    agent = Agent(load_recording(_xai_file(tmp_path)).model())
    assert (await agent.run('Capital of France?')).output == 'Paris.'
    with pytest.raises(RecordingError, match=r'recording exhausted: holds 1 model response\(s\), this is request #2'):
        await agent.run('And of Italy?')
    streamed = Agent(load_recording(_xai_file(tmp_path)).model())
    with pytest.raises(RecordingError, match=r'cannot be answered by a non-streamed response'):
        async with streamed.run_stream('Capital of France?') as result:
            await result.get_output()
