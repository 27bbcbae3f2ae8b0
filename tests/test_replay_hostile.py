"""Hostile recording files: alias bombs, gzip bombs, deep nesting and oversize files are `RecordingError`s.

Every input is generated here (the gzip bomb in memory); none may raise `MemoryError` or `RecursionError`.
"""

from __future__ import annotations

import importlib
import json
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from pydantic_ai_citations.formats._sse import MAX_JSON_DEPTH, JsonNestingError, load_json, loads_bounded
from pydantic_ai_citations.formats.wire import parse_sse
from pydantic_ai_citations.testing import RecordingError, load_recording

recording_module: Any = importlib.import_module('pydantic_ai_citations._replay._recording')

# The classic "billion laughs": 544 bytes that expand to 10^9 strings when walked.
ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
interactions: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def _cassette(headers: dict[str, list[str]], body: str | bytes, request_body: str | bytes = '{}') -> dict[str, Any]:
    return {
        'interactions': [
            {
                'request': {
                    'method': 'POST',
                    'uri': 'https://api.openai.com/v1/responses',
                    'headers': {},
                    'body': request_body,
                },
                'response': {'status': {'code': 200, 'message': 'OK'}, 'headers': headers, 'body': {'string': body}},
            }
        ]
    }


def _write(tmp_path: Path, name: str, document: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def _gzip_bomb(size: int) -> bytes:
    """`size` zero bytes, gzipped, built a MiB at a time (about 1 KiB compressed per MiB)."""
    zip_ = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    parts = [zip_.compress(block) for _ in range(size // len(block))]
    return b''.join(parts) + zip_.flush()


def test_yaml_alias_bomb(tmp_path: Path) -> None:
    path = tmp_path / 'bomb.yaml'
    path.write_text(ALIAS_BOMB)
    assert path.stat().st_size < 600
    with pytest.raises(RecordingError, match='aliases are not accepted'):
        load_recording(path)


def test_yaml_single_alias_refused(tmp_path: Path) -> None:
    path = tmp_path / 'alias.yaml'
    path.write_text('x: &h {a: 1}\ninteractions: [*h]\n')
    with pytest.raises(RecordingError, match='aliases'):
        load_recording(path)


@pytest.mark.parametrize('flow', [True, False], ids=['flow', 'block'])
def test_deep_yaml(tmp_path: Path, flow: bool) -> None:
    depth = 50_000
    text = 'interactions: ' + '[ ' * depth + ']' * depth if flow else ''.join(' ' * i + '-\n' for i in range(3000))
    path = tmp_path / 'deep.yaml'
    path.write_text(text)
    with pytest.raises(RecordingError, match='nested deeper|malformed YAML'):
        load_recording(path)


def test_gzip_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert recording_module.MAX_BODY_BYTES == 64 * 1024 * 1024
    monkeypatch.setattr(recording_module, 'MAX_BODY_BYTES', 8 * 1024 * 1024)  # the same code path, faster
    bomb = _gzip_bomb(2000 * 1024 * 1024 // 1000 * 10)  # 20 MiB of zeros in about 20 KiB
    assert len(bomb) < 50_000
    path = _write(tmp_path, 'gz.yaml', _cassette({'content-type': ['application/json']}, bomb))
    with pytest.raises(RecordingError, match='decompresses past'):
        load_recording(path)


def test_gzip_bomb_in_request_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording_module, 'MAX_BODY_BYTES', 1024 * 1024)
    document = _cassette({'content-type': ['application/json']}, '{"id": "r"}', _gzip_bomb(4 * 1024 * 1024))
    path = _write(tmp_path, 'gzreq.yaml', document)
    with pytest.raises(RecordingError, match='request body: gzip body decompresses past'):
        load_recording(path)


def test_small_gzip_still_read(tmp_path: Path) -> None:
    import gzip

    body = gzip.compress(b'{"id": "r1"}') + gzip.compress(b'')  # two members, as concatenated streams are
    path = _write(tmp_path, 'ok.yaml', _cassette({'content-type': ['application/json']}, body))
    [response] = load_recording(path).responses
    assert response.payload == {'id': 'r1'}


def test_oversize_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording_module, 'MAX_RECORDING_BYTES', 1000)
    path = tmp_path / 'big.yaml'
    path.write_text('x: ' + 'a' * 2000)
    with pytest.raises(RecordingError, match='file too large'):
        load_recording(path)


@pytest.mark.parametrize(
    ('content_type', 'template'),
    [('application/json', '{}'), ('text/event-stream', 'data: {}\n\n')],
    ids=['json', 'sse'],
)
def test_deep_json_body(tmp_path: Path, content_type: str, template: str) -> None:
    deep = '[' * 100_000 + ']' * 100_000
    path = _write(tmp_path, 'deep.yaml', _cassette({'content-type': [content_type]}, template.format(deep)))
    with pytest.raises(RecordingError, match='nested deeper'):
        load_recording(path)


def test_deep_json_vercel_fixture(tmp_path: Path) -> None:
    path = tmp_path / 'openai-deep.json'
    path.write_text('{"a": ' * 100_000 + '1' + '}' * 100_000)
    with pytest.raises(RecordingError, match='nested deeper'):
        load_recording(path)
    path = tmp_path / 'openai-deep.chunks.txt'
    path.write_text('[' * (MAX_JSON_DEPTH + 1) + ']' * (MAX_JSON_DEPTH + 1) + '\n')
    with pytest.raises(RecordingError, match='nested deeper'):
        load_recording(path)


def test_loads_bounded() -> None:
    assert loads_bounded('[' * MAX_JSON_DEPTH + ']' * MAX_JSON_DEPTH) is not None
    with pytest.raises(JsonNestingError):
        loads_bounded('[' * (MAX_JSON_DEPTH + 1) + ']' * (MAX_JSON_DEPTH + 1))
    with pytest.raises(JsonNestingError):
        loads_bounded('[' * 100_000)
    assert load_json('{"a": ' * 100_000) is None
    assert json.loads(json.dumps({'ok': [1, {'x': 2}]})) == loads_bounded('{"ok": [1, {"x": 2}]}')


def test_wire_parse_sse_deep_json() -> None:
    deep = '{"a": ' * 100_000 + '1' + '}' * 100_000
    events = parse_sse(f'data: {deep}\n\ndata: {{"type": "ok"}}\n\n')
    assert events == [{'type': 'ok'}]


_PARSED_BODY = """interactions:
- request:
    uri: https://api.anthropic.com/v1/messages
    method: POST
    parsed_body: {{model: claude-sonnet-4-5}}
  response:
    status: {{code: 200}}
    headers: {{content-type: [application/json]}}
    parsed_body:
      {body}
"""


@pytest.mark.parametrize(
    ('body', 'expected'),
    [
        pytest.param('created: 2024-13-45', b'{"created": "2024-13-45"}', id='impossible-date'),
        pytest.param('created: 2024-01-01', b'{"created": "2024-01-01"}', id='date'),
        pytest.param('n: ' + '9' * 5000, 'malformed YAML: Exceeds the limit', id='huge-int'),
        pytest.param('s: !!set {a: null}', 'parsed_body is not JSON data', id='set'),
        pytest.param('x: .inf', 'parsed_body is not JSON data', id='infinity'),
    ],
)
def test_yaml_values_json_has_no_form_for(tmp_path: Path, body: str, expected: bytes | str) -> None:
    """A YAML date is the str the JSON recorded (it crashed on `2024-13-45`, and was no JSON value); a value JSON
    cannot hold is a `RecordingError` naming it, not a raw `ValueError` or `TypeError`."""
    path = tmp_path / 'x.yaml'
    path.write_text(_PARSED_BODY.format(body=body))
    if isinstance(expected, bytes):
        assert load_recording(path).responses[0].body == expected
    else:
        with pytest.raises(RecordingError, match=expected):
            load_recording(path)
