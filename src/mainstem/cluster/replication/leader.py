"""A partition this node leads: it feeds every follower the chunks it writes and moves
the partition's commit point to what every in-sync replica holds durably.

As Kafka's ISR: a chunk is committed once each replica in the in-sync set has acked it,
and the set must hold a majority of the replica set, so a committed chunk is on a
majority and any in-sync replica can take over without losing it. A follower leaves the
set when it has not caught up, for `lag_timeout`, with where this leader's log ended at
its previous lag check (Kafka's replica.lag.time.max.ms: a follower that keeps up under
steady writes, always a chunk or two behind, stays in; one that stopped does not). Every
laggard leaves in the same change, written to etcd before the commit point moves on
without them. One that catches up joins again, once it holds both the commit point and
everything this leader had when elected (Kafka's rule since leader epochs: a leader's
commit point may lag what was committed before it took over). The leader is always in
its own set, and the set it wrote is the one it uses: etcd's echo of it is not read back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mainstem.broker.stream_service import Leading
from mainstem.broker.stream_service.subscription import sendfile_socket
from mainstem.cluster.replication import wire
from mainstem.log.transfer import send_range

log = logging.getLogger("mainstem.cluster")

HEARTBEAT_S = 0.5  # a COMMIT at least this often, so followers see the leader alive
# Lag checks per lag_timeout: a stopped follower leaves at most lag_timeout / 8 late
# (0.5 s with the default TTL); each check is one pass over the followers.
LAG_CHECKS = 8

IsrWriter = Callable[[list[str]], Awaitable[bool]]


class LeaderLog:
    def __init__(self, leading: Leading, node: str, replicas: list[str], isr: list[str],
                 write_isr: IsrWriter, lag_timeout: float) -> None:
        self.leading = leading
        self.node = node
        self.replicas = replicas
        self.isr = [n for n in isr if n in replicas]
        self._write_isr = write_isr
        self._lag_timeout = lag_timeout
        self.acked: dict[str, int] = {}  # follower -> durable offset it acked
        # Where this leader's log ended when it took over: it holds every chunk committed
        # before, so a follower that has this much lacks none of them. Its own commit
        # point may be lower (restarted, see log.commit_point), so it cannot say that.
        self.epoch_start = leading.next_offset
        # Kafka's lastCaughtUpTime: when each follower last held all that this leader had
        # written as of the previous lag check (`_mark`). A new leader gives each follower
        # a whole lag_timeout to show it keeps up.
        now = time.monotonic()
        self._caught_up = {n: now for n in replicas if n != node}
        self._mark = leading.next_offset
        self._commit_moved: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._isr_task: asyncio.Task[None] | None = None
        self._lag_task = asyncio.get_running_loop().create_task(self._watch_lag())
        leading.on_durable(lambda _mark: self._recompute())
        self._recompute()
        self._update_isr()  # a set etcd gave without this leader (a re-election) gains it

    @property
    def majority(self) -> int:
        return len(self.replicas) // 2 + 1

    def lag(self) -> dict[str, int]:
        """Records each follower lacks of what this leader has written."""
        end = self.leading.next_offset
        return {n: end - self.acked.get(n, 0) for n in self.replicas if n != self.node}

    def close(self) -> None:
        self._lag_task.cancel()
        if self._isr_task is not None:
            self._isr_task.cancel()
        self.leading.on_durable(None)
        if not self._commit_moved.done():
            self._commit_moved.set_result(None)

    # -- the commit point --------------------------------------------------------

    def on_ack(self, follower: str, offset: int) -> None:
        acked = self.acked[follower] = max(offset, self.acked.get(follower, 0))
        if acked >= self._mark:
            self._caught_up[follower] = time.monotonic()
        if follower not in self.isr and self._may_join(follower, time.monotonic()):
            self._update_isr()
        self._recompute()

    def _recompute(self) -> None:
        if len(self.isr) < self.majority:
            return  # too few in-sync replicas: writes wait, nothing is committed
        point = self.leading.durable
        for follower in self.isr:
            if follower != self.node:
                point = min(point, self.acked.get(follower, 0))
        if point > self.leading.commit_limit:
            self.leading.commit_to(point)
            moved = self._commit_moved
            self._commit_moved = asyncio.get_running_loop().create_future()
            moved.set_result(None)

    async def _watch_lag(self) -> None:
        """Every `lag_timeout / LAG_CHECKS`: note which followers hold all this leader had
        at the previous check, and change the in-sync set if it is due."""
        while True:
            await asyncio.sleep(self._lag_timeout / LAG_CHECKS)
            now = time.monotonic()
            for follower, acked in self.acked.items():
                if acked >= self._mark:  # an idle follower sends no acks, yet keeps up
                    self._caught_up[follower] = now
            self._mark = self.leading.next_offset
            if self._wanted_isr(now) != self.isr:
                self._update_isr()

    def _lagging(self, follower: str, now: float) -> bool:
        return now - self._caught_up.get(follower, now) > self._lag_timeout

    def _may_join(self, follower: str, now: float) -> bool:
        """Acked this leader (not merely never heard from), keeps up, and holds every
        chunk committed, before this leader's election too."""
        return (follower in self.acked and not self._lagging(follower, now)
                and self.acked[follower] >= max(self.leading.committed_offset,
                                                self.epoch_start))

    def _wanted_isr(self, now: float) -> list[str]:
        """The set as it should be now: this leader, the members keeping up, and the
        followers that may join (in that order, so an unchanged set compares equal)."""
        keep = [n for n in self.isr if n == self.node or not self._lagging(n, now)]
        if self.node not in keep:
            keep.insert(0, self.node)
        return keep + [n for n in self.replicas
                       if n not in keep and n != self.node and self._may_join(n, now)]

    def _update_isr(self) -> None:
        """Bring the set to what it should be. One writer at a time: a change decided
        while one is being written is picked up when that write is done."""
        if self._isr_task is None or self._isr_task.done():
            self._isr_task = asyncio.get_running_loop().create_task(self._write_changes())

    async def _write_changes(self) -> None:
        """Record each new in-sync set in etcd, then use it: never commit on a set etcd
        does not know, or a new leader could be chosen outside it."""
        while (isr := self._wanted_isr(time.monotonic())) != self.isr:
            if not await self._write_isr(isr):
                return  # no longer leading, or etcd away: the next lag check tries again
            for follower in self.isr:
                if follower not in isr:
                    log.warning("replica.out_of_sync", extra={
                        "follower": follower, "partition": self.leading.name})
            self.isr = isr
            self._recompute()

    # -- feeding one follower ------------------------------------------------------

    async def handshake(self, hello: wire.Hello) -> bytes:
        """The answer to a follower's HELLO: START when its log agrees with this one up to
        where it ends, else TRUNCATE where it must cut to agree (Kafka's leader epochs)."""
        leading = self.leading
        if hello.last_chunk_id < 0:
            return wire.frame(wire.FrameType.START)
        if (await leading.chunk_epoch(hello.last_chunk_id) == hello.last_epoch
                and hello.next_offset <= leading.next_offset):
            return wire.frame(wire.FrameType.START)
        cut = min(leading.epoch_end(hello.last_epoch), hello.last_chunk_id)
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
        leading, transport = self.leading, writer.transport
        sent_commit = -1
        while not transport.is_closing():
            chunk = await leading.written_chunk(position)
            if chunk is None:
                commit = leading.committed_offset
                if commit != sent_commit:
                    writer.write(wire.offset_frame(wire.FrameType.COMMIT, commit))
                    sent_commit = commit
                await self._next_change(position)
                continue
            sent_commit = leading.committed_offset
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
        written = asyncio.ensure_future(self.leading.wait_written(position))
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
