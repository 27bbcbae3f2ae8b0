"""Snapshots of cited pages, taken at answer time, and whether each link still leads to its page.

Pages change and links die; Google grounding URLs are redirects that expire within days. A support check run
later is only meaningful against the page as it was when the answer was written, so `capture` stores the body
together with the URL the redirects ended at.

Capturing sends nothing of the user's: each URL gets a bare `GET` with a fixed User-Agent and Accept header,
no cookies (not even ones set by a redirect on the way), no Referer, no body, no credentials from the
environment (`.netrc`, proxies). Redirects are followed by hand, at most `max_redirects` of them, so every
hop is recorded and a redirect loop ends.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Generator, Iterable, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import NoneType
from typing import Literal, cast

import anyio
import httpx2
from pydantic import ConfigDict, TypeAdapter
from pydantic_ai.exceptions import UserError

from .._answer import CitedAnswer
from .._checks import require, require_at_least, shown
from ._decode import DEFAULT_MAX_BYTES
from ._fetch import AddressRefused, GuardedTransport, literal_address_refusal, normalise_hosts

__all__ = (
    'Liveness',
    'PageSnapshot',
    'SnapshotStore',
    'USER_AGENT',
    'capture',
    'capture_answer',
    'page_snapshots_ta',
)

Liveness = Literal['ok', 'not_found', 'gone', 'timeout', 'error', 'refused']
"""Whether a cited link still leads to its page: `'ok'`; `'not_found'` (404/410); `'gone'` (redirected to a
different page, such as the site's home page); `'timeout'`; `'error'` (other status, network error, too many
redirects, unsupported scheme); `'refused'` (the link or one of its redirects leads to an internal address --
loopback, private, link-local, … -- so it was not fetched; `reason` says which)."""

USER_AGENT = 'pydantic-ai-citations-snapshot/0.1'
"""The only identifying header a capture sends."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HOME_PATHS = frozenset({'', 'index.html', 'index.htm', 'index.php', 'home', 'default.aspx', 'en', 'en-us'})
# Hosts whose whole job is to redirect (Google grounding links): landing on a home page from them is normal.
_REDIRECTOR_HOSTS = frozenset({'vertexaisearch.cloud.google.com'})


@dataclass(frozen=True)
class PageSnapshot:
    """A page as captured at answer time."""

    __pydantic_config__ = ConfigDict(ser_json_bytes='base64', val_json_bytes='base64')

    url: str
    """The URL as cited."""
    final_url: str | None
    """Where the redirects ended (`None` when no response came back)."""
    status: int | None
    """HTTP status of the final response (`None` on timeout or network error)."""
    liveness: Liveness
    """Whether the link still leads to its page (see `Liveness`)."""
    captured_at: datetime
    """When the capture finished (UTC)."""
    body: bytes = b''
    """The page body, cut at the size cap."""
    content_type: str | None = None
    """The final response's `Content-Type` header."""
    content_hash: str | None = None
    """`sha256:<hex>` of `body` (`None` when there is no body)."""
    truncated: bool = False
    """Whether the body was cut at the size cap."""
    redirects: list[str] = field(default_factory=list[str])
    """URLs visited before `final_url`, in order (the cited URL first)."""
    reason: str | None = None
    """What went wrong or looked unusual, for humans."""

    @classmethod
    def from_text(cls, url: str, text: str, *, content_type: str = 'text/html; charset=utf-8') -> PageSnapshot:
        """A snapshot of a page you already have (tests, documents, pages fetched another way)."""
        body = text.encode('utf-8')
        return cls(
            url=url,
            final_url=url,
            status=200,
            liveness='ok',
            captured_at=datetime.now(UTC),
            body=body,
            content_type=content_type,
            content_hash=_hash(body),
        )


page_snapshots_ta: TypeAdapter[list[PageSnapshot]] = TypeAdapter(list[PageSnapshot])
"""JSON round trip for lists of snapshots (bodies as base64)."""


def _hash(body: bytes) -> str:
    return 'sha256:' + hashlib.sha256(body).hexdigest()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL,
    final_url TEXT,
    status INTEGER,
    liveness TEXT NOT NULL,
    captured_at TEXT NOT NULL,
    content_type TEXT,
    content_hash TEXT,
    truncated INTEGER NOT NULL,
    redirects TEXT NOT NULL,
    reason TEXT,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_url ON snapshots (url);
CREATE INDEX IF NOT EXISTS snapshots_final_url ON snapshots (final_url);
"""
_redirects_ta: TypeAdapter[list[str]] = TypeAdapter(list[str])
_COLUMNS = (
    'url, final_url, status, liveness, captured_at, content_type, content_hash, truncated, redirects, reason, body'
)


class SnapshotStore:
    """Page snapshots in one SQLite file (stdlib `sqlite3`); every capture is kept, the latest one wins on `get`.

    Usable wherever `check_support` takes pages: a source is looked up by its URL, then by final URL.
    """

    def __init__(self, path: str | Path) -> None:
        """Open (and create if needed) a store.

        Args:
            path: A folder (the store is `snapshots.sqlite` inside it, created with its parents) or a file path
                ending in `.sqlite`, `.sqlite3` or `.db`.

        Raises:
            UserError: `path` is not a str or path-like, or is a file of another kind.
        """
        require('SnapshotStore', 'path', path, (str, os.PathLike), 'a str or path-like (a folder or a .sqlite file)')
        p = Path(path)
        if p.suffix.lower() in ('.sqlite', '.sqlite3', '.db'):
            p.parent.mkdir(parents=True, exist_ok=True)
            self.path = p
        elif p.exists() and not p.is_dir():
            raise UserError(f'Snapshot store path {str(path)!r} is a file that is not a .sqlite/.sqlite3/.db file.')
        else:
            p.mkdir(parents=True, exist_ok=True)
            self.path = p / 'snapshots.sqlite'
        with self._connect() as db:
            db.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f'SnapshotStore({str(self.path)!r})'

    @contextmanager
    def _connect(self) -> Generator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path)) as db, db:
            yield db

    def put(self, snapshot: PageSnapshot) -> None:
        """Store one snapshot."""
        self.put_many([snapshot])

    def put_many(self, snapshots: Iterable[PageSnapshot]) -> None:
        """Store several snapshots in one transaction."""
        rows = [
            (
                s.url,
                s.final_url,
                s.status,
                s.liveness,
                s.captured_at.isoformat(),
                s.content_type,
                s.content_hash,
                int(s.truncated),
                _redirects_ta.dump_json(s.redirects).decode(),
                s.reason,
                s.body,
            )
            for s in snapshots
        ]
        with self._connect() as db:
            db.executemany(f'INSERT INTO snapshots ({_COLUMNS}) VALUES ({", ".join("?" * 11)})', rows)

    @staticmethod
    def _row(row: tuple[object, ...]) -> PageSnapshot:
        (
            url,
            final_url,
            status,
            liveness,
            captured_at,
            content_type,
            content_hash,
            truncated,
            redirects,
            reason,
            body,
        ) = row
        return PageSnapshot(
            url=str(url),
            final_url=None if final_url is None else str(final_url),
            status=status if isinstance(status, int) else None,
            liveness=_liveness(str(liveness)),
            captured_at=datetime.fromisoformat(str(captured_at)),
            body=body if isinstance(body, bytes) else b'',
            content_type=None if content_type is None else str(content_type),
            content_hash=None if content_hash is None else str(content_hash),
            truncated=bool(truncated),
            redirects=_redirects_ta.validate_json(str(redirects)),
            reason=None if reason is None else str(reason),
        )

    def get(self, url: str) -> PageSnapshot | None:
        """The latest snapshot of `url` (matched as cited, else as final URL), or `None`."""
        with self._connect() as db:
            for column in ('url', 'final_url'):
                row = db.execute(
                    f'SELECT {_COLUMNS} FROM snapshots WHERE {column} = ? ORDER BY id DESC LIMIT 1', (url,)
                ).fetchone()
                if row is not None:
                    return self._row(tuple(row))
        return None

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self.get(url) is not None

    def latest(self) -> list[PageSnapshot]:
        """The latest snapshot of every URL, in order of first capture."""
        with self._connect() as db:
            rows = db.execute(
                f'SELECT {_COLUMNS} FROM snapshots WHERE id IN (SELECT MAX(id) FROM snapshots GROUP BY url) ORDER BY id'
            ).fetchall()
        return [self._row(tuple(r)) for r in rows]

    def __len__(self) -> int:
        with self._connect() as db:
            (count,) = db.execute('SELECT COUNT(DISTINCT url) FROM snapshots').fetchone()
        return int(count)


def _liveness(value: str) -> Liveness:
    if value == 'ok':
        return 'ok'
    if value == 'not_found':
        return 'not_found'
    if value == 'gone':
        return 'gone'
    if value == 'timeout':
        return 'timeout'
    if value == 'refused':
        return 'refused'
    return 'error'


def _is_home(url: httpx2.URL) -> bool:
    return url.path.strip('/').lower() in _HOME_PATHS


def _failed(url: str, liveness: Liveness, reason: str, redirects: list[str], final: str | None = None) -> PageSnapshot:
    return PageSnapshot(
        url=url,
        final_url=final,
        status=None,
        liveness=liveness,
        captured_at=datetime.now(UTC),
        redirects=redirects,
        reason=reason,
    )


async def _read_body(response: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    """The body, cut after `max_bytes`, and whether it was cut (reading stops there)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b''.join(chunks)[:max_bytes], True
    return b''.join(chunks), False


def _liveness_of(url: str, final: httpx2.URL, status: int, redirects: list[str]) -> tuple[Liveness, list[str]]:
    if status in (404, 410):
        return 'not_found', [f'HTTP {status}']
    if not 200 <= status < 300:
        return 'error', [f'HTTP {status}']
    cited = httpx2.URL(url)
    if redirects and _is_home(final) and not _is_home(cited) and cited.host not in _REDIRECTOR_HOSTS:
        return 'gone', [f'redirected to a home page ({final})']
    return 'ok', []


async def _capture_one(
    client: httpx2.AsyncClient,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    max_redirects: int,
    allow_hosts: frozenset[str],
) -> PageSnapshot:
    redirects: list[str] = []
    try:
        current = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError) as e:
        return _failed(url, 'error', f'invalid URL: {e}', redirects)
    try:
        with anyio.fail_after(timeout):
            while True:
                if current.scheme not in ('http', 'https'):
                    return _failed(url, 'error', f'unsupported URL scheme {current.scheme!r}', redirects, str(current))
                # Refuse what the URL itself names before any lookup. With the package's own transport the address
                # connected to is checked again after resolving; with the caller's, this is all it can check.
                refused = literal_address_refusal(current.host, allow_hosts)
                if refused is not None:
                    return _failed(url, 'refused', f'not fetched: {refused}', redirects, str(current))
                # A bare request built here, not with `client.build_request`: no client cookies, no default headers.
                request = httpx2.Request(
                    'GET',
                    current,
                    headers={
                        'User-Agent': USER_AGENT,
                        'Accept': 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1',
                    },
                )
                response = await client.send(request, stream=True)
                try:
                    location = response.headers.get('location')
                    if response.status_code in _REDIRECT_STATUSES and location:
                        redirects.append(str(current))
                        if len(redirects) > max_redirects:
                            return _failed(
                                url, 'error', f'more than {max_redirects} redirects', redirects, str(current)
                            )
                        current = current.join(location)
                        continue
                    body, truncated = await _read_body(response, max_bytes)
                finally:
                    await response.aclose()
                break
    except AddressRefused as e:
        return _failed(url, 'refused', f'not fetched: {e.reason}', redirects, str(current))
    except (TimeoutError, httpx2.TimeoutException):
        return _failed(url, 'timeout', f'no complete answer within {timeout:g} s', redirects, str(current))
    except (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError, ValueError) as e:
        return _failed(url, 'error', f'{type(e).__name__}: {e}', redirects, str(current))

    status = response.status_code
    liveness, reasons = _liveness_of(url, current, status, redirects)
    if truncated:
        reasons.append(f'body cut at {max_bytes} bytes')
    return PageSnapshot(
        url=url,
        final_url=str(current),
        status=status,
        liveness=liveness,
        captured_at=datetime.now(UTC),
        body=body,
        content_type=response.headers.get('content-type'),
        content_hash=_hash(body),
        truncated=truncated,
        redirects=redirects,
        reason='; '.join(reasons) or None,
    )


async def capture(
    urls: Iterable[str],
    *,
    store: SnapshotStore | None = None,
    timeout: float = 15.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_redirects: int = 5,
    concurrency: int = 8,
    transport: httpx2.AsyncBaseTransport | None = None,
    allow_hosts: Iterable[str] = (),
) -> list[PageSnapshot]:
    """Fetch each URL once (bare `GET`, see the module docstring) and return (and store) its snapshot.

    Never raises for a bad page: timeouts, dead links, redirect loops and oversized bodies become snapshots
    with the matching `liveness` and a `reason`.

    Only public addresses are fetched from: a URL, or any redirect on its way, that leads to a loopback, private,
    link-local, unique-local, multicast, reserved or unspecified address (IPv4 or IPv6, in any spelling) becomes a
    `'refused'` snapshot and is never connected to. The check is made on the address the connection is opened to,
    after resolving the name once (see `pydantic_ai_citations.support._fetch`).

    Args:
        urls: The URLs to capture; duplicates are fetched once.
        store: Where to keep the snapshots, if anywhere.
        timeout: Seconds allowed per URL, all redirects and the body included.
        max_bytes: Bodies are cut after this many bytes (`truncated=True`).
        max_redirects: At most this many redirects are followed; one more is an `'error'`.
        concurrency: At most this many pages are fetched at once.
        transport: An `httpx2` transport, e.g. `httpx2.MockTransport` in tests. With your own transport, name
            resolution and connecting are the transport's: the package then refuses only what the URLs themselves
            name (internal IP literals in any spelling, `localhost`).
        allow_hosts: Host names (or IP literals) fetched from even when they resolve to an internal address, e.g.
            an intranet search tool's host. Compared case-insensitively, exactly (no wildcards).

    Returns:
        One snapshot per distinct URL, in the order given.

    Raises:
        UserError: `urls` is one str (not a list of them) or holds something that is not a str, or another argument
            is not of its type or range (all checked before anything is fetched).
    """
    unique = _capture_urls('capture', urls)
    _require_options('capture', store, timeout, max_bytes, max_redirects, concurrency, transport)
    allowed = normalise_hosts(_hosts('capture', allow_hosts))
    return await _capture(unique, store, timeout, max_bytes, max_redirects, concurrency, transport, allowed)


async def _capture(
    unique: list[str],
    store: SnapshotStore | None,
    timeout: float,
    max_bytes: int,
    max_redirects: int,
    concurrency: int,
    transport: httpx2.AsyncBaseTransport | None,
    allowed: frozenset[str],
) -> list[PageSnapshot]:
    """`capture` of these distinct URLs, its arguments checked (`allowed`: `normalise_hosts` of `allow_hosts`)."""
    results: dict[str, PageSnapshot] = {}
    limiter = anyio.CapacityLimiter(concurrency)
    async with httpx2.AsyncClient(
        transport=transport or GuardedTransport(allow_hosts=allowed),
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
    ) as client:

        async def one(url: str) -> None:
            async with limiter:
                results[url] = await _capture_one(
                    client,
                    url,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    max_redirects=max_redirects,
                    allow_hosts=allowed,
                )

        async with anyio.create_task_group() as tg:
            for url in unique:
                tg.start_soon(one, url)
    snapshots = [results[u] for u in unique]
    if store is not None:
        store.put_many(snapshots)
    return snapshots


def _capture_urls(where: str, urls: object) -> list[str]:
    """The distinct URLs of `urls`, in order, checked: a list (or other iterable) of str, not one str."""
    if isinstance(urls, (str, bytes)):
        raise UserError(f'{where}: `urls` must be a list of URLs, not one {type(urls).__name__}: pass [{urls!r}].')
    if not isinstance(urls, Iterable):
        raise UserError(f'{where}: `urls` must be a list of URLs (str), got {shown(urls)}.')
    given = list(cast('Iterable[object]', urls))
    for index, url in enumerate(given):  # (before they are told apart: an unhashable item is refused too)
        if not isinstance(url, str):
            raise UserError(f'{where}: every URL must be a str, got {shown(url)} (item {index}).')
    return list(dict.fromkeys(cast('list[str]', given)))


def _hosts(where: str, allow_hosts: object) -> list[str]:
    if isinstance(allow_hosts, (str, bytes)) or not isinstance(allow_hosts, Iterable):
        raise UserError(f'{where}: `allow_hosts` must be a list of host names (str), got {shown(allow_hosts)}.')
    hosts = list(cast('Iterable[object]', allow_hosts))
    for host in hosts:
        require(where, 'allow_hosts', host, str, 'a list of host names (str)')
    return cast('list[str]', hosts)


def _require_options(
    where: str,
    store: object,
    timeout: object,
    max_bytes: object,
    max_redirects: object,
    concurrency: object,
    transport: object,
) -> None:
    """`capture`'s other arguments, checked before anything is fetched."""
    require(where, 'store', store, (SnapshotStore, NoneType), 'a `SnapshotStore` or None')
    require(where, 'timeout', timeout, (int, float), 'a number of seconds')
    if not cast(float, timeout) > 0:  # (NaN too)
        raise UserError(f'{where}: `timeout` must be more than 0 seconds, got {timeout!r}.')
    require_at_least(where, 'max_bytes', max_bytes, 1, int, 'an int of at least 1')
    require_at_least(where, 'max_redirects', max_redirects, 0, int, 'an int of at least 0')
    require_at_least(where, 'concurrency', concurrency, 1, int, 'an int of at least 1')
    require(where, 'transport', transport, (httpx2.AsyncBaseTransport, NoneType), 'an `httpx2` async transport or None')


def web_urls(answer: CitedAnswer) -> list[str]:
    """The URLs of an answer's web sources, in source order."""
    return [s.url for s in answer.sources if s.kind == 'web' and s.url]


async def capture_answer(
    store: SnapshotStore,
    answer: CitedAnswer,
    *,
    timeout: float = 15.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_redirects: int = 5,
    concurrency: int = 8,
    transport: httpx2.AsyncBaseTransport | None = None,
    allow_hosts: Iterable[str] = (),
) -> list[PageSnapshot]:
    """Capture every web source of `answer` into `store` (see `capture` for the arguments).

    Raises:
        UserError: `store` is not a `SnapshotStore`, `answer` not a `CitedAnswer`, or another argument not what
            `capture` takes (all checked before anything is fetched).
    """
    require('capture_answer', 'store', store, SnapshotStore, 'a `SnapshotStore`')
    require('capture_answer', 'answer', answer, CitedAnswer, 'a `CitedAnswer`')
    _require_options('capture_answer', store, timeout, max_bytes, max_redirects, concurrency, transport)
    allowed = normalise_hosts(_hosts('capture_answer', allow_hosts))
    unique = list(dict.fromkeys(web_urls(answer)))
    return await _capture(unique, store, timeout, max_bytes, max_redirects, concurrency, transport, allowed)


def snapshot_urls(snapshots: Sequence[PageSnapshot]) -> dict[str, PageSnapshot]:
    """Snapshots keyed by cited URL (the last one wins)."""
    return {s.url: s for s in snapshots}
