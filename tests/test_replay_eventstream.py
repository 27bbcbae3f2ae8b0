"""The AWS event-stream decoder used to replay Bedrock `ConverseStream` bodies: every header type, every broken frame.

Frames are built by hand (not with the package's encoder, which writes string headers only) and cross-checked with
botocore's own event-stream parser, so the decoder is tested against the format, not against itself.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from pydantic_ai_citations._replay import EventStreamFormatError, decode_event_stream
from pydantic_ai_citations._replay._eventstream import encode_event_stream


def _botocore(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """Headers and payload of each message as botocore's (untyped) event-stream parser reads them."""
    buffer: Any = EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(message.headers), bytes(message.payload)) for message in buffer]


def _header(name: str, type_code: int, value: bytes) -> bytes:
    encoded = name.encode()
    return struct.pack('>B', len(encoded)) + encoded + bytes([type_code]) + value


def _frame(headers: bytes, payload: bytes) -> bytes:
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack('>II', total, len(headers))
    message = prelude + struct.pack('>I', zlib.crc32(prelude)) + headers + payload
    return message + struct.pack('>I', zlib.crc32(message))


UUID = uuid.UUID('12345678-1234-5678-1234-567812345678')
ALL_TYPES = b''.join(
    [
        _header('t', 0, b''),
        _header('f', 1, b''),
        _header('byte', 2, struct.pack('>b', -5)),
        _header('short', 3, struct.pack('>h', -300)),
        _header('int', 4, struct.pack('>i', 70000)),
        _header('long', 5, struct.pack('>q', 2**40)),
        _header('bytes', 6, struct.pack('>H', 3) + b'\x00\x01\x02'),
        _header('str', 7, struct.pack('>H', 5) + 'héllo'.encode()[:5]),
        _header('ts', 8, struct.pack('>q', 1_700_000_000_000)),
        _header('uuid', 9, UUID.bytes),
    ]
)


def test_every_header_type_decodes_like_botocore() -> None:
    data = _frame(ALL_TYPES, b'{"a":1}') + _frame(b'', b'')
    frames = decode_event_stream(data)
    assert [f.payload for f in frames] == [b'{"a":1}', b'']
    headers = frames[0].headers
    assert headers == {
        't': True,
        'f': False,
        'byte': -5,
        'short': -300,
        'int': 70000,
        'long': 2**40,
        'bytes': b'\x00\x01\x02',
        'str': 'héll',
        'ts': 1_700_000_000_000,
        'uuid': UUID.bytes,
    }
    reference = _botocore(data)
    assert [payload for _, payload in reference] == [f.payload for f in frames]
    ref_headers = reference[0][0]
    # botocore turns the timestamp and uuid into richer objects; every other value is the same.
    assert {k: v for k, v in ref_headers.items() if k not in ('ts', 'uuid')} == {
        k: v for k, v in headers.items() if k not in ('ts', 'uuid')
    }


def test_encoder_output_round_trips_through_botocore() -> None:
    data = encode_event_stream([('contentBlockDelta', {'delta': {'text': 'hi'}}), ('messageStop', {})])
    frames = decode_event_stream(data)
    assert [f.headers[':event-type'] for f in frames] == ['contentBlockDelta', 'messageStop']
    assert [payload for _, payload in _botocore(data)] == [f.payload for f in frames]


def _with_crcs_fixed(prelude_total: int, headers_length: int, rest: bytes) -> bytes:
    prelude = struct.pack('>II', prelude_total, headers_length)
    message = prelude + struct.pack('>I', zlib.crc32(prelude)) + rest
    return message + struct.pack('>I', zlib.crc32(message))


GOOD = _frame(_header('k', 7, struct.pack('>H', 1) + b'v'), b'{}')


@pytest.mark.parametrize(
    ('data', 'message'),
    [
        pytest.param(GOOD[:10], 'truncated frame prelude at byte 0', id='short-prelude'),
        pytest.param(GOOD + GOOD[:5], f'truncated frame prelude at byte {len(GOOD)}', id='short-second-prelude'),
        pytest.param(GOOD[:8] + b'\x00\x00\x00\x00' + GOOD[12:], 'prelude checksum mismatch', id='prelude-crc'),
        pytest.param(_with_crcs_fixed(16, 10, b''), 'inconsistent frame lengths at byte 0', id='lengths'),
        pytest.param(GOOD[:-1], 'truncated frame at byte 0', id='truncated'),
        pytest.param(GOOD[:-1] + bytes([GOOD[-1] ^ 1]), 'message checksum mismatch', id='message-crc'),
        pytest.param(_frame(_header('k', 42, b''), b''), 'unknown header type 42', id='unknown-type'),
        pytest.param(
            _frame(_header('k', 7, struct.pack('>H', 9) + b'abc'), b''), "truncated header 'k'", id='short-string'
        ),
        pytest.param(_frame(_header('k', 4, b'\x00'), b''), 'malformed headers in frame at byte 0', id='short-int'),
        pytest.param(_frame(b'\x05ab', b''), 'malformed headers', id='short-name'),
        pytest.param(_frame(b'\x01\xff\x07\x00\x00', b''), 'malformed headers', id='bad-utf8-name'),
    ],
)
def test_broken_frames_are_reported_with_their_offset(data: bytes, message: str) -> None:
    with pytest.raises(EventStreamFormatError, match=message):
        decode_event_stream(data)


def test_empty_input_is_no_frames() -> None:
    assert decode_event_stream(b'') == []
