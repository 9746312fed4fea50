"""Sans-IO codec for both sides: bytes in, frames out; frames in, bytes out.

A server reads requests with `StreamCodec()` (PARSERS), a client reads the server's frames
with `StreamCodec(limit, REPLY_PARSERS)`; both write with `encode`. Typical use by a
connection::

    codec.receive_data(await reader.read(65536))
    for frame in codec.next_frames():   # every complete frame, in order
        ...
    writer.write(encode(response))

Call next_frames() after every receive_data(): the frame-size limit is enforced on each
4-byte size prefix as soon as it is seen, so at most one read's worth of an oversized frame
is ever buffered. After a FrameError the codec is unusable and the connection should close
with `error.code`.
"""

from __future__ import annotations

import struct
from builtins import memoryview  # compiled dataclasses look their field types up here
from dataclasses import dataclass

from mainstem.formats.osiris import HEADER_SIZE as CHUNK_HEADER_SIZE
from mainstem.protocols.rabbit_stream.constants import INITIAL_FRAME_MAX, Key
from mainstem.protocols.rabbit_stream.frames import PARSERS, Frame, Parser, UnknownCommand
from mainstem.protocols.rabbit_stream.responses import REPLY_PARSERS
from mainstem.protocols.rabbit_stream.wire import (
    KEY_VERSION,
    SIZE_KEY_VERSION,
    U32,
    FrameError,
    FrameTooLarge,
    MalformedFrame,
    Reader,
)

_MIN_FRAME_SIZE = KEY_VERSION.size
_DELIVER_V1 = struct.Struct(">IHHB")
_DELIVER_V2 = struct.Struct(">IHHBQ")


@dataclass(slots=True)
class Undecoded(Frame):
    """A frame left in its wire form (size prefix included) for another process to parse."""

    wire: memoryview


class StreamCodec:
    """Turns the peer's byte stream into frames: a client's requests by default, the
    server's frames with `parsers=REPLY_PARSERS`. Not thread-safe; one per connection."""

    def __init__(
        self,
        max_frame_size: int = INITIAL_FRAME_MAX,
        parsers: dict[tuple[int, int], Parser] = PARSERS,
    ) -> None:
        # Largest accepted value of a frame's size field (the bytes after the size prefix);
        # 0 means no limit. Raise it once Tune has been negotiated.
        self.max_frame_size = max_frame_size
        self._parsers = parsers
        self._buffer = bytearray()
        self._error: FrameError | None = None
        # (key, version) pairs returned as Undecoded rather than parsed (see `offload`).
        self.deferred: frozenset[tuple[int, int]] = frozenset()

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    def next_frames(self) -> list[Frame]:
        """Every complete frame buffered so far. If a bad frame follows good ones, the good
        ones are returned first and the error is raised on the next call."""
        if self._error is not None:
            raise self._error
        end, error = self._scan_complete_frames()
        frames: list[Frame] = []
        if end:
            # A private copy of the complete frames: parsed frames keep memoryviews into it,
            # and a bytearray with live views could not be shrunk by the del below.
            if end == len(self._buffer):  # the usual case: hand the buffer over whole
                block = memoryview(self._buffer)
                self._buffer = bytearray()
            else:
                block = memoryview(self._buffer[:end])
                del self._buffer[:end]
            pos = 0
            while pos < end:
                (size,) = U32.unpack_from(block, pos)
                body = block[pos + 4 : pos + 4 + size]
                if self.deferred and KEY_VERSION.unpack_from(body, 0) in self.deferred:
                    frames.append(Undecoded(block[pos : pos + 4 + size]))
                    pos += 4 + size
                    continue
                pos += 4 + size
                try:
                    frames.append(_parse(body, self._parsers))
                except FrameError as exc:
                    error = exc
                    break
        if error is not None:
            self._error = error
            if not frames:
                raise error
        return frames

    def _scan_complete_frames(self) -> tuple[int, FrameError | None]:
        """Length of the buffer prefix made of complete frames, and the size error that
        stopped the scan, if any (checked before the frame's body has arrived)."""
        buf, limit = self._buffer, self.max_frame_size
        pos, available = 0, len(self._buffer)
        while available - pos >= 4:
            (size,) = U32.unpack_from(buf, pos)
            if size < _MIN_FRAME_SIZE:
                return pos, MalformedFrame(f"frame size {size} is smaller than key and version")
            if limit and size > limit:
                return pos, FrameTooLarge(size, limit)
            if available - pos - 4 < size:
                break
            pos += 4 + size
        return pos, None


def parse_frame(body: memoryview) -> Frame:
    """One client frame from its bytes after the size prefix (key, version, fields)."""
    return _parse(body, PARSERS)


def parse_reply(body: memoryview) -> Frame:
    """One server frame from its bytes after the size prefix (key, version, fields)."""
    return _parse(body, REPLY_PARSERS)


def _parse(body: memoryview, parsers: dict[tuple[int, int], Parser]) -> Frame:
    key, version = KEY_VERSION.unpack_from(body, 0)
    parser = parsers.get((key, version))
    reader = Reader(body, KEY_VERSION.size)
    if parser is None:
        correlation_id = reader.u32() if reader.remaining() >= 4 else None
        return UnknownCommand(key, version, correlation_id)
    try:
        frame = parser(reader)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:  # a field past the end
        raise MalformedFrame(f"malformed frame key=0x{key:04x} v{version}: {exc}") from None
    reader.expect_end()
    return frame


def encode(frame: Frame) -> bytes:
    """The complete wire bytes of a frame, size prefix included."""
    body = frame.body()
    return SIZE_KEY_VERSION.pack(4 + len(body), frame.wire_key(), frame.wire_version()) + body


def encode_deliver_prefix(
    subscription_id: int, version: int, chunk_total_len: int, committed_chunk_id: int = 0
) -> bytes:
    """Everything a Deliver frame holds before the chunk: size, key, version, subscription id
    and (version 2) the committed chunk id. The caller then writes the 48-byte chunk header
    and the data entries unchanged (no bloom filter, no trailer): `chunk_total_len` is their
    combined length, 48 + data length."""
    if chunk_total_len < CHUNK_HEADER_SIZE:
        raise ValueError(f"a chunk is at least {CHUNK_HEADER_SIZE} bytes, got {chunk_total_len}")
    if version == 1:
        size = _DELIVER_V1.size - 4 + chunk_total_len
        return _DELIVER_V1.pack(size, Key.DELIVER, 1, subscription_id)
    if version == 2:
        size = _DELIVER_V2.size - 4 + chunk_total_len
        return _DELIVER_V2.pack(size, Key.DELIVER, 2, subscription_id, committed_chunk_id)
    raise ValueError(f"Deliver has versions 1 and 2, not {version}")
