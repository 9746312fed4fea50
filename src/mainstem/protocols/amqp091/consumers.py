"""basic.consume subscriptions: on a classic queue (the queue pushes within our credit) and
on a stream queue (we read the stream from an offset, one credit per unacked message)."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, Protocol

from mainstem.broker.amqp.queues import ClassicQueue, QueueMessage
from mainstem.broker.errors import PreconditionFailed
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.retention import age_s
from mainstem.broker.stream_service import (
    ChunkDamaged,
    PartitionClosed,
    PartitionService,
    waiting_out_tier,
)
from mainstem.broker.streams import Stream
from mainstem.protocols.amqp091.encode import DeliverEncoder
from mainstem.protocols.amqp091.properties import from_stream_record
from mainstem.protocols.amqp091.state import ChannelCredit
from mainstem.protocols.base import ConnectionContext


class Outgoing(Protocol):
    """Where deliveries go: the connection (`connection.AmqpConnection`)."""

    ctx: ConnectionContext
    frame_max: int

    def send(self, data: bytes) -> None: ...

    def can_write(self) -> bool: ...

    async def drain(self) -> None: ...


class ConsumerChannel(Protocol):
    """The channel as its consumers see it (`channel.Channel`): credit, delivery tags,
    counters and the connection."""

    number: int
    credit: ChannelCredit
    stats: MessageStats

    @property
    def connection(self) -> Outgoing: ...

    def next_delivery_tag(self, consumer: Consumer, message: QueueMessage | None) -> int: ...

    def counted(self, queue: str, size: int) -> None: ...

    def consumer_cancelled(self, tag: str) -> None: ...


class QueueConsumer:
    """A consumer of a classic queue. Credit: the channel's (``ChannelCredit``), once the
    client has its consume-ok, and the socket's write buffer."""

    def __init__(self, channel: ConsumerChannel, queue: ClassicQueue, tag: str, *, no_ack: bool,
                 exclusive: bool, prefetch: int) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.encoder = DeliverEncoder(channel.number, tag, channel.connection.frame_max)
        self.started = False  # no credit until the client has its consume-ok

    def start(self) -> None:
        self.started = True
        self.queue.dispatch()

    def has_credit(self) -> bool:
        return (self.started
                and self.channel.credit.allows(self.prefetch, self.unacked, self.no_ack)
                and self.channel.connection.can_write())

    def deliver(self, queue: ClassicQueue, message: QueueMessage) -> None:
        tag = self.channel.next_delivery_tag(self, message)
        if not self.no_ack:
            self.unacked += 1
        redelivered = message.redelivered
        for stats in (self.channel.stats, queue.stats):
            stats.delivered(no_ack=self.no_ack, by_get=False, redelivered=redelivered)
        self.channel.connection.send(self.encoder.encode(
            tag, message.redelivered, message.exchange, message.routing_key,
            message.properties, message.body))
        self.channel.counted(queue.name, len(message.body))

    def settled(self, count: int = 1) -> None:
        self.unacked -= count

    def cancelled_by_server(self) -> None:
        self.channel.consumer_cancelled(self.tag)

    def stop(self) -> None:
        self.queue.remove_consumer(self)


class StreamConsumer:
    """Reads a stream queue from the offset in ``x-stream-offset``; each unacked delivery
    holds one credit of the prefetch, as RabbitMQ's stream queues do."""

    no_ack = False
    exclusive = False

    def __init__(self, channel: ConsumerChannel, stream: Stream, tag: str, prefetch: int,
                 start: Any) -> None:
        if prefetch <= 0:
            raise PreconditionFailed("consumer prefetch count is not set for stream queue "
                                     f"'{stream.name}'")
        self.channel = channel
        self.stream = stream
        self.queue = stream
        self.tag = tag
        self.prefetch = prefetch
        self.unacked = 0
        self.encoder = DeliverEncoder(channel.number, tag, channel.connection.frame_max)
        self._credit = asyncio.Event()
        self._credit.set()
        partition = stream.services[0]
        self._task = asyncio.get_running_loop().create_task(
            self._run(partition, resolve_offset(partition, start)))

    async def _run(self, partition: PartitionService, start: int) -> None:
        reader = partition.subscribe(start)
        log = self.channel.connection.ctx.log
        try:
            while True:
                # pushed to, a consumer has no error to receive: it waits the tier out
                chunk = await waiting_out_tier(reader.next_chunk, log)
                for offset, record in chunk.records():
                    if offset < start:
                        continue  # "last" and explicit offsets start inside a chunk
                    while not (self.channel.credit.allows(self.prefetch, self.unacked, False)
                               and self.channel.connection.can_write()):
                        self._credit.clear()
                        await self._credit.wait()
                    self._deliver(offset, record)
                await self.channel.connection.drain()
        except (PartitionClosed, ChunkDamaged):  # damage: reported by the stream service
            self.channel.consumer_cancelled(self.tag)
        except Exception:  # a consumer that cannot go on says so, never stalls silently
            self.channel.connection.ctx.log.exception("consumer.failed", extra={
                "consumer_tag": self.tag, "queue": self.stream.name})
            self.channel.consumer_cancelled(self.tag)

    def _deliver(self, offset: int, record: memoryview) -> None:
        properties, body, exchange, routing_key = from_stream_record(record, offset)
        tag = self.channel.next_delivery_tag(self, None)
        self.unacked += 1
        self.channel.stats.deliver += 1
        self.channel.connection.send(self.encoder.encode(
            tag, False, exchange, routing_key, properties, body))
        self.channel.counted(self.stream.name, len(body))

    def settled(self, count: int = 1) -> None:
        self.unacked -= count
        self._credit.set()

    def resume(self) -> None:
        self._credit.set()

    def cancelled_by_server(self) -> None:
        self.channel.consumer_cancelled(self.tag)

    def stop(self) -> None:
        self._task.cancel()


Consumer = QueueConsumer | StreamConsumer


def resolve_offset(partition: PartitionService, spec: Any) -> int:
    """Where ``x-stream-offset`` says to start: first, last, next (the default), an offset,
    a timestamp, or an interval back from now such as "1h" or "30m"."""
    if spec is None or spec == "next":
        return partition.committed_offset
    if spec == "first":
        return partition.first_offset
    if spec == "last":  # the start of the last chunk, if there is one
        if partition.committed_offset == partition.first_offset:
            return partition.committed_offset
        return max(partition.committed_chunk_id, partition.first_offset)
    if isinstance(spec, bool):
        raise PreconditionFailed(f"invalid x-stream-offset {spec!r}")
    if isinstance(spec, int):
        return max(spec, partition.first_offset)
    if isinstance(spec, datetime.datetime):
        return partition.offset_for_timestamp(int(spec.timestamp() * 1000))
    if isinstance(spec, str) and (seconds := age_s(spec)) is not None:
        return partition.offset_for_timestamp(int((time.time() - seconds) * 1000))
    raise PreconditionFailed(f"invalid x-stream-offset {spec!r}")
