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
from the fixture (rendering, decoding and model building are the replay package's, `.._replay`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal, NotRequired, cast

from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError, with_config
from pydantic_ai.exceptions import UserError
from pydantic_ai.settings import ModelSettings
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict before Python 3.12

from .._models import PROVIDER_APIS, ApiLabel, ProviderApi
from .._replay import (
    NAMED_SSE_APIS,
    RawResponse,
    Recording,
    RecordingError,
    render_stream,
    xai_chunks_from_json,
    xai_response_from_json,
)

__all__ = (
    'FIXTURE_APIS',
    'FixtureRecording',
    'Scenario',
    'fixture_families',
    'fixture_path',
    'load_fixture',
    'load_fixtures',
    'scenarios',
)

FIXTURE_APIS: tuple[ProviderApi, ...] = PROVIDER_APIS
"""The API rows that have wire fixtures: every provider API the package knows."""

Scenario = Literal['cited', 'cited_stream', 'document', 'document_page', 'followup', 'structured']
"""The scenario names fixtures use; `scenarios(api)` says which ones an API has."""

_BEDROCK_REGION = 'us-east-1'


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
    """A `Recording` read from a wire fixture."""

    scenario: str = ''
    """The fixture's scenario name (its file name without `.json`)."""
    note: str = ''
    """What the fixture shows."""


def _folder(api: ApiLabel, family: str) -> Traversable:
    _check_api(api)
    folder = files('pydantic_ai_citations.matrix').joinpath('fixtures', api)
    return folder.joinpath(family) if family else folder


def fixture_path(api: ApiLabel, scenario: str, family: str = '') -> Path:
    """The file of a fixture (inside the installed package)."""
    return Path(str(_folder(api, family).joinpath(f'{scenario}.json')))


def fixture_families(api: ApiLabel) -> list[str]:
    """The other model families `api` has fixtures for (`fixtures/<api>/<family>/`), e.g. `['meta']` for Bedrock.

    An API's own fixtures are for its main model family; where other families answer differently, their fixtures
    sit in a folder named after the family (`model_family`), and the matrix gives them their own row.
    """
    return sorted(item.name for item in _folder(api, '').iterdir() if item.is_dir() and item.name != '__pycache__')


def scenarios(api: ApiLabel, family: str = '') -> list[str]:
    """The scenario names that have a fixture for `api` (and `family`, see `fixture_families`), sorted.

    Raises:
        UserError: `api` has no fixtures (it is not one of `FIXTURE_APIS`).
    """
    folder = _folder(api, family)
    if not folder.is_dir():
        return []
    return sorted(item.name[: -len('.json')] for item in folder.iterdir() if item.name.endswith('.json'))


def load_fixture(api: ApiLabel, scenario: str, family: str = '') -> FixtureRecording:
    """Read a wire fixture into a `Recording`: `load_fixture(api, scenario).model()` is the real model class.

    Raises:
        UserError: `api` is not one of `FIXTURE_APIS`, or it has no fixture named `scenario`.
        RecordingError: the fixture file is malformed (names the file).
    """
    available = scenarios(api, family)
    if scenario not in available:
        where = f'{api}/{family}' if family else api
        raise UserError(f'No {where} wire fixture named {scenario!r}: expected one of {", ".join(available)}.')
    data = _folder(api, family).joinpath(f'{scenario}.json').read_bytes()
    return parse_fixture(api, fixture_path(api, scenario, family), data)


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


def parse_fixture(label: ApiLabel, path: Path, data: bytes) -> FixtureRecording:
    """Build the `Recording` of a fixture from its file content (what `load_fixture` does after reading it).

    Raises:
        UserError: `label` is not one of `FIXTURE_APIS`.
        RecordingError: the content is not a valid fixture.
    """
    api = _check_api(label)
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
        api=api,
        model_name=spec['model_name'],
        streamed=spec['streamed'],
        model_settings=_settings(api, spec.get('model_settings', {})),
        prompt=spec.get('prompt'),
        responses=responses,
        requests=[],
        scenario=path.name.removesuffix('.json'),
        note=spec['note'],
    )


def _check_api(api: str) -> ProviderApi:
    for known in FIXTURE_APIS:
        if api == known:
            return known
    raise UserError(f'No wire fixtures for api {api!r}: expected one of {", ".join(FIXTURE_APIS)}.')


def _settings(api: ProviderApi, given: Mapping[str, JsonValue]) -> ModelSettings:
    settings: dict[str, object] = {}
    if api in ('anthropic-messages', 'bedrock-converse'):
        # Without `max_tokens` these model classes stream a non-streamed request, which a JSON body can't answer.
        settings['max_tokens'] = 4096
    elif api == 'perplexity-sonar':
        settings['openai_include_unmapped_response_data'] = True
    settings.update(given)
    return cast(ModelSettings, settings)


def _response(api: ProviderApi, path: Path, spec: _FixtureSpec, index: int, response: _ResponseSpec) -> RawResponse:
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
            raw = xai_response_from_json(path, cast('dict[str, object]', body), index)
            return RawResponse(200, 'application/grpc', body, '/xai_api.Chat/GetCompletion', raw)
        chunks = xai_chunks_from_json(path, cast('list[object]', events), index)
        return RawResponse(200, 'application/grpc+stream', events, '/xai_api.Chat/GetCompletionChunk', b'', (), chunks)

    uri = _uri(api, spec['model_name'], spec['streamed'])
    if has_body:
        content_type = response.get('content_type', 'application/json')
        payload = body
        raw = json.dumps(payload).encode('utf-8')
    else:
        _check_events(api, path, where, events)
        raw = render_stream(api, events)
        default_type = 'application/vnd.amazon.eventstream' if api == 'bedrock-converse' else 'text/event-stream'
        content_type = response.get('content_type', default_type)
        payload = events
    return RawResponse(status, content_type, payload, uri, raw, (('content-type', content_type),))


def _check_events(api: ProviderApi, path: Path, where: str, events: list[JsonValue]) -> None:
    if not events:
        raise RecordingError(path, f'malformed wire fixture: {where} `events` is empty')
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise RecordingError(path, f'malformed wire fixture: {where} event {n} is not an object')
        if api == 'bedrock-converse' and len(event) != 1:
            raise RecordingError(
                path, f'malformed wire fixture: {where} event {n} must be `{{"<event type>": {{payload}}}}`'
            )
        if api in NAMED_SSE_APIS and not isinstance(event.get('type'), str):
            raise RecordingError(path, f'malformed wire fixture: {where} event {n} has no string `type`')


def _uri(api: ProviderApi, model_name: str, streamed: bool) -> str | None:
    if api == 'bedrock-converse':
        operation = 'converse-stream' if streamed else 'converse'
        return f'https://bedrock-runtime.{_BEDROCK_REGION}.amazonaws.com/model/{model_name}/{operation}'
    return None
