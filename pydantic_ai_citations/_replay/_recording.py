"""Offline replay of real recorded provider responses through Pydantic AI's real model classes.

A recording is read once into a `Recording` (decoded responses, recorded requests, the model name and the
settings a faithful replay needs); `Recording.model()` then builds a *fresh* instance of the real model class
(`AnthropicModel`, `OpenAIResponsesModel`, `GoogleModel`, `BedrockConverseModel`, `XaiModel`, ...) whose
transport answers, in order, from the recorded model-endpoint responses. Request bodies are not matched: the
recording is a script of answers, not a mock server. Three layouts are read:

- `vcr`: VCR cassettes in pydantic-ai's serializer format (`parsed_body` JSON, SSE text, `!!binary`
  gzip or AWS event-stream bodies);
- `xai-grpc`: pydantic-ai's `*.xai.yaml` gRPC cassettes (`json` plus protobuf `raw` bytes);
- `vercel`: the Vercel AI SDK's fixtures (`NAME.json` bodies, `NAME.chunks.txt` one SSE data object per line).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import unquote, urlsplit

from pydantic import JsonValue
from pydantic_ai.exceptions import UserError
from pydantic_ai.settings import ModelSettings

from .._checks import require
from .._models import PROVIDER_APIS, ProviderApi
from ..formats._sse import MAX_JSON_DEPTH, loads_bounded, sse_data
from ._eventstream import EventStreamFormatError, decode_event_stream, encode_event_stream

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = (
    'RawResponse',
    'Recording',
    'RecordingApi',
    'RecordingError',
    'RecordingLayout',
    'NAMED_SSE_APIS',
    'load_recording',
    'render_stream',
    'replay_recording',
    'xai_chunks_from_json',
    'xai_response_from_json',
)

RecordingLayout = Literal['vcr', 'xai-grpc', 'vercel']
"""How a recording file is laid out."""

RecordingApi = ProviderApi
"""The provider API a recording was made against; it decides which model class replays it."""

_APIS: tuple[RecordingApi, ...] = PROVIDER_APIS

_CHAT_PATH = re.compile(r'/chat/completions$')
_RESPONSES_PATH = re.compile(r'/responses$')
_GOOGLE_PATH = re.compile(r'/models/([^/:]+):(?:stream)?[gG]enerateContent$')
_BEDROCK_PATH = re.compile(r'/model/([^/]+)/converse(?:-stream)?$')

ENDPOINT_PATHS: dict[RecordingApi, re.Pattern[str]] = {
    'anthropic-messages': re.compile(r'/v1/messages$'),
    'bedrock-converse': _BEDROCK_PATH,
    'openai-responses': _RESPONSES_PATH,
    'perplexity-agent': _RESPONSES_PATH,
    'openai-chat': _CHAT_PATH,
    'openrouter': _CHAT_PATH,
    'perplexity-sonar': _CHAT_PATH,
    'mistral': _CHAT_PATH,
    'groq': _CHAT_PATH,
    'google-gemini': _GOOGLE_PATH,
    'google-vertex': _GOOGLE_PATH,
    'cohere': re.compile(r'/v2/chat$'),
    'xai': re.compile(r'^/xai_api\.Chat/GetCompletion(?:Chunk)?$'),
}
"""The request path (URL path, or gRPC method for xAI) of each API's model endpoint; anything else is setup."""

_DEFAULT_MODEL_NAMES: dict[RecordingApi, str] = {
    'anthropic-messages': 'claude-sonnet-4-5',
    'bedrock-converse': 'us.anthropic.claude-sonnet-4-5-20250929-v1:0',
    'openai-responses': 'gpt-4o',
    'openai-chat': 'gpt-4o',
    'openrouter': 'openai/gpt-4o',
    'google-gemini': 'gemini-2.5-flash',
    'google-vertex': 'gemini-2.5-flash',
    'xai': 'grok-4-fast-non-reasoning',
    'cohere': 'command-a-03-2025',
    'perplexity-agent': 'sonar',
    'perplexity-sonar': 'sonar',
    'mistral': 'mistral-large-latest',
    'groq': 'llama-3.3-70b-versatile',
}

NAMED_SSE_APIS: frozenset[RecordingApi] = frozenset(
    {'anthropic-messages', 'openai-responses', 'perplexity-agent', 'cohere'}
)
"""APIs whose SSE events carry an `event:` line naming the event's `type`."""
_SEQUENCED_SSE: frozenset[RecordingApi] = frozenset({'openai-responses', 'perplexity-agent'})
"""APIs whose SSE events are numbered (`sequence_number`)."""
_DONE_SSE: frozenset[RecordingApi] = frozenset({'openai-chat', 'openrouter', 'perplexity-sonar', 'groq', 'mistral'})
"""APIs whose streams end with `data: [DONE]`."""
_RESPONSES_FAMILY: frozenset[RecordingApi] = frozenset({'openai-responses', 'perplexity-agent'})

MAX_RECORDING_BYTES = 64 * 1024 * 1024
"""The largest recording file read (64 MiB; real cassettes are well under 1 MiB)."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The most bytes one recorded body may decompress to (64 MiB): a gzip bomb is refused, not expanded."""

_DROPPED_HEADERS = frozenset({'content-length', 'content-encoding', 'transfer-encoding'})

_XAI_INCLUDE_SETTINGS = {
    'INCLUDE_OPTION_INLINE_CITATIONS': 'xai_include_inline_citations',
    'INCLUDE_OPTION_X_SEARCH_CALL_OUTPUT': 'xai_include_x_search_output',
    'INCLUDE_OPTION_WEB_SEARCH_CALL_OUTPUT': 'xai_include_web_search_output',
    'INCLUDE_OPTION_CODE_EXECUTION_CALL_OUTPUT': 'xai_include_code_execution_output',
    'INCLUDE_OPTION_COLLECTIONS_SEARCH_CALL_OUTPUT': 'xai_include_collections_search_output',
    'INCLUDE_OPTION_ATTACHMENT_SEARCH_CALL_OUTPUT': 'xai_include_attachment_search_output',
    'INCLUDE_OPTION_MCP_CALL_OUTPUT': 'xai_include_mcp_output',
}

_XAI_REQUEST_KEYS = ('request_sample', 'request_stream', 'request')
"""Where an xAI gRPC cassette records a chat request (`request_stream` for streamed ones)."""
_XAI_KEYS = frozenset({'request_sample', 'request_stream', 'response_sample', 'response_stream', 'collections_method'})

_OPENAI_INCLUDE_SETTINGS = {
    'file_search_call.results': 'openai_include_file_search_results',
    'code_interpreter_call.outputs': 'openai_include_code_execution_outputs',
    'web_search_call.action.sources': 'openai_include_web_search_sources',
}


class RecordingError(ValueError):
    """A recording file is missing, malformed, truncated, or made against a provider replay does not know."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f'{self.path}: {reason}')


@dataclass(frozen=True)
class RawResponse:
    """One recorded model-endpoint response, decoded."""

    status: int
    """The HTTP status code (200 for xAI gRPC responses)."""
    content_type: str
    """The recorded content type, e.g. `'application/json'`, `'text/event-stream'`, `'application/grpc'`."""
    payload: JsonValue
    """The decoded body: a JSON object; a list of SSE event objects; a list of Bedrock event-stream events as
    `{event_type: payload}`; or the xAI `json` object or `chunks_json` list."""
    uri: str | None = None
    """The recorded request URI (the gRPC method for xAI, `None` for Vercel fixtures)."""
    body: bytes = field(default=b'', repr=False, compare=False)
    """The bytes served to the model class (JSON re-dumped, un-gzipped; protobuf for xAI)."""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    """The response headers served, without `content-length`, `content-encoding` and `transfer-encoding`."""
    chunks: tuple[bytes, ...] = field(default=(), repr=False, compare=False)
    """The protobuf chunks of an xAI streamed response."""


@dataclass(frozen=True)
class Recording:
    """A recording of provider responses, ready to be replayed through Pydantic AI's real model class."""

    path: Path
    """The file the recording was read from."""
    layout: RecordingLayout
    """How the file is laid out."""
    api: RecordingApi
    """The provider API the recording was made against."""
    model_name: str
    """The model name from the recorded request (body or URI), or the response for Vercel fixtures."""
    streamed: bool
    """Whether the model responses are streamed (SSE, AWS event stream, xAI chunks)."""
    model_settings: ModelSettings
    """The settings a faithful replay needs (e.g. Anthropic `max_tokens`, so the SDK does not stream)."""
    prompt: str | None
    """The first user text of the first recorded request, or `None` when none was recorded."""
    responses: list[RawResponse]
    """The model-endpoint responses, in order; setup calls (file uploads, vector stores) are left out."""
    requests: list[JsonValue]
    """The recorded request bodies of the model-endpoint interactions, in order."""
    notes: tuple[str, ...] = ()
    """What the loader skipped and why (e.g. an xAI cassette's `collections_method` setup calls)."""

    def model(self, *, sent: list[dict[str, JsonValue]] | None = None) -> Model:
        """A fresh instance of the real model class, answered offline from `responses`, in order.

        The model class is wrapped (a `WrapperModel`) so that it keeps this recording: `testing.check_seams`, given
        the model, replays the recording afresh for each of its runs.

        Args:
            sent: When given, each outgoing request body (JSON; the request message as JSON for xAI) is appended.

        When the recorded responses run out, the next request is answered with HTTP 500
        `'recording exhausted: ...'` (for xAI, a `RecordingError`), which the model class raises as its own error.
        """
        from ._build import build_model

        return build_model(self, sent)


def load_recording(path: str | Path, *, api: RecordingApi | None = None) -> Recording:
    """Read a recording file: a VCR cassette, an xAI gRPC cassette, or a Vercel AI SDK fixture.

    Args:
        path: The file to read. Its layout is detected from the name and content.
        api: Override the provider API detected from the recorded URIs or the file name.

    Raises:
        UserError: `path` is not a str or path-like, or `api` is not one of `RecordingApi`.
        RecordingError: the file is missing, malformed or truncated, holds no model-endpoint response, or was
            made against a provider replay does not know.
    """
    _require_path('load_recording', path)
    p = Path(path)
    if api is not None and api not in _APIS:
        raise UserError(f'Unknown recording api {api!r}: expected one of {", ".join(_APIS)}.')
    if not p.is_file():
        raise RecordingError(p, 'file not found')
    try:
        size = p.stat().st_size
        if size > MAX_RECORDING_BYTES:
            raise RecordingError(p, f'file too large: {size} bytes (the limit is {MAX_RECORDING_BYTES})')
        data = p.read_bytes()
    except OSError as e:
        raise RecordingError(p, f'cannot read file: {e}') from e
    name = p.name
    if name.endswith('.chunks.txt') or name.endswith('.json'):
        return _load_vercel(p, data, api)
    if name.endswith(('.yaml', '.yml')):
        document = _load_yaml(p, data)
        interactions = _interactions(p, document)
        if name.endswith(('.xai.yaml', '.xai.yml')) or any(
            _XAI_KEYS & interaction.keys() for interaction in interactions
        ):
            if api not in (None, 'xai'):
                raise RecordingError(p, f'an xAI gRPC cassette cannot be replayed as api={api!r}')
            return _load_xai(p, interactions)
        return _load_vcr(p, interactions, api)
    raise RecordingError(p, 'unknown recording layout: expected a .yaml cassette, a .json body or a .chunks.txt stream')


def replay_recording(path: str | Path, *, api: RecordingApi | None = None) -> Model:
    """The real Pydantic AI model class for a recording, answered offline from it: `load_recording(path).model()`.

    Works on your own pydantic-ai VCR cassettes too (the `tests/models/cassettes/**.yaml` files that
    `pytest --record-mode=once` writes, and `*.xai.yaml` gRPC cassettes): the provider and model name are taken
    from the recorded request URIs and bodies, setup calls such as file uploads are skipped, and the recorded
    model responses are served in order, whatever the request. Nothing touches the network. Use
    `load_recording` when you also need the settings a faithful replay needs:

    ```python
    recording = load_recording('tests/models/cassettes/test_anthropic/test_citations.yaml')
    agent = Agent(recording.model())
    result = await agent.run(recording.prompt or 'Hello', model_settings=recording.model_settings)
    ```

    Run with `agent.run_stream` when `recording.streamed`. One agent run usually consumes one response; a
    cassette with follow-up runs holds more, and a response calling an unregistered function tool makes the agent
    retry, consuming the next one.

    Raises:
        UserError: `path` is not a str or path-like, or `api` is not one of `RecordingApi`.
        RecordingError: see `load_recording`.
    """
    _require_path('replay_recording', path)
    return load_recording(path, api=api).model()


def _require_path(where: str, path: object) -> None:
    if isinstance(path, Recording):
        raise UserError(
            f'{where}: `path` must be the recording file, got a loaded `Recording`: use `recording.model()`.'
        )
    require(where, 'path', path, (str, os.PathLike), 'the recording file (a str or path-like)')


# --- YAML layouts -------------------------------------------------------------------------------------------------


def _load_yaml(path: Path, data: bytes) -> object:
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - PyYAML comes with the testing extra the suite runs under
        raise ImportError(
            'Reading VCR cassettes needs PyYAML: install `pydantic-ai-citations[testing]` (or `pyyaml`).'
        ) from e

    # `!!binary` values (gzip, AWS event stream, protobuf) are standard YAML tags: the safe loader gives `bytes`.
    try:
        loader = _bounded_yaml_loader(yaml)(data)
        try:
            return cast(object, loader.get_single_data())
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise RecordingError(path, f'malformed YAML: {_yaml_reason(e)}') from e
    except ValueError as e:  # a scalar of a YAML type whose value cannot be built (an int past 4,300 digits)
        raise RecordingError(path, f'malformed YAML: {" ".join(str(e).split())}') from None
    except RecursionError:
        raise RecordingError(path, f'malformed YAML: nested deeper than {MAX_JSON_DEPTH} levels') from None


def _yaml_reason(error: Exception) -> str:
    """PyYAML's error on one line: what, and where (its own text quotes the input over several lines)."""
    problem = cast(object, getattr(error, 'problem', None))
    if not isinstance(problem, str):
        return ' '.join(str(error).split())
    context = cast(object, getattr(error, 'context', None))
    mark = cast(Any, getattr(error, 'problem_mark', None))
    where = f' (line {mark.line + 1}, column {mark.column + 1})' if mark is not None else ''
    return (f'{context}: ' if isinstance(context, str) else '') + problem + where


def _bounded_yaml_loader(yaml: Any) -> Any:
    """PyYAML's safe loader, refusing aliases (a few bytes can expand to gigabytes) and deep nesting."""

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def construct_yaml_timestamp(self, node: Any) -> object:
            # A date or time is a str in the JSON that was recorded (JSON has no dates): kept as written, never
            # built into a `datetime` (which fails on `2024-13-45`, and is no JSON value).
            return cast(object, self.construct_scalar(node))  # pyright: ignore[reportUnknownMemberType]

        def fetch_flow_collection_start(self, token_class: object) -> None:
            # PyYAML's scanner does work per open flow collection for every token: bound the nesting first.
            if self.flow_level >= MAX_JSON_DEPTH:
                raise yaml.scanner.ScannerError(
                    None, None, f'nested deeper than {MAX_JSON_DEPTH} levels', self.get_mark()
                )
            super().fetch_flow_collection_start(token_class)  # pyright: ignore[reportUnknownMemberType]

        def compose_node(self, parent: object, index: object) -> object:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f'YAML aliases are not accepted in recordings (*{event.anchor})', event.start_mark
                )
            self.depth += 1
            try:
                if self.depth > MAX_JSON_DEPTH:
                    event = self.peek_event()
                    raise yaml.composer.ComposerError(
                        None, None, f'nested deeper than {MAX_JSON_DEPTH} levels', event.start_mark
                    )
                return cast(object, super().compose_node(parent, index))  # pyright: ignore[reportUnknownMemberType]
            finally:
                self.depth -= 1

    BoundedLoader.add_constructor('tag:yaml.org,2002:timestamp', BoundedLoader.construct_yaml_timestamp)
    return BoundedLoader


def _gunzip(path: Path, raw: bytes, where: str) -> bytes:
    """Decompress gzip data (all members), refusing output past `MAX_BODY_BYTES`."""
    out: list[bytes] = []
    total = 0
    rest = raw
    try:
        while rest:
            unzip = zlib.decompressobj(31)
            chunk = unzip.decompress(rest, MAX_BODY_BYTES - total + 1)
            total += len(chunk)
            if total > MAX_BODY_BYTES or unzip.unconsumed_tail:
                raise RecordingError(path, f'{where}: gzip body decompresses past {MAX_BODY_BYTES} bytes')
            out.append(chunk)
            if not unzip.eof:
                raise RecordingError(path, f'{where}: bad gzip data: truncated')
            rest = unzip.unused_data.lstrip(b'\x00')
    except zlib.error as e:
        raise RecordingError(path, f'{where}: bad gzip data: {e}') from e
    return b''.join(out)


def _interactions(path: Path, document: object) -> list[dict[str, object]]:
    if not isinstance(document, dict):
        raise RecordingError(path, 'not a cassette: expected a mapping with `interactions`')
    interactions = cast('dict[str, object]', document).get('interactions')
    if not isinstance(interactions, list) or not interactions:
        raise RecordingError(path, 'the cassette has no interactions')
    result: list[dict[str, object]] = []
    for i, interaction in enumerate(cast('list[object]', interactions)):
        if not isinstance(interaction, dict):
            raise RecordingError(path, f'interaction {i} is not a mapping')
        result.append(cast('dict[str, object]', interaction))
    return result


def _mapping(path: Path, value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise RecordingError(path, f'{what} is missing or not a mapping')
    return cast('dict[str, object]', value)


def _header(headers: Mapping[str, object], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            values = _header_values(value)
            return values[0] if values else None
    return None


def _header_values(value: object) -> list[str]:
    items = cast('list[object]', value) if isinstance(value, list) else [value]
    return [item.decode('utf-8', 'replace') if isinstance(item, bytes) else str(item) for item in items]


def _api_for_uri(uri: str) -> RecordingApi | None:
    parts = urlsplit(uri)
    host = (parts.hostname or '').lower()
    path = parts.path
    candidates: tuple[RecordingApi, ...]
    if host == 'api.anthropic.com':
        candidates = ('anthropic-messages',)
    elif host.startswith('bedrock-runtime') and host.endswith('.amazonaws.com'):
        candidates = ('bedrock-converse',)
    elif host == 'api.openai.com':
        candidates = ('openai-responses', 'openai-chat')
    elif host == 'openrouter.ai' or host.endswith('.openrouter.ai'):
        candidates = ('openrouter',)
    elif host == 'api.perplexity.ai':
        candidates = ('perplexity-sonar', 'perplexity-agent')
    elif host == 'api.mistral.ai':
        candidates = ('mistral',)
    elif host == 'api.groq.com':
        candidates = ('groq',)
    elif host == 'generativelanguage.googleapis.com':
        candidates = ('google-gemini',)
    elif host.endswith('aiplatform.googleapis.com'):
        candidates = ('google-vertex',)
    elif host in ('api.cohere.com', 'api.cohere.ai'):
        candidates = ('cohere',)
    else:
        return None
    for candidate in candidates:
        if ENDPOINT_PATHS[candidate].search(path):
            return candidate
    return None


def _is_model_endpoint(uri: str, api: RecordingApi) -> bool:
    return ENDPOINT_PATHS[api].search(urlsplit(uri).path) is not None


def _load_vcr(path: Path, interactions: list[dict[str, object]], api: RecordingApi | None) -> Recording:
    selected: list[tuple[int, dict[str, object], dict[str, object]]] = []
    hosts: list[str] = []
    detected: RecordingApi | None = api
    for i, interaction in enumerate(interactions):
        request = _mapping(path, interaction.get('request'), f'interaction {i} request')
        response = _mapping(path, interaction.get('response'), f'interaction {i} response')
        uri = request.get('uri')
        if not isinstance(uri, str):
            raise RecordingError(path, f'interaction {i} request has no uri')
        hosts.append(urlsplit(uri).hostname or uri)
        if detected is None:
            detected = _api_for_uri(uri)
            if detected is None:
                continue
        elif api is None and _api_for_uri(uri) != detected:
            continue
        if _is_model_endpoint(uri, detected):
            selected.append((i, request, response))
    if detected is None:
        raise RecordingError(
            path,
            f'unknown provider: no interaction goes to a known model endpoint (hosts: {", ".join(sorted(set(hosts)))}); '
            'pass api=... to choose one',
        )
    if not selected:
        raise RecordingError(path, f'no interaction goes to a {detected} model endpoint')

    responses: list[RawResponse] = []
    requests: list[JsonValue] = []
    for i, request, response in selected:
        requests.append(_request_body(path, request, i))
        responses.append(_vcr_response(path, response, str(request['uri']), i))

    first_request = requests[0]
    first_uri = str(selected[0][1]['uri'])
    model_name = _model_name(detected, first_request, first_uri) or _DEFAULT_MODEL_NAMES[detected]
    streamed = any(_is_stream_type(r.content_type) for r in responses)
    return Recording(
        path=path,
        layout='vcr',
        api=detected,
        model_name=model_name,
        streamed=streamed,
        model_settings=_settings_for(detected, first_request),
        prompt=_first_user_text(detected, first_request),
        responses=responses,
        requests=requests,
    )


def _request_body(path: Path, request: dict[str, object], index: int) -> JsonValue:
    if 'parsed_body' in request:
        return cast(JsonValue, request['parsed_body'])
    body = request.get('body')
    if isinstance(body, dict):
        body = cast('dict[str, object]', body).get('string')
    if body is None or body in ('', b''):
        return None
    raw = body if isinstance(body, bytes) else str(body).encode('utf-8')
    if raw[:2] == b'\x1f\x8b':
        raw = _gunzip(path, raw, f'interaction {index} request body')
    text = raw.decode('utf-8', 'replace')
    try:
        return cast(JsonValue, loads_bounded(text))
    except ValueError:
        return text


def _vcr_response(path: Path, response: dict[str, object], uri: str, index: int) -> RawResponse:
    status_info = _mapping(path, response.get('status'), f'interaction {index} response status')
    status = status_info.get('code')
    if not isinstance(status, int):
        raise RecordingError(path, f'interaction {index} response has no status code')
    raw_headers = response.get('headers')
    headers = cast('dict[str, object]', raw_headers) if isinstance(raw_headers, dict) else {}
    content_type = _header(headers, 'content-type') or 'application/json'
    served_headers = tuple(
        (key.lower(), value)
        for key, values in headers.items()
        if key.lower() not in _DROPPED_HEADERS
        for value in _header_values(values)
    )
    where = f'interaction {index} response'

    if 'parsed_body' in response:
        payload = cast(JsonValue, response['parsed_body'])
        try:
            body_bytes = json.dumps(payload, allow_nan=False).encode('utf-8')
        except (TypeError, ValueError) as e:  # a YAML value JSON has no form for (a set, bytes, inf)
            raise RecordingError(path, f'{where} parsed_body is not JSON data: {e}') from None
        return RawResponse(status, content_type, payload, uri, body_bytes, served_headers or _json_headers())

    body_info = response.get('body')
    body: object = cast('dict[str, object]', body_info).get('string') if isinstance(body_info, dict) else body_info
    if body is None:
        raw = b''
    elif isinstance(body, bytes):
        raw = body
    else:
        raw = str(body).encode('utf-8')
    encoding = (_header(headers, 'content-encoding') or '').lower()
    if raw[:2] == b'\x1f\x8b' or encoding == 'gzip':
        raw = _gunzip(path, raw, where)
    elif encoding not in ('', 'identity'):
        raise RecordingError(path, f'{where}: cannot decode content-encoding {encoding!r}')

    ctype = content_type.lower()
    if 'vnd.amazon.eventstream' in ctype:
        payload = _decode_bedrock_stream(path, raw, where)
    elif 'text/event-stream' in ctype:
        payload = _parse_sse(path, raw, where)
    elif 'json' in ctype:
        payload = _parse_json(path, raw, where) if raw else None
    else:
        payload = raw.decode('utf-8', 'replace')
    return RawResponse(status, content_type, payload, uri, raw, served_headers)


def _json_headers() -> tuple[tuple[str, str], ...]:
    return (('content-type', 'application/json'),)


def _parse_json(path: Path, raw: bytes, where: str) -> JsonValue:
    try:
        return cast(JsonValue, loads_bounded(raw))
    except ValueError as e:
        raise RecordingError(path, f'{where}: body is not valid JSON (truncated?): {e}') from e


def _parse_sse(path: Path, raw: bytes, where: str) -> list[JsonValue]:
    events: list[JsonValue] = []
    for data in sse_data(raw):
        try:
            events.append(cast(JsonValue, loads_bounded(data)))
        except ValueError as e:
            raise RecordingError(path, f'{where}: SSE event is not valid JSON (truncated?): {e}: {data[:80]!r}') from e
    return events


def _decode_bedrock_stream(path: Path, raw: bytes, where: str) -> list[JsonValue]:
    try:
        frames = decode_event_stream(raw)
    except EventStreamFormatError as e:
        raise RecordingError(path, f'{where}: {e}') from e
    events: list[JsonValue] = []
    for frame in frames:
        kind = frame.headers.get(':event-type') or frame.headers.get(':exception-type') or 'unknown'
        try:
            payload = cast(JsonValue, loads_bounded(frame.payload)) if frame.payload else {}
        except ValueError as e:
            raise RecordingError(path, f'{where}: event {kind!r} payload is not JSON') from e
        events.append({str(kind): payload})
    return events


def _is_stream_type(content_type: str) -> bool:
    ctype = content_type.lower()
    return 'event-stream' in ctype or 'eventstream' in ctype or ctype == 'application/grpc+stream'


# --- xAI gRPC cassettes -------------------------------------------------------------------------------------------


def _load_xai(path: Path, interactions: list[dict[str, object]]) -> Recording:
    responses: list[RawResponse] = []
    requests: list[JsonValue] = []
    notes: list[str] = []
    for i, interaction in enumerate(interactions):
        response = _xai_response(path, interaction, i)
        if response is None:
            kinds = ', '.join(sorted(interaction)) or 'nothing'
            what = 'a collections_method setup call' if 'collections_method' in interaction else f'unknown ({kinds})'
            notes.append(f'interaction {i} skipped: {what}')
            continue
        request = next((interaction[k] for k in _XAI_REQUEST_KEYS if k in interaction), None)
        request_json = cast('dict[str, object]', request).get('json') if isinstance(request, dict) else None
        requests.append(cast(JsonValue, request_json))
        responses.append(response)
    if not responses:
        raise RecordingError(path, 'no interaction has a response_sample or response_stream (a chat call)')
    first = requests[0]
    model_name = _model_name('xai', first, '') or _DEFAULT_MODEL_NAMES['xai']
    return Recording(
        path=path,
        layout='xai-grpc',
        api='xai',
        model_name=model_name,
        streamed=any(r.chunks or r.content_type.endswith('+stream') for r in responses),
        model_settings=_settings_for('xai', first),
        prompt=_first_user_text('xai', first),
        responses=responses,
        requests=requests,
        notes=tuple(notes),
    )


def _xai_response(path: Path, interaction: dict[str, object], i: int) -> RawResponse | None:
    """The chat response of one xAI interaction, or `None` when it is not a chat call (setup, unknown kind)."""
    if 'response_stream' in interaction:
        stream = _mapping(path, interaction['response_stream'], f'interaction {i} response_stream')
        chunks_json = stream.get('chunks_json')
        chunks_raw = stream.get('chunks_raw')
        if not isinstance(chunks_json, list) and not isinstance(chunks_raw, list):
            raise RecordingError(path, f'interaction {i} response_stream has neither chunks_json nor chunks_raw')
        chunks = tuple(_xai_raw(path, c, f'interaction {i} chunk') for c in cast('list[object]', chunks_raw or []))
        messages = _xai_chunk_messages(cast('list[object]', chunks_json)) if isinstance(chunks_json, list) else []
        payload = cast(JsonValue, messages)
        if not chunks and messages:
            chunks = xai_chunks_from_json(path, messages, i)
        return RawResponse(200, 'application/grpc+stream', payload, '/xai_api.Chat/GetCompletionChunk', b'', (), chunks)
    if 'response_sample' in interaction:
        sample = _mapping(path, interaction['response_sample'], f'interaction {i} response_sample')
        sample_json = sample.get('json')
        if 'raw' in sample:
            body = _xai_raw(path, sample['raw'], f'interaction {i} response')
        elif isinstance(sample_json, dict):
            body = xai_response_from_json(path, cast('dict[str, object]', sample_json), i)
        else:
            raise RecordingError(path, f'interaction {i} response_sample has neither json nor raw')
        return RawResponse(200, 'application/grpc', cast(JsonValue, sample_json), '/xai_api.Chat/GetCompletion', body)
    return None


def _xai_chunk_messages(values: list[object]) -> list[object]:
    """pydantic-ai writes each streamed chunk as `{chunk: {...}}`; older cassettes give the chunk itself."""
    return [_unwrap_chunk(value) for value in values]


def _unwrap_chunk(value: object) -> object:
    if not isinstance(value, dict):
        return value
    mapping = cast('dict[str, object]', value)
    return mapping['chunk'] if list(mapping) == ['chunk'] else mapping


def _xai_raw(path: Path, value: object, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    raise RecordingError(path, f'{where}: `raw` is not !!binary protobuf bytes')


def _xai_chat_pb2() -> Any:
    # `xai_sdk` ships no type stubs; the generated protobuf module is used untyped.
    return importlib.import_module('xai_sdk.proto').chat_pb2


def xai_response_from_json(path: Path, value: dict[str, object], index: int) -> bytes:
    """A `GetChatCompletionResponse` given in protobuf's JSON form, as the protobuf bytes xAI sends."""
    from google.protobuf import json_format

    try:
        message = json_format.ParseDict(value, _xai_chat_pb2().GetChatCompletionResponse())
        return cast(bytes, message.SerializeToString())
    except (json_format.ParseError, ValueError, TypeError) as e:
        raise RecordingError(path, f'interaction {index} response json is not a GetChatCompletionResponse: {e}') from e


def xai_chunks_from_json(path: Path, values: list[object], index: int) -> tuple[bytes, ...]:
    """`GetChatCompletionChunk`s given in protobuf's JSON form, as the protobuf bytes xAI streams."""
    from google.protobuf import json_format

    chunks: list[bytes] = []
    for value in values:
        if not isinstance(value, dict):
            raise RecordingError(path, f'interaction {index} chunk json is not a mapping')
        try:
            message = json_format.ParseDict(cast('dict[str, object]', value), _xai_chat_pb2().GetChatCompletionChunk())
            chunks.append(cast(bytes, message.SerializeToString()))
        except (json_format.ParseError, ValueError, TypeError) as e:
            raise RecordingError(path, f'interaction {index} chunk json is not a GetChatCompletionChunk: {e}') from e
    return tuple(chunks)


# --- Vercel AI SDK fixtures ---------------------------------------------------------------------------------------


_VERCEL_PROVIDERS: dict[str, RecordingApi] = {
    'anthropic': 'anthropic-messages',
    'perplexity': 'perplexity-sonar',
    'cohere': 'cohere',
    'openrouter': 'openrouter',
    'google': 'google-gemini',
    'google-vertex': 'google-vertex',
    'amazon-bedrock': 'bedrock-converse',
}


def _load_vercel(path: Path, data: bytes, api: RecordingApi | None) -> Recording:
    streamed = path.name.endswith('.chunks.txt')
    if streamed:
        events: list[JsonValue] = []
        # Decoded as `json.loads` decodes a `.json` body's bytes (and PyYAML a cassette's): a leading byte-order mark,
        # which editors on Windows write, is skipped, and UTF-16/32 are recognised.
        text = data.decode(json.detect_encoding(data), 'replace')
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                events.append(cast(JsonValue, loads_bounded(line)))
            except ValueError as e:
                raise RecordingError(path, f'line {n} is not a JSON object (truncated?): {e}') from e
        if not events:
            raise RecordingError(path, 'the stream is empty')
        payload: JsonValue = events
    else:
        if not data.strip():
            raise RecordingError(path, 'the body is empty')
        payload = _parse_json(path, data, 'body')
    detected = api or _vercel_api(path, payload)
    if detected is None:
        raise RecordingError(path, 'unknown provider: cannot tell the API from the file name or content; pass api=...')
    if detected in ('xai', 'bedrock-converse'):
        raise RecordingError(path, f'Vercel fixtures cannot be replayed as {detected}')
    if streamed:
        body = render_stream(detected, cast('list[JsonValue]', payload))
        content_type = 'text/event-stream'
    else:
        body = json.dumps(payload).encode('utf-8')
        content_type = 'application/json'
    response = RawResponse(200, content_type, payload, None, body, (('content-type', content_type),))
    return Recording(
        path=path,
        layout='vercel',
        api=detected,
        model_name=_vercel_model_name(payload) or _DEFAULT_MODEL_NAMES[detected],
        streamed=streamed,
        model_settings=_settings_for(detected, None),
        prompt=None,
        responses=[response],
        requests=[],
    )


def _vercel_api(path: Path, payload: JsonValue) -> RecordingApi | None:
    first: JsonValue = payload[0] if isinstance(payload, list) and payload else payload
    obj = cast('dict[str, JsonValue]', first) if isinstance(first, dict) else {}
    kind = str(obj.get('type') or '')
    openai_kind: RecordingApi | None = None
    if obj.get('object') == 'response' or kind.startswith('response.'):
        openai_kind = 'openai-responses'
    elif 'choices' in obj or str(obj.get('object') or '').startswith('chat.completion'):
        openai_kind = 'openai-chat'
    # The file name's first word (`perplexity-citations.json`), then the Vercel repo's `packages/<provider>/` folder.
    hints = [path.name.split('-')[0].split('.')[0]]
    parts = path.parts
    if 'packages' in parts[:-2]:
        hints.append(parts[len(parts) - 1 - parts[::-1].index('packages') + 1])
    for hint in hints:
        if hint == 'openai' and openai_kind is not None:
            return openai_kind
        if hint in _VERCEL_PROVIDERS:
            return _VERCEL_PROVIDERS[hint]
    if openai_kind is not None:
        return openai_kind
    if kind in ('message', 'message_start'):
        return 'anthropic-messages'
    if 'candidates' in obj:
        return 'google-gemini'
    return None


def _vercel_model_name(payload: JsonValue) -> str | None:
    items = cast('list[JsonValue]', payload) if isinstance(payload, list) else [payload]
    for item in items[:3]:
        if not isinstance(item, dict):
            continue
        for container in (item, item.get('message'), item.get('response')):
            if isinstance(container, dict) and isinstance(model := container.get('model'), str) and model:
                return model
    return None


def render_stream(api: RecordingApi, events: list[JsonValue]) -> bytes:
    """The wire bytes of a streamed response given as event objects, written the way `api` streams them.

    SSE with `event:` lines for Anthropic, OpenAI Responses and the Perplexity Agent API (numbering
    `sequence_number` when an event has none) and Cohere; plain `data:` lines ending in `data: [DONE]` for the
    Chat Completions family; `data:` lines for Google; the AWS event-stream framing for Bedrock ConverseStream
    (each event written `{"<event type>": {payload}}`). xAI streams protobuf, not bytes: see `xai_chunks_from_json`.
    """
    if api == 'bedrock-converse':
        return encode_event_stream([next(iter(cast('dict[str, JsonValue]', event).items())) for event in events])
    out: list[str] = []
    for n, event in enumerate(events):
        obj = cast('dict[str, JsonValue]', event) if isinstance(event, dict) else None
        if obj is not None and api in _SEQUENCED_SSE and 'sequence_number' not in obj:
            obj = {**obj, 'sequence_number': n}
        data = json.dumps(obj if obj is not None else event)
        kind = obj.get('type') if obj is not None else None
        if api in NAMED_SSE_APIS and isinstance(kind, str):
            out.append(f'event: {kind}\ndata: {data}\n\n')
        else:
            out.append(f'data: {data}\n\n')
    if api in _DONE_SSE:
        out.append('data: [DONE]\n\n')
    return ''.join(out).encode('utf-8')


# --- What the recorded request says -------------------------------------------------------------------------------


def _model_name(api: RecordingApi, request: JsonValue, uri: str) -> str | None:
    if api in ('google-gemini', 'google-vertex'):
        if m := _GOOGLE_PATH.search(urlsplit(uri).path):
            return unquote(m.group(1))
    elif api == 'bedrock-converse':
        if m := _BEDROCK_PATH.search(urlsplit(uri).path):
            return unquote(m.group(1))
    elif isinstance(request, dict) and isinstance(model := request.get('model'), str) and model:
        return model
    return None


def _settings_for(api: RecordingApi, request: JsonValue) -> ModelSettings:
    body = cast('dict[str, JsonValue]', request) if isinstance(request, dict) else {}
    settings: dict[str, object] = {}
    if api == 'anthropic-messages':
        max_tokens = body.get('max_tokens')
        # Without `max_tokens` the Anthropic SDK may stream a non-streamed request, which a JSON body can't answer.
        settings['max_tokens'] = max_tokens if isinstance(max_tokens, int) else 4096
        if _citations_enabled(body.get('messages')):
            settings['citations'] = True
    elif api == 'bedrock-converse':
        config = body.get('inferenceConfig')
        max_tokens = config.get('maxTokens') if isinstance(config, dict) else None
        # Without `max_tokens`, `BedrockConverseModel` streams a non-streamed request, which a JSON body can't answer.
        settings['max_tokens'] = max_tokens if isinstance(max_tokens, int) else 4096
        if _citations_enabled(body.get('messages')):
            settings['citations'] = True
    elif api == 'openai-responses':
        include = body.get('include')
        for option in cast('list[JsonValue]', include) if isinstance(include, list) else []:
            if isinstance(option, str) and option in _OPENAI_INCLUDE_SETTINGS:
                settings[_OPENAI_INCLUDE_SETTINGS[option]] = True
    elif api == 'perplexity-sonar':
        # Perplexity's `citations` / `search_results` are not mapped by Pydantic AI; keep them reachable.
        settings['openai_include_unmapped_response_data'] = True
    elif api == 'xai':
        include = body.get('include')
        for option in cast('list[JsonValue]', include) if isinstance(include, list) else []:
            if option == 'INCLUDE_OPTION_INLINE_CITATIONS':
                settings['citations'] = True
            elif isinstance(option, str) and option in _XAI_INCLUDE_SETTINGS:
                settings[_XAI_INCLUDE_SETTINGS[option]] = True
    return cast(ModelSettings, settings)


def _citations_enabled(value: JsonValue) -> bool:
    """Whether any document block in the recorded request has `citations.enabled`."""
    if isinstance(value, dict):
        citations = value.get('citations')
        if isinstance(citations, dict) and citations.get('enabled') is True:
            return True
        return any(_citations_enabled(v) for v in value.values())
    if isinstance(value, list):
        return any(_citations_enabled(v) for v in value)
    return False


def _first_user_text(api: RecordingApi, request: JsonValue) -> str | None:
    if not isinstance(request, dict):
        return None
    if api in ('google-gemini', 'google-vertex'):
        messages = request.get('contents')
    elif api in _RESPONSES_FAMILY:
        messages = request.get('input')
        if isinstance(messages, str):
            return messages
    else:
        messages = request.get('messages')
    if not isinstance(messages, list):
        return None
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get('role')
        if role not in ('user', 'USER', 'ROLE_USER', None):
            continue
        if role is None and api not in _RESPONSES_FAMILY:
            continue
        content = message.get('parts') if api in ('google-gemini', 'google-vertex') else message.get('content')
        if text := _text_of(content):
            return text
    return None


def _text_of(content: JsonValue) -> str | None:
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        for item in content:
            if isinstance(item, str) and item:
                return item
            if isinstance(item, dict) and isinstance(text := item.get('text'), str) and text:
                return text
    return None
