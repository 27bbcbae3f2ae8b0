from __future__ import annotations

import codecs
from datetime import UTC
from pathlib import Path

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitedAnswer, SourceRef
from pydantic_ai_citations.support import (
    PageSnapshot,
    SnapshotStore,
    capture,
    capture_answer,
    check_support_sync,
    decode_body,
    page_snapshots_ta,
)
from pydantic_ai_citations.support._snapshots import USER_AGENT

pytestmark = pytest.mark.anyio

ARTICLE = b'<html><body><p>The cited article says exactly what the answer claims it says.</p></body></html>'


def site(request: httpx2.Request) -> httpx2.Response:
    """A small fake web: articles, dead pages, redirects, loops, errors."""
    path = request.url.path
    host = request.url.host
    if host == 'vertexaisearch.cloud.google.com':  # a grounding redirect to the real page
        return httpx2.Response(302, headers={'Location': 'https://news.test/article'})
    if path == '/article':
        return httpx2.Response(200, content=ARTICLE, headers={'Content-Type': 'text/html; charset=utf-8'})
    if path == '/moved':
        return httpx2.Response(301, headers={'Location': '/article', 'Set-Cookie': 'session=secret; Path=/'})
    if path == '/old-story':
        return httpx2.Response(302, headers={'Location': 'https://news.test/'})
    if path == '/':
        return httpx2.Response(
            200, content=b'<html><body><p>Welcome to our home page with the latest news.</p></body></html>'
        )
    if path == '/dead':
        return httpx2.Response(404, content=b'not here')
    if path == '/removed':
        return httpx2.Response(410)
    if path == '/broken':
        return httpx2.Response(500)
    if path.startswith('/loop'):
        n = int(path.removeprefix('/loop') or 0)
        return httpx2.Response(302, headers={'Location': f'/loop{n + 1}'})
    if path == '/slow':
        raise httpx2.ReadTimeout('slow', request=request)
    if path == '/refused':
        raise httpx2.ConnectError('refused', request=request)
    if path == '/huge':
        return httpx2.Response(
            200, content=b'<p>' + b'word ' * 400_000 + b'</p>', headers={'Content-Type': 'text/html'}
        )
    if path == '/ftp':
        return httpx2.Response(302, headers={'Location': 'ftp://files.test/x'})
    return httpx2.Response(404)


async def test_capture_liveness_classes(tmp_path: Path):
    store = SnapshotStore(tmp_path / 'snaps')
    urls = [
        'https://news.test/article',
        'https://news.test/moved',
        'https://news.test/old-story',
        'https://news.test/dead',
        'https://news.test/removed',
        'https://news.test/broken',
        'https://news.test/loop',
        'https://news.test/slow',
        'https://news.test/refused',
        'https://news.test/ftp',
        'mailto:someone@example.test',
        'https://news.test/article',  # duplicates are fetched once
    ]
    snaps = await capture(urls, store=store, transport=httpx2.MockTransport(site), max_redirects=3)
    got = {s.url.removeprefix('https://news.test'): (s.liveness, s.status, s.reason) for s in snaps}
    assert got == {
        '/article': ('ok', 200, None),
        '/moved': ('ok', 200, None),
        '/old-story': ('gone', 200, 'redirected to a home page (https://news.test/)'),
        '/dead': ('not_found', 404, 'HTTP 404'),
        '/removed': ('not_found', 410, 'HTTP 410'),
        '/broken': ('error', 500, 'HTTP 500'),
        '/loop': ('error', None, 'more than 3 redirects'),
        '/slow': ('timeout', None, 'no complete answer within 15 s'),
        '/refused': ('error', None, 'ConnectError: refused'),
        '/ftp': ('error', None, "unsupported URL scheme 'ftp'"),
        'mailto:someone@example.test': ('error', None, "unsupported URL scheme 'mailto'"),
    }
    moved = snaps[1]
    assert moved.final_url == 'https://news.test/article'
    assert moved.redirects == ['https://news.test/moved']
    assert moved.body == ARTICLE
    assert moved.content_hash is not None
    assert moved.content_hash.startswith('sha256:')
    assert moved.captured_at.tzinfo == UTC
    assert len(snaps[6].redirects) == 4
    assert len(store) == 11
    assert page_snapshots_ta.validate_json(page_snapshots_ta.dump_json(snaps)) == snaps


async def test_google_grounding_redirect_keeps_final_url(tmp_path: Path):
    store = SnapshotStore(tmp_path)
    url = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbC123'
    (snap,) = await capture([url], store=store, transport=httpx2.MockTransport(site))
    assert (snap.liveness, snap.final_url, snap.redirects) == ('ok', 'https://news.test/article', [url])
    # Later the grounding link is found by its cited URL or by the final URL.
    got = store.get(url)
    assert got is not None
    assert got.body == ARTICLE
    by_final = store.get('https://news.test/article')
    assert by_final is not None
    assert by_final.url == url
    assert url in store
    assert 'https://nowhere.test/' not in store


async def test_capture_sends_nothing_of_the_user():
    seen: list[httpx2.Request] = []

    def spy(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return site(request)

    await capture(['https://news.test/moved', 'https://news.test/article'], transport=httpx2.MockTransport(spy))
    assert len(seen) == 3
    for request in seen:
        assert request.method == 'GET'
        assert request.content == b''
        headers = {k.lower() for k in request.headers}
        assert headers <= {'host', 'user-agent', 'accept'}, headers
        assert request.headers['user-agent'] == USER_AGENT
        assert 'cookie' not in headers  # not even the cookie the redirect set
        assert 'referer' not in headers
        assert 'authorization' not in headers
        assert request.url.query == b''


async def test_capture_size_cap_and_concurrency():
    in_flight = 0
    peak = 0

    async def slowish(request: httpx2.Request) -> httpx2.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.01)
        in_flight -= 1
        return site(request)

    urls = [f'https://news.test/article?{i}' for i in range(10)] + ['https://news.test/huge']
    snaps = await capture(urls, transport=httpx2.MockTransport(slowish), concurrency=3, max_bytes=100_000)
    assert peak == 3
    huge = snaps[-1]
    assert (huge.liveness, huge.truncated, len(huge.body)) == ('ok', True, 100_000)
    assert huge.reason == 'body cut at 100000 bytes'


async def test_capture_misuse():
    with pytest.raises(UserError, match='`concurrency` must be an int of at least 1, got 0'):
        await capture(['https://x.test/'], concurrency=0)
    with pytest.raises(UserError, match='max_redirects'):
        await capture(['https://x.test/'], max_redirects=-1)
    with pytest.raises(UserError, match='max_bytes'):
        await capture(['https://x.test/'], max_bytes=0)


async def test_capture_answer_then_check(tmp_path: Path):
    claim = 'The cited article says exactly what the answer claims.'
    sources = [
        SourceRef(1, 'web', url='https://news.test/moved'),
        SourceRef(2, 'web', url='https://news.test/dead'),
        SourceRef(3, 'document', document_id='file-1', title='Report'),
    ]
    answer = CitedAnswer(claim, unanchored=sources, sources=sources)
    store = SnapshotStore(tmp_path / 'store.sqlite')
    snaps = await capture_answer(store, answer, transport=httpx2.MockTransport(site))
    assert [s.url for s in snaps] == ['https://news.test/moved', 'https://news.test/dead']
    assert store.path == tmp_path / 'store.sqlite'
    report = check_support_sync(answer, store)
    assert [(c.source, c.verdict) for c in report.checks] == [(1, 'supported'), (2, 'unreachable'), (3, 'no_snapshot')]
    assert report.summary.dead_links == ['https://news.test/dead (not_found)']


def test_store_keeps_history_and_latest_wins(tmp_path: Path):
    store = SnapshotStore(tmp_path)
    store.put(PageSnapshot.from_text('https://a.test/', '<p>old version of the page text here</p>'))
    store.put(PageSnapshot.from_text('https://a.test/', '<p>new version of the page text here</p>'))
    store.put(PageSnapshot.from_text('https://b.test/', 'plain', content_type='text/plain'))
    latest = store.latest()
    assert [(s.url, s.body) for s in latest] == [
        ('https://a.test/', b'<p>new version of the page text here</p>'),
        ('https://b.test/', b'plain'),
    ]
    assert len(store) == 2
    reopened = SnapshotStore(tmp_path / 'snapshots.sqlite')
    assert reopened.get('https://b.test/') == latest[1]
    assert repr(reopened).startswith('SnapshotStore(')
    (tmp_path / 'file.txt').write_text('x')
    with pytest.raises(UserError, match='file.txt'):
        SnapshotStore(tmp_path / 'file.txt')


# --- decoding -------------------------------------------------------------------------------------------------------

RU = '<html><head>{meta}</head><body><p>Президент посетил госпиталь</p></body></html>'


@pytest.mark.parametrize(
    ('body', 'content_type', 'encoding'),
    [
        pytest.param(RU.format(meta='').encode(), None, 'utf-8', id='utf8-undeclared'),
        pytest.param(RU.format(meta='').encode('cp1251'), 'text/html; charset=windows-1251', 'cp1251', id='header'),
        pytest.param(
            RU.format(meta='<meta charset="windows-1251">').encode('cp1251'), 'text/html', 'cp1251', id='meta'
        ),
        pytest.param(
            RU.format(meta='<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">').encode('koi8_r'),
            None,
            'koi8-r',
            id='meta-http-equiv',
        ),
        pytest.param(RU.format(meta='').encode('cp1251'), 'text/html; charset=utf-8', None, id='wrong-header-detected'),
        pytest.param(codecs.BOM_UTF8 + RU.format(meta='').encode(), None, 'utf-8-sig', id='bom-utf8'),
        pytest.param(RU.format(meta='').encode('utf-16'), None, 'utf-16', id='bom-utf16'),
        pytest.param(RU.format(meta='').encode('cp1251'), 'text/html; charset=nonsense', None, id='unknown-charset'),
    ],
)
def test_decode_charsets(body: bytes, content_type: str | None, encoding: str | None):
    page = decode_body(body, content_type)
    assert page.text is not None
    assert 'Президент посетил госпиталь' in page.text
    if encoding is not None:
        assert page.encoding == encoding


def test_decode_binary_and_truncated():
    assert decode_body(b'%PDF-1.4 ...').reason == 'not a text page (binary body)'
    assert decode_body(b'abc\x00\x01\x02').reason == 'not a text page (binary body)'
    assert decode_body(b'GIF89a', 'image/gif').reason == "not a text page (content type 'image/gif')"
    cut = decode_body('ж'.encode() * 10, max_bytes=5)  # the cut splits a two-byte character
    assert (cut.text, cut.truncated, cut.reason) == ('жж', True, 'page cut at 5 bytes')
    assert decode_body(b'').text == ''


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=300), st.sampled_from([None, 'text/html', 'text/html; charset=utf-8', 'text/plain; charset=x'])
)
def test_decode_never_crashes(body: bytes, content_type: str | None):
    page = decode_body(body, content_type, max_bytes=200)
    assert page.text is not None or page.reason


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_check_support_never_crashes_on_bytes(body: bytes):
    answer = CitedAnswer(
        'A claim about something.', unanchored=[SourceRef(1, 'web', url='u')], sources=[SourceRef(1, 'web', url='u')]
    )
    (check,) = check_support_sync(answer, {'u': body}).checks
    assert check.reason


async def test_capture_total_timeout_bounds_slow_servers():
    async def drip(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(5)
        return httpx2.Response(200)

    with anyio.fail_after(2):
        (snap,) = await capture(['https://slow.test/'], transport=httpx2.MockTransport(drip), timeout=0.05)
    assert (snap.liveness, snap.reason) == ('timeout', 'no complete answer within 0.05 s')
