"""What readers may see of a partition: its commit point, as the replica set moves it.

A record is visible once its chunk is durable on this disk and, on a replicated partition,
lies below the commit limit its replica set agreed on (Kafka's high watermark; None for a
partition of one replica, where durable means committed). Written chunks wait here, in
order, until both hold. A replica that restarted rewinds the point to what its replica
set last said; one that stops leading abandons the writes still waiting, which are its
successor's to keep or drop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from mainstem.log.errors import NotWritable, PartitionClosed
from mainstem.log.segments import Segments


@dataclass(slots=True)
class _Point:
    offset: int = 0  # every record below it is durable and visible
    chunk_id: int = -1  # first offset of the last visible chunk, -1 when none
    byte: int = 0


class CommitView:
    def __init__(self, segments: Segments, moved: Callable[[], None]) -> None:
        """Everything `segments` hold is taken for committed (see rewind); `moved` is
        called each time the point may have moved."""
        self._segments = segments
        active = segments.active
        self._point = _Point(active.next_offset, segments.last_chunk()[0], active.next_byte)
        self._pending: deque[tuple[int, int, int]] = deque()  # next offset, chunk id, next byte
        self.durable = active.next_offset  # every record below it is durable on this disk
        self.limit: int | None = None  # set by the replica set; None: one replica
        self.on_durable: Callable[[int], None] | None = None  # replication's vote
        self._moved = moved
        self._abandoned: NotWritable | None = None  # see abandon
        self._tail: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def offset(self) -> int:
        return self._point.offset

    @property
    def chunk_id(self) -> int:
        return self._point.chunk_id

    @property
    def byte(self) -> int:
        return self._point.byte

    # -- moving the point ---------------------------------------------------------

    def written(self, next_offset: int, chunk_id: int, next_byte: int) -> None:
        """A chunk was written: it becomes visible once durable and agreed."""
        self._pending.append((next_offset, chunk_id, next_byte))

    def reached_disk(self, mark: int) -> None:
        """Every record below `mark` is durable on this disk."""
        self.durable = mark
        if self.on_durable is not None:
            self.on_durable(mark)
        self._advance()

    def hold(self) -> None:
        """Commit nothing more until the replica set agrees (`set_limit`)."""
        self.limit = self._point.offset

    def set_limit(self, limit: int) -> None:
        """The replica set agreed on every record below `limit`."""
        self.limit = limit
        self._advance()

    def _advance(self) -> None:
        mark = self.durable if self.limit is None else min(self.durable, self.limit)
        point = self._point
        while self._pending and self._pending[0][0] <= mark:
            point.offset, point.chunk_id, point.byte = self._pending.popleft()
        self._wake()
        self._moved()

    def _wake(self) -> None:
        if self._tail is not None and not self._tail.done():
            self._tail.set_result(None)
        self._tail = None

    # -- waiting ------------------------------------------------------------------------

    async def reach(self, mark: int) -> None:
        """Return once the replica set agreed on every record below `mark` (at once when
        it has one replica: durable is enough, and the caller waited for that)."""
        while self.limit is not None and self.offset < mark:
            if self._abandoned is not None:
                raise self._abandoned
            await self._next_move()

    async def wait_for(self, offset: int) -> None:
        """Return once a record at or past `offset` is committed."""
        while self.offset <= offset:
            await self._next_move()

    async def _next_move(self) -> None:
        if self._closed:
            raise PartitionClosed(f"{self._segments.directory} is closed")
        if self._tail is None:
            self._tail = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._tail)

    def close(self) -> None:
        """Waiters wake, see the partition closed, and raise."""
        self._closed = True
        self._wake()

    # -- the replica's turns --------------------------------------------------------

    def abandon(self, reason: str) -> None:
        """This node stopped leading: whoever waits for a write of its own to commit is
        told it may not (the new leader decides), instead of waiting for ever."""
        self._abandoned = NotWritable(reason)
        self._wake()

    def resume(self) -> None:
        """This node leads again: its writes commit as the replica set acks them."""
        self._abandoned = None

    def rewind(self, offset: int) -> None:
        """Show readers only the chunks that end at or below `offset` (the replica set's
        last known commit point); those after it wait for the replica set's word again.
        For a replica that restarted and may hold a tail no majority ever acked."""
        if offset >= self._point.offset:
            return
        segments = self._segments
        k = segments.holding(offset)
        before = segments[k - 1].index.last() if k else None
        point = _Point(segments[k].first_chunk_id, before.chunk_id if before else -1,
                       segments[k].first_byte)
        pending: deque[tuple[int, int, int]] = deque()
        for segment in segments[k:]:
            index = segment.index
            for i, chunk_id in enumerate(index.chunk_ids):
                end = chunk_id + index.record_counts[i]
                next_byte = (index.byte_positions[i + 1] if i + 1 < len(index.chunk_ids)
                             else segment.next_byte)
                if end <= offset:
                    point = _Point(end, chunk_id, next_byte)
                else:
                    pending.append((end, chunk_id, next_byte))
        self._point, self._pending = point, pending
        self.limit = point.offset

    def cut(self, next_offset: int, last_chunk_id: int, next_byte: int) -> None:
        """The log was cut to end at `next_offset` (a follower's divergent tail went)."""
        self._pending = deque(p for p in self._pending if p[0] <= next_offset)
        self.durable = min(self.durable, next_offset)
        if self._point.offset > next_offset:
            self._point = _Point(next_offset, last_chunk_id, next_byte)
