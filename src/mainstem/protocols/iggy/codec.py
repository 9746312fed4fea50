"""Iggy binary protocol codec, sans-IO: frames, identifiers and reply layouts.

Request: length u32 (code + payload) | code u32 | payload. Response: status u32
(0 = OK, else an Iggy error code) | length u32 | payload. All little-endian.
Reply layouts follow the binary mapper of the Rust `iggy` crate 0.6.x.
"""

from __future__ import annotations

import enum
import struct
from builtins import memoryview  # compiled dataclasses look their field types up here
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

U8: Final = struct.Struct("<B")
U32: Final = struct.Struct("<I")
U64: Final = struct.Struct("<Q")
REQUEST_HEADER = struct.Struct("<II")  # length, code
RESPONSE_HEADER = struct.Struct("<II")  # status, length
MAX_IDENTIFIER = 255
T = TypeVar("T")


class Code(enum.IntEnum):
    PING = 1
    GET_STATS = 10
    GET_CLUSTER_METADATA = 12
    GET_ME = 20
    GET_CLIENT = 21
    GET_CLIENTS = 22
    LOGIN_USER = 38
    LOGOUT_USER = 39
    POLL_MESSAGES = 100
    SEND_MESSAGES = 101
    GET_CONSUMER_OFFSET = 120
    STORE_CONSUMER_OFFSET = 121
    GET_STREAM = 200
    GET_STREAMS = 201
    CREATE_STREAM = 202
    DELETE_STREAM = 203
    GET_TOPIC = 300
    GET_TOPICS = 301
    CREATE_TOPIC = 302
    DELETE_TOPIC = 303
    CREATE_PARTITIONS = 402
    DELETE_PARTITIONS = 403
    GET_CONSUMER_GROUP = 600
    GET_CONSUMER_GROUPS = 601
    CREATE_CONSUMER_GROUP = 602
    DELETE_CONSUMER_GROUP = 603
    JOIN_CONSUMER_GROUP = 604
    LEAVE_CONSUMER_GROUP = 605
    SYNC_CONSUMER_GROUP = 606


class ErrorCode(enum.IntEnum):
    """Iggy's numeric error codes (the subset mainstem raises)."""

    ERROR = 1
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    CLIENT_NOT_FOUND = 22
    UNAUTHENTICATED = 40
    UNAUTHORIZED = 41
    INVALID_CREDENTIALS = 42
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_ID_ALREADY_EXISTS = 1011
    STREAM_NAME_ALREADY_EXISTS = 1012
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_ID_ALREADY_EXISTS = 2012
    TOPIC_NAME_ALREADY_EXISTS = 2013
    TOO_MANY_PARTITIONS = 2015
    TOO_MANY_TOPICS = 2021
    PARTITION_NOT_FOUND = 3007
    INVALID_MESSAGES_COUNT = 4009
    CANNOT_APPEND_MESSAGE = 4010
    CANNOT_READ_MESSAGE = 4011
    INVALID_MESSAGE_CHECKSUM = 4027  # mainstem's use: a chunk of the range is damaged
    CONSUMER_GROUP_ID_NOT_FOUND = 5000
    CONSUMER_GROUP_ID_ALREADY_EXISTS = 5001
    CONSUMER_GROUP_MEMBER_NOT_FOUND = 5004


class IggyError(Exception):
    """A request failed: the reply carries `code` as its status."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class FramingError(Exception):
    """The byte stream cannot be framed any more: the connection must close."""


@dataclass(frozen=True, slots=True)
class Request:
    code: int
    payload: memoryview


def parse_requests(buf: bytes, max_frame: int) -> tuple[list[Request], int]:
    """Every complete request in `buf` and the bytes they used. The length is
    bounded before any payload is waited for."""
    requests: list[Request] = []
    view = memoryview(buf)
    pos, end = 0, len(buf)
    while end - pos >= REQUEST_HEADER.size:
        length, code = REQUEST_HEADER.unpack_from(view, pos)
        if length < 4 or length > max_frame:
            raise FramingError(f"request length {length} outside 4..{max_frame}")
        if end - pos < 4 + length:
            break
        requests.append(Request(code, view[pos + 8 : pos + 4 + length]))
        pos += 4 + length
    return requests, pos


def encode_request(code: int, payload: bytes = b"") -> bytes:
    return REQUEST_HEADER.pack(len(payload) + 4, code) + payload


def encode_response(payload: bytes = b"") -> bytes:
    return RESPONSE_HEADER.pack(0, len(payload)) + payload


def encode_error(code: int) -> bytes:
    return RESPONSE_HEADER.pack(code, 0)


# -- reading request payloads -------------------------------------------------


class Reader:
    """Bounds-checked cursor over a request payload; overruns are InvalidFormat."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise IggyError(ErrorCode.INVALID_FORMAT, "truncated request")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        value: int = U32.unpack(self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = U64.unpack(self.take(8))[0]
        return value

    def name(self, what: str) -> str:
        """u8 length + UTF-8, 1..255 bytes."""
        raw = self.take(self.u8())
        if not raw:
            raise IggyError(ErrorCode.INVALID_FORMAT, f"empty {what}")
        return _utf8(raw, what)

    def long_string(self) -> str:
        return _utf8(self.take(self.u32()), "string")

    def identifier(self) -> int | str:
        """kind u8 (1 numeric, 2 string) + length u8 + value."""
        kind, length = self.u8(), self.u8()
        value = self.take(length)
        if kind == 1 and length == 4:
            number: int = U32.unpack(value)[0]
            return number
        if kind == 2 and length > 0:
            return _utf8(value, "identifier")
        raise IggyError(ErrorCode.INVALID_IDENTIFIER, f"bad identifier kind {kind} length {length}")

    def end(self) -> None:
        if self.remaining:
            raise IggyError(ErrorCode.INVALID_FORMAT, f"{self.remaining} unexpected bytes")


def _utf8(raw: memoryview, what: str) -> str:
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError:
        raise IggyError(ErrorCode.INVALID_FORMAT, f"{what} is not UTF-8") from None


def encode_identifier(value: int | str) -> bytes:
    if isinstance(value, int):
        return b"\x01\x04" + U32.pack(value)
    raw = value.encode()
    if not 0 < len(raw) <= MAX_IDENTIFIER:
        raise ValueError("a string identifier holds 1 to 255 bytes")
    return bytes((2, len(raw))) + raw


def encode_name(name: str) -> bytes:
    raw = name.encode()
    return U8.pack(len(raw)) + raw


def encode_long_string(text: str) -> bytes:
    raw = text.encode()
    return U32.pack(len(raw)) + raw


@dataclass(frozen=True, slots=True)
class Consumer:
    kind: int  # 1 consumer, 2 consumer group
    id: int | str


CONSUMER = 1
CONSUMER_GROUP = 2


def read_consumer(reader: Reader, tail: int) -> Consumer:
    """The seed's consumer is kind u8 + id u32; the real client sends kind u8 +
    identifier. Told apart by the exact body length: `tail` is the byte count
    that follows the consumer (after stream and topic identifiers). When both
    forms fit, the identifier (what real clients send) wins."""
    kind = reader.u8()
    if kind not in (CONSUMER, CONSUMER_GROUP):
        raise IggyError(ErrorCode.INVALID_FORMAT, f"bad consumer kind {kind}")
    buf, pos = reader.buf, reader.pos
    as_identifier = pos + 2 <= len(buf) and _fits(buf, pos + 2 + buf[pos + 1], tail)
    if not as_identifier and _fits(buf, pos + 4, tail):
        return Consumer(kind, reader.u32())
    return Consumer(kind, reader.identifier())


def _fits(buf: memoryview, pos: int, tail: int) -> bool:
    """True when exactly two identifiers and `tail` bytes follow `pos`."""
    for _ in range(2):
        if pos + 2 > len(buf):
            return False
        pos += 2 + buf[pos + 1]
    return pos + tail == len(buf)


# -- messages -----------------------------------------------------------------

POLLED_HEADER: Final = struct.Struct("<QBQ16sI")  # offset, state, timestamp, id, checksum
POLL_REPLY_HEADER: Final = struct.Struct("<IQI")  # partition id, current offset, count
SEND_MESSAGE_HEADER: Final = struct.Struct("<16sI")  # id, headers length


def read_each(reader: Reader, make: Callable[[bytes, bytes, bytes], T]) -> list[T]:
    """`make(id as sent (u128 LE), headers, payload)` of each message that ends a
    SEND_MESSAGES body: id u128, headers length u32 + headers (checked), payload length
    u32 + payload, repeated. One tight loop over `bytes` (indexed and sliced natively when
    compiled): this is the hot path."""
    data = bytes(reader.buf)
    pos, end = reader.pos, len(data)
    made = []
    try:
        while pos < end:
            raw_id = data[pos:pos + 16]
            pos += 16
            headers_length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16 | \
                data[pos + 3] << 24
            pos += 4
            headers = b""
            if headers_length:
                headers = data[pos:pos + headers_length]
                pos += headers_length
                validate_headers(headers)
            length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16 | data[pos + 3] << 24
            pos += 4 + length
            made.append(make(raw_id, headers, data[pos - length:pos]))
    except IndexError:  # a length field past the end
        raise IggyError(ErrorCode.INVALID_FORMAT, "truncated message") from None
    if pos > end:
        raise IggyError(ErrorCode.INVALID_FORMAT, "truncated message payload")
    reader.pos = pos
    return made


HEADER_KINDS = range(1, 16)  # raw, string, bool, int8..int128, uint8..uint128, f32, f64
_FIXED_WIDTH = {3: 1, 4: 1, 5: 2, 6: 4, 7: 8, 8: 16, 9: 1, 10: 2, 11: 4, 12: 8, 13: 16,
                14: 4, 15: 8}


def validate_headers(raw: bytes) -> None:
    """Header map: key u32-length string, kind u8, value u32-length bytes."""
    for _key, kind, value in iter_headers(raw):
        width = _FIXED_WIDTH.get(kind)
        if kind not in HEADER_KINDS or (width is not None and len(value) != width):
            raise IggyError(ErrorCode.INVALID_FORMAT, f"bad header kind {kind}")


def iter_headers(raw: bytes) -> Iterator[tuple[str, int, bytes]]:
    reader = Reader(memoryview(raw))
    while reader.remaining:
        key = reader.long_string()
        kind = reader.u8()
        yield key, kind, bytes(reader.take(reader.u32()))


def encode_headers(headers: dict[str, tuple[int, bytes]]) -> bytes:
    out = bytearray()
    for key, (kind, value) in headers.items():
        out += encode_long_string(key) + U8.pack(kind) + U32.pack(len(value)) + value
    return bytes(out)
