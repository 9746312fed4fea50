"""Sans-IO framing of the BSON event protocol: a stream of BSON documents
``{type: <FRAME>, frame: {...}}``, each delimited by BSON's own little-endian int32 length.

Both directions frame alike: the server reads requests and a client reads responses,
events and query results with an ``EventCodec``, and both write with ``encode_frame``.
The length is bounded before anything is buffered. A frame over the bound is skipped without
being stored and reported as ``Oversized`` (the connection answers with a failed RESPONSE and
goes on); a length below 5 or bytes that are not BSON are a ``FramingError`` (close).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bson
from bson.errors import BSONError

_LENGTH = struct.Struct("<i")
MIN_DOCUMENT = 5  # length + terminating NUL: the empty document
MAX_DOCUMENT = 2**31 - 1  # the largest int32 length
FRAME_OVERHEAD = 64 * 1024  # what a PUBLISH holds besides its event


class FramingError(Exception):
    """The byte stream cannot be framed any more: close the connection."""


@dataclass(slots=True)
class Frame:  # not frozen: one is made for every frame, and frozen ones cost more
    type: str
    body: dict[str, Any]
    size: int


@dataclass(frozen=True, slots=True)
class Oversized:
    size: int


@dataclass(frozen=True, slots=True)
class Malformed:
    """Valid BSON that is not ``{type: string, frame: document}``."""

    reason: str
    request_id: Any


Event = Frame | Oversized | Malformed


class EventCodec:
    def __init__(self, max_event_size: int | None) -> None:
        # None: any size BSON can state (a client trusts its server's frames).
        self.max_frame_size = (MAX_DOCUMENT if max_event_size is None
                               else max_event_size + FRAME_OVERHEAD)
        self._buffer = bytearray()
        self._skip = 0  # bytes of an oversized frame still to drop

    def receive_data(self, data: bytes) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data

    def next_events(self) -> list[Event]:
        """The frames complete in the buffer. Consecutive frames within the bound are
        decoded by one call, which validates each of them whole as before."""
        events: list[Event] = []
        buf = self._buffer
        pos = run = 0  # `run`: where the frames not yet decoded start
        sizes: list[int] = []  # of those frames
        while len(buf) - pos >= 4 and not self._skip:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length < MIN_DOCUMENT:
                raise FramingError(f"BSON length {length} is below {MIN_DOCUMENT}")
            if length > self.max_frame_size:
                events += _decode_run(buf, run, sizes)
                events.append(Oversized(length))
                available = len(buf) - pos
                if available >= length:
                    pos += length
                else:
                    self._skip = length - available
                    pos = len(buf)
                run, sizes = pos, []
                continue
            if len(buf) - pos < length:
                break
            sizes.append(length)
            pos += length
        events += _decode_run(buf, run, sizes)
        del buf[:pos]
        return events


def _decode_run(buf: bytearray, start: int, sizes: list[int]) -> list[Event]:
    """The frames of `sizes` bytes each from `start`, decoded at once."""
    if not sizes:
        return []
    with memoryview(buf) as view:
        try:
            documents = bson.decode_all(view[start:start + sum(sizes)])
        except (BSONError, ValueError, OverflowError) as exc:
            raise FramingError(f"not a BSON document: {exc}") from None
    return [_frame(document, size) for document, size in zip(documents, sizes, strict=True)]


def _frame(document: dict[str, Any], size: int) -> Frame | Malformed:
    kind, body = document.get("type"), document.get("frame")
    if type(kind) is str and type(body) is dict:  # the usual frame, checked cheaply
        return Frame(kind, body, size)
    request_id = body.get("rID") if isinstance(body, dict) else None
    if not isinstance(kind, str):
        return Malformed("the frame has no string 'type'", request_id)
    if not isinstance(body, dict):
        return Malformed("the frame has no document 'frame'", request_id)
    return Frame(kind, body, size)


def encode_frame(kind: str, body: dict[str, Any]) -> bytes:
    """One frame of either direction: a request, a response, an event, a query result."""
    return bson.encode({"type": kind, "frame": body})


# -- the server's hottest frames, built from bytes encode_frame makes once -------------

_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_SENTINEL = 0x5A5A5A5A  # an int32 whose bytes mark where a template's value goes


def _template(kind: str, body: dict[str, Any]) -> tuple[bytes, bytes]:
    """encode_frame's bytes for `body` around the int32 `_SENTINEL` it holds once."""
    raw = encode_frame(kind, body)
    head, tail = raw.split(_INT32.pack(_SENTINEL))
    return head, tail


_OK_HEAD, _OK_TAIL = _template("RESPONSE", {"ok": True, "rID": _SENTINEL})


def encode_ok(request_ids: list[Any]) -> bytes:
    """``RESPONSE {ok: true, rID}`` for each request, the bytes encode_frame gives."""
    pack = _INT32.pack
    return b"".join([_OK_HEAD + pack(rid) + _OK_TAIL
                     if type(rid) is int and -2**31 <= rid < 2**31
                     else encode_frame("RESPONSE", {"ok": True, "rID": rid})
                     for rid in request_ids])


def _int_element(name: bytes, value: int) -> bytes:
    """A BSON integer element as encode_frame writes it: int32 where it fits."""
    if -2**31 <= value < 2**31:
        return b"\x10" + name + b"\x00" + _INT32.pack(value)
    return b"\x12" + name + b"\x00" + _INT64.pack(value)


_RECEV_HEAD = bson.encode({"type": "RECEV"})[4:-1] + b"\x03frame\x00"  # to its body
_EVENT_KEY = b"\x03event\x00"
EVENT_TAIL = b"\x00\x00"  # what follows a RECEV frame's event: the ends of both documents


class _RecevLayout:
    """RECEV frames whose body starts with the elements `known`: their bytes up to the
    event from one struct."""

    def __init__(self, known: bytes, position: str) -> None:
        self.pack = struct.Struct(
            f"<i{len(_RECEV_HEAD)}si{len(known)}s{position}{len(_EVENT_KEY)}s").pack
        self.known = known
        self.body = 4 + len(known) + struct.calcsize(position) + len(_EVENT_KEY) + 1
        self.total = 4 + len(_RECEV_HEAD) + self.body + 1


class RecevEncoder:
    """``RECEV {subID, timestamp, pos, event}`` frames of one subscription, the bytes
    encode_frame gives, with the event's stored bytes copied in as they are: a frame is
    what `heads(timestamp)(position, event_size)` gives, the event, then EVENT_TAIL."""

    def __init__(self, sub_id: int) -> None:
        self._sub_id = _int_element(b"subID", sub_id)

    def heads(self, timestamp: int) -> Callable[[int, int], bytes]:
        """The heads of the frames of events stored at `timestamp` (a chunk's)."""
        known = self._sub_id + _int_element(b"timestamp", timestamp)
        int32 = _RecevLayout(known + b"\x10pos\x00", "i")
        int64 = _RecevLayout(known + b"\x12pos\x00", "q")
        pack, total, body, known = int32.pack, int32.total, int32.body, int32.known

        def head(position: int, event_size: int) -> bytes:
            if -2**31 <= position < 2**31:
                return pack(total + event_size, _RECEV_HEAD, body + event_size, known,
                            position, _EVENT_KEY)
            return int64.pack(int64.total + event_size, _RECEV_HEAD, int64.body + event_size,
                              int64.known, position, _EVENT_KEY)

        return head
