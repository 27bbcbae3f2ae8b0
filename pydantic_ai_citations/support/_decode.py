"""Page bodies (bytes) to text, with the charset found the way browsers do.

Charset from the `Content-Type` header, then a BOM, then `<meta charset>`,
then UTF-8, then detection; binary bodies and oversized pages are reported, never a crash.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

__all__ = ('DEFAULT_MAX_BYTES', 'DecodedPage', 'decode_body', 'charset_from_content_type')

DEFAULT_MAX_BYTES = 5_000_000
"""Pages are cut at this many bytes (5 MB) before parsing; the cut is reported."""

_TEXT_TYPES = ('text/', 'application/xhtml', 'application/xml', 'application/json', 'application/ld+json')
_BINARY_MAGIC = (
    b'%PDF-',
    b'\x89PNG',
    b'GIF8',
    b'\xff\xd8\xff',
    b'PK\x03\x04',
    b'\x1f\x8b',
    b'RIFF',
    b'OggS',
    b'\x00\x00\x01\x00',
)


@dataclass(frozen=True)
class DecodedPage:
    """A page body as text, or why it could not be read as text."""

    text: str | None
    """The decoded text, `None` when the body is not text (binary)."""
    encoding: str | None
    """The codec used (`None` when not decoded)."""
    truncated: bool = False
    """Whether the body was cut at the size cap before decoding."""
    reason: str | None = None
    """Why `text` is `None`, or what was unusual (a replaced encoding, a cut)."""


def charset_from_content_type(content_type: str | None) -> str | None:
    """The `charset` parameter of a `Content-Type` value, if any."""
    if not content_type:
        return None
    for param in content_type.split(';')[1:]:
        name, _, value = param.partition('=')
        if name.strip().lower() == 'charset':
            return value.strip().strip('"\'') or None
    return None


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _meta_charset(head: bytes) -> str | None:
    """`<meta charset>` or `<meta http-equiv="content-type" content="...; charset=...">` in the first bytes."""
    tree = LexborHTMLParser(head.decode('latin-1'))
    for node in tree.css('meta'):
        attrs = node.attributes
        charset = attrs.get('charset')
        if charset:
            return charset
        if (attrs.get('http-equiv') or '').lower() == 'content-type':
            found = charset_from_content_type(attrs.get('content'))
            if found:
                return found
    return None


def _guess(body: bytes) -> tuple[str, str]:
    """A codec for a body that is not UTF-8 and declares nothing usable."""
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - charset-normalizer is optional
        pass
    else:
        best = from_bytes(body[:200_000]).best()
        if best is not None and _codec(best.encoding):
            return best.encoding, f'encoding detected as {best.encoding}'
    # Without a detector: single-byte Cyrillic pages have most letters above 0x7f, Western pages few.
    high = sum(1 for b in body[:100_000] if b >= 0xC0)
    low = sum(1 for b in body[:100_000] if 0x41 <= b <= 0x7A)
    if high > low:
        return 'cp1251', 'encoding guessed as cp1251'
    return 'cp1252', 'encoding guessed as cp1252'


def decode_body(body: bytes, content_type: str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> DecodedPage:
    """Decode a page body for passage splitting.

    Args:
        body: The raw body.
        content_type: The `Content-Type` header, if known (its charset wins when it decodes the body).
        max_bytes: Bodies longer than this are cut first (`truncated=True`).
    """
    truncated = len(body) > max_bytes
    if truncated:
        body = body[:max_bytes]
    notes: list[str] = [f'page cut at {max_bytes} bytes'] if truncated else []
    main_type = (content_type or '').split(';')[0].strip().lower()
    if main_type and not main_type.startswith(_TEXT_TYPES):
        return DecodedPage(None, None, truncated, f'not a text page (content type {main_type!r})')
    if body.startswith(_BINARY_MAGIC):
        return DecodedPage(None, None, truncated, 'not a text page (binary body)')
    for bom, name in ((codecs.BOM_UTF8, 'utf-8-sig'), (codecs.BOM_UTF16_LE, 'utf-16'), (codecs.BOM_UTF16_BE, 'utf-16')):
        if body.startswith(bom):
            return DecodedPage(body.decode(name, 'replace'), name, truncated, '; '.join(notes) or None)
    if b'\x00' in body[:4096]:
        return DecodedPage(None, None, truncated, 'not a text page (binary body)')
    declared = [charset_from_content_type(content_type), _meta_charset(body[:4096])]
    for name in declared:
        codec = _codec(name)
        if codec is None:
            if name:
                notes.append(f'unknown charset {name!r}')
            continue
        try:
            return DecodedPage(body.decode(codec), codec, truncated, '; '.join(notes) or None)
        except UnicodeDecodeError:
            if truncated and codec.startswith('utf'):
                # The cut may split a multi-byte character; drop the broken tail only.
                return DecodedPage(body.decode(codec, 'ignore'), codec, truncated, '; '.join(notes) or None)
            notes.append(f'declared charset {name!r} does not decode the page')
    try:
        return DecodedPage(body.decode('utf-8'), 'utf-8', truncated, '; '.join(notes) or None)
    except UnicodeDecodeError as e:
        if truncated and e.start >= len(body) - 4:
            return DecodedPage(body.decode('utf-8', 'ignore'), 'utf-8', truncated, '; '.join(notes) or None)
    codec, note = _guess(body)
    notes.append(note)
    return DecodedPage(body.decode(codec, 'replace'), codec, truncated, '; '.join(notes))
