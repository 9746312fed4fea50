"""A partition as protocols see it: one Appender to write, Subscriptions to read, and
the positions they answer queries with. Protocols hold these, never the log's objects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Sequence

from mainstem.broker.damage import PartitionDamage, PartitionKey
from mainstem.broker.fence import Fence
from mainstem.broker.stream_service.appender import Appender
from mainstem.broker.stream_service.forwarding import Forwarder
from mainstem.broker.stream_service.gate import WriteGate
from mainstem.broker.stream_service.integrity import Integrity, Repair
from mainstem.broker.stream_service.roles import Following, Leading
from mainstem.broker.stream_service.subscription import Subscription
from mainstem.formats.chunk import Chunk
from mainstem.log import commit_point
from mainstem.log.partition import ChunkLocation, Partition
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import TieredRecord
from mainstem.log.tiered_segment import TieredSegment
from mainstem.log.verify import ChunkCheck

log = logging.getLogger("mainstem.broker")


class PartitionService:
    def __init__(self, partition: Partition, gate: WriteGate | None = None,
                 damage: PartitionDamage | None = None) -> None:
        self.partition = partition
        # where its readers report a damaged chunk: a stream's is named and counted
        self.damage = damage or PartitionDamage(PartitionKey("", str(partition.directory), 0))
        self.appender = Appender(partition, gate)
        self._forwarder: Forwarder | None = None  # the way to the leader, when replicated
        self._fence: Fence | None = None  # while leading a replicated partition
        self._saved_commit = 0  # see save_commit_point
        self.integrity = Integrity()  # what the scrub found in the stored chunks

    def subscribe(self, offset: int, *, credit: int | None = None,
                  filter_values: Sequence[str] = (),
                  match_unfiltered: bool = False) -> Subscription:
        """A reader from `offset` (moved up to the first offset if retention took it)."""
        return Subscription(self.partition, max(offset, self.first_offset), self.damage,
                            credit=credit, filter_values=filter_values,
                            match_unfiltered=match_unfiltered)

    async def close(self) -> None:
        """Close the partition, writing first what its appender staged."""
        self.appender.write_staged()
        await self.partition.aclose()

    def delete(self) -> None:
        """Close the partition at once, dropping what is staged, and remove its files."""
        self.partition.close()
        shutil.rmtree(self.partition.directory, ignore_errors=True)

    @property
    def first_offset(self) -> int:
        return self.partition.first_offset

    @property
    def committed_offset(self) -> int:
        """Every record below it is durable and visible."""
        return self.partition.committed_offset

    @property
    def committed_chunk_id(self) -> int:
        """First offset of the last visible chunk; -1 when none."""
        return self.partition.committed_chunk_id

    @property
    def first_byte(self) -> int:
        """The payload byte where the first record kept begins."""
        return self.partition.first_byte

    @property
    def committed_byte(self) -> int:
        """The payload byte where the first record not yet visible begins."""
        return self.partition.committed_byte

    def locate(self, offset: int) -> ChunkLocation | None:
        """The committed chunk holding `offset` (or the next, in a gap), unread; None when
        nothing is committed there yet. For readers that pick chunks by position."""
        return self.partition.locate(offset)

    def mark_verified(self, chunk_id: int) -> None:
        """The chunk starting at `chunk_id` was checked whole and found sound (a scrub):
        subscribers send it without checking it again."""
        self.partition.mark_verified(chunk_id)

    async def wait_for(self, offset: int) -> None:
        """Return once a record at or past `offset` is committed."""
        await self.partition.wait_for(offset)

    # -- verification: damage in stored chunks, found by the scrub and repaired ------------

    async def check_chunks(self, offset: int, max_bytes: int) -> list[ChunkCheck]:
        """Read and check the committed local chunks from the one holding `offset` (or the
        next) on, as many of its segment's as fit in `max_bytes` (one at least), in a worker
        thread. Empty when no committed local chunk lies there; OSError when its segment
        went meanwhile."""
        run = self.partition.chunk_run(offset, max_bytes)
        return [] if run is None else await asyncio.to_thread(run.check)

    def chunk_copy(self, chunk_id: int) -> bytes:
        """This replica's copy of the chunk at `chunk_id`, checked, for a replica whose copy
        is damaged (CorruptChunk when this one is too, DataRemoved when none is local)."""
        return self.partition.chunk_copy(chunk_id)

    def replace_chunk(self, chunk_id: int, raw: bytes, source: str) -> Repair:
        """Replace the damaged chunk at `chunk_id` with `raw`, the copy `source` sent, once
        it proves to be that chunk intact (CorruptChunk otherwise); the range is logged."""
        check = self.partition.replace_chunk(chunk_id, raw)
        repair = Repair(check.chunk_id, check.next_offset, check.segment, check.file_pos,
                        check.size, source, time.time())
        self.integrity.was_repaired(repair)
        log.warning("chunk.repaired", extra={
            "partition": str(self.partition.directory), "chunk_id": repair.chunk_id,
            "next_offset": repair.next_offset, "segment": repair.segment,
            "file_pos": repair.file_pos,
            "size": repair.size, "source": source})
        return repair

    # -- the writer's own records: a queue keeps its messages in a partition -----------

    @property
    def next_offset(self) -> int:
        """The offset the next record written gets."""
        return self.partition.next_offset

    def read_written(self, offset: int) -> Chunk:
        """The chunk holding `offset`, durable or not yet: for a writer reading back its
        own records (a queue paging messages in, a new leader replaying its journal),
        never for readers of the log. DataRemoved when it is gone."""
        return self.partition.read_written(offset)

    def truncate_before(self, offset: int) -> int:
        """Delete the segments wholly below `offset`, whose records the writer settled;
        how many went. Only committed (so durable) segments go: await `durable` first for
        those written since the last fsync to go too."""
        return self.partition.truncate_before(offset)

    async def durable(self) -> None:
        """Return once everything written so far is committed (fsynced in the commit's
        threads, and acked by the replica set where there is one)."""
        await self.partition.durable_point()

    @property
    def size_bytes(self) -> int:
        return self.partition.size_bytes

    @property
    def segment_count(self) -> int:
        return self.partition.segment_count

    # -- tiering: the oldest sealed segments may live in an object store ---------------

    @property
    def tiered_bytes(self) -> int:
        """Of `size_bytes`, what lives in the tier."""
        return self.partition.tiered_bytes

    @property
    def local_first_offset(self) -> int:
        """The first offset on local disk: those below it are read from the tier."""
        return self.partition.local_first_offset

    @property
    def tiered_records(self) -> list[TieredRecord]:
        """The tiered segments' records, oldest first."""
        return self.partition.tiered_records

    def tier_candidates(self) -> list[Segment]:
        """The oldest local segments past the local bounds, to upload oldest first."""
        return self.partition.tier_candidates()

    async def attach_tiered(self, records: Sequence[TieredRecord], tier: Tier,
                            cache: TierCache) -> None:
        """Put the recorded tiered segments before the local ones (at start); those the
        local files still hold wait until this replica's copy is sealed (`swap_tiered`)."""
        for member in self.partition.attach_tiered(
                [await TieredSegment.load(tier, record, cache) for record in records]):
            member.delete()

    async def swap_tiered(self, segment: Segment, record: TieredRecord, tier: Tier,
                          cache: TierCache) -> bool:
        """`segment` was uploaded as `record`, and recorded: read it from the tier from
        now on, its local files deleted. False if retention took it meanwhile."""
        member = await TieredSegment.load(tier, record, cache)
        if segment.deleted:
            member.delete()
            return False
        self.partition.swap_tiered(member)
        return True

    def oldest_sealed(self) -> Segment | None:
        """The oldest local segment unless it is the active one (a follower swaps it for
        the tiered copy its leader recorded)."""
        return self.partition.oldest_sealed()

    def forget_tiered_before(self, offset: int) -> None:
        """Forget the tiered segments wholly below `offset`, their objects left alone (a
        follower whose leader's retention dropped them)."""
        self.partition.truncate_before(min(offset, self.local_first_offset))

    def on_tier_dropped(self, dropped: Callable[[TieredRecord], None]) -> None:
        """Call `dropped` with each tiered segment retention deletes."""
        self.partition.tier_dropped = dropped

    def offset_for_timestamp(self, timestamp: int) -> int:
        """First offset of the first committed chunk at or after `timestamp` (ms)."""
        return self.partition.offset_for_timestamp(timestamp)

    # -- replication roles: a cluster changes the partition through these only ---------

    def stand_by(self, forwarder: Forwarder) -> None:
        """This node holds a replica it does not lead (yet): it writes nothing itself, its
        appends go to the leader by `forwarder`, and after a restart it shows readers only
        what its replica set had committed as last saved (see `save_commit_point`)."""
        self._forwarder = forwarder
        self._saved_commit = commit_point.load(self.partition.directory)
        self.partition.commits.rewind(self._saved_commit)
        self._stand_by()

    def _stand_by(self) -> None:
        self.partition.writable = False
        self.appender.forwarder = self._forwarder
        self._fence = None

    def lead(self, epoch: int, fence: Fence | None = None) -> Leading:
        """This node leads from `epoch` on: it takes writes, and they commit only as far as
        the replica set acks them (`Leading.commit_to`); nothing new until it does. Its
        writes to shared state (the tier's records) go under `fence`, until it steps down."""
        self._fence = fence
        partition = self.partition
        partition.epochs.current = epoch
        partition.commits.hold()
        partition.commits.resume()
        partition.writable = True
        self.appender.forwarder = None
        return Leading(partition, self._stand_by)

    def follow(self) -> Following:
        """This node follows the leader on another node (it stands by meanwhile)."""
        return Following(self.partition)

    @property
    def takes_writes(self) -> bool:
        """False on a replica whose leader is elsewhere."""
        return self.partition.writable

    @property
    def fence(self) -> Fence | None:
        """The proof that this node leads the replicated partition, while it does: what
        it writes to shared state goes under it (see broker.fence); None otherwise."""
        return self._fence if self.partition.writable else None

    @property
    def epoch(self) -> int:
        """The epoch of the chunks this node writes (its leader's, when following)."""
        return self.partition.epochs.current

    async def save_commit_point(self) -> None:
        """Keep the commit point for a restart, if it moved (see log.commit_point). The
        file is replaced in a worker thread: a rename over a file waits for the disk (ext4
        writes the new file's data first), which held a loaded node's loop 0.1 s."""
        committed = self.committed_offset
        if committed != self._saved_commit:
            with contextlib.suppress(OSError):  # the stream may be going away
                await asyncio.to_thread(commit_point.save, self.partition.directory,
                                        committed)
                self._saved_commit = committed
