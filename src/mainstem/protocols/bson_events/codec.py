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


@dataclass(frozen=True, slots=True)
class Frame:
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
        events: list[Event] = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 4 and not self._skip:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length < MIN_DOCUMENT:
                raise FramingError(f"BSON length {length} is below {MIN_DOCUMENT}")
            if length > self.max_frame_size:
                events.append(Oversized(length))
                available = len(buf) - pos
                if available >= length:
                    pos += length
                else:
                    self._skip = length - available
                    pos = len(buf)
                continue
            if len(buf) - pos < length:
                break
            events.append(_parse(bytes(buf[pos:pos + length])))
            pos += length
        del buf[:pos]
        return events


def _parse(raw: bytes) -> Frame | Malformed:
    try:
        document = bson.decode(raw)
    except (BSONError, ValueError, OverflowError) as exc:
        raise FramingError(f"not a BSON document: {exc}") from None
    kind, body = document.get("type"), document.get("frame")
    request_id = body.get("rID") if isinstance(body, dict) else None
    if not isinstance(kind, str):
        return Malformed("the frame has no string 'type'", request_id)
    if not isinstance(body, dict):
        return Malformed("the frame has no document 'frame'", request_id)
    return Frame(kind, body, len(raw))


def encode_frame(kind: str, body: dict[str, Any]) -> bytes:
    """One frame of either direction: a request, a response, an event, a query result."""
    return bson.encode({"type": kind, "frame": body})
