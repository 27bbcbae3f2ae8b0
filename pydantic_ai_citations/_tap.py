"""HTTP transport taps: what a provider sent that Pydantic AI's model class does not keep.

`PerplexityTap` feeds Perplexity Agent API responses to `AgentStreamCollector`s (below); `CohereTap` records Cohere v2
chat bodies (`CohereModel` keeps none of their citations); `AnthropicTap` records the text blocks of Anthropic
Messages responses (a block cited only by `search_result_location` keeps nothing in Pydantic AI); `MistralTap`
records the `reference` content chunks of Mistral chat completions (`MistralModel` drops them without a trace). Each
passes the bytes on unchanged (SSE is never buffered: `_SseTapStream`) and keeps the newest responses by the response
id that Pydantic AI records as `ModelResponse.provider_response_id`.

Why a tap (the Perplexity case, which decided the route for all of them):

Pydantic AI 2.68's `OpenAIResponsesModel` never sees the Perplexity-only data: the openai SDK builds an event
or output item of a type it does not know into the *first* class of its union (a `search_results` event becomes
a `ResponseAudioDeltaEvent`, a `search_results` item a `ResponseOutputMessage` with `content=None`), and the model
ignores those. Worse, a **non-streamed** body with a `search_results` output item crashes
`OpenAIResponsesModel._process_response` with `TypeError: 'NoneType' object is not iterable`.
`openai_include_unmapped_response_data` applies to Chat Completions only.

Routes considered:

1. Subclass `OpenAIResponsesModel` and override `_process_provider_details`: private hook, sees only the final
   response object (the streamed `search_results` events are gone by then), does not fix the crash.
2. Wrap the openai client's HTTP transport: `OpenAIProvider(http_client=...)` is public API, the wire format is
   Perplexity's documented format, and nothing in Pydantic AI's internals is touched. **Chosen.**

`PerplexityTap` wraps an `httpx2` async transport. For every response from a Perplexity responses/agent
endpoint it feeds the body into a *fresh* `AgentStreamCollector` as the bytes flow to the SDK (SSE is never
buffered), and stores the collector under the response `id`, which Pydantic AI also records as
`ModelResponse.provider_response_id`. A non-streamed JSON body is read whole (it must be parsed anyway) and,
by default, handed to the SDK without its Perplexity-only output items, which avoids the crash above; the
collector keeps them. `apply_agent_api` then fills `TextPart.citations` in place.
`TrackCitations(perplexity_tap=tap)` (through `_recover.recover_in_place`) applies each response's collector to it:
citations, and the tap's verdict on whether the response completed (`response.completed` seen).
"""

from __future__ import annotations

import json
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import httpx2
from pydantic import JsonValue
from pydantic_ai.exceptions import UserError

from ._checks import require, require_bools
from ._problems import CitationProblem
from .formats._sse import SseDecoder, load_json
from .formats.perplexity import PERPLEXITY_ONLY_ITEMS, AgentStreamCollector

if TYPE_CHECKING:
    import httpx

__all__ = (
    'AnthropicTap',
    'CohereTap',
    'MistralRecord',
    'MistralTap',
    'PerplexityTap',
    'anthropic_http_client',
    'cohere_http_client',
    'mistral_http_client',
    'perplexity_http_client',
)


def _check_tap_arguments(where: str, max_responses: int, hosts: Sequence[str]) -> None:
    require(where, 'max_responses', max_responses, int, 'an int')
    if max_responses < 1:
        raise UserError(f'`max_responses` must be at least 1, got {max_responses!r}.')
    # A single host given as a string would be read as one host per character, and nothing would be tapped.
    if isinstance(hosts, str) or not all(isinstance(h, str) for h in cast('Sequence[object]', hosts)):
        raise UserError(f"{where}: `hosts` must be a list of host names (e.g. `['api.example.com']`), got {hosts!r}.")


class PerplexityTap:
    """Feeds every Perplexity Agent API response that passes an HTTP client into its own collector.

    Build the client with `perplexity_http_client(tap)` (or wrap a transport with `tap.transport(...)`) and give it
    to `OpenAIProvider(http_client=...)`. After a request, `tap.collector_for(model_response.provider_response_id)`
    returns that response's collector. The tap keeps the newest `max_responses` collectors and forgets older ones.
    """

    def __init__(
        self,
        *,
        max_responses: int = 256,
        hosts: Sequence[str] = ('api.perplexity.ai',),
        strip_unknown_output_items: bool = True,
        strict: bool = False,
    ) -> None:
        """Create a tap.

        Args:
            max_responses: How many collectors to keep, newest first; older ones are evicted.
            hosts: Hosts whose `.../responses` and `.../agent` endpoints are tapped.
            strip_unknown_output_items: Remove Perplexity-only output items (`search_results`,
                `fetch_url_results`) from non-streamed JSON bodies before the openai SDK parses them; Pydantic AI
                2.68 crashes on them otherwise. The collector still sees them.
            strict: Passed to each collector (`ConflictingSourceIdError` on conflicting ids).
        """
        _check_tap_arguments('PerplexityTap', max_responses, hosts)
        require_bools('PerplexityTap', strip_unknown_output_items=strip_unknown_output_items, strict=strict)
        self.max_responses = max_responses
        self.hosts = tuple(hosts)
        self.strip_unknown_output_items = strip_unknown_output_items
        self.strict = strict
        self.problems: list[CitationProblem] = []
        """Problems with responses that never carried an id (so have no collector to hold them)."""
        self._collectors: OrderedDict[str, AgentStreamCollector] = OrderedDict()

    def collector_for(self, response_id: str | None) -> AgentStreamCollector | None:
        """The collector of the response with this id, or `None` if it was not seen (or was evicted)."""
        if response_id is None:
            return None
        return self._collectors.get(response_id)

    def pop(self, response_id: str | None) -> AgentStreamCollector | None:
        """Like `collector_for`, but forget the collector."""
        if response_id is None:
            return None
        return self._collectors.pop(response_id, None)

    def transport(self, inner: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncBaseTransport:
        """Wrap `inner` (default: a new `httpx2.AsyncHTTPTransport()`) so its Perplexity responses are tapped."""
        return _TapTransport(self, inner if inner is not None else httpx2.AsyncHTTPTransport())

    def _wants(self, request: httpx2.Request) -> bool:
        path = request.url.path.rstrip('/')
        return request.url.host in self.hosts and (path.endswith('/responses') or path.endswith('/agent'))

    def _register(self, collector: AgentStreamCollector) -> None:
        rid = collector.response_id
        if rid is None or self._collectors.get(rid) is collector:
            return
        self._collectors[rid] = collector
        self._collectors.move_to_end(rid)
        while len(self._collectors) > self.max_responses:
            self._collectors.popitem(last=False)

    def _orphan(self, collector: AgentStreamCollector) -> None:
        if collector.response_id is None:
            self.problems.extend(collector.problems)


def perplexity_http_client(
    tap: PerplexityTap, *, transport: httpx2.AsyncBaseTransport | None = None, timeout: float | None = 600.0
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` whose Perplexity Agent API responses feed `tap`.

    Args:
        tap: The tap that keeps the collectors.
        transport: The transport to wrap (default: a new `httpx2.AsyncHTTPTransport()`).
        timeout: Client timeout in seconds.
    """
    require(
        'perplexity_http_client', 'tap', tap, PerplexityTap, 'a `PerplexityTap` (the one given to `TrackCitations`)'
    )
    return httpx2.AsyncClient(transport=tap.transport(transport), timeout=timeout)


class _TapTransport(httpx2.AsyncBaseTransport):
    def __init__(self, tap: PerplexityTap, inner: httpx2.AsyncBaseTransport) -> None:
        self._tap = tap
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not self._tap._wants(request):  # pyright: ignore[reportPrivateUsage]
            return await self._inner.handle_async_request(request)
        # Ask for an uncompressed body, so the tap can read the bytes the SDK receives.
        request.headers['accept-encoding'] = 'identity'
        response = await self._inner.handle_async_request(request)
        if response.status_code >= 400:
            return response
        content_type = response.headers.get('content-type', '')
        collector = AgentStreamCollector(strict=self._tap.strict)
        if 'text/event-stream' in content_type:
            stream = _perplexity_stream(self._tap, collector, response)
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=stream,
                request=request,
                extensions=response.extensions,
            )
        if 'json' not in content_type:
            return response
        raw, body = await _read_json(response.stream, response.headers.get('content-encoding', ''))
        if not isinstance(body, dict):
            self._tap.problems.append(
                CitationProblem('unreadable_raw_data', 'A Perplexity JSON body could not be read.')
            )
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                content=raw,
                request=request,
                extensions=response.extensions,
            )
        body_map = cast('dict[str, JsonValue]', body)
        collector.feed_response(body_map)
        collector.close()
        self._tap._register(collector)  # pyright: ignore[reportPrivateUsage]
        self._tap._orphan(collector)  # pyright: ignore[reportPrivateUsage]
        headers = response.headers
        content = raw
        output = body_map.get('output')
        if self._tap.strip_unknown_output_items and isinstance(output, list):
            kept = [
                item for item in output if not (isinstance(item, dict) and item.get('type') in PERPLEXITY_ONLY_ITEMS)
            ]
            if len(kept) != len(output):
                content = json.dumps({**body_map, 'output': kept}).encode()
                headers = httpx2.Headers(
                    [
                        (k, v)
                        for k, v in response.headers.multi_items()
                        if k.lower() not in ('content-length', 'content-encoding', 'transfer-encoding')
                    ]
                )
        return httpx2.Response(
            response.status_code, headers=headers, content=content, request=request, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _ByteStream(Protocol):
    """What httpx and httpx2 async response streams both are."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


async def _read_json(stream: object, content_encoding: str) -> tuple[bytes, object]:
    """Read a whole body: its raw (possibly compressed) bytes and its JSON value (`None` if unreadable).

    The raw bytes are what the SDK must get when the body is passed on unchanged.
    """
    byte_stream = cast(_ByteStream, stream)
    try:
        raw = b''.join([chunk async for chunk in byte_stream])
    finally:
        await byte_stream.aclose()
    body_bytes = _decode_body(raw, content_encoding)
    try:
        return raw, json.loads(body_bytes) if body_bytes is not None else None
    except ValueError:
        return raw, None


def _decode_body(raw: bytes, encoding: str) -> bytes | None:
    encoding = encoding.strip().lower()
    if encoding in ('', 'identity'):
        return raw
    if encoding in ('gzip', 'deflate'):
        try:
            return zlib.decompress(raw, 47)  # 47: gzip or zlib header, detected
        except zlib.error:
            return None
    return None


class _SseTapStream(httpx2.AsyncByteStream):
    """Passes each chunk on unchanged right after decoding its SSE events for a tap: nothing is buffered.

    The one pass-through stream of every tap: `on_event` gets each event's decoded `data` (a JSON value, or `None`
    when it is not JSON), `on_problem` what could not be read, `on_close` the end of the body (whole or not).
    """

    def __init__(
        self,
        inner: object,
        content_encoding: str,
        *,
        on_event: Callable[[object], None],
        on_problem: Callable[[CitationProblem], None],
        on_close: Callable[[], None],
    ) -> None:
        self._inner = cast(httpx2.AsyncByteStream, inner)
        self._on_event = on_event
        self._on_problem = on_problem
        self._on_close = on_close
        self._decoder = SseDecoder()
        encoding = content_encoding.strip().lower()
        self._unzip = zlib.decompressobj(47) if encoding in ('gzip', 'deflate') else None
        self._readable = encoding in ('', 'identity', 'gzip', 'deflate')
        if not self._readable:
            on_problem(
                CitationProblem(
                    'unreadable_raw_data', f'The stream is encoded as {encoding!r}, which the tap cannot read.'
                )
            )

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._feed(chunk)
                yield chunk
            if self._readable:
                self._take(self._decoder.flush())
        finally:
            self._on_close()

    def _feed(self, chunk: bytes) -> None:
        if not self._readable:
            return
        try:
            data = self._unzip.decompress(chunk) if self._unzip is not None else chunk
        except zlib.error:
            self._readable = False
            self._on_problem(CitationProblem('unreadable_raw_data', 'The compressed stream could not be read.'))
            return
        self._take(self._decoder.feed(data))

    def _take(self, data: list[str]) -> None:
        for event in map(load_json, data):
            self._on_event(event)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _perplexity_stream(tap: PerplexityTap, collector: AgentStreamCollector, response: httpx2.Response) -> _SseTapStream:
    def on_event(event: object) -> None:
        if isinstance(event, dict):
            collector.feed_event(cast('dict[str, JsonValue]', event))
            # Register as soon as the id is known, so a caller can look the collector up mid-stream.
            tap._register(collector)  # pyright: ignore[reportPrivateUsage]
        else:
            collector.report(CitationProblem('unreadable_raw_data', 'An SSE event is not a JSON object.'))

    def on_close() -> None:
        collector.close()
        tap._register(collector)  # pyright: ignore[reportPrivateUsage]
        tap._orphan(collector)  # pyright: ignore[reportPrivateUsage]

    encoding = response.headers.get('content-encoding', '')
    return _SseTapStream(response.stream, encoding, on_event=on_event, on_problem=collector.report, on_close=on_close)


class CohereTap:
    """Records each Cohere v2 chat response body that passes an HTTP client, by the response `id`.

    Pydantic AI 2.68's `CohereModel` keeps none of the body's `citations`. Build the cohere SDK's client with
    `httpx_client=cohere_http_client(tap)` and give it to `CohereProvider(cohere_client=...)`; after a request,
    `tap.body_for(model_response.provider_response_id)` returns that response's body (for a stream, the body its events
    add up to: text and citations).
    """

    def __init__(self, *, max_responses: int = 256, hosts: Sequence[str] = ('api.cohere.com',)) -> None:
        """Create a tap.

        Args:
            max_responses: How many bodies to keep, newest first; older ones are evicted.
            hosts: Hosts whose `.../chat` endpoint is tapped.
        """
        _check_tap_arguments('CohereTap', max_responses, hosts)
        self.max_responses = max_responses
        self.hosts = tuple(hosts)
        self._bodies: OrderedDict[str, dict[str, JsonValue]] = OrderedDict()

    def body_for(self, response_id: str | None) -> dict[str, JsonValue] | None:
        """The body of the response with this id, or `None` if it was not seen (or was evicted)."""
        return None if response_id is None else self._bodies.get(response_id)

    def transport(self, inner: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncBaseTransport:
        """Wrap `inner` (default: a new `httpx.AsyncHTTPTransport()`) so its Cohere chat responses are recorded."""
        import httpx  # the cohere SDK's HTTP library: loaded when a tap is used, not with the package

        from ._tap_httpx import CohereTapTransport

        return CohereTapTransport(self, inner if inner is not None else httpx.AsyncHTTPTransport())

    def _record(self, body: dict[str, JsonValue]) -> None:
        rid = body.get('id')
        if not isinstance(rid, str):
            return
        self._bodies[rid] = body
        self._bodies.move_to_end(rid)
        while len(self._bodies) > self.max_responses:
            self._bodies.popitem(last=False)


def cohere_http_client(
    tap: CohereTap, *, transport: httpx.AsyncBaseTransport | None = None, timeout: float | None = 600.0
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` (the cohere SDK's HTTP library) whose Cohere chat responses feed `tap`."""
    require('cohere_http_client', 'tap', tap, CohereTap, 'a `CohereTap` (the one given to `TrackCitations`)')
    import httpx

    return httpx.AsyncClient(transport=tap.transport(transport), timeout=timeout)


def ignore_problem(problem: CitationProblem) -> None:
    """A tap without a place for problems (an unreadable stream keeps nothing to recover from)."""


class CohereStreamBody:
    """Rebuilds a Cohere v2 chat body (`id`, `message.content`, `message.citations`) from its stream events."""

    def __init__(self, tap: CohereTap) -> None:
        self._tap = tap
        self._id: str | None = None
        self._texts: dict[int, list[str]] = {}
        self._citations: list[JsonValue] = []

    def feed(self, event: object) -> None:
        ev = cast('dict[str, object]', event) if isinstance(event, dict) else {}
        kind = ev.get('type')
        message = _dig(ev, 'delta', 'message')
        if kind == 'message-start' and isinstance(rid := ev.get('id'), str):
            self._id = rid
        elif kind == 'content-delta' and isinstance(text := _dig(message, 'content', 'text'), str):
            index = ev.get('index')
            self._texts.setdefault(index if isinstance(index, int) else 0, []).append(text)
        elif kind == 'citation-start' and isinstance(citation := _dig(message, 'citations'), dict):
            self._citations.append(cast(JsonValue, citation))
        elif kind == 'message-end':
            self.close()

    def close(self) -> None:
        if self._id is None:
            return
        content: list[JsonValue] = [{'type': 'text', 'text': ''.join(self._texts[i])} for i in sorted(self._texts)]
        message: dict[str, JsonValue] = {'content': content, 'citations': list(self._citations)}
        self._tap._record({'id': self._id, 'message': message})  # pyright: ignore[reportPrivateUsage]


def _dig(value: object, *path: str) -> object:
    for name in path:
        if not isinstance(value, dict):
            return None
        value = cast('dict[str, object]', value).get(name)
    return value


class AnthropicTap:
    """Records the cited text blocks of each Anthropic Messages response that passes an HTTP client, by message id.

    Pydantic AI 2.68's `AnthropicModel` ignores `search_result_location` citations, and a text block cited *only*
    that way keeps no raw data at all (no `provider_details`). Build the provider's client with
    `anthropic_http_client(tap)` and give it to `AnthropicProvider(http_client=...)`, and `TrackCitations(
    anthropic_tap=tap)` recovers them. After a request, `tap.text_blocks_for(model_response.provider_response_id)`
    returns that response's text blocks (`{'text': ..., 'citations': [...]}`, in order). Streamed (SSE, never
    buffered) and non-streamed bodies alike. The tap keeps the newest `max_responses` responses.
    """

    def __init__(self, *, max_responses: int = 256, hosts: Sequence[str] = ('api.anthropic.com',)) -> None:
        """Create a tap.

        Args:
            max_responses: How many responses to keep, newest first; older ones are evicted.
            hosts: Hosts whose `.../messages` endpoint is tapped.
        """
        _check_tap_arguments('AnthropicTap', max_responses, hosts)
        self.max_responses = max_responses
        self.hosts = tuple(hosts)
        self.problems: list[CitationProblem] = []
        """Problems with bodies the tap could not read (so could not record)."""
        self._blocks: OrderedDict[str, list[dict[str, JsonValue]]] = OrderedDict()

    def text_blocks_for(self, response_id: str | None) -> list[dict[str, JsonValue]] | None:
        """The text blocks of the response with this id, or `None` if it was not seen (or was evicted)."""
        return None if response_id is None else self._blocks.get(response_id)

    def transport(self, inner: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncBaseTransport:
        """Wrap `inner` (default: a new `httpx2.AsyncHTTPTransport()`) so its Anthropic responses are recorded."""
        return _AnthropicTapTransport(self, inner if inner is not None else httpx2.AsyncHTTPTransport())

    def _record(self, response_id: object, blocks: list[dict[str, JsonValue]]) -> None:
        if not isinstance(response_id, str) or not response_id:
            return
        self._blocks[response_id] = blocks
        self._blocks.move_to_end(response_id)
        while len(self._blocks) > self.max_responses:
            self._blocks.popitem(last=False)


def anthropic_http_client(
    tap: AnthropicTap, *, transport: httpx2.AsyncBaseTransport | None = None, timeout: float | None = 600.0
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` whose Anthropic Messages responses feed `tap` (for `AnthropicProvider(http_client=...)`).

    Args:
        tap: The tap that keeps the cited text blocks.
        transport: The transport to wrap (default: a new `httpx2.AsyncHTTPTransport()`).
        timeout: Client timeout in seconds.
    """
    require('anthropic_http_client', 'tap', tap, AnthropicTap, 'an `AnthropicTap` (the one given to `TrackCitations`)')
    return httpx2.AsyncClient(transport=tap.transport(transport), timeout=timeout)


def _text_block(block: Mapping[str, object]) -> dict[str, JsonValue]:
    citations = block.get('citations')
    return {
        'text': text if isinstance(text := block.get('text'), str) else '',
        'citations': cast('list[JsonValue]', citations) if isinstance(citations, list) else [],
    }


class _AnthropicStreamBlocks:
    """Rebuilds the text blocks of one streamed Messages response from its events, in place in the tap's record."""

    def __init__(self, tap: AnthropicTap) -> None:
        self._tap = tap
        self._blocks: list[dict[str, JsonValue]] = []
        self._open: dict[int, tuple[dict[str, JsonValue], list[str]]] = {}

    def feed(self, event: object) -> None:
        if not isinstance(event, dict):
            return
        ev = cast('dict[str, object]', event)
        kind, index = ev.get('type'), ev.get('index')
        if kind == 'message_start' and isinstance(message := ev.get('message'), dict):
            # Registered now and filled as blocks end: the record is complete when the stream is.
            self._tap._record(cast('dict[str, object]', message).get('id'), self._blocks)  # pyright: ignore[reportPrivateUsage]
        elif not isinstance(index, int):
            return
        elif kind == 'content_block_start' and isinstance(block := ev.get('content_block'), dict):
            block_map = cast('dict[str, object]', block)
            if block_map.get('type') == 'text':
                record = _text_block(block_map)
                self._open[index] = (record, [cast(str, record['text'])])
        elif kind == 'content_block_delta' and index in self._open and isinstance(delta := ev.get('delta'), dict):
            record, texts = self._open[index]
            delta_map = cast('dict[str, JsonValue]', delta)
            if delta_map.get('type') == 'text_delta' and isinstance(piece := delta_map.get('text'), str):
                texts.append(piece)
            elif delta_map.get('type') == 'citations_delta':
                cast('list[JsonValue]', record['citations']).append(delta_map.get('citation'))
        elif kind == 'content_block_stop' and index in self._open:
            record, texts = self._open.pop(index)
            record['text'] = ''.join(texts)
            self._blocks.append(record)


class _RecordingTransport(httpx2.AsyncBaseTransport):
    """Hands one endpoint's responses to a tap as they pass: an SSE stream event by event, a JSON body whole.

    The body is asked for uncompressed, so the tap reads the bytes the SDK receives; error responses and other
    endpoints pass untouched. Subclasses say which endpoint (`path`), how events and bodies are read, and whose.
    """

    path = ''
    provider = ''

    def __init__(self, tap: AnthropicTap | MistralTap, inner: httpx2.AsyncBaseTransport) -> None:
        self._tap = tap
        self._inner = inner

    def on_event(self) -> Callable[[object], None]:
        """A fresh reader of one streamed response's events."""
        raise NotImplementedError

    def on_body(self, body: dict[str, object]) -> None:
        """Read one JSON response body."""
        raise NotImplementedError

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        wanted = request.url.host in self._tap.hosts and request.url.path.rstrip('/').endswith(self.path)
        if wanted:
            request.headers['accept-encoding'] = 'identity'
        response = await self._inner.handle_async_request(request)
        content_type = response.headers.get('content-type', '')
        if not wanted or response.status_code >= 400:
            return response
        encoding = response.headers.get('content-encoding', '')
        if 'text/event-stream' in content_type:
            problems = self._tap.problems.append
            stream = _SseTapStream(
                response.stream, encoding, on_event=self.on_event(), on_problem=problems, on_close=_nothing
            )
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=stream,
                request=request,
                extensions=response.extensions,
            )
        if 'json' not in content_type:
            return response
        raw, body = await _read_json(response.stream, encoding)
        if isinstance(body, dict):
            self.on_body(cast('dict[str, object]', body))
        else:
            self._tap.problems.append(
                CitationProblem('unreadable_raw_data', f'{self.provider} JSON body could not be read.')
            )
        return httpx2.Response(
            response.status_code, headers=response.headers, content=raw, request=request, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _AnthropicTapTransport(_RecordingTransport):
    path = '/messages'
    provider = 'An Anthropic'

    def on_event(self) -> Callable[[object], None]:
        return _AnthropicStreamBlocks(cast(AnthropicTap, self._tap)).feed

    def on_body(self, body: dict[str, object]) -> None:
        content = body.get('content')
        items: list[object] = cast('list[object]', content) if isinstance(content, list) else []
        blocks = [
            _text_block(cast('dict[str, object]', b))
            for b in items
            if isinstance(b, dict) and cast('dict[str, object]', b).get('type') == 'text'
        ]
        cast(AnthropicTap, self._tap)._record(body.get('id'), blocks)  # pyright: ignore[reportPrivateUsage]


def _nothing() -> None:
    return None


class MistralTap:
    """Records the `reference` content chunks of each Mistral chat completion that passes an HTTP client, by id.

    Pydantic AI 2.68's `MistralModel` drops `reference` chunks (`{'type': 'reference', 'reference_ids': [...]}`, the
    citations of an answer grounded in tool results) and keeps no trace of them. Build the Mistral client with
    `Mistral(api_key=..., async_client=mistral_http_client(tap))`, give it to `MistralProvider(mistral_client=...)`,
    and `TrackCitations(mistral_tap=tap)` lists them on the answer. After a request,
    `tap.references_for(model_response.provider_response_id)` returns that response's text and its reference chunks,
    each with the `offset` in the text where it stood. Streamed (SSE, never buffered) and non-streamed bodies alike.
    """

    def __init__(self, *, max_responses: int = 256, hosts: Sequence[str] = ('api.mistral.ai',)) -> None:
        """Create a tap.

        Args:
            max_responses: How many responses to keep, newest first; older ones are evicted.
            hosts: Hosts whose `.../chat/completions` endpoint is tapped.
        """
        _check_tap_arguments('MistralTap', max_responses, hosts)
        self.max_responses = max_responses
        self.hosts = tuple(hosts)
        self.problems: list[CitationProblem] = []
        """Problems with bodies the tap could not read (so could not record)."""
        self._records: OrderedDict[str, MistralRecord] = OrderedDict()

    def references_for(self, response_id: str | None) -> MistralRecord | None:
        """The text and reference chunks of the response with this id, or `None` if it was not seen (or was evicted)."""
        return None if response_id is None else self._records.get(response_id)

    def transport(self, inner: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncBaseTransport:
        """Wrap `inner` (default: a new `httpx2.AsyncHTTPTransport()`) so its Mistral chat responses are recorded."""
        return _MistralTapTransport(self, inner if inner is not None else httpx2.AsyncHTTPTransport())

    def _record(self, response_id: object, record: MistralRecord) -> None:
        if not isinstance(response_id, str) or not response_id:
            return
        self._records[response_id] = record
        self._records.move_to_end(response_id)
        while len(self._records) > self.max_responses:
            self._records.popitem(last=False)


class MistralRecord:
    """What a `MistralTap` saw of one chat completion: its text and its `reference` chunks (with their offsets)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.references: list[dict[str, JsonValue]] = []
        """Each `reference` chunk as sent, plus `offset`: the length of the text before it."""

    @property
    def text(self) -> str:
        """The answer's text: its text chunks (or string contents) joined."""
        return ''.join(self.texts)

    def feed(self, content: object) -> None:
        """Take one message (or delta) `content`: a string, or a list of content chunks."""
        if isinstance(content, str):
            self.texts.append(content)
            return
        for chunk in cast('list[object]', content) if isinstance(content, list) else []:
            item = cast('dict[str, JsonValue]', chunk) if isinstance(chunk, dict) else {}
            if item.get('type') == 'text' and isinstance(text := item.get('text'), str):
                self.texts.append(text)
            elif item.get('type') == 'reference':
                self.references.append({**item, 'offset': sum(map(len, self.texts))})


def mistral_http_client(
    tap: MistralTap, *, transport: httpx2.AsyncBaseTransport | None = None, timeout: float | None = 600.0
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` whose Mistral chat responses feed `tap` (for `Mistral(async_client=...)`).

    Args:
        tap: The tap that keeps the reference chunks.
        transport: The transport to wrap (default: a new `httpx2.AsyncHTTPTransport()`).
        timeout: Client timeout in seconds.
    """
    require('mistral_http_client', 'tap', tap, MistralTap, 'a `MistralTap` (the one given to `TrackCitations`)')
    return httpx2.AsyncClient(transport=tap.transport(transport), timeout=timeout)


def _first_choice_content(body: Mapping[str, object], key: str) -> object:
    choices = body.get('choices')
    first = cast('list[object]', choices)[0] if isinstance(choices, list) and choices else None
    return _dig(first, key, 'content')


def _mistral_stream(tap: MistralTap, record: MistralRecord) -> Callable[[object], None]:
    def on_event(event: object) -> None:
        if not isinstance(event, dict):
            return  # not a JSON object: nothing to record
        ev = cast('dict[str, object]', event)
        tap._record(ev.get('id'), record)  # pyright: ignore[reportPrivateUsage]
        record.feed(_first_choice_content(ev, 'delta'))

    return on_event


class _MistralTapTransport(_RecordingTransport):
    path = '/chat/completions'
    provider = 'A Mistral'

    def on_event(self) -> Callable[[object], None]:
        return _mistral_stream(cast(MistralTap, self._tap), MistralRecord())

    def on_body(self, body: dict[str, object]) -> None:
        record = MistralRecord()
        record.feed(_first_choice_content(body, 'message'))
        cast(MistralTap, self._tap)._record(body.get('id'), record)  # pyright: ignore[reportPrivateUsage]
