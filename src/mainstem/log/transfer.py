"""Sending a committed chunk from its segment file to a socket, as Osiris's send_file.

The protocol supplies only its frame header; the chunk's 48-byte header and data go
after it as a `Transfer`: from the page cache to the socket by sendfile as far as the
kernel takes them, the rest only when the socket can take more (the protocol's output
paces it, a piece at a time), so a subscriber that does not read holds a small piece of
memory in the broker, never its backlog. A Transfer that waits pins its segment's
descriptor: retention may delete the segment meanwhile, its bytes stay readable until
the Transfer is released. A small chunk is read whole when it is peeked at and goes out
in one write with its frame header: one send, where a write and a sendfile would be two,
each waking the reader (what a subscriber at the tail of a steady stream gets, chunk
after chunk). A chunk is checked against its CRCs before it is sent unless it is known
sound (written by this process, or checked since open: `Segment.verified`), so a damaged
one never reaches a client; a small one is checked in the read that peeks at it. A
chunk's bloom filter stays on disk: a subscriber gets the header and data entries, and
the size the frame declares is `ChunkView.wire_size`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from mainstem.formats.chunk import BLOOM_SIZE_AT, MAX_BLOOM_SIZE
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.chunk_stream import check_chunk
from mainstem.log.partition import ChunkLocation
from mainstem.log.segment_file import Segment

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
    """Read the chunk's header and bloom filter, or the whole of a small chunk (one pread),
    having checked its CRCs unless it is known sound (ChunkDamaged when they fail): a small
    one in the same read, with its trailer and guard."""
    segment, i = location.segment, location.index
    whole = location.send_size <= READ_WHOLE_UP_TO
    if whole and not segment.verified(i):
        _, stored = segment.chunk_span(i)
        raw = os.pread(segment.fileno(), stored, location.file_pos)
        segment.check(i, raw)
        head = raw[:location.send_size]
    else:
        check_chunk(segment, i)
        size = location.send_size if whole else HEADER_SIZE + MAX_BLOOM_SIZE
        head = os.pread(segment.fileno(), size, location.file_pos)
    bloom = memoryview(head)[HEADER_SIZE:HEADER_SIZE + head[BLOOM_SIZE_AT]]
    return ChunkView(location, head[:HEADER_SIZE], bloom, head if whole else None)


class Transfer:
    """`head` (in memory: a frame header, maybe the chunk's header), then `ranges` of a
    segment file (position, length), sent as the socket takes them. `body`, when given,
    holds the ranges' bytes already read: sent with the head in one writev, and dropped
    once the socket falls behind (the rest is read from the file as it goes). A transfer
    that does not go at once pins the segment's descriptor (`hold`) until `release`."""

    __slots__ = ("_body", "_fd", "_head", "_ranges", "_segment", "_sent", "size")

    def __init__(self, segment: Segment, head: bytes, ranges: tuple[tuple[int, int], ...],
                 body: bytes | None = None) -> None:
        self._segment: Segment | None = segment
        self._fd = -1  # the pinned descriptor, once held
        self._head = head
        self._ranges = ranges
        self._body = body
        self._sent = 0
        self.size = len(head) + (ranges[0][1] if len(ranges) == 1
                                 else sum(length for _, length in ranges))

    def hold(self) -> None:
        """Keep the file readable across steps (a send that waits for its socket), even
        once retention deletes the segment: its descriptor stays pinned until `release`."""
        if self._fd < 0 and self._segment is not None:
            self._fd = self._segment.pin()

    @property
    def remaining(self) -> int:
        return self.size - self._sent

    def send_now(self, socket_fd: int) -> bool:
        """Send on for as long as the kernel takes bytes without blocking (a non-blocking
        socket); True once everything went."""
        try:
            while self._sent < self.size:
                sent, wanted = self._send_some(socket_fd)
                self._sent += sent
                if sent < wanted:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        if self._sent < self.size:
            self._body = None  # the socket is behind: hold no more than the descriptor
            self.hold()
            return False
        return True

    def _send_some(self, socket_fd: int) -> tuple[int, int]:
        """One system call: (bytes sent, bytes offered)."""
        head = len(self._head)
        if self._body is not None:
            if not self._sent:  # the common case: all of it, at once
                return os.writev(socket_fd, (self._head, self._body)), self.size
            parts = [memoryview(self._body)[max(self._sent - head, 0):]]
            if self._sent < head:
                parts.insert(0, memoryview(self._head)[self._sent:])
            return os.writev(socket_fd, parts), sum(len(part) for part in parts)
        if self._sent < head:
            rest = memoryview(self._head)[self._sent:]
            return os.write(socket_fd, rest), len(rest)
        start, length = self._file_span(self._sent - head)
        return os.sendfile(socket_fd, self._file(), start, length), length

    def take(self, limit: int) -> bytes:
        """The next bytes, at most `limit` of them, for a writer; counted as sent."""
        self.hold()  # what is left goes in later steps
        parts: list[bytes] = []
        wanted = min(limit, self.remaining)
        head = len(self._head)
        while wanted:
            if self._sent < head:
                part = self._head[self._sent:self._sent + wanted]
            elif self._body is not None:
                at = self._sent - head
                part = self._body[at:at + wanted]
            else:
                start, length = self._file_span(self._sent - head)
                part = os.pread(self._fd, min(wanted, length), start)
                if not part:
                    raise OSError(f"segment file {self._segment} ends before its chunk")
            parts.append(part)
            self._sent += len(part)
            wanted -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _file(self) -> int:
        """The segment's descriptor: pinned, or for use within this step."""
        if self._fd >= 0:
            return self._fd
        assert self._segment is not None, "released"
        return self._segment.fileno()

    def _file_span(self, offset: int) -> tuple[int, int]:
        """Where the body's byte `offset` lies in the file, and how much of its range follows."""
        for start, length in self._ranges:
            if offset < length:
                return start + offset, length - offset
            offset -= length
        raise AssertionError("past the end of the transfer")

    def release(self) -> None:
        """Unpin the segment's descriptor, if held (once; later calls do nothing)."""
        segment, self._segment, self._body = self._segment, None, None
        if segment is not None and self._fd >= 0:
            segment.unpin()
        self._fd = -1


def transfer(view: ChunkView, frame_header: bytes) -> Transfer:
    """`frame_header`, then the chunk's header and data entries (its filter left out)."""
    location = view.location
    bloom = len(view.bloom)
    if not bloom:  # header and data lie together
        return Transfer(location.segment, frame_header,
                        ((location.file_pos, location.send_size),), view.whole)
    data = (location.file_pos + HEADER_SIZE + bloom, view.wire_size - HEADER_SIZE)
    if view.whole is None:
        return Transfer(location.segment, frame_header + view.header, (data,))
    body = view.header + view.whole[HEADER_SIZE + bloom:]
    return Transfer(location.segment, frame_header, ((location.file_pos, HEADER_SIZE), data),
                    body)


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
