"""Host names of cited URLs, normalised one way for display (`_render`) and for lookups (`_store`)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

GROUNDING_HOST = 'vertexaisearch.cloud.google.com'
"""Google's grounding redirector: Gemini cites every web page through it."""
GROUNDING_PATH = '/grounding-api-redirect/'

_PLAIN_HOST_RE = re.compile(r'https?://([A-Za-z0-9.-]+)(?:[/?#]|\Z)')
"""A URL whose host `urlsplit` reads as it is: plain scheme, no user, port, brackets, spaces or other characters."""
_DOMAIN_RE = re.compile(r'(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]')


def bare_host(host: str) -> str:
    """`host` lower-cased, without surrounding spaces, a trailing dot or a leading `www.`."""
    host = host.lower().strip().rstrip('.')
    return host[4:] if host.startswith('www.') else host


def url_host(url: str) -> str | None:
    """The bare host of `url` (see `bare_host`), or `None` when it has none or does not parse."""
    plain = _PLAIN_HOST_RE.match(url)
    if plain is not None:  # most cited URLs: the host `urlsplit` finds, without its work (a store indexes each URL)
        return bare_host(plain[1]) or None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if host and ':' in host:  # an IPv6 address (in brackets in the URL): one spelling of it
        return ipv6_host(host)
    return (bare_host(host) or None) if host else None


def host_spellings(host: str) -> list[str]:
    """`host` and, for an internationalised domain name, its other spellings (pages link any of them).

    The other spelling of an ASCII name (`xn--mnchen-3ya.de`) is its Unicode one (`münchen.de`), and of a Unicode
    name its ASCII ones: as IDNA 2008 writes it (registries and browsers: `faß.de` is `xn--fa-hia.de`) and, where
    that differs, as IDNA 2003 did (Python's `idna` codec: `fass.de`).
    """
    import idna  # (on first use: its tables are large)

    found = [host]
    try:
        if not host.isascii():
            found.append(idna.encode(host, uts46=True).decode('ascii'))
        elif 'xn--' in host:
            found.append(idna.decode(host))
    except (idna.IDNAError, UnicodeError):  # (not a name IDNA 2008 converts: a symbol, a label too long)
        pass
    try:
        if not host.isascii():
            found.append(host.encode('idna').decode('ascii'))
        elif 'xn--' in host:
            found.append(host.encode('ascii').decode('idna'))
    except UnicodeError:  # (not a name IDNA 2003 converts)
        pass
    return list(dict.fromkeys(spelling for spelling in map(bare_host, found) if spelling))


def ipv6_host(text: str) -> str | None:
    """The IPv6 address `text` (with or without brackets) in its compressed spelling, or `None` if it is not one."""
    try:
        return ipaddress.IPv6Address(text.strip().removeprefix('[').removesuffix(']')).compressed
    except ValueError:
        return None


def is_grounding_redirect(url: str) -> bool:
    """Whether `url` is a Google grounding redirect (opaque: the page it leads to is not in it)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.hostname == GROUNDING_HOST and parts.path.startswith(GROUNDING_PATH)


def title_domain(title: str | None) -> str | None:
    """The domain a source title names (Gemini titles a grounding redirect with its page's domain), or `None`."""
    if not title:
        return None
    host = bare_host(title)
    return host if _DOMAIN_RE.fullmatch(host) else None


def host_key(host: str) -> str:
    """`host` as an index key: its labels last to first, each followed by a dot.

    `docs.pydantic.dev` gives `dev.pydantic.docs.`. Byte-ordered, the keys of the hosts under a domain follow the
    domain's own key and start with it: one range of keys (`domain_range`) holds a domain and everything under it.
    """
    return '.'.join(reversed(host.split('.'))) + '.'


def key_host(key: str) -> str:
    """The host a `host_key` is of: `dev.pydantic.docs.` gives `docs.pydantic.dev`."""
    return '.'.join(reversed(key.removesuffix('.').split('.')))


def domain_range(domain: str) -> tuple[str, str] | None:
    """The `host_key`s of `domain` and of every host under it, as the byte range `[low, high)`.

    `None` when no other host is under `domain`: an IP address (no top-level domain is all digits) or a one-label
    host (a top-level domain alone is no domain to search under) is only itself, its `host_key`.
    """
    labels = domain.split('.')
    if ':' in domain or len(labels) < 2 or labels[-1].isdigit():
        return None
    low = host_key(domain)
    return low, low[:-1] + '/'  # (`/` is the byte after `.`)
