"""Page capture never reaches an internal address: a real HTTP server on loopback counts what reaches it."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pydantic_ai_citations.support import SnapshotStore, capture

pytestmark = pytest.mark.anyio


class _Server:
    def __init__(self) -> None:
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits.append(self.path)
                if self.path.startswith('/redirect-to/'):
                    self.send_response(302)
                    self.send_header('Location', self.path.removeprefix('/redirect-to/'))
                    self.end_headers()
                    return
                if self.path.startswith('/short'):  # promises more than it sends, then closes the connection
                    self.send_response(200)
                    self.send_header('Content-Type', 'text/html')
                    self.send_header('Content-Length', '1000')
                    self.end_headers()
                    self.wfile.write(b'<p>short</p>')
                    self.close_connection = True
                    return
                body = b'<html><body><p>An internal page that must never be captured.</p></body></html>'
                self.send_response(200)
                self.send_header('Content-Type', 'text/html; charset=utf-8')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    with _Server() as s:
        yield s


INTERNAL_SPELLINGS = [
    pytest.param('http://127.0.0.1:{port}/a', id='loopback'),
    pytest.param('http://localhost:{port}/a', id='localhost-name'),
    pytest.param('http://LOCALHOST.:{port}/a', id='localhost-upper-dot'),
    pytest.param('http://2130706433:{port}/a', id='decimal'),
    pytest.param('http://0x7f.1:{port}/a', id='hex-short'),
    pytest.param('http://127.1:{port}/a', id='short-dotted'),
    pytest.param('http://[::ffff:127.0.0.1]:{port}/a', id='ipv4-mapped-ipv6'),
    pytest.param('http://[::1]:{port}/a', id='ipv6-loopback'),
    pytest.param('http://0.0.0.0:{port}/a', id='unspecified'),
]


@pytest.mark.parametrize('template', INTERNAL_SPELLINGS)
async def test_internal_urls_are_refused_and_never_reached(server: _Server, template: str) -> None:
    url = template.format(port=server.port)
    (snap,) = await capture([url], timeout=5)
    assert snap.liveness == 'refused', snap
    assert snap.body == b''
    assert snap.reason is not None and snap.reason.startswith('not fetched:')
    assert server.hits == []


async def test_octal_spelling_is_never_reached(server: _Server) -> None:
    # httpx2 rejects the octal spelling as an invalid URL: an error snapshot, and nothing is sent.
    (snap,) = await capture([f'http://0177.0.0.1:{server.port}/a'], timeout=5)
    assert snap.liveness == 'error'
    assert snap.reason is not None and 'invalid URL' in snap.reason
    assert server.hits == []


@pytest.mark.parametrize(
    'url',
    [
        pytest.param('http://169.254.169.254/latest/meta-data/', id='cloud-metadata'),
        pytest.param('http://10.0.0.1/admin', id='private-10'),
        pytest.param('http://192.168.1.1/', id='private-192'),
        pytest.param('http://172.16.0.1/', id='private-172'),
        pytest.param('http://100.64.0.1/', id='shared-cgnat'),
        pytest.param('http://[fd00::1]/', id='unique-local'),
        pytest.param('http://[fe80::1]/', id='ipv6-link-local'),
        pytest.param('http://224.0.0.1/', id='multicast'),
        pytest.param('http://[ff02::1]/', id='ipv6-multicast'),
        pytest.param('http://[::]/', id='ipv6-unspecified'),
    ],
)
async def test_internal_literals_are_refused_before_connecting(url: str) -> None:
    (snap,) = await capture([url], timeout=5)
    assert snap.liveness == 'refused', snap
    assert snap.status is None


async def test_redirect_from_an_allowed_host_to_an_internal_address_is_refused(server: _Server) -> None:
    # `localhost` is allowed (an intranet tool's host); the page it serves redirects to a literal internal address.
    target = f'http://127.0.0.1:{server.port}/admin'
    url = f'http://localhost:{server.port}/redirect-to/{target}'
    (snap,) = await capture([url], timeout=5, allow_hosts=['localhost'])
    assert snap.liveness == 'refused'
    assert snap.redirects == [url]
    assert snap.final_url == target
    assert server.hits == [f'/redirect-to/{target}']  # the admin page was never requested


async def test_redirect_to_cloud_metadata_is_refused(server: _Server) -> None:
    url = f'http://localhost:{server.port}/redirect-to/http://169.254.169.254/latest/meta-data/'
    (snap,) = await capture([url], timeout=5, allow_hosts=['LocalHost'])
    assert snap.liveness == 'refused'
    assert snap.reason is not None and 'link-local' in snap.reason


async def test_allowed_hosts_are_captured(server: _Server, tmp_path: object) -> None:
    store = SnapshotStore(f'{tmp_path}/snaps.db')
    url = f'http://localhost:{server.port}/page'
    (snap,) = await capture([url], timeout=5, allow_hosts=['localhost'], store=store)
    assert snap.liveness == 'ok'
    assert b'internal page' in snap.body
    assert server.hits == ['/page']
    assert store.get(url) == snap


async def test_a_body_cut_off_by_the_server_is_an_error_snapshot_and_the_others_are_kept(
    server: _Server, tmp_path: object
) -> None:
    """A server that closes the connection before the body it announced: that page's snapshot says so (`error`), and
    the other pages of the capture are captured and stored (the read error crashed the whole capture before)."""
    store = SnapshotStore(f'{tmp_path}/snaps.db')
    short, good = f'http://localhost:{server.port}/short', f'http://localhost:{server.port}/page'
    snaps = await capture([short, good], timeout=5, allow_hosts=['localhost'], store=store)
    assert [s.liveness for s in snaps] == ['error', 'ok']
    assert 'peer closed connection' in (snaps[0].reason or '')
    assert store.get(good) == snaps[1]
    assert store.get(short) == snaps[0]


async def test_own_transport_still_refuses_internal_literals() -> None:
    seen: list[str] = []

    def spy(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        if request.url.host == 'public.test':
            return httpx2.Response(302, headers={'Location': 'http://[::ffff:a00:1]/admin'})
        return httpx2.Response(200, content=b'<p>secret</p>')

    snaps = await capture(
        ['https://public.test/', 'http://localhost/', 'http://0x7f000001/'], transport=httpx2.MockTransport(spy)
    )
    assert [s.liveness for s in snaps] == ['refused', 'refused', 'refused']
    assert seen == ['https://public.test/']


async def test_unresolvable_host_is_an_error_not_a_crash() -> None:
    (snap,) = await capture(['http://no-such-host.invalid/'], timeout=5)
    assert snap.liveness == 'error'


@given(st.ip_addresses())
def test_refusal_matches_the_address_classes(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    from pydantic_ai_citations.support._fetch import refusal

    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    assert (refusal(address) is None) == (plain.is_global and not plain.is_multicast)


async def test_a_name_resolving_to_an_internal_address_is_refused_after_lookup(server: _Server) -> None:
    import socket

    name = socket.gethostname()
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(name, server.port, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip(f'this machine name ({name!r}) does not resolve')
    if any(ipaddress.ip_address(str(a).split('%')[0]).is_global for a in resolved):
        pytest.skip(f'{name!r} resolves to a public address here: {sorted(resolved)}')
    (snap,) = await capture([f'http://{name}:{server.port}/a'], timeout=5)
    assert snap.liveness == 'refused', snap
    assert server.hits == []
