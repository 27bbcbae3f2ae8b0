"""Malformed and unusual recordings: each defect is a `RecordingError` naming the interaction and what is wrong,
and the request details a faithful replay needs (model name, prompt, settings) are read from every layout.

All recordings are generated here (no corpus needed).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pydantic_ai_citations._replay import decode_event_stream, render_stream
from pydantic_ai_citations.testing import RecordingError, load_recording

OPENAI_CHAT = 'https://api.openai.com/v1/chat/completions'
CHAT_BODY: dict[str, Any] = {'id': 'c', 'object': 'chat.completion', 'model': 'gpt-4o', 'choices': []}


def _interaction(
    *,
    uri: str = OPENAI_CHAT,
    request_body: Any = '{}',
    status: Any = None,
    headers: dict[str, Any] | None = None,
    body: Any = None,
) -> dict[str, Any]:
    return {
        'request': {'method': 'POST', 'uri': uri, 'headers': {}, 'body': request_body},
        'response': {
            'status': {'code': 200, 'message': 'OK'} if status is None else status,
            'headers': {'Content-Type': ['application/json']} if headers is None else headers,
            'body': {'string': json.dumps(CHAT_BODY)} if body is None else body,
        },
    }


def _write(tmp_path: Path, document: Any, name: str = 'cassette.yaml') -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def _xai(interaction: dict[str, Any]) -> dict[str, Any]:
    return {'interactions': [{'request_sample': {'json': {'model': 'grok-4'}}, **interaction}]}


@pytest.mark.parametrize(
    ('document', 'message'),
    [
        pytest.param({'interactions': ['not a mapping']}, 'interaction 0 is not a mapping', id='interaction-scalar'),
        pytest.param(
            {'interactions': [{'response': dict[str, Any]()}]},
            'interaction 0 request is missing or not a mapping',
            id='no-request',
        ),
        pytest.param(
            {'interactions': [{'request': {'method': 'POST'}, 'response': {}}]},
            'interaction 0 request has no uri',
            id='no-uri',
        ),
        pytest.param(
            {'interactions': [_interaction(status={'message': 'OK'})]},
            'interaction 0 response has no status code',
            id='no-status-code',
        ),
        pytest.param(
            {'interactions': [_interaction(headers={'Content-Encoding': ['br']}, body={'string': 'x'})]},
            "interaction 0 response: cannot decode content-encoding 'br'",
            id='unknown-encoding',
        ),
        pytest.param(
            {'interactions': [_interaction(body={'string': gzip.compress(b'{"a": 1}')[:-12]})]},
            'interaction 0 response: bad gzip data: truncated',
            id='truncated-gzip',
        ),
        pytest.param(
            {'interactions': [_interaction(body={'string': b'\x1f\x8b\x08\x00garbage-not-deflate'})]},
            'interaction 0 response: bad gzip data: ',
            id='corrupt-gzip',
        ),
        pytest.param(
            _xai({'response_stream': {}}),
            'interaction 0 response_stream has neither chunks_json nor chunks_raw',
            id='xai-stream-empty',
        ),
        pytest.param(
            _xai({'response_sample': {}}),
            'interaction 0 response_sample has neither json nor raw',
            id='xai-sample-empty',
        ),
        pytest.param(
            _xai({'response_sample': {'raw': 'text, not bytes'}}),
            r'interaction 0 response: `raw` is not !!binary protobuf bytes',
            id='xai-raw-not-bytes',
        ),
        pytest.param(
            _xai({'response_sample': {'json': {'no_such_field': 1}}}),
            'interaction 0 response json is not a GetChatCompletionResponse',
            id='xai-json-unknown-field',
        ),
        pytest.param(
            _xai({'response_stream': {'chunks_json': ['not a mapping']}}),
            'interaction 0 chunk json is not a mapping',
            id='xai-chunk-scalar',
        ),
        pytest.param(
            _xai({'response_stream': {'chunks_json': [{'chunk': {'no_such_field': 1}}]}}),
            'interaction 0 chunk json is not a GetChatCompletionChunk',
            id='xai-chunk-unknown-field',
        ),
    ],
)
def test_malformed_cassette_is_a_recording_error_naming_the_defect(
    tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    if 'request_sample' in document['interactions'][0]:
        pytest.importorskip('xai_sdk', reason='xAI cassettes need the xai-sdk extra')
    path = _write(tmp_path, document)
    with pytest.raises(RecordingError, match='^' + str(path).replace('\\', '\\\\') + ': ') as info:
        load_recording(path)
    assert message in info.value.reason
    assert info.value.path == str(path)


def test_xai_cassette_cannot_be_replayed_as_another_api(tmp_path: Path) -> None:
    path = _write(tmp_path, _xai({'response_sample': {'json': {}}}))
    with pytest.raises(RecordingError, match=r"an xAI gRPC cassette cannot be replayed as api='openai-chat'"):
        load_recording(path, api='openai-chat')


def test_vercel_fixture_cannot_be_replayed_as_xai(tmp_path: Path) -> None:
    path = tmp_path / 'fixture.json'
    path.write_text(json.dumps(CHAT_BODY))
    with pytest.raises(RecordingError, match='Vercel fixtures cannot be replayed as xai'):
        load_recording(path, api='xai')


def test_request_bodies_in_every_recorded_form(tmp_path: Path) -> None:
    """A request body given as `{string: ...}`, gzipped, empty or not JSON is kept, decoded where it can be."""
    request = json.dumps({'model': 'gpt-4.1', 'messages': [{'role': 'user', 'content': 'Hi'}]})
    path = _write(
        tmp_path,
        {
            'interactions': [
                _interaction(request_body={'string': request}),
                _interaction(request_body=gzip.compress(b'{"model": "gpt-4.1"}')),
                _interaction(request_body=''),
                _interaction(request_body='model=gpt-4.1'),
            ]
        },
    )
    recording = load_recording(path)
    assert recording.requests == [
        {'model': 'gpt-4.1', 'messages': [{'role': 'user', 'content': 'Hi'}]},
        {'model': 'gpt-4.1'},
        None,
        'model=gpt-4.1',
    ]
    assert recording.model_name == 'gpt-4.1'
    assert recording.prompt == 'Hi'


def test_response_without_body_or_with_a_text_body(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            'interactions': [
                _interaction(headers={'Content-Type': ['application/json']}, body={'string': None}),
                _interaction(headers={'Content-Type': ['text/plain'], 'Content-Encoding': 'identity'}, body='oops'),
            ]
        },
    )
    first, second = load_recording(path).responses
    assert (first.payload, first.body) == (None, b'')
    assert (second.content_type, second.payload) == ('text/plain', 'oops')
    assert ('content-encoding', 'identity') not in second.headers


def test_google_and_bedrock_model_names_come_from_the_uri(tmp_path: Path) -> None:
    google = _write(
        tmp_path,
        {
            'interactions': [
                _interaction(
                    uri='https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent',
                    request_body=json.dumps({'contents': [{'role': 'user', 'parts': [{'text': 'Hello Gemini'}]}]}),
                )
            ]
        },
        'google.yaml',
    )
    bedrock = _write(
        tmp_path,
        {
            'interactions': [
                _interaction(
                    uri='https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude%3A0/converse',
                    request_body=json.dumps(
                        {
                            'inferenceConfig': {'maxTokens': 100},
                            'messages': [
                                {'role': 'user', 'content': [{'document': {'citations': {'enabled': True}}}]},
                                {'role': 'user', 'content': [{'text': 'Cite it'}]},
                            ],
                        }
                    ),
                )
            ]
        },
        'bedrock.yaml',
    )
    google_recording = load_recording(google)
    assert (google_recording.api, google_recording.model_name) == ('google-gemini', 'gemini-2.5-pro')
    assert google_recording.prompt == 'Hello Gemini'
    bedrock_recording = load_recording(bedrock)
    assert (bedrock_recording.api, bedrock_recording.model_name) == ('bedrock-converse', 'us.anthropic.claude:0')
    assert bedrock_recording.model_settings == {'max_tokens': 100, 'citations': True}
    assert bedrock_recording.prompt == 'Cite it'


@pytest.mark.parametrize(
    ('uri', 'request_body', 'prompt'),
    [
        pytest.param(
            'https://api.openai.com/v1/responses', {'input': 'Plain input'}, 'Plain input', id='responses-str'
        ),
        pytest.param(
            OPENAI_CHAT,
            {
                'messages': [
                    'not a message',
                    {'role': 'system', 'content': 'You cite.'},
                    {'content': 'no role outside the Responses API'},
                    {'role': 'user', 'content': [{'type': 'image'}]},
                    {'role': 'user', 'content': ['', 'Second user text']},
                ]
            },
            'Second user text',
            id='chat-skips-non-user',
        ),
        pytest.param(OPENAI_CHAT, {'messages': [{'role': 'user', 'content': [7]}]}, None, id='no-text'),
        pytest.param(OPENAI_CHAT, {'messages': 'not a list'}, None, id='messages-not-list'),
        pytest.param(OPENAI_CHAT, ['not', 'a', 'mapping'], None, id='body-not-mapping'),
    ],
)
def test_prompt_is_the_first_user_text(tmp_path: Path, uri: str, request_body: Any, prompt: str | None) -> None:
    path = _write(tmp_path, {'interactions': [_interaction(uri=uri, request_body=json.dumps(request_body))]})
    assert load_recording(path).prompt == prompt


def test_xai_include_options_become_model_settings(tmp_path: Path) -> None:
    pytest.importorskip('xai_sdk', reason='xAI cassettes need the xai-sdk extra')
    request = {
        'model': 'grok-4',
        'include': ['INCLUDE_OPTION_INLINE_CITATIONS', 'INCLUDE_OPTION_WEB_SEARCH_CALL_OUTPUT', 'UNKNOWN', 3],
    }
    path = _write(
        tmp_path,
        {'interactions': [{'request_sample': {'json': request}, 'response_sample': {'json': {'id': 'r'}}}]},
        'chat.xai.yaml',
    )
    recording = load_recording(path)
    assert recording.model_settings == {'citations': True, 'xai_include_web_search_output': True}
    assert recording.model_name == 'grok-4'
    assert not recording.streamed


@pytest.mark.parametrize(
    ('name', 'payload', 'api'),
    [
        pytest.param('fixture.json', CHAT_BODY, 'openai-chat', id='openai-by-content'),
        pytest.param('fixture.json', {'type': 'message', 'content': []}, 'anthropic-messages', id='anthropic-message'),
        pytest.param('fixture.json', {'candidates': []}, 'google-gemini', id='google-candidates'),
        pytest.param('perplexity-citations.json', CHAT_BODY, 'perplexity-sonar', id='file-name-hint'),
        pytest.param(
            'packages/google-vertex/src/__fixtures__/search.json',
            {'candidates': []},
            'google-vertex',
            id='vercel-package-folder',
        ),
    ],
)
def test_vercel_fixture_api_is_detected_from_name_then_content(
    tmp_path: Path, name: str, payload: dict[str, Any], api: str
) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    assert load_recording(path).api == api


def test_vercel_fixture_of_unknown_shape_asks_for_api(tmp_path: Path) -> None:
    path = tmp_path / 'fixture.chunks.txt'
    path.write_text('[1]\n{"type": "unknown"}\n')
    with pytest.raises(RecordingError, match=r'unknown provider: .*pass api=\.\.\.'):
        load_recording(path)
    recording = load_recording(path, api='openai-chat')
    assert recording.streamed
    assert recording.model_name == 'gpt-4o'  # no model in the first events: the API's default


def test_render_stream_numbers_responses_events_and_frames_bedrock() -> None:
    responses = render_stream('openai-responses', [{'type': 'response.created'}, 'bare'])
    assert responses == (
        b'event: response.created\ndata: {"type": "response.created", "sequence_number": 0}\n\ndata: "bare"\n\n'
    )
    framed = render_stream('bedrock-converse', [{'messageStart': {'role': 'assistant'}}, {'messageStop': {}}])
    frames = decode_event_stream(framed)
    assert [frame.headers[':event-type'] for frame in frames] == ['messageStart', 'messageStop']
    assert json.loads(frames[0].payload) == {'role': 'assistant'}


DATA = Path(__file__).parent / 'data'


@pytest.mark.parametrize(
    ('name', 'content'),
    [
        pytest.param(
            'fixture.chunks.txt', (DATA / 'anthropic-search-result-location.chunks.txt').read_bytes(), id='chunks'
        ),
        pytest.param('fixture.json', (DATA / 'anthropic-search-result-location.json').read_bytes(), id='json'),
        pytest.param('cassette.yaml', yaml.safe_dump({'interactions': [_interaction()]}).encode(), id='yaml'),
    ],
)
def test_a_leading_byte_order_mark_is_skipped_in_every_layout(tmp_path: Path, name: str, content: bytes) -> None:
    """Editors on Windows write a UTF-8 byte-order mark: every layout reads the file as without it (a `.chunks.txt`
    stream was refused, its first line 'not a JSON object')."""
    plain = tmp_path / 'plain' / name
    marked = tmp_path / 'marked' / name
    for path, data in ((plain, content), (marked, b'\xef\xbb\xbf' + content)):
        path.parent.mkdir()
        path.write_bytes(data)
    expected = load_recording(plain, api='anthropic-messages' if name.startswith('fixture') else None)
    recording = load_recording(marked, api=expected.api)
    assert recording == dataclasses.replace(expected, path=marked)
    assert [r.body for r in recording.responses] == [r.body for r in expected.responses]


def test_a_utf16_stream_is_read_as_a_json_body_is(tmp_path: Path) -> None:
    """A `.chunks.txt` file's bytes are decoded as `json.loads` decodes a `.json` body's (UTF-16 with its mark too)."""
    content = (DATA / 'anthropic-search-result-location.chunks.txt').read_text()
    path = tmp_path / 'fixture.chunks.txt'
    path.write_text(content, encoding='utf-16')
    recording = load_recording(path, api='anthropic-messages')
    assert recording.responses[0].payload == [json.loads(line) for line in content.splitlines() if line.strip()]
