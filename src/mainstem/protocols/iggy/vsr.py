"""Iggy's replicated (VSR) framing, sans-IO: the 256-byte headers of apache-iggy 0.9.

Every frame is a 256-byte header and a body. The header opens with checksum, body
checksum and cluster (u128 each, zero from clients: mainstem neither sets nor checks
them), the frame size u32 at byte 48 and the command u8 at byte 60 (request 5, reply
8, eviction 13). The request and reply fields from byte 128 are those the Rust SDK
0.11 (wire protocol 0x2C00) sends and reads. A request names an operation: Register
(the login), Logout, a replicated write (the 2024 command it stands for is fixed by
the operation) or NonReplicated, which carries a 2024 command code at byte 196.
Replies to metadata writes, consumer-offset writes and Register open with a result
section: count u32, then count x (index u32, result u32), so [0] is success and
[1, 0, code] a refusal. Other replies carry a failure in the header's status field.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from mainstem.protocols.iggy.codec import U32, Code, ErrorCode, FramingError

HEADER_SIZE = 256
SIZE_OFFSET = 48
COMMAND_OFFSET = 60
PROTOCOL_VERSION = 0x2C00

# client, request checksum, timestamp, request number, operation, session, command code
REQUEST_FIELDS = struct.Struct("<16s16sQQB7xQ4xI")
# request checksum, context, client, op, commit, timestamp, request, operation, status
REPLY_FIELDS = struct.Struct("<16s16s16sQQQQB7xI")
# client, server protocol version and its minimum, then the reason in the last byte
EVICTION_FIELDS = struct.Struct("<16sII")
FIELDS_OFFSET = 128


class Command(enum.IntEnum):
    REQUEST = 5
    REPLY = 8
    EVICTION = 13


class Operation(enum.IntEnum):
    REGISTER = 1
    NON_REPLICATED = 2
    LOGOUT = 3
    CREATE_STREAM = 128
    DELETE_STREAM = 130
    CREATE_TOPIC = 132
    DELETE_TOPIC = 134
    CREATE_PARTITIONS = 136
    DELETE_PARTITIONS = 137
    CREATE_CONSUMER_GROUP = 139
    DELETE_CONSUMER_GROUP = 140
    JOIN_CONSUMER_GROUP = 148
    LEAVE_CONSUMER_GROUP = 149
    SEND_MESSAGES = 160
    STORE_CONSUMER_OFFSET = 161


class Eviction(enum.IntEnum):
    """Why a session ends (the reason byte of an eviction frame)."""

    INVALID_CREDENTIALS = 9
    INCOMPATIBLE_PROTOCOL = 14
    MALFORMED_LOGIN = 15


# The 2024 command each replicated operation stands for.
COMMANDS: dict[int, Code] = {
    Operation.CREATE_STREAM: Code.CREATE_STREAM,
    Operation.DELETE_STREAM: Code.DELETE_STREAM,
    Operation.CREATE_TOPIC: Code.CREATE_TOPIC,
    Operation.DELETE_TOPIC: Code.DELETE_TOPIC,
    Operation.CREATE_PARTITIONS: Code.CREATE_PARTITIONS,
    Operation.DELETE_PARTITIONS: Code.DELETE_PARTITIONS,
    Operation.CREATE_CONSUMER_GROUP: Code.CREATE_CONSUMER_GROUP,
    Operation.DELETE_CONSUMER_GROUP: Code.DELETE_CONSUMER_GROUP,
    Operation.JOIN_CONSUMER_GROUP: Code.JOIN_CONSUMER_GROUP,
    Operation.LEAVE_CONSUMER_GROUP: Code.LEAVE_CONSUMER_GROUP,
    Operation.SEND_MESSAGES: Code.SEND_MESSAGES,
    Operation.STORE_CONSUMER_OFFSET: Code.STORE_CONSUMER_OFFSET,
}
# A lookup of something absent answers with an empty body, which the SDK reads as None.
LOOKUPS = frozenset((Code.GET_STREAM, Code.GET_TOPIC, Code.GET_CONSUMER_GROUP))
ABSENT = frozenset((ErrorCode.STREAM_ID_NOT_FOUND, ErrorCode.STREAM_NAME_NOT_FOUND,
                    ErrorCode.TOPIC_ID_NOT_FOUND, ErrorCode.TOPIC_NAME_NOT_FOUND,
                    ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND))
METADATA_OPERATIONS = range(128, 150)
OFFSET_OPERATIONS = range(161, 166)


def result_framed(operation: int) -> bool:
    """True when the reply body opens with a result section."""
    return (operation == Operation.REGISTER or operation in METADATA_OPERATIONS
            or operation in OFFSET_OPERATIONS)


@dataclass(frozen=True, slots=True)
class Frame:
    client: bytes  # u128, echoed in replies
    checksum: bytes  # the request checksum, echoed in replies
    request: int
    operation: int
    session: int
    code: int  # the 2024 command of a NonReplicated request
    body: memoryview


def is_request(buf: bytes) -> bool:
    """True when `buf` (more than 60 bytes, or all there is) opens with a request header.
    A request of the 2024 layout never starts with a zero length, so one frame tells."""
    return (len(buf) > COMMAND_OFFSET and U32.unpack_from(buf)[0] == 0
            and buf[COMMAND_OFFSET] == Command.REQUEST
            and U32.unpack_from(buf, SIZE_OFFSET)[0] >= HEADER_SIZE)


def may_become_request(buf: bytes) -> bool:
    """True while too few bytes have come to tell a request header from a zero length."""
    return len(buf) <= COMMAND_OFFSET and buf[:4] == bytes(4)


def parse_frames(buf: bytes, max_frame: int) -> tuple[list[Frame], int]:
    """Every complete request in `buf` and the bytes they used. The size is bounded
    before any body is waited for."""
    frames: list[Frame] = []
    view = memoryview(buf)
    pos, end = 0, len(buf)
    while end - pos > COMMAND_OFFSET:
        (size,) = U32.unpack_from(view, pos + SIZE_OFFSET)
        if not HEADER_SIZE <= size <= max_frame:
            raise FramingError(f"frame size {size} outside {HEADER_SIZE}..{max_frame}")
        if view[pos + COMMAND_OFFSET] != Command.REQUEST:
            raise FramingError(f"frame command {view[pos + COMMAND_OFFSET]} is no request")
        if end - pos < size:
            break
        client, checksum, _, request, operation, session, code = REQUEST_FIELDS.unpack_from(
            view, pos + FIELDS_OFFSET)
        frames.append(Frame(client, checksum, request, operation, session, code,
                            view[pos + HEADER_SIZE : pos + size]))
        pos += size
    return frames, pos


def encode_reply(frame: Frame, body: bytes = b"", status: int = 0, commit: int = 0) -> bytes:
    header = bytearray(HEADER_SIZE)
    U32.pack_into(header, SIZE_OFFSET, HEADER_SIZE + len(body))
    header[COMMAND_OFFSET] = Command.REPLY
    REPLY_FIELDS.pack_into(header, FIELDS_OFFSET, frame.checksum, bytes(16), frame.client,
                           commit, commit, 0, frame.request, frame.operation, status)
    return bytes(header) + body


def encode_eviction(client: bytes, reason: Eviction) -> bytes:
    """A session-terminal frame. Only an incompatible protocol names the versions
    spoken (min <= max, both nonzero)."""
    header = bytearray(HEADER_SIZE)
    U32.pack_into(header, SIZE_OFFSET, HEADER_SIZE)
    header[COMMAND_OFFSET] = Command.EVICTION
    version = PROTOCOL_VERSION if reason == Eviction.INCOMPATIBLE_PROTOCOL else 0
    EVICTION_FIELDS.pack_into(header, FIELDS_OFFSET, client, version, version)
    header[-1] = reason
    return bytes(header)


def committed(payload: bytes = b"") -> bytes:
    """A result section saying success, then the payload."""
    return U32.pack(0) + payload


def refused(code: int) -> bytes:
    """A result section carrying one failure."""
    return struct.pack("<III", 1, 0, code)
