"""The taps' transports on `httpx` (the cohere SDK's HTTP library), apart so `httpx` loads only when a tap is used."""

from __future__ import annotations

from typing import cast

import httpx
from pydantic import JsonValue

from ._tap import (
    CohereStreamBody,
    CohereTap,
    _read_json,  # pyright: ignore[reportPrivateUsage]
    _SseTapStream,  # pyright: ignore[reportPrivateUsage]
    ignore_problem,
)

__all__ = ('CohereTapTransport', 'HttpxSseTapStream')


class CohereTapTransport(httpx.AsyncBaseTransport):
    def __init__(self, tap: CohereTap, inner: httpx.AsyncBaseTransport) -> None:
        self._tap = tap
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        wanted = request.url.host in self._tap.hosts and request.url.path.rstrip('/').endswith('/chat')
        content_type = response.headers.get('content-type', '')
        if wanted and response.status_code < 400 and 'text/event-stream' in content_type:
            body = CohereStreamBody(self._tap)
            stream = HttpxSseTapStream(
                response.stream,
                response.headers.get('content-encoding', ''),
                on_event=body.feed,
                on_problem=ignore_problem,
                on_close=body.close,
            )
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=stream,
                request=request,
                extensions=response.extensions,
            )
        if not wanted or response.status_code >= 400 or 'json' not in content_type:
            return response
        raw, body = await _read_json(response.stream, response.headers.get('content-encoding', ''))
        if isinstance(body, dict):
            self._tap._record(cast('dict[str, JsonValue]', body))  # pyright: ignore[reportPrivateUsage]
        return httpx.Response(
            response.status_code, headers=response.headers, content=raw, request=request, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class HttpxSseTapStream(_SseTapStream, httpx.AsyncByteStream):
    """`_SseTapStream` for a client built on `httpx` (the cohere SDK's), which checks the stream's type."""
