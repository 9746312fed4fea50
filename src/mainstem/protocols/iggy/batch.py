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
from collections.abc import Iterable
from dataclasses import dataclass

from mainstem.protocols.iggy.codec import (
    U32,
    ErrorCode,
    IggyError,
    Reader,
    SentMessage,
    encode_long_string,
    iter_headers,
    validate_headers,
)

BATCH_HEADER = struct.Struct("<QQQQQQI")  # partition, base offset, base and origin
#                                           timestamps, length, checksum, message count
BATCH_HEADER_SIZE = 256
FRAME_HEADER = struct.Struct("<Q16sIIIIQ")  # checksum, id, offset and timestamp deltas,
#                                             headers length, payload length, reserved
STRING_KEY = 2


@dataclass(frozen=True, slots=True)
class PolledMessage:
    offset: int
    id: int
    headers: bytes  # the 2024 header map
    payload: bytes | memoryview


def read_batch(reader: Reader) -> list[SentMessage]:
    """The batch that ends a SEND_MESSAGES body, its headers turned into the 2024 map."""
    body = reader.remaining
    _, _, _, _, length, _, count = BATCH_HEADER.unpack(reader.take(BATCH_HEADER.size))
    if length != body:
        raise IggyError(ErrorCode.INVALID_FORMAT, f"batch length {length}, body {body} bytes")
    reader.take(BATCH_HEADER_SIZE - BATCH_HEADER.size)
    messages = []
    while reader.remaining:
        _, raw_id, _, _, headers_length, length, reserved = FRAME_HEADER.unpack(
            reader.take(FRAME_HEADER.size))
        if reserved:
            raise IggyError(ErrorCode.INVALID_FORMAT, "message frame reserved bytes are set")
        payload = reader.take(length)
        headers = to_seed_headers(bytes(reader.take(headers_length)))
        messages.append(SentMessage(int.from_bytes(raw_id, "little"), headers, payload))
    if len(messages) != count:
        raise IggyError(ErrorCode.INVALID_MESSAGES_COUNT,
                        f"batch says {count} messages, holds {len(messages)}")
    return messages


def encode_batch(partition: int, timestamp_us: int, messages: list[PolledMessage]) -> bytes:
    """One batch of messages stored at the same time, as a poll serves it."""
    frames = bytearray()
    base = messages[0].offset
    for m in messages:
        headers = to_vsr_headers(m.headers)
        frames += FRAME_HEADER.pack(0, m.id.to_bytes(16, "little"), m.offset - base, 0,
                                    len(headers), len(m.payload), 0)
        frames += m.payload
        frames += headers
    header = bytearray(BATCH_HEADER_SIZE)
    BATCH_HEADER.pack_into(header, 0, partition, base, timestamp_us, timestamp_us,
                           BATCH_HEADER_SIZE + len(frames), 0, len(messages))
    return bytes(header) + frames


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


def group_by_timestamp(messages: Iterable[tuple[int, PolledMessage]]
                       ) -> list[tuple[int, list[PolledMessage]]]:
    """Consecutive messages of one store time make one batch."""
    batches: list[tuple[int, list[PolledMessage]]] = []
    for timestamp, message in messages:
        if batches and batches[-1][0] == timestamp:
            batches[-1][1].append(message)
        else:
            batches.append((timestamp, [message]))
    return batches
