"""Sending a committed chunk from its segment file to a socket, as Osiris's send_file.

The protocol supplies only its frame header; the chunk's 48-byte header and data go
after it, from the page cache to the socket by sendfile when the kernel takes them at
once, else read and handed to the protocol's writer. A small chunk is read whole when
it is peeked at and goes out in one write with its frame header: one send, where a
write and a sendfile would be two, each waking the reader (what a subscriber at the
tail of a steady stream gets, chunk after chunk). A chunk's bloom filter stays on
disk: a subscriber gets the header and data entries, and the size the frame declares
is `ChunkView.wire_size`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from mainstem.formats.chunk import BLOOM_SIZE_AT, MAX_BLOOM_SIZE
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.partition import ChunkLocation

# Chunks up to this many bytes (header, filter and data) are read whole by `peek`.
READ_WHOLE_UP_TO = 64 * 1024


@dataclass(frozen=True, slots=True)
class ChunkView:
    """A committed chunk's place on disk with its header and bloom filter read; `whole`
    holds all of its header, filter and data when it is small."""

    location: ChunkLocation
    header: bytes
    bloom: memoryview
    whole: bytes | None = None

    @property
    def wire_size(self) -> int:
        """Bytes of header and data entries: what a subscriber receives of the chunk."""
        return self.location.send_size - len(self.bloom)

    @property
    def num_records(self) -> int:
        return self.location.next_offset - self.location.chunk_id


def peek(location: ChunkLocation) -> ChunkView:
    """Read the chunk's header and bloom filter, or the whole of a small chunk (one pread)."""
    whole = location.send_size <= READ_WHOLE_UP_TO
    size = location.send_size if whole else HEADER_SIZE + MAX_BLOOM_SIZE
    head = os.pread(location.segment.fileno(), size, location.file_pos)
    bloom = memoryview(head)[HEADER_SIZE:HEADER_SIZE + head[BLOOM_SIZE_AT]]
    return ChunkView(location, head[:HEADER_SIZE], bloom, head if whole else None)


def send_chunk(view: ChunkView, frame_header: bytes, socket_fd: int | None,
               write: Callable[[bytes], None]) -> None:
    """Send `frame_header`, then the chunk's header and data. With `socket_fd` (a plain
    socket with nothing queued before it) the kernel takes what it can at once; the
    rest goes through `write`. A chunk read whole goes in one write with the frame
    header. Else, without a filter, header and data lie together and go straight from
    the file; with one, the header goes with the frame header."""
    if view.whole is not None:
        data = view.whole
        if view.bloom:  # the filter stays behind
            data = view.header + data[HEADER_SIZE + len(view.bloom):]
        sent = 0 if socket_fd is None else _write_now(socket_fd, frame_header, data)
        _write_rest(frame_header, data, sent, write)
        return
    location = view.location
    prefix, start, length = frame_header, location.file_pos, location.send_size
    if view.bloom:
        prefix += view.header
        start, length = start + HEADER_SIZE + len(view.bloom), view.wire_size - HEADER_SIZE
    send_range(location.segment.fileno(), start, length, prefix, socket_fd, write)


def send_range(segment_fd: int, start: int, length: int, prefix: bytes, socket_fd: int | None,
               write: Callable[[bytes], None]) -> None:
    """Send `prefix`, then `length` bytes of a segment file from `start`: by sendfile as
    far as the kernel takes them at once (with `socket_fd`), the rest through `write`."""
    sent = 0 if socket_fd is None else _send_now(socket_fd, prefix, segment_fd, start, length)
    if sent < len(prefix):
        write(prefix[sent:])
        sent = len(prefix)
    done = sent - len(prefix)
    if done < length:
        write(os.pread(segment_fd, length - done, start + done))


def _send_now(socket_fd: int, prefix: bytes, segment_fd: int, start: int, length: int) -> int:
    """Send the prefix, then `length` bytes of the segment file from `start`, for as long
    as the kernel takes them without blocking; return how many bytes went."""
    try:
        sent = os.write(socket_fd, prefix)
    except (BlockingIOError, InterruptedError):
        return 0
    if sent < len(prefix):
        return sent
    try:
        return sent + os.sendfile(socket_fd, segment_fd, start, length)
    except (BlockingIOError, InterruptedError):
        return sent


def _write_now(socket_fd: int, first: bytes, second: bytes) -> int:
    """Write both in one system call, as far as the kernel takes them without blocking;
    return how many bytes went."""
    try:
        return os.writev(socket_fd, (first, second))
    except (BlockingIOError, InterruptedError):
        return 0


def _write_rest(first: bytes, second: bytes, sent: int, write: Callable[[bytes], None]) -> None:
    """Hand `write` what `_write_now` left of `first` then `second`."""
    if sent < len(first):
        write(first[sent:])
        sent = len(first)
    if sent - len(first) < len(second):
        write(second[sent - len(first):])
