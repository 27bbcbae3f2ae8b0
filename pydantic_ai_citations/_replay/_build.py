"""Build the real Pydantic AI model class for a `Recording`, with its transport answered from the recording.

- HTTP SDKs (Anthropic, OpenAI, OpenRouter, Google, Mistral, Perplexity via the OpenAI SDK): `httpx2.MockTransport`;
  the Cohere and Groq SDKs still use `httpx`, so they get `httpx.MockTransport`. SDK retries are off, so an error answer
  surfaces at once.
- Bedrock: a botocore `before-send` hook on a boto3 client with dummy credentials answers every operation.
- xAI: the real `xai_sdk` chat client over a fake gRPC channel that serialises each request with the SDK's own
  serializer and answers with the recorded protobuf bytes.

Nothing here opens a socket: every transport answers from memory, and a request to a path that is not the
recording's model endpoint is answered with an error instead of being sent.
"""

from __future__ import annotations

import importlib
import json
import ssl
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from pydantic import JsonValue
from pydantic_ai import ModelMessage, ModelResponse, RunContext
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.native_tools import AbstractNativeTool
from pydantic_ai.settings import ModelSettings

from .._models import ApiLabel, describe_model
from ._recording import ENDPOINT_PATHS, Recording, RecordingError

if TYPE_CHECKING:
    from .._tap import AnthropicTap, CohereTap, MistralTap, PerplexityTap

__all__ = (
    'ReplayModel',
    'ReplayTransport',
    'TappedModel',
    'anthropic_tap_for',
    'build_model',
    'cohere_tap_for',
    'copy_settings',
    'httpx2_client',
    'mistral_tap_for',
    'mock_transport',
    'perplexity_tap_for',
    'sharing_sdk_setup',
)

_DUMMY_KEY = 'replay-dummy-key'

_Answer = tuple[int, list[tuple[str, str]], bytes]


class ReplayTransport:
    """Answers requests, in order, from a recording's model-endpoint responses; shared by all transports."""

    def __init__(self, recording: Recording, sent: list[dict[str, JsonValue]] | None) -> None:
        self._recording = recording
        self._sent = sent
        self._next = 0
        # Bedrock calls run in worker threads.
        self._lock = threading.Lock()

    def answer(self, method: str, url: str, body: bytes) -> _Answer:
        """The recorded answer to a request, or an HTTP 500 error answer (unexpected path, recording exhausted)."""
        path = urlsplit(url).path
        recording = self._recording
        if not ENDPOINT_PATHS[recording.api].search(path):
            return _error_answer(
                f'unexpected request {method} {url}: not a {recording.api} model endpoint; '
                f'replay of {recording.path.name} never touches the network'
            )
        with self._lock:
            if self._sent is not None:
                self._sent.append(_json_body(body))
            index = self._next
            self._next += 1
        if index >= len(recording.responses):
            return _error_answer(
                f'recording exhausted: {recording.path.name} holds {len(recording.responses)} model response(s), '
                f'this is request #{index + 1}'
            )
        response = recording.responses[index]
        headers = list(response.headers) or [('content-type', response.content_type)]
        return response.status, headers, response.body

    def record_sent(self, body: dict[str, JsonValue]) -> int:
        """Record an outgoing request (xAI: the request message as JSON) and return its index."""
        with self._lock:
            if self._sent is not None:
                self._sent.append(body)
            index = self._next
            self._next += 1
        return index


def _json_body(body: bytes) -> dict[str, JsonValue]:
    try:
        value: object = json.loads(body) if body else {}
    except ValueError:
        return {'body': body.decode('utf-8', 'replace')}
    return cast('dict[str, JsonValue]', value) if isinstance(value, dict) else {'body': cast(JsonValue, value)}


def _error_answer(message: str) -> _Answer:
    # One body that the Anthropic, OpenAI, Google, Cohere and Bedrock error parsers all find a message in.
    body = {
        'type': 'error',
        'error': {'type': 'api_error', 'code': 500, 'status': 'INTERNAL', 'message': message},
        'message': message,
    }
    headers = [('content-type', 'application/json'), ('x-amzn-errortype', 'InternalServerException')]
    return 500, headers, json.dumps(body).encode('utf-8')


def copy_settings(recording: Recording) -> ModelSettings:
    """The recording's model settings, as a copy: a model must not share (and could not change) the frozen dict."""
    return cast(ModelSettings, dict(recording.model_settings))


_SHARED: ContextVar[dict[str, object] | None] = ContextVar('pydantic_ai_citations_replay_shared', default=None)


@contextmanager
def sharing_sdk_setup() -> Generator[None]:
    """Within this block, replay models share the SDK setup that is costly to build and holds nothing per model.

    Today that is the botocore session (the service definitions it loads, about 100 ms per session) and the SSL
    context the Google clients are given; each model still gets its own client and transport. What is shared lives as long as the block: a matrix run wraps its
    probes in one.
    """
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(key: str, make: Callable[[], object]) -> Any:
    """The value `make()` built once per `sharing_sdk_setup` block (built afresh outside one)."""
    pool = _SHARED.get()
    if pool is None:
        return make()
    if key not in pool:
        pool[key] = make()
    return pool[key]


def build_model(recording: Recording, sent: list[dict[str, JsonValue]] | None) -> ReplayModel:
    """A fresh model instance of the recording's API, answered from `recording.responses` (see `ReplayModel`)."""
    model = _BUILDERS[recording.api](recording, ReplayTransport(recording, sent))
    return model if isinstance(model, ReplayModel) else ReplayModel(model, recording)


@dataclass(init=False)
class ReplayModel(WrapperModel):
    """A recording's replay: the real model class answered from the recording, and the recording it answers from.

    A replay serves the recorded responses once each, in order, so one agent run usually uses it up. `recording` is
    what a caller that runs an agent several times needs to give each run a fresh replay (`recording.model()`):
    `testing.check_seams` does so for a replayed model it is given. Everything else is the wrapped model class's.
    """

    recording: Recording
    """The recording this model answers from."""
    native_tools: tuple[AbstractNativeTool, ...]
    """The provider-run tools the recorded responses used, asked for on every request the agent did not ask for them
    in (the recording's application enabled them): a model class may drop what a tool it was not given returns."""

    def __init__(self, wrapped: Model, recording: Recording, native_tools: tuple[AbstractNativeTool, ...] = ()) -> None:
        super().__init__(wrapped)
        self.recording = recording
        self.native_tools = native_tools

    def _with_native_tools(self, parameters: ModelRequestParameters) -> ModelRequestParameters:
        asked = {type(tool) for tool in parameters.native_tools}
        missing = [tool for tool in self.native_tools if type(tool) not in asked]
        return replace(parameters, native_tools=[*parameters.native_tools, *missing]) if missing else parameters

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await super().request(messages, model_settings, self._with_native_tools(model_request_parameters))

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        parameters = self._with_native_tools(model_request_parameters)
        async with super().request_stream(messages, model_settings, parameters, run_context) as stream:
            yield stream

    @property
    def api_label(self) -> ApiLabel:
        """The provider API of the wrapped model (read by `describe_model`)."""
        return describe_model(self.wrapped).api


def mock_transport(transport: ReplayTransport, http: Any) -> Any:
    """An `http.MockTransport` answered by `transport`; `http` is the `httpx2` module, or `httpx` for SDKs on it."""

    def handler(request: Any) -> Any:
        status, headers, body = transport.answer(request.method, str(request.url), request.read())
        return http.Response(status, headers=headers, content=body)

    return http.MockTransport(handler)


def httpx2_client(transport: ReplayTransport, *, timeout: float | None = None) -> Any:
    """An `httpx2.AsyncClient` answered by `transport`."""
    import httpx2

    mock = mock_transport(transport, httpx2)
    if timeout is None:
        # No explicit timeout: the Anthropic SDK streams non-streamed requests when the client timeout isn't its default.
        return httpx2.AsyncClient(transport=mock)
    return httpx2.AsyncClient(transport=mock, timeout=timeout)


def _anthropic(recording: Recording, transport: ReplayTransport) -> Model:
    import httpx2
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from .._tap import AnthropicTap

    # Served through the package's Anthropic tap, as an application would set it up: a text block cited only by
    # `search_result_location` keeps nothing in `AnthropicModel`. No explicit timeout, as in `httpx2_client`.
    tap = AnthropicTap()
    http_client = httpx2.AsyncClient(transport=tap.transport(mock_transport(transport, httpx2)))
    client = AsyncAnthropic(
        api_key=_DUMMY_KEY, base_url='https://api.anthropic.com', http_client=http_client, max_retries=0
    )
    provider = AnthropicProvider(anthropic_client=client)
    model = AnthropicModel(recording.model_name, provider=provider, settings=copy_settings(recording))
    return TappedModel(model, recording, tap, _anthropic_server_tools(recording))


def _anthropic_server_tools(recording: Recording) -> tuple[AbstractNativeTool, ...]:
    """The native tools behind the `server_tool_use` blocks of the recorded responses.

    Pydantic AI's Anthropic model drops such a block when the request did not enable its tool, and keeps the result
    block without its call.
    """
    from pydantic_ai.native_tools import CodeExecutionTool, WebFetchTool, WebSearchTool

    kinds: dict[str, type[AbstractNativeTool]] = {
        'web_search': WebSearchTool,
        'web_fetch': WebFetchTool,
        'code_execution': CodeExecutionTool,
        'bash_code_execution': CodeExecutionTool,
        'text_editor_code_execution': CodeExecutionTool,
    }
    used: dict[type[AbstractNativeTool], None] = {}
    stack: list[JsonValue] = [r.payload for r in recording.responses]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            name = item.get('name')
            if item.get('type') == 'server_tool_use' and isinstance(name, str) and name in kinds:
                used[kinds[name]] = None
            stack.extend(item.values())
    return tuple(kind() for kind in used)


def anthropic_tap_for(model: Model) -> AnthropicTap | None:
    """The `AnthropicTap` an Anthropic replay model was built with, for `TrackCitations(anthropic_tap=...)`."""
    from .._tap import AnthropicTap

    tap = model.tap if isinstance(model, TappedModel) else None
    return tap if isinstance(tap, AnthropicTap) else None


_OPENAI_BASE_URLS = {
    'openai-responses': 'https://api.openai.com/v1',
    'openai-chat': 'https://api.openai.com/v1',
    'openrouter': 'https://openrouter.ai/api/v1',
    'perplexity-sonar': 'https://api.perplexity.ai',
    'perplexity-agent': 'https://api.perplexity.ai/v1',
}


def _openai(recording: Recording, transport: ReplayTransport) -> Model:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(
        api_key=_DUMMY_KEY,
        base_url=_OPENAI_BASE_URLS[recording.api],
        http_client=httpx2_client(transport),
        max_retries=0,
    )
    if recording.api == 'openrouter':
        from pydantic_ai.models.openrouter import OpenRouterModel
        from pydantic_ai.providers.openrouter import OpenRouterProvider

        return OpenRouterModel(
            recording.model_name, provider=OpenRouterProvider(openai_client=client), settings=copy_settings(recording)
        )
    provider = OpenAIProvider(openai_client=client)
    if recording.api == 'openai-responses':
        return OpenAIResponsesModel(recording.model_name, provider=provider, settings=copy_settings(recording))
    return OpenAIChatModel(recording.model_name, provider=provider, settings=copy_settings(recording))


def _google(recording: Recording, transport: ReplayTransport) -> Model:
    import httpx2
    from google.genai import Client
    from google.genai.types import HttpOptions
    from pydantic_ai.models import get_user_agent
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.providers.google import GoogleProvider
    from pydantic_ai.providers.google_cloud import GoogleCloudProvider

    # The client is built here, as the providers would build it, for two differences: google-genai makes two SSL
    # contexts per client that load the CA bundle (tens of ms each) for connections replay never opens; it gets
    # one that loads nothing (and so could verify no server), shared by the models of a matrix run. And it builds a
    # sync `httpx` client (with a connection pool) `GoogleModel` never uses; it gets one on the replay transport.
    context = shared('google-ssl-context', lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    options = HttpOptions(
        headers={'user-agent': get_user_agent()},
        httpx_client=httpx2.Client(transport=mock_transport(transport, httpx2)),
        # An explicit timeout: google-genai warns about httpx's short default otherwise.
        httpx_async_client=httpx2_client(transport, timeout=600),
        timeout=600_000,
        client_args={'verify': context},
        async_client_args={'verify': context, 'ssl': context},
    )
    # Vertex AI in express mode (API key): no project, location or Application Default Credentials lookup.
    vertex = recording.api == 'google-vertex'
    client = Client(vertexai=vertex, api_key=_DUMMY_KEY, http_options=options)
    provider = GoogleCloudProvider(client=client) if vertex else GoogleProvider(client=client)
    return GoogleModel(recording.model_name, provider=provider, settings=copy_settings(recording))


def _cohere(recording: Recording, transport: ReplayTransport) -> Model:
    import httpx
    from cohere import AsyncClientV2
    from pydantic_ai.models.cohere import CohereModel
    from pydantic_ai.providers.cohere import CohereProvider

    from .._tap import CohereTap, cohere_http_client

    # Served through the package's Cohere tap, as an application would set it up: `CohereModel` keeps no citations.
    tap = CohereTap()
    client = AsyncClientV2(
        api_key=_DUMMY_KEY,
        base_url='https://api.cohere.com',
        httpx_client=cohere_http_client(tap, transport=mock_transport(transport, httpx)),
    )
    provider = CohereProvider(cohere_client=client)
    return TappedModel(
        CohereModel(recording.model_name, provider=provider, settings=copy_settings(recording)), recording, tap
    )


def cohere_tap_for(model: Model) -> CohereTap | None:
    """The `CohereTap` a Cohere replay model was built with, for `TrackCitations(cohere_tap=...)`."""
    from .._tap import CohereTap

    tap = model.tap if isinstance(model, TappedModel) else None
    return tap if isinstance(tap, CohereTap) else None


class _BotoRawBody:
    """The `raw` of a botocore `AWSResponse`: botocore reads `stream()`, event streams iterate it."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_kwargs: object) -> Iterator[bytes]:
        return iter([self._body] if self._body else [])

    def read(self, amt: int | None = None) -> bytes:
        body, self._body = (self._body, b'') if amt is None else (self._body[:amt], self._body[amt:])
        return body

    def close(self) -> None:
        self._body = b''


def _boto3_session(boto3: Any) -> Any:
    # A private session with dummy credentials: no profile, environment or instance-metadata lookup.
    return boto3.session.Session(aws_access_key_id='replay', aws_secret_access_key='replay', region_name='us-east-1')


def _bedrock(recording: Recording, transport: ReplayTransport) -> Model:
    from pydantic_ai.models.bedrock import BedrockConverseModel
    from pydantic_ai.providers.bedrock import BedrockProvider

    # boto3 and botocore ship no type stubs: used untyped.
    boto3: Any = importlib.import_module('boto3')
    aws_response: Any = importlib.import_module('botocore.awsrequest').AWSResponse
    config: Any = importlib.import_module('botocore.config').Config

    region = 'us-east-1'
    host = urlsplit(recording.responses[0].uri or '').hostname or ''
    if host.startswith('bedrock-runtime.') and host.endswith('.amazonaws.com'):
        region = host.split('.')[1]
    session: Any = shared('boto3-session', lambda: _boto3_session(boto3))
    client: Any = session.client(
        'bedrock-runtime', region_name=region, config=config(retries={'total_max_attempts': 1})
    )

    def before_send(request: Any, **_kwargs: object) -> Any:
        body: object = request.body
        raw = body if isinstance(body, bytes) else (str(body).encode('utf-8') if body else b'')
        status, headers, content = transport.answer(str(request.method), str(request.url), raw)
        return aws_response(str(request.url), status, dict(headers), _BotoRawBody(content))

    # Answering in `before-send` means botocore never opens a connection.
    client.meta.events.register('before-send.bedrock-runtime', before_send)
    provider = BedrockProvider(bedrock_client=client)
    return BedrockConverseModel(recording.model_name, provider=provider, settings=copy_settings(recording))


class _FakeGrpcChannel:
    """Just enough of `grpc.aio.Channel` for `xai_sdk`'s generated stubs, answered from the recording."""

    def __init__(self, recording: Recording, transport: ReplayTransport) -> None:
        self._recording = recording
        self._transport = transport

    def _record(self, method: str, request: Any, serializer: Callable[[Any], bytes] | None) -> int:
        from google.protobuf import json_format

        if not ENDPOINT_PATHS['xai'].search(method):
            raise RecordingError(
                self._recording.path,
                f'unexpected xAI call {method}: not a chat completion; replay never touches the network',
            )
        if serializer is not None:
            serializer(request)  # The SDK's own serializer, so a malformed request fails as it would live.
        return self._transport.record_sent(
            cast('dict[str, JsonValue]', json_format.MessageToDict(request, preserving_proto_field_name=True))
        )

    def _response(self, index: int, method: str) -> Any:
        responses = self._recording.responses
        if index >= len(responses):
            raise RecordingError(
                self._recording.path,
                f'recording exhausted: holds {len(responses)} model response(s), this is request #{index + 1}',
            )
        response = responses[index]
        wants_stream = method.endswith('Chunk')
        if wants_stream != bool(response.chunks):
            kind = 'streamed' if response.chunks else 'non-streamed'
            raise RecordingError(
                self._recording.path, f'request #{index + 1} ({method}) cannot be answered by a {kind} response'
            )
        return response

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_kwargs: object,
    ) -> Callable[..., Any]:
        async def call(request: Any, **_call_kwargs: object) -> Any:
            response = self._response(self._record(method, request, request_serializer), method)
            return response.body if response_deserializer is None else response_deserializer(response.body)

        return call

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_kwargs: object,
    ) -> Callable[..., Any]:
        def call(request: Any, **_call_kwargs: object) -> AsyncIterator[Any]:
            index = self._record(method, request, request_serializer)

            async def chunks() -> AsyncIterator[Any]:
                response = self._response(index, method)
                for chunk in response.chunks:
                    yield chunk if response_deserializer is None else response_deserializer(chunk)

            return chunks()

        return call

    def stream_unary(self, method: str, *_args: object, **_kwargs: object) -> Callable[..., Any]:
        return self._unsupported(method)

    def stream_stream(self, method: str, *_args: object, **_kwargs: object) -> Callable[..., Any]:
        return self._unsupported(method)

    def _unsupported(self, method: str) -> Callable[..., Any]:
        def call(*_args: object, **_kwargs: object) -> Any:
            raise RecordingError(
                self._recording.path, f'unexpected xAI call {method}: replay never touches the network'
            )

        return call


class _FakeXaiFiles:
    """Stands in for `xai_sdk`'s files client: `XaiModel` uploads documents before sending them; nothing leaves here."""

    def __init__(self) -> None:
        self.uploaded: list[tuple[str | None, int]] = []

    async def upload(self, data: bytes, filename: str | None = None, **_kwargs: object) -> object:
        from types import SimpleNamespace

        self.uploaded.append((filename, len(data)))
        return SimpleNamespace(id=f'file-replay-{len(self.uploaded)}', filename=filename)


class _FakeXaiClient:
    """Stands in for `xai_sdk.AsyncClient`: `XaiModel` uses its `chat` client, and `files` to upload documents."""

    def __init__(self, chat: object) -> None:
        self.chat = chat
        self.files = _FakeXaiFiles()


def _xai(recording: Recording, transport: ReplayTransport) -> Model:
    from pydantic_ai.models.xai import XaiModel
    from pydantic_ai.providers.xai import XaiProvider

    # xai_sdk ships no type stubs: its real chat client is used untyped, over the fake channel.
    chat_client: Any = importlib.import_module('xai_sdk.aio.chat').Client
    chat: object = chat_client(_FakeGrpcChannel(recording, transport))
    provider = XaiProvider(xai_client=cast(Any, _FakeXaiClient(chat)))
    return XaiModel(recording.model_name, provider=provider, settings=copy_settings(recording))


def _perplexity_agent(recording: Recording, transport: ReplayTransport) -> Model:
    import httpx2
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from .._tap import PerplexityTap, perplexity_http_client

    # Served through the package's own route to Perplexity's events, as an application would set it up.
    tap = PerplexityTap()
    http_client = perplexity_http_client(tap, transport=mock_transport(transport, httpx2))
    client = AsyncOpenAI(
        api_key=_DUMMY_KEY, base_url=_OPENAI_BASE_URLS['perplexity-agent'], http_client=http_client, max_retries=0
    )
    provider = OpenAIProvider(openai_client=client)
    model = OpenAIResponsesModel(recording.model_name, provider=provider, settings=copy_settings(recording))
    return TappedModel(model, recording, tap)


@dataclass(init=False)
class TappedModel(ReplayModel):
    """A replay model served through one of the package's HTTP taps (Perplexity Agent, Cohere, Anthropic, Mistral).

    The tap belongs to the model it was built for and goes with it: `perplexity_tap_for` / `cohere_tap_for` /
    `anthropic_tap_for` / `mistral_tap_for` read it
    here, so nothing outside the model remembers it. Everything else is the wrapped real model class's.
    """

    tap: PerplexityTap | CohereTap | AnthropicTap | MistralTap
    """The tap the wrapped model's HTTP client was built with."""

    def __init__(
        self,
        wrapped: Model,
        recording: Recording,
        tap: PerplexityTap | CohereTap | AnthropicTap | MistralTap,
        native_tools: tuple[AbstractNativeTool, ...] = (),
    ) -> None:
        super().__init__(wrapped, recording, native_tools)
        self.tap = tap


def perplexity_tap_for(model: Model) -> PerplexityTap | None:
    """The `PerplexityTap` a Perplexity Agent replay model was built with, for `TrackCitations(perplexity_tap=...)`."""
    from .._tap import PerplexityTap

    tap = model.tap if isinstance(model, TappedModel) else None
    return tap if isinstance(tap, PerplexityTap) else None


def _mistral(recording: Recording, transport: ReplayTransport) -> Model:
    import httpx2
    from mistralai.client import Mistral
    from pydantic_ai.models.mistral import MistralModel
    from pydantic_ai.providers.mistral import MistralProvider

    from .._tap import MistralTap

    # The SDK's own sync client would build an SSL context that loads the CA bundle; replay's never connects.
    # Served through the package's Mistral tap, as an application would set it up: `MistralModel` drops `reference`
    # content chunks without a trace.
    tap = MistralTap()
    client = Mistral(
        api_key=_DUMMY_KEY,
        server_url='https://api.mistral.ai',
        client=httpx2.Client(transport=mock_transport(transport, httpx2)),
        async_client=httpx2.AsyncClient(transport=tap.transport(mock_transport(transport, httpx2))),
    )
    provider = MistralProvider(mistral_client=client)
    model = MistralModel(recording.model_name, provider=provider, settings=copy_settings(recording))
    return TappedModel(model, recording, tap)


def mistral_tap_for(model: Model) -> MistralTap | None:
    """The `MistralTap` a Mistral replay model was built with, for `TrackCitations(mistral_tap=...)`."""
    from .._tap import MistralTap

    tap = model.tap if isinstance(model, TappedModel) else None
    return tap if isinstance(tap, MistralTap) else None


def _groq(recording: Recording, transport: ReplayTransport) -> Model:
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


_BUILDERS: dict[str, Callable[[Recording, ReplayTransport], Model]] = {
    'anthropic-messages': _anthropic,
    'bedrock-converse': _bedrock,
    'openai-responses': _openai,
    'openai-chat': _openai,
    'openrouter': _openai,
    'perplexity-sonar': _openai,
    'perplexity-agent': _perplexity_agent,
    'google-gemini': _google,
    'google-vertex': _google,
    'xai': _xai,
    'cohere': _cohere,
    'mistral': _mistral,
    'groq': _groq,
}
