"""Segments: the byte-addressed view of a partition that the segment store protocol uses.

A segment `scope/stream/number` is partition `number` of stream `stream` in
namespace `scope`. Its bytes are its events as Event frames (8-byte header and
data) in append order; each event is one log record, so a record at offset N
whose payload starts at payload byte B starts at segment byte B + 8 * N.
Appenders are deduplicated by connection id: the highest connection offset
stored is a publisher sequence in the chunk trailer, written with the data.
Sealing and logical truncation are rows of the catalog (`segment_states`), read once
at start and kept in memory, since every append checks the seal. In a cluster they are
shared through `sharing` before they are answered, and changes made on other nodes come
in through `apply`: a seal is for good and a truncation point only moves forward, so
applying them in any order gives every node the same state.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from mainstem.broker.cluster_view import SegmentSharing
from mainstem.broker.errors import InvalidArgument, NotFound, PreconditionFailed
from mainstem.broker.stream_service import PartitionService
from mainstem.broker.streams import StreamStore
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_BIT
from mainstem.log.chunk import Chunk, encode_simple_entries
from mainstem.log.partition import DataRemoved, Partition

EVENT_HEADER = struct.Struct(">iI")  # type 0, data length
EVENT_TYPE = bytes(4)
DEFAULT_SCOPE = "/"  # an empty scope names the default namespace


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


class SegmentStore:
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
        self.sharing: SegmentSharing | None = None  # set by a node that joins a cluster

    def close(self) -> None:
        self._db.close()

    # -- names and state -------------------------------------------------------

    def partition(self, name: SegmentName) -> Partition:
        return self.service(name).partition

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
        partition = self.partition(name)
        physical = segment_byte(partition.first_offset, partition.first_byte)
        return max(physical, self.truncated_at(name))

    def write_offset(self, name: SegmentName) -> int:
        partition = self.partition(name)
        return segment_byte(partition.committed_offset, partition.committed_byte)

    # -- lifecycle ---------------------------------------------------------------

    def create(self, name: SegmentName) -> None:
        """A new stream of `number + 1` partitions; AlreadyExists when it exists."""
        self.streams.create(name.namespace, name.stream, name.number + 1)

    async def seal(self, name: SegmentName) -> None:
        await self.service(name).appender.settled()
        self._save(name, sealed=True)
        if self.sharing is not None:
            await self.sharing.seal(name.namespace, name.stream, name.number)

    async def truncate(self, name: SegmentName, offset: int) -> None:
        if not self.start_offset(name) <= offset <= self.write_offset(name):
            raise InvalidArgument(f"truncation offset {offset} is outside segment {name}")
        self._save(name, truncated=offset)
        if self.sharing is not None:
            await self.sharing.truncate(name.namespace, name.stream, name.number, offset)

    def apply(self, name: SegmentName, sealed: bool, truncated: int) -> None:
        """A seal or truncation made on another node: merged, never undone."""
        self._save(name, sealed=sealed or self.is_sealed(name),
                   truncated=max(truncated, self.truncated_at(name)))

    def states(self) -> dict[SegmentName, tuple[bool, int]]:
        """(sealed, truncation point) of every segment with either."""
        return {SegmentName.parse(key): (bool(state.get("sealed")), int(state.get("truncated", 0)))
                for key, state in self._state.items()}

    async def delete(self, name: SegmentName) -> None:
        stream = self.streams.get(name.namespace, name.stream)
        if len(stream.partitions) != 1 or name.number != 0:
            raise PreconditionFailed("only the single segment of a one-partition stream "
                                     "can be deleted")
        await self.streams.delete(name.namespace, name.stream)
        self.forget(name.namespace, name.stream)
        if self.sharing is not None:
            await self.sharing.forget(name.namespace, name.stream)

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
              framed: Sequence[bytes | memoryview], level: int) -> PartitionService:
        """Append events, each as its length (u32, big-endian) and data: the simple Osiris
        entry of the record that stores it, so what was read goes to the log uncopied.
        They are not yet durable; the appender's new connection offset is stored with
        them, so the level never runs ahead of the data."""
        if self.is_sealed(name):
            raise SegmentSealed(f"segment {name} is sealed")
        service = self.service(name)
        service.appender.append_simple_entries(framed, writer=writer_key(connection_id),
                                               sequence=level)
        return service

    # -- reading -----------------------------------------------------------------

    async def read(self, name: SegmentName, offset: int, max_bytes: int) -> Chunklet:
        """Event-frame bytes from `offset`; at the tail, waits up to `tail_wait_s`."""
        partition = self.partition(name)
        if offset < self.start_offset(name):
            raise SegmentTruncated(f"offset {offset} of {name} was truncated")
        if offset >= self.write_offset(name) and not self.is_sealed(name):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(partition.wait_for(partition.committed_offset),
                                       self.tail_wait_s)
        try:
            data = _read_frames(partition, offset, max_bytes)
        except DataRemoved as error:
            raise SegmentTruncated(f"offset {offset} of {name} was removed") from error
        end = self.write_offset(name)
        at_tail = offset + len(data) >= end
        return Chunklet(offset, data, at_tail, at_tail and self.is_sealed(name))


def _chunk_for(partition: Partition, pos: int) -> tuple[object, int] | None:
    """The last committed chunk starting at or before segment byte `pos`."""
    lo, hi = partition.first_offset, partition.committed_offset
    best = None
    while lo < hi:
        found = partition.find_committed((lo + hi) // 2)
        if found is None:
            hi = (lo + hi) // 2
            continue
        segment, i = found
        index = segment.index
        chunk_id = index.chunk_ids[i]
        if segment_byte(chunk_id, index.byte_positions[i]) <= pos:
            best = found
            lo = chunk_id + index.record_counts[i]
        else:
            hi = chunk_id
    return best


def _read_frames(partition: Partition, pos: int, max_bytes: int) -> bytes | memoryview:
    """Up to `max_bytes` of event frames from segment byte `pos`: the frames that overlap
    the range, joined once, then cut to it."""
    if pos < segment_byte(partition.first_offset, partition.first_byte):
        raise DataRemoved(f"byte {pos} was removed", partition.first_byte)
    found = _chunk_for(partition, pos)
    stored: list[bytes | memoryview] = [b""]  # the records' simple entries (length, body)
    first: int | None = None  # the segment byte where the first of them begins
    at, high = pos, pos + max_bytes
    while found is not None and at < high:
        segment, i = found
        chunk = segment.read_chunk(i)  # type: ignore[attr-defined]
        at = segment_byte(chunk.chunk_id, segment.index.byte_positions[i])  # type: ignore[attr-defined]
        begins, at = _overlapping_entries(chunk, at, pos, high, stored)
        first = begins if first is None else first
        found = partition.find_committed(chunk.next_offset, found)  # type: ignore[arg-type]
    if first is None:
        return b""
    # An entry is its record's Event frame once the event type goes in front.
    return memoryview(EVENT_TYPE.join(stored))[pos - first:high - first]


def _overlapping_entries(chunk: Chunk, at: int, low: int, high: int,
                         stored: list[bytes | memoryview]) -> tuple[int | None, int]:
    """Add to `stored` the simple entries of the chunk's records whose frames overlap
    segment bytes [low, high), the chunk starting at byte `at`. Returns where the first
    added frame starts (None: none added) and the byte after the last record seen."""
    mark = len(stored)
    done = _simple_entries(chunk.data, chunk.header.num_entries, at, low, high, stored)
    if done is None:  # sub-batches inside (a stream publisher's): a frame per entry body
        del stored[mark:]
        bodies = [body for _, body in chunk.records()]
        done = _simple_entries(memoryview(encode_simple_entries(bodies)), len(bodies), at, low,
                               high, stored)
        assert done is not None
    return done


def _simple_entries(data: memoryview, entries: int, at: int, low: int, high: int,
                    stored: list[bytes | memoryview]) -> tuple[int | None, int] | None:
    """`_overlapping_entries` of a data section of simple entries; None when a sub-batch
    turns up. Two tight loops: skip to `low`, then take up to `high`."""
    pos = n = 0
    unpack = SIMPLE_ENTRY.unpack_from
    while n < entries:
        (length,) = unpack(data, pos)
        if length & SUB_BATCH_BIT:
            return None
        if at + EVENT_HEADER.size + length > low:
            break
        pos, at, n = pos + 4 + length, at + EVENT_HEADER.size + length, n + 1
    begins = at if n < entries and at < high else None
    take = stored.append
    while n < entries and at < high:
        (length,) = unpack(data, pos)
        if length & SUB_BATCH_BIT:
            return None
        take(data[pos:pos + 4 + length])
        pos, at, n = pos + 4 + length, at + EVENT_HEADER.size + length, n + 1
    return begins, at


def check_found(name: SegmentName, streams: StreamStore) -> None:
    """NotFound unless the segment exists."""
    stream = streams.find(name.namespace, name.stream)
    if stream is None or name.number >= len(stream.partitions):
        raise NotFound(f"segment {name} does not exist")
