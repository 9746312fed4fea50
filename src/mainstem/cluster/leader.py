"""A partition this node leads: it feeds every follower the chunks it writes and moves
the partition's commit point to what every in-sync replica holds durably.

As Kafka's ISR: a chunk is committed once each replica in the in-sync set has acked it,
and the set must hold a majority of the replica set, so a committed chunk is on a
majority and any in-sync replica can take over without losing it. A follower that stops
acking for `lag_timeout` while behind leaves the set (written to etcd before the commit
point moves on without it); one that catches up joins it again, once it holds both the
commit point and everything this leader had when elected (Kafka's rule since leader
epochs: a leader's commit point may lag what was committed before it took over).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mainstem.broker.stream_service.subscription import sendfile_socket
from mainstem.cluster import wire
from mainstem.log.partition import Partition
from mainstem.log.transfer import send_range

log = logging.getLogger("mainstem.cluster")

HEARTBEAT_S = 0.5  # a COMMIT at least this often, so followers see the leader alive

IsrWriter = Callable[[list[str]], Awaitable[bool]]


class LeaderLog:
    def __init__(self, partition: Partition, node: str, replicas: list[str], isr: list[str],
                 write_isr: IsrWriter, lag_timeout: float) -> None:
        self.partition = partition
        self.node = node
        self.replicas = replicas
        self.isr = [n for n in isr if n in replicas]
        self._write_isr = write_isr
        self._lag_timeout = lag_timeout
        self.acked: dict[str, int] = {}  # follower -> durable offset it acked
        # Where this leader's log ended when it took over: it holds every chunk committed
        # before, so a follower that has this much lacks none of them. Its own commit
        # point may be lower (restarted, see log.commit_point), so it cannot say that.
        self.epoch_start = partition.next_offset
        self._behind_since: dict[str, float] = {}
        self._commit_moved: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._isr_task: asyncio.Task[None] | None = None
        self._lag_task = asyncio.get_running_loop().create_task(self._watch_lag())
        partition.commit_limit = partition.committed_offset  # nothing new until acked
        partition.on_durable = lambda _mark: self._recompute()
        self._recompute()

    @property
    def majority(self) -> int:
        return len(self.replicas) // 2 + 1

    def lag(self) -> dict[str, int]:
        """Records each follower lacks of what this leader has written."""
        end = self.partition.next_offset
        return {n: end - self.acked.get(n, 0) for n in self.replicas if n != self.node}

    def close(self) -> None:
        self._lag_task.cancel()
        if self._isr_task is not None:
            self._isr_task.cancel()
        self.partition.on_durable = None
        if not self._commit_moved.done():
            self._commit_moved.set_result(None)

    # -- the commit point --------------------------------------------------------

    def on_ack(self, follower: str, offset: int) -> None:
        self.acked[follower] = max(offset, self.acked.get(follower, 0))
        if follower not in self.isr and self.acked[follower] >= max(
                self.partition.committed_offset, self.epoch_start):
            self._change_isr([*self.isr, follower])
        self._recompute()

    def _recompute(self) -> None:
        if len(self.isr) < self.majority:
            return  # too few in-sync replicas: writes wait, nothing is committed
        point = self.partition.local_durable
        for follower in self.isr:
            if follower != self.node:
                point = min(point, self.acked.get(follower, 0))
        if point > (self.partition.commit_limit or 0):
            self.partition.set_commit_limit(point)
            moved = self._commit_moved
            self._commit_moved = asyncio.get_running_loop().create_future()
            moved.set_result(None)

    async def _watch_lag(self) -> None:
        """Drop from the in-sync set a follower that has been behind for too long."""
        while True:
            await asyncio.sleep(self._lag_timeout / 4)
            now, end = time.monotonic(), self.partition.next_offset
            for follower in self.isr:
                if follower == self.node or self.acked.get(follower, 0) >= end:
                    self._behind_since.pop(follower, None)
                    continue
                since = self._behind_since.setdefault(follower, now)
                if now - since > self._lag_timeout:
                    log.warning("replica.out_of_sync", extra={
                        "follower": follower, "partition": str(self.partition.directory)})
                    self._change_isr([n for n in self.isr if n != follower])
                    break

    def _change_isr(self, isr: list[str]) -> None:
        """Record a new in-sync set in etcd, then use it: never commit on a set etcd does
        not know, or a new leader could be chosen outside it."""
        if self._isr_task is not None and not self._isr_task.done():
            return  # one change at a time; the next ack or lag check retries
        self._isr_task = asyncio.get_running_loop().create_task(self._apply_isr(isr))

    async def _apply_isr(self, isr: list[str]) -> None:
        if await self._write_isr(isr):
            self.isr = isr
            self._behind_since.clear()
            self._recompute()

    # -- feeding one follower ------------------------------------------------------

    def handshake(self, hello: wire.Hello) -> bytes:
        """The answer to a follower's HELLO: START when its log agrees with this one up to
        where it ends, else TRUNCATE where it must cut to agree (Kafka's leader epochs)."""
        partition = self.partition
        if hello.last_chunk_id < 0:
            return wire.frame(wire.FrameType.START)
        if (partition.chunk_epoch(hello.last_chunk_id) == hello.last_epoch
                and hello.next_offset <= partition.next_offset):
            return wire.frame(wire.FrameType.START)
        cut = min(partition.epoch_end(hello.last_epoch), hello.last_chunk_id)
        return wire.offset_frame(wire.FrameType.TRUNCATE, cut)

    async def feed(self, follower: str, position: int, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        """Send the follower every written chunk from `position` on, and commit points;
        read its ACKs meanwhile. Returns when either side closes."""
        acks = asyncio.get_running_loop().create_task(self._read_acks(follower, reader))
        try:
            await self._send_chunks(position, writer)
        finally:
            acks.cancel()

    async def _read_acks(self, follower: str, reader: asyncio.StreamReader) -> None:
        while True:
            kind, body = await read_frame(reader, wire.MAX_CONTROL_FRAME)
            if kind != wire.FrameType.ACK:
                raise wire.WireError(f"a follower sends ACK frames, not {kind}")
            self.on_ack(follower, wire.read_offset(body))

    async def _send_chunks(self, position: int, writer: asyncio.StreamWriter) -> None:
        partition, transport = self.partition, writer.transport
        sent_commit = -1
        while not transport.is_closing():
            chunk = partition.written_chunk(position)
            if chunk is None:
                commit = partition.committed_offset
                if commit != sent_commit:
                    writer.write(wire.offset_frame(wire.FrameType.COMMIT, commit))
                    sent_commit = commit
                await self._next_change(position)
                continue
            sent_commit = partition.committed_offset
            if chunk.rewritten is not None:  # from a segment of an older version
                writer.write(wire.chunk_frame_header(len(chunk.rewritten), chunk.opens_segment,
                                                     sent_commit) + chunk.rewritten)
            else:
                header = wire.chunk_frame_header(chunk.size, chunk.opens_segment, sent_commit)
                fd = (sendfile_socket(transport) if transport.get_write_buffer_size() == 0
                      else None)
                send_range(chunk.segment.fileno(), chunk.file_pos, chunk.size, header, fd,
                           transport.write)
            position = chunk.next_offset
            await writer.drain()

    async def _next_change(self, position: int) -> None:
        """Wait for a new chunk, a moved commit point, or the heartbeat."""
        written = asyncio.ensure_future(self.partition.wait_written(position))
        moved = asyncio.ensure_future(asyncio.shield(self._commit_moved))
        try:
            await asyncio.wait({written, moved}, timeout=HEARTBEAT_S,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (written, moved):
                task.cancel()
            await asyncio.gather(written, moved, return_exceptions=True)
        error = None if written.cancelled() else written.exception()
        if error is not None:
            raise error  # PartitionClosed ends the feed


async def read_frame(reader: asyncio.StreamReader, limit: int) -> tuple[int, bytes]:
    """One frame: (type, body). Raises WireError past `limit` bytes."""
    length, kind = wire.FRAME.unpack(await reader.readexactly(wire.FRAME.size))
    if not 1 <= length <= limit:
        raise wire.WireError(f"frame of {length} bytes (at most {limit})")
    return kind, await reader.readexactly(length - 1)
