"""Wire fixtures: short provider responses, written by hand in each provider's documented wire format.

A fixture is a mini-cassette, `fixtures/<api>/<scenario>.json` (package data, JSON so no YAML is needed at run time):

```json
{"model_name": "...", "streamed": false, "note": "what it shows",
 "responses": [{"status": 200, "content_type": "application/json", "body": {...}}]}
```

A streamed response gives `events` (the event objects, in order) instead of `body`; `load_fixture` renders them the
API's way: SSE with `event:` lines for Anthropic, OpenAI Responses (numbering `sequence_number` when an event has
none) and Cohere; plain `data:` lines ending in `data: [DONE]` for the Chat Completions family (OpenAI Chat,
OpenRouter, Perplexity Sonar, Groq, Mistral); `data:` lines for Google; the binary AWS event-stream framing for
Bedrock ConverseStream (each event written `{"<event type>": {payload}}`); protobuf for xAI (whose `body` / `events`
are `GetChatCompletionResponse` / `GetChatCompletionChunk` in protobuf's JSON form).

`load_fixture(api, scenario)` returns a `Recording` whose `model()` is the real Pydantic AI model class answered
from the fixture. Three APIs that `Recording` does not know are served through a compatible transport API and
built here: Perplexity's Agent API (`OpenAIResponsesModel` at Perplexity's base URL), Mistral (`MistralModel`) and
Groq (`GroqModel`); `FixtureRecording.fixture_api` keeps the row's own label.
"""

from __future__ import annotations

import binascii
import importlib
import json
import struct
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NotRequired, cast

from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError, with_config
from pydantic_ai.exceptions import UserError
from pydantic_ai.settings import ModelSettings
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict before Python 3.12

from .._models import API_LABELS, ApiLabel
from ..testing._replay import (
    RawResponse,
    Recording,
    RecordingApi,
    RecordingError,
    _xai_chunks_from_json,  # pyright: ignore[reportPrivateUsage]  # the replay module's protobuf-JSON helpers
    _xai_response_from_json,  # pyright: ignore[reportPrivateUsage]
)
from ..testing._replay_models import ReplayTransport, copy_settings, httpx2_client, mock_transport

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from ..formats.perplexity import PerplexityTap

__all__ = (
    'FIXTURE_APIS',
    'FixtureRecording',
    'Scenario',
    'encode_event_stream',
    'fixture_path',
    'load_fixture',
    'load_fixtures',
    'render_events',
    'scenarios',
)

FIXTURE_APIS: tuple[ApiLabel, ...] = tuple(api for api in API_LABELS if api != 'other')
"""The API rows that have wire fixtures (every `ApiLabel` but `'other'`)."""

Scenario = Literal['cited', 'cited_stream', 'document', 'document_page', 'followup', 'structured']
"""The scenario names fixtures use; `scenarios(api)` says which ones an API has."""

_TRANSPORT_API: dict[ApiLabel, RecordingApi] = {
    'anthropic-messages': 'anthropic-messages',
    'bedrock-converse': 'bedrock-converse',
    'openai-responses': 'openai-responses',
    'openai-chat': 'openai-chat',
    'openrouter': 'openrouter',
    'google-gemini': 'google-gemini',
    'google-vertex': 'google-vertex',
    'xai': 'xai',
    'cohere': 'cohere',
    'perplexity-sonar': 'perplexity-sonar',
    # Served by the same transport as a `Recording` API whose endpoint path matches, with the model built here.
    'perplexity-agent': 'openai-responses',
    'mistral': 'openai-chat',
    'groq': 'openai-chat',
}

_NAMED_SSE: frozenset[ApiLabel] = frozenset({'anthropic-messages', 'openai-responses', 'perplexity-agent', 'cohere'})
_SEQUENCED_SSE: frozenset[ApiLabel] = frozenset({'openai-responses', 'perplexity-agent'})
_DONE_SSE: frozenset[ApiLabel] = frozenset({'openai-chat', 'openrouter', 'perplexity-sonar', 'groq', 'mistral'})

_BEDROCK_REGION = 'us-east-1'
_PERPLEXITY_BASE_URL = 'https://api.perplexity.ai/v1'
_DUMMY_KEY = 'fixture-dummy-key'


@with_config(ConfigDict(extra='forbid'))
class _ResponseSpec(TypedDict):
    status: NotRequired[int]
    content_type: NotRequired[str]
    body: NotRequired[JsonValue]
    events: NotRequired[list[JsonValue]]


@with_config(ConfigDict(extra='forbid'))
class _FixtureSpec(TypedDict):
    model_name: str
    streamed: bool
    note: str
    responses: list[_ResponseSpec]
    prompt: NotRequired[str]
    model_settings: NotRequired[dict[str, JsonValue]]


_FIXTURE_TA: TypeAdapter[_FixtureSpec] = TypeAdapter(_FixtureSpec)


@dataclass(frozen=True)
class FixtureRecording(Recording):
    """A `Recording` read from a wire fixture; `model()` builds the real model class of `fixture_api`."""

    fixture_api: ApiLabel = 'other'
    """The capability-matrix row the fixture belongs to (`api` is the transport API used to serve it)."""
    scenario: str = ''
    """The fixture's scenario name (its file name without `.json`)."""
    note: str = ''
    """What the fixture shows."""

    def model(self, *, sent: list[dict[str, JsonValue]] | None = None) -> Model:
        """A fresh instance of the real model class, answered offline from `responses`, in order.

        Args:
            sent: When given, each outgoing request body (JSON; the request message as JSON for xAI) is appended.
        """
        if self.fixture_api not in ('perplexity-agent', 'mistral', 'groq'):
            return super().model(sent=sent)
        transport = ReplayTransport(self, sent)
        if self.fixture_api == 'perplexity-agent':
            return _perplexity_agent(self, transport)
        if self.fixture_api == 'mistral':
            return _mistral(self, transport)
        return _groq(self, transport)


def fixture_path(api: ApiLabel, scenario: str) -> Path:
    """The file of a fixture (inside the installed package)."""
    _check_api(api)
    return Path(str(files('pydantic_ai_citations.matrix').joinpath('fixtures', api, f'{scenario}.json')))


def scenarios(api: ApiLabel) -> list[str]:
    """The scenario names that have a fixture for `api`, sorted.

    Raises:
        UserError: `api` has no fixtures (it is not one of `FIXTURE_APIS`).
    """
    _check_api(api)
    folder = files('pydantic_ai_citations.matrix').joinpath('fixtures', api)
    return sorted(item.name[: -len('.json')] for item in folder.iterdir() if item.name.endswith('.json'))


def load_fixture(api: ApiLabel, scenario: str) -> FixtureRecording:
    """Read a wire fixture into a `Recording`: `load_fixture(api, scenario).model()` is the real model class.

    Raises:
        UserError: `api` is not one of `FIXTURE_APIS`, or it has no fixture named `scenario`.
        RecordingError: the fixture file is malformed (names the file).
    """
    available = scenarios(api)
    if scenario not in available:
        raise UserError(f'No {api} wire fixture named {scenario!r}: expected one of {", ".join(available)}.')
    path = fixture_path(api, scenario)
    data = files('pydantic_ai_citations.matrix').joinpath('fixtures', api, f'{scenario}.json').read_bytes()
    return parse_fixture(api, path, data)


def load_fixtures(api: ApiLabel, *scenario_names: str) -> FixtureRecording:
    """Several fixtures of one API served in turn, e.g. `load_fixtures(api, 'cited', 'followup')` for a second turn.

    The result is the first fixture with the responses of all of them, in order; its `streamed`, `prompt` and
    `model_settings` are the first fixture's (run the later turns streamed or not as their own fixtures say).

    Raises:
        UserError: no scenario is given, or see `load_fixture`.
        RecordingError: see `load_fixture`.
    """
    if not scenario_names:
        raise UserError('load_fixtures() needs at least one scenario name, e.g. `load_fixtures(api, "cited")`.')
    first, *rest = (load_fixture(api, name) for name in scenario_names)
    return replace(first, responses=[*first.responses, *(r for f in rest for r in f.responses)])


def parse_fixture(api: ApiLabel, path: Path, data: bytes) -> FixtureRecording:
    """Build the `Recording` of a fixture from its file content (what `load_fixture` does after reading it).

    Raises:
        UserError: `api` is not one of `FIXTURE_APIS`.
        RecordingError: the content is not a valid fixture.
    """
    _check_api(api)
    try:
        spec = _FIXTURE_TA.validate_json(data)
    except ValidationError as e:
        problems = '; '.join(f'{".".join(map(str, err["loc"])) or "<root>"}: {err["msg"]}' for err in e.errors())
        raise RecordingError(path, f'malformed wire fixture: {problems}') from e
    if not spec['responses']:
        raise RecordingError(path, 'malformed wire fixture: `responses` is empty')
    responses = [_response(api, path, spec, i, r) for i, r in enumerate(spec['responses'])]
    return FixtureRecording(
        path=path,
        layout='vcr',
        api=_TRANSPORT_API[api],
        model_name=spec['model_name'],
        streamed=spec['streamed'],
        model_settings=_settings(api, spec.get('model_settings', {})),
        prompt=spec.get('prompt'),
        responses=responses,
        requests=[],
        fixture_api=api,
        scenario=path.name.removesuffix('.json'),
        note=spec['note'],
    )


def _check_api(api: str) -> None:
    if api not in FIXTURE_APIS:
        raise UserError(f'No wire fixtures for api {api!r}: expected one of {", ".join(FIXTURE_APIS)}.')


def _settings(api: ApiLabel, given: Mapping[str, JsonValue]) -> ModelSettings:
    settings: dict[str, object] = {}
    if api in ('anthropic-messages', 'bedrock-converse'):
        # Without `max_tokens` these model classes stream a non-streamed request, which a JSON body can't answer.
        settings['max_tokens'] = 4096
    elif api == 'perplexity-sonar':
        settings['openai_include_unmapped_response_data'] = True
    settings.update(given)
    return cast(ModelSettings, settings)


def _response(api: ApiLabel, path: Path, spec: _FixtureSpec, index: int, response: _ResponseSpec) -> RawResponse:
    where = f'responses[{index}]'
    has_body, has_events = 'body' in response, 'events' in response
    if has_body == has_events:
        raise RecordingError(path, f'malformed wire fixture: {where} needs exactly one of `body` and `events`')
    status = response.get('status', 200)
    if has_events and not spec['streamed']:
        raise RecordingError(path, f'malformed wire fixture: {where} has `events` but the fixture is not `streamed`')
    if has_body and spec['streamed'] and status < 400:
        raise RecordingError(path, f'malformed wire fixture: {where} has a `body` but the fixture is `streamed`')

    body = response.get('body')
    events = response.get('events') or []
    if api == 'xai':
        if has_body:
            if not isinstance(body, dict):
                raise RecordingError(path, f'malformed wire fixture: {where} `body` is not an object')
            raw = _xai_response_from_json(path, cast(dict[str, object], body), index)
            return RawResponse(200, 'application/grpc', body, '/xai_api.Chat/GetCompletion', raw)
        chunks = _xai_chunks_from_json(path, cast(list[object], events), index)
        return RawResponse(200, 'application/grpc+stream', events, '/xai_api.Chat/GetCompletionChunk', b'', (), chunks)

    uri = _uri(api, spec['model_name'], spec['streamed'])
    if has_body:
        content_type = response.get('content_type', 'application/json')
        payload = body
        raw = json.dumps(payload).encode('utf-8')
    else:
        _check_events(api, path, where, events)
        raw = render_events(api, events)
        default_type = 'application/vnd.amazon.eventstream' if api == 'bedrock-converse' else 'text/event-stream'
        content_type = response.get('content_type', default_type)
        payload = events
    return RawResponse(status, content_type, payload, uri, raw, (('content-type', content_type),))


def _check_events(api: ApiLabel, path: Path, where: str, events: list[JsonValue]) -> None:
    if not events:
        raise RecordingError(path, f'malformed wire fixture: {where} `events` is empty')
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise RecordingError(path, f'malformed wire fixture: {where} event {n} is not an object')
        if api == 'bedrock-converse' and len(event) != 1:
            raise RecordingError(
                path, f'malformed wire fixture: {where} event {n} must be `{{"<event type>": {{payload}}}}`'
            )
        if api in _NAMED_SSE and not isinstance(event.get('type'), str):
            raise RecordingError(path, f'malformed wire fixture: {where} event {n} has no string `type`')


def _uri(api: ApiLabel, model_name: str, streamed: bool) -> str | None:
    if api == 'bedrock-converse':
        operation = 'converse-stream' if streamed else 'converse'
        return f'https://bedrock-runtime.{_BEDROCK_REGION}.amazonaws.com/model/{model_name}/{operation}'
    return None


def render_events(api: ApiLabel, events: list[JsonValue]) -> bytes:
    """The wire bytes of a streamed response given as event objects, rendered the way `api` streams them."""
    if api == 'bedrock-converse':
        frames: list[tuple[str, JsonValue]] = []
        for event in events:
            (kind, payload), *_ = cast(dict[str, JsonValue], event).items()
            frames.append((kind, payload))
        return encode_event_stream(frames)
    out: list[str] = []
    for n, event in enumerate(events):
        obj = cast(dict[str, JsonValue], event) if isinstance(event, dict) else None
        if obj is not None and api in _SEQUENCED_SSE and 'sequence_number' not in obj:
            obj = {**obj, 'sequence_number': n}
        data = json.dumps(obj if obj is not None else event)
        kind = obj.get('type') if obj is not None else None
        if api in _NAMED_SSE and isinstance(kind, str):
            out.append(f'event: {kind}\ndata: {data}\n\n')
        else:
            out.append(f'data: {data}\n\n')
    if api in _DONE_SSE:
        out.append('data: [DONE]\n\n')
    return ''.join(out).encode('utf-8')


def encode_event_stream(events: list[tuple[str, JsonValue]]) -> bytes:
    """Encode `(event type, JSON payload)` pairs as AWS event-stream messages (what Bedrock ConverseStream sends).

    Each message: total length and headers length (big-endian uint32), the CRC32 of those 8 bytes, the headers
    (`:event-type`, `:content-type`, `:message-type` as string headers, type 7), the JSON payload, and the CRC32 of
    everything before it.
    """
    out = bytearray()
    for kind, payload in events:
        headers = b''.join(
            _string_header(name, value)
            for name, value in (
                (':event-type', kind),
                (':content-type', 'application/json'),
                (':message-type', 'event'),
            )
        )
        body = json.dumps(payload, separators=(',', ':')).encode('utf-8')
        total = 12 + len(headers) + len(body) + 4
        prelude = struct.pack('>II', total, len(headers))
        message = prelude + struct.pack('>I', binascii.crc32(prelude)) + headers + body
        out += message + struct.pack('>I', binascii.crc32(message))
    return bytes(out)


def _string_header(name: str, value: str) -> bytes:
    name_bytes, value_bytes = name.encode('utf-8'), value.encode('utf-8')
    return struct.pack('>B', len(name_bytes)) + name_bytes + b'\x07' + struct.pack('>H', len(value_bytes)) + value_bytes


# --- Model classes `Recording` does not build ----------------------------------------------------------------------


def _perplexity_agent(recording: FixtureRecording, transport: ReplayTransport) -> Model:
    import httpx2
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from ..formats.perplexity import PerplexityTap, perplexity_http_client

    # Served through the package's own route to Perplexity's events, as an application would set it up.
    tap = PerplexityTap()
    http_client = perplexity_http_client(tap, transport=mock_transport(transport, httpx2))
    client = AsyncOpenAI(api_key=_DUMMY_KEY, base_url=_PERPLEXITY_BASE_URL, http_client=http_client, max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    model = OpenAIResponsesModel(recording.model_name, provider=provider, settings=copy_settings(recording))
    _TAPS[id(model)] = (weakref.ref(model), tap)
    return model


_TAPS: dict[int, tuple[weakref.ref[Model], PerplexityTap]] = {}


def perplexity_tap_for(model: Model) -> PerplexityTap | None:
    """The `PerplexityTap` a Perplexity Agent fixture model was built with, for `TrackCitations(perplexity_tap=...)`."""
    found = _TAPS.get(id(model))
    if found is None or found[0]() is not model:  # models are unhashable: keyed by id, checked by weak reference
        return None
    return found[1]


def _mistral(recording: FixtureRecording, transport: ReplayTransport) -> Model:
    from pydantic_ai.models.mistral import MistralModel
    from pydantic_ai.providers.mistral import MistralProvider

    provider = MistralProvider(
        api_key=_DUMMY_KEY, base_url='https://api.mistral.ai', http_client=httpx2_client(transport)
    )
    return MistralModel(recording.model_name, provider=provider, settings=copy_settings(recording))


def _groq(recording: FixtureRecording, transport: ReplayTransport) -> Model:
    import httpx
    from pydantic_ai.models.groq import GroqModel
    from pydantic_ai.providers.groq import GroqProvider

    # The Groq SDK still uses `httpx`; it ships no `httpx2` client option.
    groq: Any = importlib.import_module('groq')
    client = groq.AsyncGroq(
        api_key=_DUMMY_KEY,
        base_url='https://api.groq.com',
        http_client=httpx.AsyncClient(transport=mock_transport(transport, httpx)),
        max_retries=0,
    )
    provider = GroqProvider(groq_client=client)
    return GroqModel(recording.model_name, provider=provider, settings=copy_settings(recording))
