"""How an Iggy message is stored as a log record (the one place that says so).

A record is an AMQP 1.0 message, so the stream protocol (rstream) and Spark read
Iggy messages like any other:

    application-properties  {"iggy-id": binary(16, u128 big-endian)
                             [, "iggy-headers": binary(Iggy header map, as sent)]}
    data                    the payload

The layout is fixed, so writing is a join of constant prefixes and reading is
a prefix check plus struct unpacks; records written by other protocols are
read with the generic AMQP 1.0 decoder (id 0, no headers, body as payload).
"""

from __future__ import annotations

import struct

from mainstem.formats.amqp10 import Amqp10DecodeError, message_body

_BE32 = struct.Struct(">I")
_ID_KEY = b"\xa1\x07iggy-id\xa0\x10"
_HEADERS_KEY = b"\xa1\x0ciggy-headers\xb0"
_APP_PROPS = b"\x00\x53\x74\xd1"
_DATA = b"\x00\x53\x75\xb0"
# map32 size counts the 4-byte count field and the items.
_PLAIN_PREFIX = _APP_PROPS + struct.pack(">II", 4 + len(_ID_KEY) + 16, 2) + _ID_KEY
_ID_END = len(_PLAIN_PREFIX) + 16


def encode_record(message_id: int, headers: bytes, payload: bytes | memoryview) -> bytes:
    raw_id = message_id.to_bytes(16, "big")
    if not headers:
        return b"".join((_PLAIN_PREFIX, raw_id, _DATA, _BE32.pack(len(payload)), payload))
    size = 4 + len(_ID_KEY) + 16 + len(_HEADERS_KEY) + 4 + len(headers)
    return b"".join((_APP_PROPS, struct.pack(">II", size, 4), _ID_KEY, raw_id, _HEADERS_KEY,
                     _BE32.pack(len(headers)), headers, _DATA, _BE32.pack(len(payload)),
                     payload))


def decode_record(record: memoryview) -> tuple[int, bytes, memoryview]:
    """(id, headers, payload) of a stored record."""
    if record[: len(_APP_PROPS)] == _APP_PROPS and record[12:_ID_END - 16] == _ID_KEY:
        message_id = int.from_bytes(record[_ID_END - 16:_ID_END], "big")
        pos = _ID_END
        headers = b""
        if record[pos:pos + len(_HEADERS_KEY)] == _HEADERS_KEY:
            pos += len(_HEADERS_KEY)
            (length,) = _BE32.unpack_from(record, pos)
            headers = bytes(record[pos + 4:pos + 4 + length])
            pos += 4 + length
        if record[pos:pos + 4] == _DATA:
            (length,) = _BE32.unpack_from(record, pos + 4)
            return message_id, headers, record[pos + 8:pos + 8 + length]
    try:
        return 0, b"", message_body(record)
    except Amqp10DecodeError:
        return 0, b"", record
