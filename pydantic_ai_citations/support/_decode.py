"""Page bodies (bytes) to text, with the charset found the way browsers do.

Charset from the `Content-Type` header, then a BOM, then `<meta charset>`,
then UTF-8, then detection; binary bodies and oversized pages are reported, never a crash.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from types import NoneType

from selectolax.lexbor import LexborHTMLParser

from .._checks import require, require_at_least

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


# The text encodings of the WHATWG Encoding Standard (what browsers decode pages with) as Python names, plus the few
# supersets Python has. Anything else Python can look up -- `base64`, `hex`, `rot13`, `zlib`, `bz2`, `uu`, `quopri`,
# `punycode`, `idna`, `unicode_escape`, `utf-7`, `undefined` -- is a transform, not a page encoding.
_WEB_CODECS = frozenset(
    {
        'utf-8', 'utf-8-sig', 'utf-16', 'utf-16-le', 'utf-16-be', 'utf-32', 'ascii', 'cp866', 'koi8-r', 'koi8-u',
        'mac-roman', 'mac-cyrillic', 'cp874', 'tis-620', 'gbk', 'gb2312', 'gb18030', 'big5', 'big5hkscs', 'cp950',
        'euc_jp', 'euc_jis_2004', 'iso2022_jp', 'shift_jis', 'cp932', 'shift_jis_2004', 'euc_kr', 'cp949',
        *(f'iso8859-{n}' for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16)),
        *(f'cp{n}' for n in range(1250, 1259)),
    }
)  # fmt: skip
# WHATWG labels Python spells otherwise.
_LABELS = {'x-mac-cyrillic': 'mac-cyrillic', 'x-mac-roman': 'mac-roman', 'iso-8859-8-i': 'iso8859-8'}
# Python codecs for which browsers use another: WHATWG decodes the labels of ISO-8859-1 and ASCII as windows-1252,
# ISO-8859-9 as windows-1254 and ISO-8859-11 / TIS-620 as windows-874 (supersets: the same text, and more bytes read).
_AS_BROWSERS = {
    'iso8859-1': 'cp1252',
    'ascii': 'cp1252',
    'iso8859-9': 'cp1254',
    'iso8859-11': 'cp874',
    'tis-620': 'cp874',
}
_CP1252_C1 = {0xDC81: 0x81, 0xDC8D: 0x8D, 0xDC8F: 0x8F, 0xDC90: 0x90, 0xDC9D: 0x9D}
"""The five bytes Python's cp1252 leaves undefined, read as WHATWG's windows-1252 reads them (the C1 controls)."""
_UTF16 = frozenset({'utf-16', 'utf-16-le', 'utf-16-be'})
_FEW_BAD_BYTES = 1 / 1000
"""A declared charset that cannot decode at most this share of a page's bytes is used, the bytes replaced (browsers
replace them all); one that fails more often is taken as wrong, and the next way to find the charset is tried."""


class _NotText(Exception):
    """A declared charset that Python knows but that is not a page encoding."""


def _codec(name: str | None) -> str | None:
    """The Python codec for a declared charset; `None` for an unknown name; `_NotText` for a transform codec."""
    if not name:
        return None
    label = name.strip().lower()
    try:
        codec = codecs.lookup(_LABELS.get(label, label)).name
    except (LookupError, ValueError):  # ValueError: a name with a NUL byte
        return None
    if codec not in _WEB_CODECS:
        raise _NotText(name)
    return _AS_BROWSERS.get(codec, codec)


def _decoded(body: bytes, codec: str, truncated: bool) -> tuple[str | None, str | None]:
    """`body` in `codec` as a browser reads it (text, note), or `(None, None)` when the codec fails too often.

    A multi-byte character split by the size cap at the very end is dropped; a few bytes the codec cannot read are
    replaced (noted); windows-1252 reads its five undefined bytes as the C1 controls.
    """
    if codec == 'cp1252':
        return body.decode(codec, 'surrogateescape').translate(_CP1252_C1), None
    try:
        return body.decode(codec), None
    except UnicodeDecodeError as e:
        if truncated and e.start >= len(body) - 4:
            try:
                return body[: e.start].decode(codec), None  # the cut split the last character
            except UnicodeDecodeError:
                pass
    text = body.decode(codec, 'replace')
    bad = text.count('\ufffd')
    if bad > max(3, len(body) * _FEW_BAD_BYTES):
        return None, None
    return text, f'{bad} byte sequence(s) not valid in {codec} replaced'


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


def _header_utf16(header: str | None) -> str | None:
    """The UTF-16 codec a `Content-Type` charset names, if it names one (a `<meta>` cannot: browsers ignore it)."""
    try:
        codec = _codec(header)
    except _NotText:
        return None
    return codec if codec in _UTF16 else None


def _detected(name: str) -> bool:
    try:
        return _codec(name) is not None
    except _NotText:
        return False


def _guess(body: bytes) -> tuple[str, str]:
    """A codec for a body that is not UTF-8 and declares nothing usable."""
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - charset-normalizer is optional
        pass
    else:
        best = from_bytes(body[:200_000]).best()
        if best is not None and _detected(best.encoding):
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

    Raises:
        UserError: `body` is not bytes, `content_type` not a str or None, or `max_bytes` not an int of at least 1.
    """
    require('decode_body', 'body', body, (bytes, bytearray), 'the raw body as bytes (a str is decoded already)')
    require('decode_body', 'content_type', content_type, (str, NoneType), 'the Content-Type header (str) or None')
    require_at_least('decode_body', 'max_bytes', max_bytes, 1, int, 'an int of at least 1')
    body = bytes(body)
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
    header = charset_from_content_type(content_type)
    utf16 = _header_utf16(header)
    if b'\x00' in body[:4096] and utf16 is None:  # (UTF-16 text holds NUL bytes: only the header can declare it)
        return DecodedPage(None, None, truncated, 'not a text page (binary body)')
    declared = [header] if utf16 is not None else [header, _meta_charset(body[:4096])]
    for name in declared:
        try:
            codec = _codec(name)
        except _NotText:
            # Not a page encoding (a transform such as base64 or zlib): the page cannot honestly be read as text.
            return DecodedPage(None, None, truncated, f'declared charset {name!r} is not a text encoding')
        if codec is None:
            if name:
                # Browsers ignore a label they do not know and go on: so does this (noted in the reason).
                notes.append(f'unknown charset {name!r}')
            continue
        if codec == 'utf-16':  # no BOM (checked before): WHATWG's utf-16 is little-endian
            codec = 'utf-16-le'
        text, note = _decoded(body, codec, truncated)
        if text is not None:
            return DecodedPage(text, codec, truncated, '; '.join([*notes, *([note] if note else [])]) or None)
        notes.append(f'declared charset {name!r} does not decode the page')
    try:
        return DecodedPage(body.decode('utf-8'), 'utf-8', truncated, '; '.join(notes) or None)
    except UnicodeDecodeError as e:
        if truncated and e.start >= len(body) - 4:
            return DecodedPage(body.decode('utf-8', 'ignore'), 'utf-8', truncated, '; '.join(notes) or None)
    codec, note = _guess(body)
    notes.append(note)
    return DecodedPage(body.decode(codec, 'replace'), codec, truncated, '; '.join(notes))
