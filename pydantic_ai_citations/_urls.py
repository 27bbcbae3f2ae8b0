"""Host names of cited URLs, normalised one way for display (`_render`) and for lookups (`_store`)."""

from __future__ import annotations

from urllib.parse import urlsplit


def bare_host(host: str) -> str:
    """`host` lower-cased, without surrounding spaces, a trailing dot or a leading `www.`."""
    host = host.lower().strip().rstrip('.')
    return host[4:] if host.startswith('www.') else host


def url_host(url: str) -> str | None:
    """The bare host of `url` (see `bare_host`), or `None` when it has none or does not parse."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return (bare_host(host) or None) if host else None
