"""Sans-IO framing of the BSON event protocol: a stream of BSON documents
``{type: <FRAME>, frame: {...}}``, each delimited by BSON's own little-endian int32 length.

Both directions frame alike: the server reads requests and a client reads responses,
events and query results with an ``EventCodec``, and both write with ``encode_frame``.
The length is bounded before anything is buffered. A frame over the bound is skipped without
being stored and reported as ``Oversized`` (the connection answers with a failed RESPONSE and
goes on); a length below 5 or bytes that are not BSON are a ``FramingError`` (close).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
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
    # Where it was read: `source` holds it from `start` (a read shared by its frames).
    source: bytes = field(default=b"", compare=False, repr=False)
    start: int = field(default=0, compare=False, repr=False)


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
        # Reads not framed yet, joined once they hold what `_wanted` says (a length, or
        # the frame it states): a large frame is copied once, not once per read.
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._wanted = 4
        self._skip = 0  # bytes of an oversized frame still to drop
        self._layouts: dict[tuple[str, str], _PublishLayout] = {}  # publish_event's

    def receive_data(self, data: bytes | memoryview) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        if data:
            self._pieces.append(bytes(data))
            self._buffered += len(data)

    def next_events(self) -> list[Event]:
        """The frames complete in the buffer. Consecutive frames within the bound are
        decoded by one call, which validates each of them whole as before."""
        if self._buffered < self._wanted:
            return []
        data = self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces)
        events: list[Event] = []
        pos = run = 0  # `run`: where the frames not yet decoded start
        sizes: list[int] = []  # of those frames
        wanted = 4
        while len(data) - pos >= 4 and not self._skip:
            (length,) = _LENGTH.unpack_from(data, pos)
            if length < MIN_DOCUMENT:
                raise FramingError(f"BSON length {length} is below {MIN_DOCUMENT}")
            if length > self.max_frame_size:
                events += _decode_run(data, run, sizes)
                events.append(Oversized(length))
                available = len(data) - pos
                if available >= length:
                    pos += length
                else:
                    self._skip = length - available
                    pos = len(data)
                run, sizes = pos, []
                continue
            if len(data) - pos < length:
                wanted = length
                break
            sizes.append(length)
            pos += length
        events += _decode_run(data, run, sizes)
        rest = data[pos:]
        self._pieces = [rest] if rest else []
        self._buffered, self._wanted = len(rest), wanted
        return events

    def publish_event(self, frame: Frame, channel: str) -> memoryview | None:
        """The bytes of a PUBLISH's event as read, when the frame has the layout
        mainstem's client writes, ``{type, frame: {channel, event, rID: int32}}`` and no
        other element; None for any other (the event is then encoded from the body).
        The layout is checked byte for byte: the bytes are those the frame decoded to."""
        layout = self._layouts.get((frame.type, channel))
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[frame.type, channel] = _PublishLayout(frame.type, channel)
        return layout.event(frame)


MAX_LAYOUTS = 256  # publish_event's layouts by (type, channel) kept per connection
_RID_PREFIX = b"\x10rID\x00"  # an int32 rID element closes the body
_AFTER_EVENT = len(_RID_PREFIX) + 4 + 2  # that element, then the ends of both documents


class _PublishLayout:
    """PUBLISH frames of one type to one channel as mainstem's client writes them: the
    type element, the frame's key, the body's length, the channel element and the
    event's key, read with one struct."""

    def __init__(self, kind: str, channel: str) -> None:
        self._head = bson.encode({"type": kind, "frame": {}})[4:-6]
        self._channel = bson.encode({"channel": channel, "event": {}})[4:-6]
        self._unpack = struct.Struct(f"<{len(self._head)}si{len(self._channel)}si").unpack_from
        self._event_start = 4 + len(self._head) + 4 + len(self._channel)

    def event(self, frame: Frame) -> memoryview | None:
        source, start, size = frame.source, frame.start, frame.size
        if size < self._event_start + MIN_DOCUMENT + _AFTER_EVENT:
            return None
        head, body_size, channel, event_size = self._unpack(source, start + 4)
        event = start + self._event_start
        end = start + size - _AFTER_EVENT
        if (head != self._head or channel != self._channel or event_size != end - event
                or body_size != size - 5 - len(head) or not source.startswith(_RID_PREFIX, end)):
            return None
        return memoryview(source)[event:end]


def _decode_run(data: bytes, start: int, sizes: list[int]) -> list[Event]:
    """The frames of `sizes` bytes each from `start`, decoded at once."""
    if not sizes:
        return []
    try:
        with memoryview(data) as view:
            documents = bson.decode_all(view[start:start + sum(sizes)])
    except (BSONError, ValueError, OverflowError) as exc:
        raise FramingError(f"not a BSON document: {exc}") from None
    frames: list[Event] = []
    for document, size in zip(documents, sizes, strict=True):
        frames.append(_frame(document, size, data, start))
        start += size
    return frames


def _frame(document: dict[str, Any], size: int, source: bytes, start: int
           ) -> Frame | Malformed:
    kind, body = document.get("type"), document.get("frame")
    if type(kind) is str and type(body) is dict:  # the usual frame, checked cheaply
        return Frame(kind, body, size, source, start)
    request_id = body.get("rID") if isinstance(body, dict) else None
    if not isinstance(kind, str):
        return Malformed("the frame has no string 'type'", request_id)
    if not isinstance(body, dict):
        return Malformed("the frame has no document 'frame'", request_id)
    return Frame(kind, body, size, source, start)


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


@functools.cache
def _recev_struct(known_size: int, position: str) -> struct.Struct:
    """One per layout, not per chunk: a chunk may hold a single event."""
    return struct.Struct(f"<i{len(_RECEV_HEAD)}si{known_size}s{position}{len(_EVENT_KEY)}s")


class _RecevLayout:
    """RECEV frames whose body starts with the elements `known`: their bytes up to the
    event from one struct."""

    def __init__(self, known: bytes, position: str) -> None:
        self.pack = _recev_struct(len(known), position).pack
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
