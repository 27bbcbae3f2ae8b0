"""The AWS event-stream framing (Bedrock `ConverseStream` bodies): a small decoder and encoder.

Each message is `total_length (4) | headers_length (4) | prelude_crc (4) | headers | payload | message_crc (4)`,
big-endian, with CRC32 checksums. Written here rather than borrowed from botocore's private `EventStreamBuffer`
so a truncated or corrupted frame is reported with its offset instead of being silently left in a buffer.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

from pydantic import JsonValue

__all__ = ('EventStreamFrame', 'EventStreamFormatError', 'decode_event_stream', 'encode_event_stream')

_PRELUDE = 12
_MIN_MESSAGE = _PRELUDE + 4


class EventStreamFormatError(ValueError):
    """The bytes are not a well-formed AWS event stream."""


@dataclass(frozen=True)
class EventStreamFrame:
    """One decoded event-stream message."""

    headers: dict[str, str | int | bool | bytes]
    payload: bytes


def decode_event_stream(data: bytes) -> list[EventStreamFrame]:
    """Split `data` into frames, checking lengths and both CRCs.

    Raises:
        EventStreamFormatError: if a frame is truncated, its lengths are inconsistent, or a checksum fails.
    """
    frames: list[EventStreamFrame] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < _MIN_MESSAGE:
            raise EventStreamFormatError(f'truncated frame prelude at byte {offset}')
        total, headers_length = struct.unpack_from('>II', data, offset)
        (prelude_crc,) = struct.unpack_from('>I', data, offset + 8)
        if zlib.crc32(data[offset : offset + 8]) != prelude_crc:
            raise EventStreamFormatError(f'prelude checksum mismatch at byte {offset}')
        if total < _MIN_MESSAGE + headers_length:
            raise EventStreamFormatError(f'inconsistent frame lengths at byte {offset}')
        if offset + total > len(data):
            raise EventStreamFormatError(f'truncated frame at byte {offset}: needs {total} bytes')
        (message_crc,) = struct.unpack_from('>I', data, offset + total - 4)
        if zlib.crc32(data[offset : offset + total - 4]) != message_crc:
            raise EventStreamFormatError(f'message checksum mismatch at byte {offset}')
        headers_start = offset + _PRELUDE
        headers = _decode_headers(data[headers_start : headers_start + headers_length], offset)
        payload = data[headers_start + headers_length : offset + total - 4]
        frames.append(EventStreamFrame(headers=headers, payload=payload))
        offset += total
    return frames


_FIXED_SIZES = {2: ('>b', 1), 3: ('>h', 2), 4: ('>i', 4), 5: ('>q', 8), 8: ('>q', 8)}


def _decode_headers(raw: bytes, frame_offset: int) -> dict[str, str | int | bool | bytes]:
    headers: dict[str, str | int | bool | bytes] = {}
    pos = 0
    try:
        while pos < len(raw):
            name_length = raw[pos]
            name = raw[pos + 1 : pos + 1 + name_length].decode('utf-8')
            pos += 1 + name_length
            value_type = raw[pos]
            pos += 1
            value: str | int | bool | bytes
            if value_type in (0, 1):
                value = value_type == 0
            elif value_type in _FIXED_SIZES:
                fmt, size = _FIXED_SIZES[value_type]
                (value,) = struct.unpack_from(fmt, raw, pos)
                pos += size
            elif value_type in (6, 7):
                (length,) = struct.unpack_from('>H', raw, pos)
                chunk = raw[pos + 2 : pos + 2 + length]
                if len(chunk) != length:
                    raise EventStreamFormatError(f'truncated header {name!r} in frame at byte {frame_offset}')
                value = chunk.decode('utf-8') if value_type == 7 else chunk
                pos += 2 + length
            elif value_type == 9:
                value = raw[pos : pos + 16]
                pos += 16
            else:
                raise EventStreamFormatError(f'unknown header type {value_type} in frame at byte {frame_offset}')
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise EventStreamFormatError(f'malformed headers in frame at byte {frame_offset}: {e}') from e
    return headers


def encode_event_stream(events: list[tuple[str, JsonValue]]) -> bytes:
    """Encode `(event type, JSON payload)` pairs as AWS event-stream messages (what Bedrock ConverseStream sends).

    Each message: total length and headers length (big-endian uint32), the CRC32 of those 8 bytes, the headers
    (`:event-type`, `:content-type`, `:message-type` as string headers, type 7), the JSON payload, and the CRC32 of
    everything before it.
    """
    out = bytearray()
    for kind, payload in events:
        headers = b''.join(
            _string_header(name, value)
            for name, value in (
                (':event-type', kind),
                (':content-type', 'application/json'),
                (':message-type', 'event'),
            )
        )
        body = json.dumps(payload, separators=(',', ':')).encode('utf-8')
        total = 12 + len(headers) + len(body) + 4
        prelude = struct.pack('>II', total, len(headers))
        message = prelude + struct.pack('>I', zlib.crc32(prelude)) + headers + body
        out += message + struct.pack('>I', zlib.crc32(message))
    return bytes(out)


def _string_header(name: str, value: str) -> bytes:
    name_bytes, value_bytes = name.encode('utf-8'), value.encode('utf-8')
    return struct.pack('>B', len(name_bytes)) + name_bytes + b'\x07' + struct.pack('>H', len(value_bytes)) + value_bytes
