"""A replicated partition's roles on this node, as the cluster hands them out: leading
it, following its leader, or standing by (`PartitionService.stand_by`, `lead`, `follow`).

Only these change what replication changes in a partition: whether it takes writes,
where its appends go, its epoch, how far its commit point may move, and who hears that
its disk holds more. Osiris has its writer and replica reader as roles of one log alike.
"""

from __future__ import annotations

from collections.abc import Callable

from mainstem.log.partition import Partition, WrittenChunk
from mainstem.log.tiered_segment import NotFetched, fetching

DurableCallback = Callable[[int], None]


class _Role:
    def __init__(self, partition: Partition) -> None:
        self._partition = partition

    @property
    def name(self) -> str:
        """The partition's directory, for logs."""
        return str(self._partition.directory)

    @property
    def next_offset(self) -> int:
        return self._partition.next_offset

    @property
    def committed_offset(self) -> int:
        return self._partition.committed_offset

    @property
    def durable(self) -> int:
        """Every record below it is durable on this disk (committed or not)."""
        return self._partition.commits.durable

    def commit_to(self, limit: int) -> None:
        """The replica set agreed on every record below `limit`: show readers that far."""
        self._partition.commits.set_limit(limit)

    def on_durable(self, callback: DurableCallback | None) -> None:
        """Call `callback` with `durable` each time this disk holds more (None: stop)."""
        self._partition.commits.on_durable = callback


class Leading(_Role):
    """This node leads the partition: it writes, and feeds its followers each chunk."""

    def __init__(self, partition: Partition, stand_by: Callable[[], None]) -> None:
        super().__init__(partition)
        self._stand_by = stand_by

    @property
    def commit_limit(self) -> int:
        return self._partition.commits.limit or 0

    async def written_chunk(self, offset: int) -> WrittenChunk | None:
        """The written chunk holding `offset` (or the first after a gap), a tiered one
        fetched first (a new follower copies the whole log); None past the end."""
        return await fetching(lambda: self._partition.written_chunk(offset))

    async def wait_written(self, offset: int) -> None:
        """Return once a record at or past `offset` is written (durable or not)."""
        await self._partition.wait_written(offset)

    async def chunk_epoch(self, chunk_id: int) -> int | None:
        """The epoch of the chunk that starts at `chunk_id`; None when none does (a tiered
        chunk's header fetched first where its record predates epochs)."""
        return await fetching(lambda: self._partition.epochs.of_chunk(chunk_id))

    def epoch_end(self, epoch: int) -> int:
        """Where the records of epochs up to `epoch` end (the first chunk of a later one)."""
        return self._partition.epochs.end_of(epoch)

    def step_down(self, reason: str) -> None:
        """This node no longer leads: it takes no writes, its appends go to the leader
        again, and whoever waits for a write of its own to commit is told `reason`."""
        self._partition.commits.on_durable = None
        self._stand_by()
        self._partition.commits.abandon(reason)


class Following(_Role):
    """This node follows the partition's leader: it appends the leader's chunks as they
    came and shows readers no further than the leader's commit point."""

    async def last_chunk(self) -> tuple[int, int] | None:
        """(chunk id, epoch) of the last chunk this log holds; None when it is empty (a
        tiered chunk's header fetched first where its record predates epochs)."""
        return await fetching(self._partition.last_chunk)

    def accept_chunk(self, raw: memoryview, opens_segment: bool, commit: int) -> None:
        """Append a chunk the leader wrote, checked (CorruptChunk when it is damaged or
        does not continue this log), and commit to the leader's point sent with it."""
        self._partition.append_chunk(raw, opens_segment)
        self.commit_to(commit)

    async def truncate_from(self, offset: int) -> None:
        """Drop this log's divergent tail from `offset` on: the leader never committed it.
        The writer sequences come from the new tail, fetched first if it is tiered."""
        try:
            self._partition.truncate_from(offset)
        except NotFetched as missing:
            await missing.fetch()
            await fetching(self._partition.recover_writers)
