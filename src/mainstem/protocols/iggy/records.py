"""How an Iggy message is stored as a log record (the one place that says so).

A record is an AMQP 1.0 message, so the stream protocol (rstream) and Spark read
Iggy messages like any other:

    application-properties  {"iggy-id": binary(16, u128 big-endian)
                             [, "iggy-headers": binary(Iggy header map, as sent)]}
    data                    the payload

The layout is fixed, so writing is a join of constant prefixes and reading is
a prefix check plus struct unpacks; records written by other protocols are
read with the generic AMQP 1.0 decoder (id 0, no headers, body as payload).
Sends and polls handle a thousand messages at a time, so both ways have one loop
over a batch with a single struct call per message for the common record without
headers: sends build the chunk's Osiris entries directly, polls read them back from
a chunk's bytes.
"""

from __future__ import annotations

import itertools
import struct
import time
from typing import Final

from mainstem.formats.amqp10 import Amqp10DecodeError, message_body
from mainstem.formats.chunk import Chunk
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_BIT

# Final: compiled, these are C constants, not a lookup in the module's dict per message.
_BE32: Final = struct.Struct(">I")
_ID_KEY: Final[bytes] = b"\xa1\x07iggy-id\xa0\x10"
_HEADERS_KEY: Final[bytes] = b"\xa1\x0ciggy-headers\xb0"
_APP_PROPS: Final[bytes] = b"\x00\x53\x74\xd1"
_DATA: Final[bytes] = b"\x00\x53\x75\xb0"
# map32 size counts the 4-byte count field and the items.
_PLAIN_PREFIX: Final[bytes] = _APP_PROPS + struct.pack(">II", 4 + len(_ID_KEY) + 16, 2) + _ID_KEY
_ID_START: Final = len(_PLAIN_PREFIX)
_ID_END: Final = _ID_START + 16
_PAYLOAD_AT: Final = _ID_END + len(_DATA) + 4  # of a record without headers
# A record without headers as its Osiris entry, up to the payload: entry length, prefix,
# id, data section code, payload length.
_PLAIN_ENTRY: Final = struct.Struct(f">I{len(_PLAIN_PREFIX)}s16s{len(_DATA)}sI")
NO_ID: Final[bytes] = bytes(16)  # a message sent with id 0: the server gives it one

# A message polled back: offset, id as the wire carries it (u128 LE), the 2024 header
# map, payload.
Stored = tuple[int, bytes, bytes, bytes | memoryview]

_ids = itertools.count(time.time_ns() << 32)


def unique_id() -> int:
    """Server-assigned message id: unique within this process and across restarts."""
    return next(_ids)


def entry(raw_id: bytes, headers: bytes, payload: bytes | memoryview) -> bytes:
    """A sent message (id as sent, u128 LE) as the simple Osiris entry of its record."""
    if raw_id == NO_ID:
        raw_id = unique_id().to_bytes(16, "little")
    if not headers:
        return _PLAIN_ENTRY.pack(_PAYLOAD_AT + len(payload), _PLAIN_PREFIX, raw_id[::-1],
                                 _DATA, len(payload)) + payload
    record = encode_record(int.from_bytes(raw_id, "little"), headers, payload)
    return SIMPLE_ENTRY.pack(len(record)) + record


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



def read_chunk(chunk: Chunk, start: int, count: int, max_bytes: int) -> tuple[list[Stored], int]:
    """Up to `count` messages of a chunk from offset `start`, stopping once their payloads
    reach `max_bytes`; and the payload bytes taken. Records written without headers are
    read in place, their fixed parts compared and sliced (natively when compiled); others
    are decoded."""
    data = bytes(chunk.data)
    out: list[Stored] = []
    offset, pos, size = chunk.chunk_id, 0, 0
    sub_batch, length_size = SUB_BATCH_BIT, SIMPLE_ENTRY.size  # locals: no lookup per entry
    for _ in range(chunk.header.num_entries):
        if len(out) == count or size >= max_bytes:
            break
        length = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
        if length & sub_batch:  # written by a stream publisher: the log's own walk
            return _decoded(chunk, max(start, offset), count, max_bytes, out, size)
        record, end = pos + length_size, pos + length_size + length
        if offset >= start:
            at = record + _PAYLOAD_AT - 4  # the payload's length
            if length >= _PAYLOAD_AT and data[record:record + _ID_START] == _PLAIN_PREFIX \
                    and data[record + _ID_END:at] == _DATA and _PAYLOAD_AT + (
                        data[at] << 24 | data[at + 1] << 16 | data[at + 2] << 8 | data[at + 3]
                    ) == length:
                out.append((offset, data[record + _ID_START:record + _ID_END][::-1], b"",
                            data[record + _PAYLOAD_AT:end]))
            else:
                out.append(_stored(offset, memoryview(data)[record:end]))
            size += len(out[-1][3])
        pos = end
        offset += 1
    return out, size


def _decoded(chunk: Chunk, start: int, count: int, max_bytes: int, out: list[Stored],
             size: int) -> tuple[list[Stored], int]:
    for offset, record in chunk.records():
        if len(out) == count or size >= max_bytes:
            break
        if offset >= start:
            out.append(_stored(offset, record))
            size += len(out[-1][3])
    return out, size


def _stored(offset: int, record: memoryview) -> Stored:
    message_id, headers, payload = decode_record(record)
    return offset, message_id.to_bytes(16, "little"), headers, payload
