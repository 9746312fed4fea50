"""A durable queue's persistent messages, kept in a log partition of its own.

The journal holds two kinds of record: an *enqueue* (the message: exchange, routing key,
encoded properties, body) and a *settle* (the journal offsets of messages acknowledged or
dropped). Replaying it gives the queue's contents after a restart or a crash. Writes of one
event-loop turn become one chunk, so a burst of publishes or acks costs one write and one
fsync. Whole segments below the oldest live message are deleted.

A deep queue keeps only the journal offsets of most of its messages in memory and reads them
back from here when they near the head (``RecordReader``).

A replay runs in slices of at most ``REPLAY_SLICE`` records (an enqueue, or one offset a
settle names): a new quorum-queue leader replays while its event loop keeps serving
(``replay_yielding``), so its lease keep-alive and other partitions' elections run on.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from struct import Struct

from mainstem.broker.amqp.queues.live_offsets import LiveOffsets
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.counters import BrokerCounters
from mainstem.broker.stream_service import NotWritable, PartitionClosed, PartitionService
from mainstem.formats.chunk import Chunk
from mainstem.log.commit import FsyncTimings
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, RetentionPolicy

ENQUEUE, SETTLE = 0x45, 0x53  # "E", "S"
_ENQUEUE_HEAD = Struct(">BBBI")  # kind, exchange length, routing key length, properties length
_OFFSET = Struct(">Q")
SEGMENT_BYTES = 64 * 1024 * 1024
COMPACT_EVERY = 4096  # settles between attempts to delete old segments
# Records a replay reads between two turns of the event loop: a few milliseconds.
REPLAY_SLICE = 1024


def encode_enqueue(message: QueueMessage) -> bytes:
    exchange = message.exchange.encode("utf-8", "surrogateescape")
    routing_key = message.routing_key.encode("utf-8", "surrogateescape")
    head = _ENQUEUE_HEAD.pack(ENQUEUE, len(exchange), len(routing_key), len(message.properties))
    return b"".join((head, exchange, routing_key, message.properties, message.body))


def decode_enqueue(record: memoryview) -> QueueMessage:
    _, exchange_len, key_len, properties_len = _ENQUEUE_HEAD.unpack_from(record)
    key_at = _ENQUEUE_HEAD.size + exchange_len
    properties_at = key_at + key_len
    body_at = properties_at + properties_len
    return QueueMessage(str(record[_ENQUEUE_HEAD.size:key_at], "utf-8", "surrogateescape"),
                        str(record[key_at:properties_at], "utf-8", "surrogateescape"),
                        bytes(record[properties_at:body_at]), bytes(record[body_at:]),
                        persistent=True)


def body_size(record: memoryview) -> int:
    lengths: tuple[int, int, int] = _ENQUEUE_HEAD.unpack_from(record)[1:]
    return len(record) - _ENQUEUE_HEAD.size - sum(lengths)


def open_partition(directory: Path, durability: DurabilityPolicy,
                   descriptors: DescriptorCache | None = None,
                   fsync_timings: FsyncTimings | None = None, *,
                   fsync_on_demand: bool = True) -> Partition:
    """A journal's log partition. Alone, it is fsynced only when a confirm waits for it;
    replicated, always (a follower acks only what it holds durably)."""
    return Partition.open(directory, durability=durability,
                          retention=RetentionPolicy(max_segment_bytes=SEGMENT_BYTES),
                          fsync_on_demand=fsync_on_demand, descriptors=descriptors,
                          fsync_timings=fsync_timings)


def encode_settle(offsets: list[int]) -> bytes:
    return bytes([SETTLE]) + Struct(f">{len(offsets)}Q").pack(*offsets)


@dataclass
class Replay:
    """What a journal holds after a restart: its live messages' offsets, oldest first,
    and their body sizes."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    sizes: array[int] = field(default_factory=lambda: array("I"))


def _apply_record(offset: int, record: memoryview, live: LiveOffsets) -> int:
    """Add an enqueue to `live`, or drop what a settle names; returns how many it settled."""
    if record[0] == ENQUEUE:
        live.add(offset)
        return 0
    settled = 0
    for (done,) in _OFFSET.iter_unpack(record[1:]):
        live.discard(done)
        settled += 1
    return settled


def _apply_chunk(chunk: Chunk, live: LiveOffsets) -> int:
    """Add a chunk's enqueues to `live`, drop its settles; returns how many it settled."""
    return sum(_apply_record(offset, record, live) for offset, record in chunk.records())


class FollowedJournal:
    """A replicated journal on a node that follows its leader: it keeps the live set of
    what is committed, so whole segments below the oldest live message go as they do on
    the leader (a follower's disk would grow for ever otherwise)."""

    def __init__(self, service: PartitionService, compact_every: int = COMPACT_EVERY) -> None:
        self.service = service
        self._live = LiveOffsets()
        self._position = service.first_offset  # the next offset to read
        self._compact_every = compact_every
        self._settled = 0  # since the last compaction

    def catch_up(self) -> Iterator[None]:
        """Read what was committed since the last call, pausing (a yield) after every
        REPLAY_SLICE records: a follower's loop serves others meanwhile. Once all is
        read, compact if enough settled."""
        service, budget = self.service, REPLAY_SLICE
        while self._position < service.committed_offset:
            chunk = service.read_written(self._position)
            settled = _apply_chunk(chunk, self._live)
            self._settled += settled
            budget -= chunk.next_offset - self._position + settled
            self._position = chunk.next_offset
            if budget <= 0:
                yield
                budget = REPLAY_SLICE
        if self._settled >= self._compact_every:
            self._settled = 0
            floor = self._live.floor()
            service.truncate_before(self._position if floor is None else floor)


class RecordReader:
    """Reads records back by offset, in increasing order, keeping the last chunk read: a
    queue paging in reads its records a batch at a time, in the order it wrote them."""

    def __init__(self, service: PartitionService) -> None:
        self.service = service
        self._chunk: Chunk | None = None
        self._records: Iterator[tuple[int, memoryview]] = iter(())
        self._position = 0  # the offset the iterator yields next

    def read(self, offsets: Iterable[int]) -> Iterator[memoryview]:
        """The records at `offsets`, lazily: memoryviews into the chunk last read."""
        for offset in offsets:
            chunk = self._chunk
            if chunk is None or not chunk.chunk_id <= offset < chunk.next_offset \
                    or offset < self._position:
                chunk = self._chunk = self.service.read_written(offset)
                self._records = chunk.records()
            for at, record in self._records:
                if at == offset:
                    self._position = at + 1
                    yield record
                    break
            else:
                raise LookupError(f"no record {offset} in {self.service.partition.directory}")

    def forget(self) -> None:
        self._chunk, self._records = None, iter(())


class QueueJournal:
    """Writes through the partition's Appender, as every writer of a partition does."""

    def __init__(self, service: PartitionService, counters: BrokerCounters | None = None
                 ) -> None:
        self.service = service
        self._appender = service.appender
        self._counters = counters or BrokerCounters()  # its nacks_outcome_unknown
        self._pending: list[QueueMessage] = []
        self._settles: list[int] = []
        self._batch: asyncio.Future[None] | None = None
        self._batch_confirms = 0  # enqueues waiting for this batch to be durable
        self._live = LiveOffsets()  # journal offsets of unsettled messages
        self.reader = RecordReader(service)
        self._since_compaction = 0
        self._compacting: asyncio.Task[None] | None = None
        # Told of messages the log refused (a full disk): nacked, so not to be delivered.
        self.on_refused: Callable[[list[QueueMessage]], None] | None = None

    @classmethod
    def open(cls, directory: Path, durability: DurabilityPolicy,
             descriptors: DescriptorCache | None = None,
             fsync_timings: FsyncTimings | None = None,
             counters: BrokerCounters | None = None) -> tuple[QueueJournal, Replay]:
        """Open the journal and replay it: the offsets of its unsettled messages."""
        journal = cls(PartitionService(open_partition(directory, durability, descriptors,
                                                      fsync_timings)), counters)
        return journal, journal.replay()

    def replay(self) -> Replay:
        """Read every record written (durable or not: a new leader's whole log is the
        queue's) and keep the offsets of the messages not settled, oldest first. At
        start-up, before anything else runs on the loop, in one go."""
        replay = Replay()
        for _ in self._replay_slices(replay):
            pass
        return replay

    async def replay_yielding(self) -> Replay:
        """`replay`, giving the event loop a turn after each slice. Nothing may write to
        the journal meanwhile: its queue holds publishes until it is done."""
        replay = Replay()
        for _ in self._replay_slices(replay):
            await asyncio.sleep(0)
        return replay

    def _replay_slices(self, replay: Replay) -> Iterator[None]:
        """Fill `replay`, pausing (a yield) after every REPLAY_SLICE records."""
        service, live = self.service, self._live
        offset, budget = service.first_offset, REPLAY_SLICE
        while offset < service.next_offset:
            chunk = service.read_written(offset)
            for at, record in chunk.records():
                budget -= 1 + _apply_record(at, record, live)
                if budget <= 0:
                    yield
                    budget = REPLAY_SLICE
            offset = chunk.next_offset
        survivors = iter(live)  # a second pass reads their sizes
        while offsets := array("q", islice(survivors, REPLAY_SLICE)):
            replay.offsets.extend(offsets)
            replay.sizes.extend(map(body_size, self.reader.read(offsets)))
            yield
        self.reader.forget()

    def enqueue(self, message: QueueMessage, confirm: bool) -> asyncio.Future[None]:
        """Write the message with this turn's batch; the future is done once it is durable
        (with `confirm`: fsynced; else written, which survives a crash of the process)."""
        self._pending.append(message)
        batch = self._schedule()
        self._batch_confirms += confirm
        return batch

    def settle(self, message: QueueMessage) -> None:
        """The message left the queue for good (acked, dropped, expired, purged)."""
        message.settled = True
        if message.log_offset is not None:  # else still pending: it is simply not written
            self.settle_offset(message.log_offset)

    def settle_offset(self, offset: int) -> None:
        """The message written at `offset` left the queue for good."""
        self._live.discard(offset)
        self._settles.append(offset)
        self._schedule()

    @property
    def writing(self) -> bool:
        """A batch is about to be written: its messages get their offsets then."""
        return self._batch is not None

    def _schedule(self) -> asyncio.Future[None]:
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            loop.call_soon(self._flush)
        return self._batch

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        confirms, self._batch_confirms = self._batch_confirms, 0
        assert batch is not None
        live = [m for m in self._pending if not m.settled]
        records = [encode_enqueue(m) for m in live]
        if self._settles:
            records.append(encode_settle(self._settles))
        self._since_compaction += len(self._settles)
        self._pending, self._settles = [], []
        if not records:
            batch.set_result(None)
            return
        receipt = self._appender.write_records(records, durable=bool(confirms))
        written = receipt.durable
        if not written.done():  # a confirm waits for durability
            written.add_done_callback(lambda done: self._written(done, batch, confirms))
        elif (error := written.exception()) is not None:
            # Refused (a full disk): the publishers get a nack, the queue drops them.
            batch.set_exception(error)
            if self.on_refused is not None:
                self.on_refused(live)
            return
        else:
            batch.set_result(None)
        for offset, message in enumerate(live, receipt.first_offset):
            message.log_offset = offset
            self._live.add(offset)
        if self._since_compaction >= COMPACT_EVERY:
            self._compact()

    def _written(self, done: asyncio.Future[None], batch: asyncio.Future[None],
                 confirms: int) -> None:
        """A batch written is durable, or failed after the write: its confirming
        publishers get a nack whose outcome is unknown (counted)."""
        if done.exception() is not None:
            self._counters.nacks_outcome_unknown += confirms
        pass_on(done, batch)

    def _compact(self) -> None:
        self._since_compaction = 0
        if self._compacting is None or self._compacting.done():
            self._compacting = asyncio.get_running_loop().create_task(self._compact_durable())

    async def _compact_durable(self) -> None:
        """Delete the segments below the oldest live message once what was written is
        durable. Waited for, not done here: a blocking fsync on the loop held a loaded
        node's loop 0.05-0.15 s at each compaction while a consumer drained a deep queue."""
        try:
            await self.service.durable()
        except (PartitionClosed, NotWritable, OSError):  # the next compaction tries again
            return
        floor = self._live.floor()
        self.service.truncate_before(self.service.next_offset if floor is None else floor)

    def _stop_compacting(self) -> None:
        if self._compacting is not None:
            self._compacting.cancel()

    async def close(self) -> None:
        if self._batch is not None:
            self._flush()  # which may start a compaction: stopped next
        self._stop_compacting()
        await self.service.close()

    def delete(self) -> None:
        """Close and remove the journal's files (the queue was deleted)."""
        self._stop_compacting()
        self._pending, self._settles = [], []
        self.service.delete()


def pass_on(done: asyncio.Future[None], batch: asyncio.Future[None]) -> None:
    """Settle a batch's future (or a publish's waiting on it) as the append under it
    settled."""
    error = done.exception()
    if batch.done():
        return
    if error is None:
        batch.set_result(None)
    else:
        batch.set_exception(error)
