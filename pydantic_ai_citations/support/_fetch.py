"""Where page capture may connect: public addresses only, checked on the address actually connected to.

A model chooses the URLs it cites, so fetching them blindly turns an app into a proxy into its own network
(`http://127.0.0.1/…`, cloud metadata at `http://169.254.169.254/…`, a public page that redirects to
`http://10.0.0.1/admin`). Capture therefore refuses every destination that is not a global unicast address:
loopback, link-local, private, unique-local, shared (CGNAT), reserved, multicast and unspecified addresses, IPv4
and IPv6, IPv4-mapped IPv6 included.

The check is made where the connection is opened, not on the URL: `GuardedTransport` gives httpcore a network
backend whose `connect_tcp` resolves the host once, checks every address the name resolves to, and connects to
the address it checked. There is no second lookup between check and connect (no DNS-rebinding window), and
redirects are checked the same way because every hop opens its connection through the same backend. Odd host
spellings (`2130706433`, `0x7f.1`, `0177.0.0.1`, `[::ffff:127.0.0.1]`) need no special case: they resolve to the
address they name, and the address is what is checked.

Hosts named in `allow_hosts` skip the check (for intranet search tools whose pages are meant to be captured).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Generator, Iterable
from contextlib import contextmanager
from typing import Any

import anyio
import httpcore2
import httpx2

__all__ = ('AddressRefused', 'GuardedTransport', 'literal_address_refusal', 'normalise_hosts', 'refusal')


class AddressRefused(Exception):
    """Capture refused to connect to a host because it resolves to an internal address."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f'{host}: {reason}')


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def refusal(address: IPAddress) -> str | None:
    """Why `address` may not be fetched from, or `None` for a global unicast address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_unspecified:
        return f'{address} is an unspecified address'
    if address.is_loopback:
        return f'{address} is a loopback address'
    if address.is_link_local:
        return f'{address} is a link-local address'
    if address.is_multicast:
        return f'{address} is a multicast address'
    if address.is_private:
        return f'{address} is a private address'
    if not address.is_global:
        return f'{address} is not a public address'
    return None


def _literal(host: str) -> IPAddress | None:
    """The address a host spelling names without DNS: dotted, IPv6 and the legacy `inet_aton` forms."""
    bare = host.strip('[]')
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except (OSError, ValueError):
        return None


def normalise_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Allowed host names as compared: lower case, no brackets, no trailing dot."""
    return frozenset(h.strip().strip('[]').rstrip('.').lower() for h in hosts)


def _allowed(host: str, allow_hosts: frozenset[str]) -> bool:
    return host.strip('[]').rstrip('.').lower() in allow_hosts


def literal_address_refusal(host: str, allow_hosts: frozenset[str]) -> str | None:
    """Why a host may not be fetched from without resolving it: internal IP literals and `localhost` names.

    Used when the caller brings its own transport (which does its own resolution): the package can still refuse
    what the URL itself says.
    """
    if _allowed(host, allow_hosts):
        return None
    name = host.rstrip('.').lower()
    if name == 'localhost' or name.endswith('.localhost'):
        return f'{host} names the local machine'
    address = _literal(host)
    return None if address is None else refusal(address)


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves once, checks every address, connects to the checked one."""

    def __init__(self, allow_hosts: frozenset[str]) -> None:
        self._allow_hosts = allow_hosts
        # httpcore2 declares AnyIOBackend conditionally (anyio is always installed here): type it by its interface.
        self._inner: httpcore2.AsyncNetworkBackend = httpcore2.AnyIOBackend()  # pyright: ignore[reportAttributeAccessIssue]

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await self._resolve(host, port)
        if not _allowed(host, self._allow_hosts):
            for address in addresses:
                reason = refusal(address)
                if reason is not None:
                    raise AddressRefused(host, reason)
        # Connect to the address that was checked, never to the name (which could resolve differently now).
        return await self._inner.connect_tcp(
            str(addresses[0]), port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        literal = _literal(host)
        if literal is not None:
            return [literal]
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise httpcore2.ConnectError(f'cannot resolve {host!r}: {e}') from e
        addresses = [ipaddress.ip_address(str(info[4][0]).split('%', 1)[0]) for info in infos]
        if not addresses:  # pragma: no cover - getaddrinfo raises rather than answer nothing
            raise httpcore2.ConnectError(f'{host!r} resolves to no address')
        return addresses

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:  # pragma: no cover - capture never asks for a unix socket
        raise AddressRefused(path, 'unix sockets are never fetched from')

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - only used by httpcore's retries
        await anyio.sleep(seconds)


@contextmanager
def _as_httpx_errors(request: httpx2.Request) -> Generator[None]:
    """`httpcore2` timeouts and network and protocol errors as the `httpx2` errors a capture reports.

    As `httpx2`'s own transport maps them: while the request is sent, and while its body is read (a server that
    closes the connection early, or resets it).
    """
    try:
        yield
    except httpcore2.TimeoutException as e:
        raise httpx2.TimeoutException(str(e), request=request) from e
    except httpcore2.NetworkError as e:
        raise httpx2.NetworkError(str(e), request=request) from e
    except httpcore2.ProtocolError as e:
        raise httpx2.ProtocolError(str(e), request=request) from e


class _Body(httpx2.AsyncByteStream):
    def __init__(self, stream: Any, request: httpx2.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors(self._request):
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An `httpx2` transport that only connects to public addresses (see the module docstring).

    No proxies and no environment settings: capture connects directly, so the check sees the real destination.
    """

    def __init__(self, *, allow_hosts: Iterable[str] = ()) -> None:
        """Make a transport; hosts named in `allow_hosts` are connected to whatever they resolve to."""
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            network_backend=_GuardedBackend(normalise_hosts(allow_hosts)),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send `request` over a checked connection; timeouts and network errors come back as `httpx2` errors."""
        core_request = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,  # pyright: ignore[reportArgumentType]
            extensions=dict[str, Any](request.extensions),
        )
        with _as_httpx_errors(request):
            response = await self._pool.handle_async_request(core_request)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream, request),
            extensions=dict[str, Any](response.extensions),  # pyright: ignore[reportUnknownMemberType,reportUnknownArgumentType]
        )

    async def aclose(self) -> None:
        """Close pooled connections."""
        await self._pool.aclose()
