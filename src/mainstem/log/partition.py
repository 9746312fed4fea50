"""A partition: one ordered log of records, stored as a run of segment files.

Offsets count records from 0. A record becomes visible to readers once its
chunk reaches the durability point (`committed_offset`), so nothing a reader
sees can vanish in a crash. Besides offsets, every payload byte has a position
in the partition's byte stream, for protocols that address data by bytes.

This module keeps the local files (Kafka's LocalLog): writing, reading, rolling, retention
and cutting a tail. What readers may see as the replica set agrees is `commits`
(`log/commit_view.py`), the leader epochs are `epochs` (`log/epochs.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mainstem.formats.chunk import (
    FIRST_EPOCH,
    Chunk,
    ChunkData,
    ChunkType,
    CorruptChunk,
    data_length,
    encode_header,
    encode_simple_entries,
    payload_size,
)
from mainstem.formats.osiris import HEADER_SIZE, MAX_CHUNK_ENTRIES
from mainstem.log.commit import FsyncTimings, GroupCommit
from mainstem.log.commit_view import CommitView
from mainstem.log.descriptors import DescriptorCache, shared_cache
from mainstem.log.epochs import Epochs
from mainstem.log.errors import DataRemoved, NotWritable, PartitionClosed
from mainstem.log.guard import GUARD, guard
from mainstem.log.index import IndexEntry
from mainstem.log.policy import DurabilityPolicy, RetentionPolicy
from mainstem.log.segment_file import SEGMENT_VERSION, Segment, chunk_from
from mainstem.log.segments import Segments, fsync_directory
from mainstem.log.tier_upload import TieredRecord
from mainstem.log.tiered_segment import NotFetched, TieredSegment
from mainstem.log.verify import ChunkCheck, ChunkRun, replace_chunk
from mainstem.log.writer_state import WriterState


@dataclass(frozen=True, slots=True)
class Appended:
    chunk_id: int  # offset of the chunk's first record
    next_offset: int


@dataclass(frozen=True, slots=True)
class ChunkLocation:
    """Where a committed chunk lies on disk, for sending it without reading it.

    `send_size` covers the 48-byte header, the bloom filter (if any) and the data
    entries: what the stream protocol's Deliver carries once the filter is left out
    (the trailer and the guard always are).
    """

    segment: Segment  # holds the file descriptor open while the caller sends
    file_pos: int
    send_size: int
    chunk_id: int
    next_offset: int
    first_byte: int  # the partition's payload byte where the chunk's records begin
    index: int  # the chunk's place in its segment

    def read(self) -> Chunk | None:
        """The chunk, read and checked; None once retention has deleted its segment."""
        return None if self.segment.deleted else self.segment.read_chunk(self.index)


@dataclass(frozen=True, slots=True)
class WrittenChunk:
    """A written chunk (durable or not yet) whole, trailer and guard included, for a
    follower: where it lies, and whether it opens a segment (the follower rolls there too,
    so that each of its segments also starts with a chunk restating every writer
    sequence). A chunk of a version-1 segment comes `rewritten` in the current layout,
    the only one a follower stores."""

    segment: Segment
    file_pos: int
    size: int
    chunk_id: int
    next_offset: int
    opens_segment: bool
    rewritten: bytes | None = None


class Partition:
    def __init__(self, directory: Path, segments: Segments, durability: DurabilityPolicy,
                 retention: RetentionPolicy, epoch: int, fsync_on_demand: bool = False,
                 fsync_timings: FsyncTimings | None = None) -> None:
        self.directory = directory
        self.retention = retention
        self._segments = segments
        self.epochs = Epochs(segments, epoch)
        active = segments.active
        self.next_offset = active.next_offset
        self.next_byte = active.next_byte
        self._last_chunk_id, self._last_timestamp = segments.last_chunk()
        self.writers = WriterState.recover(segments)
        self.commits = CommitView(segments, self._commit_moved)
        self.writable = True  # False on a follower: only its leader's chunks come in
        self._written_tail: asyncio.Future[None] | None = None
        self._dirty: dict[int, Segment] = {}
        self._commit = GroupCommit(durability, self._sync_dirty, self.commits.reached_disk,
                                   durable=self.next_offset, on_demand=fsync_on_demand,
                                   timings=fsync_timings)
        self._closed = False
        self._retention_waits = False  # see apply_retention
        # Told of each tiered segment retention drops, whose objects are then to delete.
        self.tier_dropped: Callable[[TieredRecord], None] | None = None

    # -- opening and closing -------------------------------------------------

    @classmethod
    def open(cls, directory: Path, *, durability: DurabilityPolicy | None = None,
             retention: RetentionPolicy | None = None, epoch: int = FIRST_EPOCH,
             fsync_on_demand: bool = False, descriptors: DescriptorCache | None = None,
             fsync_timings: FsyncTimings | None = None) -> Partition:
        """Open (creating if needed) and recover the partition stored in `directory`.
        With `fsync_on_demand`, appends are fsynced only once someone waits on `commit`
        (and written data is visible to readers only then). Its files' descriptors come
        from `descriptors` (the process's shared cache when None); its fsync rounds report
        their durations to `fsync_timings`."""
        return cls(directory, Segments.open(directory, descriptors or shared_cache()),
                   durability or DurabilityPolicy(), retention or RetentionPolicy(), epoch,
                   fsync_on_demand, fsync_timings)

    def close(self) -> None:
        """Flush and close; blocking. Use `aclose` from a running event loop."""
        if self._closed:
            return
        self._commit.sync_now()
        self._closed = True
        self.commits.close()
        self._segments.close()

    async def aclose(self) -> None:
        await self._commit.drain()
        self.close()

    # -- state ---------------------------------------------------------------

    @property
    def sequences(self) -> dict[str, int]:
        """Writer reference -> last sequence written (durable or not yet)."""
        return self.writers.last

    @property
    def first_offset(self) -> int:
        return self._segments[0].first_chunk_id

    @property
    def first_byte(self) -> int:
        return self._segments[0].first_byte

    @property
    def committed_offset(self) -> int:
        return self.commits.offset

    @property
    def committed_chunk_id(self) -> int:
        return self.commits.chunk_id

    @property
    def committed_byte(self) -> int:
        return self.commits.byte

    @property
    def size_bytes(self) -> int:
        return self._segments.size

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def tiered_bytes(self) -> int:
        return self._segments.tiered_size

    @property
    def local_first_offset(self) -> int:
        """The first offset kept on local disk (the tiered ones lie below it)."""
        return self._segments.local[0].first_chunk_id

    @property
    def tiered_records(self) -> list[TieredRecord]:
        """The records of the tiered segments, oldest first."""
        return [segment.record for segment in self._segments[:self._segments.tiered_count]
                if isinstance(segment, TieredSegment)]

    # -- tiering: sealed segments move to a tier, oldest first ----------------------------

    def tier_candidates(self, now_ms: int | None = None) -> list[Segment]:
        """The oldest local segments past the local limits, oldest first: sealed, and
        replaced by later committed data as retention requires (so never the active
        segment nor the last one holding chunks, which recovery reads)."""
        policy = self.retention
        if policy.local_max_bytes is None and policy.local_max_age_ms is None:
            return []
        now_ms = _now_ms() if now_ms is None else now_ms
        local = self._segments.local
        total = sum(segment.size for segment in local)
        candidates = []
        for segment in local[:-1]:
            too_big = policy.local_max_bytes is not None and total > policy.local_max_bytes
            last_ts = segment.last_timestamp
            too_old = (policy.local_max_age_ms is not None and last_ts is not None
                       and last_ts < now_ms - policy.local_max_age_ms)
            if not (too_big or too_old) or not self._replaced(segment):
                break
            candidates.append(segment)
            total -= segment.size
        return candidates

    def attach_tiered(self, tiered: Sequence[TieredSegment]) -> list[TieredSegment]:
        """Put the partition's tiered segments (from its records) before its local ones;
        those the local files still hold are returned, not attached (see Segments)."""
        return self._segments.attach_tiered(tiered)

    def oldest_sealed(self) -> Segment | None:
        """The oldest local segment unless it is the active one."""
        local = self._segments.local
        return local[0] if len(local) > 1 else None

    def swap_tiered(self, tiered: TieredSegment) -> None:
        """The oldest local segment was uploaded and recorded: read it from the tier from
        now on, and delete the local copy."""
        self._segments.swap_tiered(tiered)

    # -- appending -----------------------------------------------------------

    def write(self, data: ChunkData, num_entries: int, num_records: int, *,
              payload_bytes: int | None = None, sequences: Mapping[str, int] | None = None,
              timestamp: int | None = None, bloom: bytes = b"") -> Appended:
        """Append one chunk of already-encoded data entries, not yet durable.

        `sequences` are publisher sequences (writer reference -> last publishing
        id) stored in the chunk's trailer, so deduplication state can never get
        ahead of or fall behind the data it describes. `bloom` is the chunk's filter
        of its messages' filter values (see `chunk.bloom_filter`). `data` given as parts
        (`payload_bytes` then required) is written as it is, never joined.
        """
        if self._closed:
            raise PartitionClosed(f"{self.directory} is closed")
        if not self.writable:
            raise NotWritable(f"{self.directory} is a follower: write to its leader")
        if num_records < 1 or num_entries < 1 or num_entries > MAX_CHUNK_ENTRIES:
            raise ValueError(f"a chunk holds 1 to {MAX_CHUNK_ENTRIES} entries "
                             "and at least one record")
        parts = data if isinstance(data, list) else [data]
        if payload_bytes is None:
            assert not isinstance(data, list), "the payload of data in parts is given"
            payload_bytes = payload_size(data, num_entries)
        segment = self._segment_for(HEADER_SIZE + len(bloom) + data_length(data))
        chunk_id = self.next_offset
        tracking = self.writers.tracking(sequences)  # restates all after a roll
        timestamp = max(timestamp if timestamp is not None else _now_ms(), self._last_timestamp)
        header = encode_header(chunk_id=chunk_id, data=data, num_entries=num_entries,
                               num_records=num_records, timestamp=timestamp,
                               epoch=self.epochs.current, chunk_type=ChunkType.USER,
                               trailer_length=len(tracking), bloom_size=len(bloom))
        entry = IndexEntry(chunk_id, timestamp, segment.size, self.next_byte, num_records,
                           len(tracking) + GUARD.size)
        segment.append((header, bloom, *parts, tracking, guard(header + bloom, tracking)),
                       entry, payload_bytes)
        self.writers.written(sequences)
        self.next_offset = chunk_id + num_records
        self.next_byte += payload_bytes
        self._last_chunk_id, self._last_timestamp = chunk_id, timestamp
        self._dirty[id(segment)] = segment
        self.commits.written(self.next_offset, chunk_id, self.next_byte)
        self._commit.written(self.next_offset)
        self._wake_written()
        return Appended(chunk_id, self.next_offset)

    def write_records(self, records: Sequence[bytes | memoryview], **options: object) -> Appended:
        """Append records as simple entries, not yet durable: one chunk, or as many as the
        chunk's entry limit needs (`options` go with the last). The last one's Appended
        covers them all, since commits are in order."""
        for start in range(0, len(records) - MAX_CHUNK_ENTRIES, MAX_CHUNK_ENTRIES):
            self.write_records(records[start:start + MAX_CHUNK_ENTRIES])
        records = records[(len(records) - 1) // MAX_CHUNK_ENTRIES * MAX_CHUNK_ENTRIES:]
        data = encode_simple_entries(records)
        payload = len(data) - 4 * len(records)
        return self.write(data, len(records), len(records), payload_bytes=payload,
                          **options)  # type: ignore[arg-type]

    async def commit(self, appended: Appended) -> None:
        """Return once the chunk reached the durability policy's point (and, replicated,
        the replica set's commit point)."""
        await self._reach(appended.next_offset)

    async def _reach(self, mark: int) -> None:
        await self._commit.wait(mark)
        await self.commits.reach(mark)

    async def append(self, records: Sequence[bytes | memoryview], *,
                     sequences: Mapping[str, int] | None = None) -> Appended:
        appended = self.write_records(records, sequences=sequences)
        await self.commit(appended)
        return appended

    async def durable_point(self) -> None:
        """Return once everything written so far is durable: a publish that was
        dropped as a duplicate is confirmed only when the original it repeats is."""
        await self._reach(self.next_offset)

    def flush(self) -> None:
        """Blocking fsync of everything written, making it visible."""
        self._commit.sync_now()

    def _segment_for(self, chunk_size: int) -> Segment:
        active = self._segments.active
        full = (active.size + chunk_size > self.retention.max_segment_bytes
                or active.num_chunks >= self.retention.max_segment_chunks)
        if active.num_chunks and (full or active.version != SEGMENT_VERSION):
            active = self._roll()
        return active

    def _roll(self) -> Segment:
        """Start a new segment at the end of the log."""
        active = self._segments.roll(self.next_offset, self.next_byte)
        self.writers.restate()
        self.apply_retention()
        return active

    def _sync_dirty(self) -> None:
        # Runs in a worker thread; appends made meanwhile land in the new dict.
        dirty, self._dirty = self._dirty, {}
        for segment in dirty.values():
            if not segment.deleted:
                segment.sync()

    def _commit_moved(self) -> None:
        if self._retention_waits:  # a segment waited for this commit to go (see below)
            self.apply_retention()

    # -- reading -------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> int:
        """First offset of the first committed chunk at or after `timestamp` (ms)."""
        found = self._segments.offset_for_timestamp(timestamp)
        return self.committed_offset if found is None else min(found, self.committed_offset)

    def locate(self, offset: int) -> ChunkLocation | None:
        """The committed chunk holding `offset`, or the first one after it when
        `offset` fell into a gap; None when nothing is committed there yet."""
        found = self.find_committed(offset)
        return None if found is None else self.location(*found)

    def read_chunk(self, offset: int) -> Chunk | None:
        """The committed chunk holding `offset` (see `locate`), read into memory."""
        found = self.find_committed(offset)
        return None if found is None else found[0].read_chunk(found[1])

    def read_written(self, offset: int) -> Chunk:
        """The chunk holding `offset`, durable or not yet: for the writer reading back its
        own records (a queue paging messages in), never for readers of the log."""
        found = self._segments.find(offset) if offset >= self.first_offset else None
        if found is None or offset < found[0].index.chunk_ids[found[1]]:
            raise DataRemoved(f"offset {offset} is not in {self.directory}", self.first_offset)
        return found[0].read_chunk(found[1])

    def find_committed(self, offset: int, after: tuple[Segment, int] | None = None
                       ) -> tuple[Segment, int] | None:
        """(segment, chunk index) of the committed chunk for `offset`. `after` is
        the chunk a sequential reader read last: its successor is found without a
        search when it starts exactly at `offset`."""
        found = None
        if after is not None and not after[0].deleted:
            segment, i = after
            if i + 1 < segment.num_chunks and segment.index.chunk_ids[i + 1] == offset:
                found = segment, i + 1
        if found is None:
            found = self._segments.find(max(offset, self.first_offset))
        if found is None:
            return None
        segment, i = found
        if segment.index.chunk_ids[i] + segment.index.record_counts[i] > self.committed_offset:
            return None
        return found

    def location(self, segment: Segment, i: int) -> ChunkLocation:
        index = segment.index
        file_pos, span = segment.chunk_span(i)
        return ChunkLocation(segment, file_pos, span - index.tail_lengths[i],
                             index.chunk_ids[i], index.chunk_ids[i] + index.record_counts[i],
                             index.byte_positions[i], i)

    def mark_verified(self, chunk_id: int) -> None:
        """The chunk starting at `chunk_id` was checked whole and found sound (a scrub):
        senders skip their check before sending it raw (`chunk_stream.check_chunk`)."""
        found = self._segments.find(chunk_id)
        if found is not None and found[0].index.chunk_ids[found[1]] == chunk_id:
            found[0].mark_verified(found[1])

    # -- verification: damage found before it is read, and repaired --------------------

    def chunk_run(self, offset: int, max_bytes: int) -> ChunkRun | None:
        """The committed local chunks from the one holding `offset` (or the next), as many of
        its segment's as fit in `max_bytes`, to check (see `log.verify`); None when no
        committed local chunk lies there."""
        found = self.find_committed(max(offset, self.local_first_offset))
        if found is None or found[0].tiered:
            return None
        return ChunkRun.of(found[0], found[1], self.committed_offset, max_bytes)

    def chunk_copy(self, chunk_id: int) -> bytes:
        """The local chunk that starts at `chunk_id`, whole, checked and in the current layout:
        what another replica replaces its damaged copy with. CorruptChunk when this copy is
        damaged too, DataRemoved when this replica holds no such chunk locally."""
        segment, i = self._local_chunk(chunk_id)
        return segment.current_layout(i)

    def replace_chunk(self, chunk_id: int, raw: bytes) -> ChunkCheck:
        """Write another replica's copy over the local chunk at `chunk_id`, once it proves to
        be that chunk intact (`verify.replace_chunk`); returns where it went."""
        segment, i = self._local_chunk(chunk_id)
        return replace_chunk(segment, i, raw)

    def _local_chunk(self, chunk_id: int) -> tuple[Segment, int]:
        found = self._segments.find(chunk_id) if chunk_id >= self.first_offset else None
        if found is None or found[0].tiered or found[0].index.chunk_ids[found[1]] != chunk_id:
            raise DataRemoved(f"no local chunk starts at {chunk_id} in {self.directory}",
                              self.local_first_offset)
        return found

    async def wait_for(self, offset: int) -> None:
        """Return once a record at or past `offset` is committed."""
        await self.commits.wait_for(offset)

    # -- replication -----------------------------------------------------------
    # A leader sends followers every written chunk, durable or not, byte for byte; a
    # follower appends them as they are, and both move their commit point only as far as
    # the replica set agreed (`commits.set_limit`).

    def written_chunk(self, offset: int) -> WrittenChunk | None:
        """The written chunk holding `offset` (or the first after a gap); None past the end.
        NotFetched for a tiered chunk not local yet."""
        if offset >= self.next_offset:
            return None
        found = self._segments.find(max(offset, self.first_offset))
        if found is None:
            return None
        segment, i = found
        if isinstance(segment, TieredSegment) and not segment.ready(i):
            raise NotFetched(segment, i)  # its bytes are sent from the cache: fetch first
        file_pos, size = segment.chunk_span(i)
        chunk_id = segment.index.chunk_ids[i]
        rewritten = segment.current_layout(i) if segment.version != SEGMENT_VERSION else None
        return WrittenChunk(segment, file_pos, size, chunk_id,
                            chunk_id + segment.index.record_counts[i],
                            i == 0 and segment is not self._segments[0], rewritten)

    async def wait_written(self, offset: int) -> None:
        """Return once a record at or past `offset` is written (durable or not)."""
        while self.next_offset <= offset:
            if self._closed:
                raise PartitionClosed(f"{self.directory} is closed")
            if self._written_tail is None:
                self._written_tail = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._written_tail)

    def _wake_written(self) -> None:
        if self._written_tail is not None and not self._written_tail.done():
            self._written_tail.set_result(None)
        self._written_tail = None

    def append_chunk(self, raw: memoryview, opens_segment: bool) -> Appended:
        """Append a chunk a leader wrote, unchanged, after checking its CRCs and that it
        continues this log. Raises CorruptChunk when it does not."""
        if self._closed:
            raise PartitionClosed(f"{self.directory} is closed")
        chunk = chunk_from(raw)  # with its guard, checked with its size
        header = chunk.header
        if header.chunk_id != self.next_offset:
            raise CorruptChunk(f"chunk {header.chunk_id} of {len(raw)} bytes does not follow "
                               f"offset {self.next_offset} in {self.directory}")
        segment = self._segments.active
        if segment.num_chunks and (opens_segment or segment.version != SEGMENT_VERSION):
            segment = self._roll()
        sequences = chunk.sequences()
        payload = payload_size(chunk.data, header.num_entries)
        entry = IndexEntry(header.chunk_id, header.timestamp, segment.size, self.next_byte,
                           header.num_records, header.trailer_length + GUARD.size)
        segment.append((raw,), entry, payload)
        self.writers.written(sequences)
        self.epochs.saw(header.epoch)
        self.next_offset = header.next_offset
        self.next_byte += payload
        self._last_chunk_id, self._last_timestamp = header.chunk_id, header.timestamp
        self._dirty[id(segment)] = segment
        self.commits.written(self.next_offset, header.chunk_id, self.next_byte)
        self._commit.written(self.next_offset)
        self._wake_written()
        return Appended(header.chunk_id, self.next_offset)

    def last_chunk(self) -> tuple[int, int] | None:
        """(chunk id, epoch) of the last written chunk; None for an empty log. NotFetched
        when it is tiered under a record that predates epochs and its header is not local."""
        if self._last_chunk_id < 0 or self.next_offset <= self.first_offset:
            return None
        return self._last_chunk_id, self.epochs.of_chunk(self._last_chunk_id) or 0

    def truncate_from(self, offset: int) -> None:
        """Drop every chunk at or after `offset` (a chunk boundary): a follower's divergent
        tail, which its leader never committed. (A replica that restarted takes its whole
        log for committed until its leader says otherwise.)"""
        if offset >= self.next_offset:
            return
        self._commit.sync_now()
        segment = self._segments.cut_from(offset)
        self.next_offset, self.next_byte = segment.next_offset, segment.next_byte
        self._last_chunk_id, self._last_timestamp = self._segments.last_chunk()
        self.commits.cut(self.next_offset, self._last_chunk_id, self.next_byte)
        self._commit = GroupCommit(self._commit.policy, self._sync_dirty,
                                   self.commits.reached_disk, durable=self.next_offset,
                                   timings=self._commit.timings)
        self.recover_writers()

    def recover_writers(self) -> None:
        """Writer sequences as of the tail, from its chunks' trailers. After a cut that
        leaves the tail in a tiered segment, its chunks must be fetched first: NotFetched
        then, and this is called again once they are (`tiered_segment.fetching`)."""
        self.writers = WriterState.recover(self._segments)

    # -- retention -----------------------------------------------------------

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole old segments over the size or age limit; the active
        segment always stays. Returns how many segments were deleted."""
        policy = self.retention
        now_ms = _now_ms() if now_ms is None else now_ms
        total = self.size_bytes
        deleted = 0
        # A segment over the limits that is not yet replaced by durable data goes once
        # it is: the commit that makes it so runs retention again.
        self._retention_waits = False
        while len(self._segments) > 1:
            oldest = self._segments[0]
            too_big = policy.max_bytes is not None and total > policy.max_bytes
            last_ts = oldest.last_timestamp
            too_old = (policy.max_age_ms is not None and last_ts is not None
                       and last_ts < now_ms - policy.max_age_ms)
            if not (too_big or too_old):
                break
            if not self._replaced(oldest):
                self._retention_waits = True
                break
            total -= oldest.size
            self._segments.drop_oldest()
            if isinstance(oldest, TieredSegment) and self.tier_dropped is not None:
                self.tier_dropped(oldest.record)
            deleted += 1
        if deleted:
            fsync_directory(self.directory)
        return deleted

    def truncate_before(self, offset: int) -> int:
        """Delete the whole segments that hold only offsets below `offset` (a queue's
        settled messages); the active segment stays. Returns how many were deleted."""
        deleted = 0
        while (len(self._segments) > 1 and self._segments[0].next_offset <= offset
               and self._replaced(self._segments[0])):
            self._segments.drop_oldest()
            deleted += 1
        if deleted:
            fsync_directory(self.directory)
        return deleted

    def _replaced(self, oldest: Segment) -> bool:
        """Whether the oldest segment may go: its data is durable, and so is a later
        chunk, whose restated publisher sequences take over from the ones it holds."""
        return oldest.next_offset < self.committed_offset

def _now_ms() -> int:
    return time.time_ns() // 1_000_000
