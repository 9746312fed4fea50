"""Sans-IO codec of the segment store protocol, both ways: every message encodes and
decodes, and the server and mainstem's client read with the same `Decoder`.

Every frame is a type (int32) and a length (int32, big-endian) followed by the
fields. Strings are a u16 length and Java's modified UTF-8; UUIDs 16 bytes;
booleans one byte. A message too big for one frame travels as Partial pieces
(Begin, Middle..., End) whose data joined is the whole message, header included.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast, dataclass_transform

HEADER = struct.Struct(">iI")
LONG = struct.Struct(">q")
INT = struct.Struct(">i")
U16 = struct.Struct(">H")
DEFAULT_MAX_FRAME = (1 << 24) - 1


class FrameError(Exception):
    """Input that breaks the framing or a message's layout."""


# -- Java's modified UTF-8 ----------------------------------------------------

_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


def _as_surrogates(match: re.Match[str]) -> str:
    code = ord(match.group()) - 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def encode_mutf8(text: str) -> bytes:
    """NUL as C0 80, characters past U+FFFF as two 3-byte surrogates."""
    raw = _SUPPLEMENTARY.sub(_as_surrogates, text).encode("utf-8", "surrogatepass")
    return raw.replace(b"\x00", b"\xc0\x80")


def decode_mutf8(raw: bytes | memoryview) -> str:
    data = bytes(raw)
    if any(b >= 0xF0 for b in data):
        raise FrameError("4-byte sequences are not modified UTF-8")
    try:
        text = data.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        # join surrogate pairs; a lone surrogate fails here
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeError as error:
        reason = getattr(error, "reason", error)  # a UnicodeDecodeError's, as a rule
        raise FrameError(f"malformed modified UTF-8: {reason}") from None


# -- field readers ---------------------------------------------------------------


class _Fields:
    """Reads fields from one frame's body, raising FrameError past its end."""

    __slots__ = ("pos", "view")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.view):
            raise FrameError("a field runs past the frame's end")
        piece = self.view[self.pos:end]
        self.pos = end
        return piece

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size))

    def long(self) -> int:
        value: int = self.unpack(LONG)[0]
        return value

    def int(self) -> int:
        value: int = self.unpack(INT)[0]
        return value

    def bool(self) -> bool:
        return self.take(1)[0] != 0

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(16)))

    def string(self) -> str:
        (n,) = self.unpack(U16)
        return decode_mutf8(self.take(n))

    def rest(self) -> memoryview:
        return self.take(len(self.view) - self.pos)

    def done(self) -> None:
        if self.pos != len(self.view):
            raise FrameError("trailing bytes after the last field")


def _string(text: str) -> bytes:
    raw = encode_mutf8(text)
    if len(raw) > 0xFFFF:
        raise FrameError("string longer than 65535 bytes")
    return U16.pack(len(raw)) + raw


# -- messages --------------------------------------------------------------------


class Message:
    TYPE: ClassVar[int]
    FIELDS: ClassVar[str]  # per field: s string, u uuid, q long, i int, ? bool, b rest

    def body(self) -> bytes:
        return _encode_fields(self.FIELDS, _values(self))

    def encode(self) -> bytes:
        body = self.body()
        return HEADER.pack(self.TYPE, len(body)) + body

    def encode_parts(self) -> list[bytes | memoryview]:
        """The frame as pieces to write one after the other."""
        return [self.encode()]


def _encode_fields(kinds: str, values: list[object]) -> bytes:
    return b"".join([_ENCODERS[kind](value) for kind, value in zip(kinds, values, strict=True)])


def _values(message: Message) -> list[object]:
    return [getattr(message, name) for name in message.__dataclass_fields__]  # type: ignore[attr-defined]


_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "s": _string,
    "u": lambda v: v.bytes,
    "q": LONG.pack,
    "i": INT.pack,
    "?": lambda v: b"\x01" if v else b"\x00",
    "b": bytes,
}
_READERS = {"s": _Fields.string, "u": _Fields.uuid, "q": _Fields.long, "i": _Fields.int,
            "?": _Fields.bool, "b": _Fields.rest}


_M = TypeVar("_M", bound="Message")


@dataclass_transform()
def _message(type_code: int, fields: str) -> Callable[[type[_M]], type[_M]]:
    """Make a message class a dataclass with its type code and field kinds, and register
    it for decoding."""
    def wrap(cls: type[_M]) -> type[_M]:
        cls = dataclass(slots=True)(cls)
        cls.TYPE, cls.FIELDS = type_code, fields
        MESSAGES[type_code] = cls
        return cls
    return wrap


MESSAGES: dict[int, type[Message]] = {}


@_message(-2, "?b")
class Partial(Message):
    kind: int  # 0 begin, 1 middle, 2 end (one byte)
    data: bytes | memoryview

    def body(self) -> bytes:
        return bytes([self.kind]) + bytes(self.data)


PARTIAL_BEGIN, PARTIAL_MIDDLE, PARTIAL_END = 0, 1, 2


@_message(0, "b")
class Event(Message):
    data: bytes | memoryview


@_message(1, "us")
class SetupAppend(Message):
    connection_id: uuid.UUID
    segment: str


@_message(2, "suq")
class AppendSetup(Message):
    segment: str
    connection_id: uuid.UUID
    ack_level: int


@_message(3, "uqi")
class BeginAppendBlock(Message):
    connection_id: uuid.UUID
    connection_offset: int
    length: int


@_message(4, "uqi")
class EndAppendBlock(Message):
    connection_id: uuid.UUID
    connection_offset: int
    block_length: int


@_message(7, "uq")
class DataAppended(Message):
    connection_id: uuid.UUID
    ack_level: int


@_message(9, "sqi")
class ReadSegment(Message):
    segment: str
    offset: int
    suggested_length: int


@_message(10, "sq??b")
class SegmentRead(Message):
    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: bytes | memoryview

    def encode_parts(self) -> list[bytes | memoryview]:
        """The fields, then the data as it is: megabytes read are not copied again."""
        head = _encode_fields(self.FIELDS[:-1], _values(self)[:-1])
        return [HEADER.pack(self.TYPE, len(head) + len(self.data)) + head, self.data]


@_message(11, "qs")
class GetStreamSegmentInfo(Message):
    request_id: int
    segment: str


@_message(12, "qs??qq")
class StreamSegmentInfo(Message):
    request_id: int
    segment: str
    exists: bool
    sealed: bool
    start_offset: int
    write_offset: int


@dataclass(slots=True)
class SegmentRequest(Message):
    """A request about one segment, or its plain acknowledgement."""

    request_id: int
    segment: str


@dataclass(slots=True)
class SegmentOffsetRequest(SegmentRequest):
    offset: int


_R = TypeVar("_R", bound=SegmentRequest)


def _request(type_code: int, name: str, base: type[_R]) -> type[_R]:
    fields = "qsq" if issubclass(base, SegmentOffsetRequest) else "qs"
    return _message(type_code, fields)(cast(type[_R], type(name, (base,), {})))


CreateSegment = _request(20, "CreateSegment", SegmentRequest)
SegmentCreated = _request(21, "SegmentCreated", SegmentRequest)
SealSegment = _request(28, "SealSegment", SegmentRequest)
SegmentSealed = _request(29, "SegmentSealed", SegmentRequest)
DeleteSegment = _request(30, "DeleteSegment", SegmentRequest)
SegmentDeleted = _request(31, "SegmentDeleted", SegmentRequest)
TruncateSegment = _request(38, "TruncateSegment", SegmentOffsetRequest)
SegmentTruncated = _request(39, "SegmentTruncated", SegmentRequest)


@dataclass(slots=True)
class SegmentError(Message):
    """An error reply about one segment (or "" for the connection)."""

    segment: str
    message: str


def _error(type_code: int, name: str) -> type[SegmentError]:
    return _message(type_code, "ss")(cast(type[SegmentError], type(name, (SegmentError,), {})))


AuthenticationFailed = _error(60, "AuthenticationFailed")
WrongHost = _error(50, "WrongHost")
SegmentIsSealed = _error(51, "SegmentIsSealed")
SegmentAlreadyExists = _error(52, "SegmentAlreadyExists")
NoSuchSegment = _error(53, "NoSuchSegment")
InvalidEventNumber = _error(55, "InvalidEventNumber")
SegmentIsTruncated = _error(56, "SegmentIsTruncated")
OperationUnsupported = _error(57, "OperationUnsupported")
ProtocolError = _error(58, "ProtocolError")  # mainstem's: bad input, before a close
StorageFailed = _error(202, "StorageFailed")  # mainstem's: appends not stored, before a close
TierUnavailable = _error(203, "TierUnavailable")  # mainstem's: a tiered read failed; try again
DataDamaged = _error(204, "DataDamaged")  # mainstem's: the read starts at a damaged chunk


@_message(100, "b")
class KeepAlive(Message):
    data: bytes | memoryview = b""


@_message(200, "ss")
class Authenticate(Message):
    """mainstem's login step: the first frame of every connection."""

    username: str
    password: str


@_message(201, "")
class Authenticated(Message):
    pass


# -- decoding --------------------------------------------------------------------


def decode_body(type_code: int, body: memoryview) -> Message:
    cls = MESSAGES.get(type_code)
    if cls is None:
        raise FrameError(f"unknown message type {type_code}")
    if cls is Event:
        return Event(body)  # the hot path: no field parsing
    if cls is Partial:
        if not body:
            raise FrameError("a partial message needs its kind byte")
        if body[0] > PARTIAL_END:
            raise FrameError(f"unknown partial kind {body[0]}")
        return Partial(body[0], body[1:])
    fields = _Fields(body)
    values = [_READERS[kind](fields) for kind in cls.FIELDS]
    fields.done()
    return cls(*values)


@dataclass(slots=True)
class Events:
    """Consecutive Event frames, each without its type: its length (u32, big-endian) and
    data, a slice of the bytes read."""

    framed: list[bytes | memoryview]
    size: int  # bytes on the wire


class Decoder:
    """Splits a byte stream into messages; lengths are checked before buffering. What
    was read is sliced, not copied: only a frame split across reads is joined."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame_size = max_frame_size
        self._pending = bytearray()  # the start of a frame split across reads

    def feed(self, data: bytes | memoryview) -> list[tuple[Message, int]]:
        """Every complete message in the buffer, with its size on the wire."""
        return self._decode(data, False)  # type: ignore[return-value]

    def feed_events(self, data: bytes | memoryview) -> list[tuple[Message, int] | Events]:
        """As `feed`, but each run of Event frames comes as one Events, undecoded (the
        hot path of an append connection)."""
        return self._decode(data, True)

    def _decode(self, data: bytes | memoryview, runs: bool
                ) -> list[tuple[Message, int] | Events]:
        out: list[tuple[Message, int] | Events] = []
        view = memoryview(data)
        if self._pending:
            joined = self._join(view)
            if joined is None:
                return out
            frame, used = joined
            self._walk(memoryview(frame), runs, out)
            view = view[used:]
        pos = self._walk(view, runs, out)
        self._pending[:] = view[pos:]
        return out

    def _join(self, view: memoryview) -> tuple[bytes, int] | None:
        """The pending frame completed from the head of `view`, and the bytes it took."""
        pending = self._pending
        used = min(max(HEADER.size - len(pending), 0), len(view))
        pending += view[:used]
        if len(pending) < HEADER.size:
            return None
        _, length = HEADER.unpack_from(pending)
        self._check(length)
        more = min(HEADER.size + length - len(pending), len(view) - used)
        pending += view[used:used + more]
        used += more
        if len(pending) < HEADER.size + length:
            return None
        frame = bytes(pending)
        pending.clear()
        return frame, used

    def _check(self, length: int) -> None:
        if length > self.max_frame_size:
            raise FrameError(f"frame length {length} exceeds {self.max_frame_size}")

    def _walk(self, view: memoryview, runs: bool,
              out: list[tuple[Message, int] | Events]) -> int:
        """Decode the complete frames at the start of `view` into `out`; the bytes used."""
        pos, end = 0, len(view)
        unpack = HEADER.unpack_from
        while end - pos >= HEADER.size:
            type_code, length = unpack(view, pos)
            self._check(length)
            stop = pos + HEADER.size + length
            if stop > end:
                break
            if not runs or type_code != Event.TYPE:
                out.append((decode_body(type_code, view[pos + HEADER.size:stop]), stop - pos))
                pos = stop
                continue
            first = pos
            framed: list[bytes | memoryview] = []
            append = framed.append
            while True:  # the hot loop: a run of Event frames
                append(view[pos + 4:stop])
                pos = stop
                if end - pos < HEADER.size:
                    break
                type_code, length = unpack(view, pos)
                stop = pos + HEADER.size + length
                if type_code != Event.TYPE or stop > end or length > self.max_frame_size:
                    break
            out.append(Events(framed, pos - first))
        return pos


class Reassembler:
    """Joins Partial pieces into one message; bounded by `max_message_size`."""

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size
        self._parts: bytearray | None = None

    @property
    def pending(self) -> bool:
        return self._parts is not None

    def add(self, piece: Partial) -> Message | None:
        if piece.kind == PARTIAL_BEGIN:
            if self._parts is not None:
                raise FrameError("a partial message began before the previous one ended")
            self._parts = bytearray()
        elif self._parts is None:
            raise FrameError("a partial message continued without a beginning")
        self._parts += piece.data
        if len(self._parts) > self.max_message_size:
            raise FrameError("a partial message exceeds the message size limit")
        if piece.kind != PARTIAL_END:
            return None
        whole, self._parts = memoryview(bytes(self._parts)), None
        if len(whole) < HEADER.size:
            raise FrameError("a joined partial message is shorter than a header")
        type_code, length = HEADER.unpack_from(whole)
        if length != len(whole) - HEADER.size or type_code == Partial.TYPE:
            raise FrameError("a joined partial message has a wrong length or type")
        return decode_body(type_code, whole[HEADER.size:])


def event_length(data: bytes | memoryview) -> int:
    """How far one Event moves its append connection's offset: its whole frame."""
    return HEADER.size + len(data)


def encode_append_block(connection_id: uuid.UUID, offset: int,
                        events: list[bytes]) -> tuple[bytes, int]:
    """Events appended at connection offset `offset` as one block (BeginAppendBlock, the
    Event frames, EndAppendBlock), and the connection offset after it."""
    pack = HEADER.pack
    body = b"".join([piece for e in events for piece in (pack(Event.TYPE, len(e)), e)])
    end = offset + len(body)
    return (BeginAppendBlock(connection_id, offset, len(body)).encode() + body
            + EndAppendBlock(connection_id, end, len(body)).encode()), end


def split_partial(frame: bytes, max_frame_size: int) -> list[bytes]:
    """`frame` as is when it fits, else as Partial frames that each fit."""
    if len(frame) - HEADER.size <= max_frame_size:
        return [frame]
    step = max_frame_size - 1
    pieces = [frame[i:i + step] for i in range(0, len(frame), step)]
    kinds = [PARTIAL_BEGIN] + [PARTIAL_MIDDLE] * (len(pieces) - 2) + [PARTIAL_END]
    return [Partial(kind, piece).encode() for kind, piece in zip(kinds, pieces, strict=True)]
