"""The message batch of apache-iggy 0.9, sans-IO: how sends and polls carry messages.

A batch is a 256-byte header (partition id, base offset, base timestamp, origin
timestamp, batch length, batch checksum: u64 each, then the message count u32; the
rest zero) and one frame per message: a 48-byte header (checksum u64, id u128,
offset delta u32, timestamp delta u32, user headers length u32, payload length u32,
eight zero bytes), the payload, then the user headers. The checksums are XXH3-64;
mainstem neither checks nor computes them (TCP guards the bytes, and the SDK does not
verify a poll), so polled batches carry zeros there.

User headers differ from the 2024 map only in a kind byte before each key (2 for a
string key). Records keep the 2024 map, so both generations of client read them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Final

from mainstem.protocols.iggy.codec import (
    U32,
    ErrorCode,
    IggyError,
    Reader,
    T,
    encode_long_string,
    iter_headers,
    validate_headers,
)
from mainstem.protocols.iggy.records import Stored

BATCH_HEADER: Final = struct.Struct("<QQQQQQI")  # partition, base offset, base and origin
#                                           timestamps, length, checksum, message count
BATCH_HEADER_SIZE: Final = 256
FRAME_HEADER: Final = struct.Struct("<Q16sIIIIQ")  # checksum, id, offset and timestamp deltas,
#                                             headers length, payload length, reserved
_NO_RESERVED: Final[bytes] = bytes(8)
STRING_KEY: Final = 2


def read_batch(reader: Reader, make: Callable[[bytes, bytes, bytes], T]) -> list[T]:
    """`make(id as sent (u128 LE), headers as the 2024 map, payload)` of each message of
    the batch that ends a SEND_MESSAGES body. One tight loop over `bytes` (indexed and
    sliced natively when compiled): this is the hot path."""
    body = reader.remaining
    _, _, _, _, length, _, count = BATCH_HEADER.unpack(reader.take(BATCH_HEADER.size))
    if length != body:
        raise IggyError(ErrorCode.INVALID_FORMAT, f"batch length {length}, body {body} bytes")
    reader.take(BATCH_HEADER_SIZE - BATCH_HEADER.size)
    data = bytes(reader.buf)
    pos, end, frame_size = reader.pos, len(data), FRAME_HEADER.size
    made = []
    while pos < end:
        if end - pos < frame_size:
            raise IggyError(ErrorCode.INVALID_FORMAT, "truncated request")
        # FRAME_HEADER's fields, little-endian: the id at 8, the two lengths at 32 and 36.
        if data[pos + 40:pos + 48] != _NO_RESERVED:
            raise IggyError(ErrorCode.INVALID_FORMAT, "message frame reserved bytes are set")
        raw_id = data[pos + 8:pos + 24]
        headers_length = data[pos + 32] | data[pos + 33] << 8 | data[pos + 34] << 16 | \
            data[pos + 35] << 24
        length = data[pos + 36] | data[pos + 37] << 8 | data[pos + 38] << 16 | \
            data[pos + 39] << 24
        pos += frame_size + length
        payload = data[pos - length:pos]
        headers = b""
        if headers_length:
            headers = to_seed_headers(data[pos:pos + headers_length])
            pos += headers_length
        made.append(make(raw_id, headers, payload))
    if pos > end:
        raise IggyError(ErrorCode.INVALID_FORMAT, "truncated request")
    reader.pos = pos
    if len(made) != count:
        raise IggyError(ErrorCode.INVALID_MESSAGES_COUNT,
                        f"batch says {count} messages, holds {len(made)}")
    return made


def encode_batch(partition: int, timestamp_us: int, messages: list[Stored]) -> bytes:
    """One batch of messages stored at the same time, as a poll serves it."""
    frames: list[bytes | memoryview] = []
    base = messages[0][0]
    pack = FRAME_HEADER.pack
    size = BATCH_HEADER_SIZE
    for offset, raw_id, headers, payload in messages:
        if headers:
            headers = to_vsr_headers(headers)
            frames += (pack(0, raw_id, offset - base, 0, len(headers), len(payload), 0),
                       payload, headers)
        else:
            frames += (pack(0, raw_id, offset - base, 0, 0, len(payload), 0), payload)
        size += FRAME_HEADER.size + len(headers) + len(payload)
    header = bytearray(BATCH_HEADER_SIZE)
    BATCH_HEADER.pack_into(header, 0, partition, base, timestamp_us, timestamp_us, size, 0,
                           len(messages))
    return b"".join((header, *frames))


def to_seed_headers(raw: bytes) -> bytes:
    """key kind u8 + key + kind + value (this generation) to key + kind + value (2024)."""
    out = bytearray()
    reader = Reader(memoryview(raw))
    while reader.remaining:
        if reader.u8() != STRING_KEY:
            raise IggyError(ErrorCode.INVALID_FORMAT, "header keys must be strings")
        key = reader.take(reader.u32())
        kind = reader.u8()
        value = reader.take(reader.u32())
        out += U32.pack(len(key)) + key + bytes((kind,)) + U32.pack(len(value)) + value
    validate_headers(bytes(out))
    return bytes(out)


def to_vsr_headers(raw: bytes) -> bytes:
    return b"".join(_vsr_header(key, kind, value) for key, kind, value in iter_headers(raw))


def _vsr_header(key: str, kind: int, value: bytes) -> bytes:
    return bytes((STRING_KEY,)) + encode_long_string(key) + bytes((kind,)) + \
        U32.pack(len(value)) + value


def group_by_timestamp(chunks: Iterable[tuple[int, list[Stored]]]
                       ) -> list[tuple[int, list[Stored]]]:
    """Consecutive messages of one store time make one batch."""
    batches: list[tuple[int, list[Stored]]] = []
    for timestamp, messages in chunks:
        if batches and batches[-1][0] == timestamp:
            batches[-1][1].extend(messages)
        else:
            batches.append((timestamp, list(messages)))
    return batches
