"""Segments: the byte-addressed view of a partition that the segment store protocol uses.

A segment `scope/stream/number` is partition `number` of stream `stream` in
namespace `scope`. Its bytes are its events as Event frames (8-byte header and
data) in append order; each event is one log record, so a record at offset N
whose payload starts at payload byte B starts at segment byte B + 8 * N.
Appenders are deduplicated by connection id: the highest connection offset
stored is a publisher sequence in the chunk trailer, written with the data.
Sealing and logical truncation are rows of the catalog (`segment_states`), read once
at start and kept in memory, since every append checks the seal. In a cluster a
segment's state is a "segment" change (`broker.replicated`), shared before the client is
answered; changes made on other nodes come in through `apply`: a seal is for good and a
truncation point only moves forward (`merge`), so applying them in any order gives every
node the same state.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import operator
import sqlite3
import struct
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mainstem.broker.catalog import ChangeNotifier
from mainstem.broker.errors import InvalidArgument, NotFound, PreconditionFailed
from mainstem.broker.stream_service import (
    ChunkDamaged,
    ChunkLocation,
    DataRemoved,
    NotFetched,
    PartitionService,
    Receipt,
    fetching,
)
from mainstem.broker.streams import StreamStore
from mainstem.formats.chunk import Chunk, encode_simple_entries
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_BIT

EVENT_HEADER = struct.Struct(">iI")  # type 0, data length
EVENT_TYPE = bytes(4)
RECENT_CHUNKS = 8  # walked chunks kept for the next read (each up to a chunk's size)
DEFAULT_SCOPE = "/"  # an empty scope names the default namespace
SEGMENT = "segment"  # the kind of its changes: key (namespace, stream, number)


class SegmentSealed(PreconditionFailed):
    """Appending to a sealed segment."""


class SegmentTruncated(PreconditionFailed):
    """Reading below a segment's truncation point."""


@dataclass(frozen=True, slots=True)
class SegmentName:
    namespace: str
    stream: str
    number: int

    @classmethod
    def parse(cls, name: str) -> SegmentName:
        parts = name.rsplit("/", 2)
        if len(parts) != 3 or not parts[1] or not parts[2].isdigit():
            raise InvalidArgument(f"segment name '{name}' is not scope/stream/number")
        return cls(parts[0] or DEFAULT_SCOPE, parts[1], int(parts[2]))

    def __str__(self) -> str:
        scope = "" if self.namespace == DEFAULT_SCOPE else self.namespace
        return f"{scope}/{self.stream}/{self.number}"


@dataclass(frozen=True, slots=True)
class Chunklet:
    """Bytes read from a segment."""

    offset: int
    data: bytes | memoryview
    at_tail: bool
    end_of_segment: bool


def segment_byte(offset: int, payload_byte: int) -> int:
    return payload_byte + EVENT_HEADER.size * offset


def writer_key(connection_id: uuid.UUID) -> str:
    return "segment:" + connection_id.hex


def merge(held: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """Two states of one segment as one: sealed if either is, the later truncation."""
    return {"sealed": bool(held["sealed"] or written["sealed"]),
            "truncated": max(int(held["truncated"]), int(written["truncated"]))}


class SegmentStore(ChangeNotifier):
    def __init__(self, streams: StreamStore, db: sqlite3.Connection,
                 tail_wait_s: float = 30.0) -> None:
        """`db`: a connection of its own to the catalog (`Catalog.connect`), closed by
        `close`."""
        self.streams = streams
        self.tail_wait_s = tail_wait_s
        self._db = db
        self._state: dict[str, dict[str, int | bool]] = {
            str(SegmentName(namespace, stream, number)): {"sealed": bool(sealed),
                                                          "truncated": truncated}
            for namespace, stream, number, sealed, truncated in db.execute(
                "SELECT namespace, stream, number, sealed, truncated FROM segment_states")}
        self._recent = _RecentChunks()

    def close(self) -> None:
        self._db.close()

    # -- names and state -------------------------------------------------------

    def service(self, name: SegmentName) -> PartitionService:
        return self.streams.service(name.namespace, name.stream, name.number)

    def is_sealed(self, name: SegmentName) -> bool:
        return bool(self._state.get(str(name), {}).get("sealed", False))

    def truncated_at(self, name: SegmentName) -> int:
        return int(self._state.get(str(name), {}).get("truncated", 0))

    def _save(self, name: SegmentName, **changes: int | bool) -> None:
        state = {**self._state.get(str(name), {}), **changes}
        self._db.execute(
            "INSERT OR REPLACE INTO segment_states VALUES (?, ?, ?, ?, ?)",
            (name.namespace, name.stream, name.number, bool(state.get("sealed", False)),
             int(state.get("truncated", 0))))
        self._state[str(name)] = state

    def start_offset(self, name: SegmentName) -> int:
        service = self.service(name)
        physical = segment_byte(service.first_offset, service.first_byte)
        return max(physical, self.truncated_at(name))

    def write_offset(self, name: SegmentName) -> int:
        service = self.service(name)
        return segment_byte(service.committed_offset, service.committed_byte)

    # -- lifecycle ---------------------------------------------------------------

    async def seal(self, name: SegmentName) -> None:
        await self.service(name).appender.settled()
        self._save(name, sealed=True)
        await self._share(name)

    async def truncate(self, name: SegmentName, offset: int) -> None:
        if not self.start_offset(name) <= offset <= self.write_offset(name):
            raise InvalidArgument(f"truncation offset {offset} is outside segment {name}")
        self._save(name, truncated=offset)
        await self._share(name)

    async def _share(self, name: SegmentName) -> None:
        await self._shared(SEGMENT, (name.namespace, name.stream, name.number),
                           self._row(name))

    def _row(self, name: SegmentName) -> dict[str, Any]:
        return {"sealed": self.is_sealed(name), "truncated": self.truncated_at(name)}

    def apply(self, key: Sequence[str], row: dict[str, Any] | None) -> None:
        """A segment's state from another node: merged, never undone; None: its stream
        was deleted."""
        namespace, stream, number = key
        if row is None:
            self.forget(namespace, stream)
            return
        name = SegmentName(namespace, stream, int(number))
        self._save(name, **merge(self._row(name), row))

    def rows(self) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """(key, state) of every segment sealed or truncated."""
        for key in self._state:
            name = SegmentName.parse(key)
            yield (name.namespace, name.stream, name.number), self._row(name)

    async def delete(self, name: SegmentName) -> None:
        stream = self.streams.get(name.namespace, name.stream)
        if len(stream.partitions) != 1 or name.number != 0:
            raise PreconditionFailed("only the single segment of a one-partition stream "
                                     "can be deleted")
        await self.streams.delete(name.namespace, name.stream)
        self.forget(name.namespace, name.stream)
        await self._shared(SEGMENT, (name.namespace, name.stream, name.number), None)

    def forget(self, namespace: str, stream: str) -> None:
        """Drop the state of a stream's segments (deleted here or on another node)."""
        stream_prefix = str(SegmentName(namespace, stream, 0)).rsplit("/", 1)[0] + "/"
        for key in [k for k in self._state if k.startswith(stream_prefix)]:
            del self._state[key]
        self._db.execute("DELETE FROM segment_states WHERE namespace = ? AND stream = ?",
                         (namespace, stream))

    # -- appending ---------------------------------------------------------------

    async def ack_level(self, name: SegmentName, connection_id: uuid.UUID) -> int:
        """The highest connection offset durably stored for this appender."""
        return await self.service(name).appender.committed_sequence(
            writer_key(connection_id)) or 0

    def write(self, name: SegmentName, connection_id: uuid.UUID,
              framed: Sequence[bytes | memoryview], level: int) -> Receipt:
        """Append events, each as its length (u32, big-endian) and data: the simple Osiris
        entry of the record that stores it, so what was read goes to the log uncopied.
        They are not yet durable; the appender's new connection offset is stored with
        them, so the level never runs ahead of the data."""
        if self.is_sealed(name):
            raise SegmentSealed(f"segment {name} is sealed")
        return self.service(name).appender.append_simple_entries(
            framed, writer=writer_key(connection_id), sequence=level)

    # -- reading -----------------------------------------------------------------

    async def wait_readable(self, name: SegmentName, offset: int) -> None:
        """At the tail of an open segment, wait up to `tail_wait_s` for more events."""
        service = self.service(name)
        if offset >= self.write_offset(name) and not self.is_sealed(name):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tail_wait_s):
                    await service.wait_for(service.committed_offset)

    async def read(self, name: SegmentName, offset: int, max_bytes: int) -> Chunklet:
        """Event-frame bytes from `offset`, as far as they are written (tiered chunks
        fetched first). A damaged chunk in the way is reported and raised (ChunkDamaged)."""
        try:
            return await fetching(lambda: self._read_now(name, offset, max_bytes))
        except ChunkDamaged as error:
            self.service(name).damage.report(error)
            raise

    def _read_now(self, name: SegmentName, offset: int, max_bytes: int) -> Chunklet:
        """Event-frame bytes from `offset`, as far as they are written and local."""
        service = self.service(name)
        if offset < self.start_offset(name):
            raise SegmentTruncated(f"offset {offset} of {name} was truncated")
        try:
            data = _read_frames(service, offset, max_bytes, self._recent)
        except DataRemoved as error:
            raise SegmentTruncated(f"offset {offset} of {name} was removed") from error
        end = self.write_offset(name)
        at_tail = offset + len(data) >= end
        return Chunklet(offset, data, at_tail, at_tail and self.is_sealed(name))


def _chunk_for(service: PartitionService, pos: int) -> ChunkLocation | None:
    """The last committed chunk starting at or before segment byte `pos`."""
    lo, hi = service.first_offset, service.committed_offset
    best = None
    while lo < hi:
        found = service.locate((lo + hi) // 2)
        if found is None:
            hi = (lo + hi) // 2
        elif segment_byte(found.chunk_id, found.first_byte) <= pos:
            best = found
            lo = found.next_offset
        else:
            hi = found.chunk_id
    return best


class _ChunkFrames:
    """One chunk's records as the Event frames a read returns, walked once: the segment
    byte where each frame starts, and each record's simple entry (its length and data:
    an Event frame is that entry with the event type in front)."""

    __slots__ = ("_bytes", "_data", "_starts")

    def __init__(self, chunk: Chunk, at: int) -> None:
        data = chunk.data
        starts = _entry_starts(data, chunk.header.num_entries)
        if starts is None:  # sub-batches inside (a stream publisher's): a frame per body
            bodies = [body for _, body in chunk.records()]
            data = memoryview(encode_simple_entries(bodies))
            starts = _entry_starts(data, len(bodies))
            assert starts is not None
        self._data, self._starts = data, starts
        # A frame is 4 bytes longer than its entry: frame k starts 4 * k further on.
        self._bytes = list(map(operator.add, starts, range(at, at + 4 * len(starts), 4)))

    def overlapping(self, low: int, high: int) -> tuple[int, list[memoryview], int]:
        """The entries whose frames overlap segment bytes [low, high): where the first
        frame starts, the entries, and where the last ends (nothing left to read when
        that is `high` or beyond, or when no entry overlaps)."""
        frame_bytes, last = self._bytes, len(self._bytes) - 1
        first = max(bisect.bisect_right(frame_bytes, low) - 1, 0)
        end = min(bisect.bisect_left(frame_bytes, high, first), last)
        data, starts = self._data, self._starts
        entries = [data[starts[k]:starts[k + 1]] for k in range(first, end)]
        return frame_bytes[min(first, last)], entries, frame_bytes[min(max(first, end), last)]


def _entry_starts(data: memoryview, entries: int) -> list[int] | None:
    """Where each simple entry of a data section starts, then where the last ends; None
    when a sub-batch turns up."""
    starts, pos = [0] * (entries + 1), 0
    unpack = SIMPLE_ENTRY.unpack_from
    for k in range(1, entries + 1):
        (length,) = unpack(data, pos)
        if length & SUB_BATCH_BIT:
            return None
        pos = starts[k] = pos + 4 + length
    return starts


class _RecentChunks:
    """The chunks read last, walked: a reader's next request usually starts inside the
    chunk its last one ended in, which is then neither read, checked nor walked again."""

    def __init__(self, size: int = RECENT_CHUNKS) -> None:
        self._size = size
        self._chunks: dict[tuple[PartitionService, int], _ChunkFrames] = {}

    def frames(self, service: PartitionService, found: ChunkLocation) -> _ChunkFrames:
        """The frames of the chunk at `found`."""
        key = (service, found.chunk_id)
        frames = self._chunks.pop(key, None)
        if frames is None:
            chunk = found.read()
            if chunk is None:  # retention took it since it was found
                raise DataRemoved(f"chunk {found.chunk_id} was removed", service.first_byte)
            frames = _ChunkFrames(chunk, segment_byte(found.chunk_id, found.first_byte))
            if len(self._chunks) >= self._size:
                del self._chunks[next(iter(self._chunks))]
        self._chunks[key] = frames  # the most recent last
        return frames


def _read_frames(service: PartitionService, pos: int, max_bytes: int,
                 recent: _RecentChunks) -> bytes | memoryview:
    """Up to `max_bytes` of event frames from segment byte `pos`: the frames that overlap
    the range, joined once, then cut to it; tiered chunks only while they are local."""
    if pos < segment_byte(service.first_offset, service.first_byte):
        raise DataRemoved(f"byte {pos} was removed", service.first_byte)
    found = _chunk_for(service, pos)
    stored: list[bytes | memoryview] = [b""]  # the records' simple entries (length, body)
    first: int | None = None  # the segment byte where the first of them begins
    at, high = pos, pos + max_bytes
    while found is not None and at < high:
        try:
            frames = recent.frames(service, found)
        except (NotFetched, ChunkDamaged):
            if first is None:
                raise  # the caller fetches it and reads again, or answers the damage
            break  # a short read: one that waited for every chunk could need more than the
            # tier cache holds, each fetch evicting what the one before brought; a damaged
            # chunk is answered when a read starts there, after the events before it
        begins, entries, at = frames.overlapping(pos, high)
        if entries:
            first = begins if first is None else first
            stored += entries
        found = service.locate(found.next_offset)
    if first is None:
        return b""
    # An entry is its record's Event frame once the event type goes in front.
    return memoryview(EVENT_TYPE.join(stored))[pos - first:high - first]


def check_found(name: SegmentName, streams: StreamStore) -> None:
    """NotFound unless the segment exists."""
    stream = streams.find(name.namespace, name.stream)
    if stream is None or name.number >= len(stream.partitions):
        raise NotFound(f"segment {name} does not exist")
