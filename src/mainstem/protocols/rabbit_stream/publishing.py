"""A stream connection's publishing commands: DeclarePublisher, Publish and its confirms,
QueryPublisherSequence, DeletePublisher.

A Publish frame goes to its partition's appender, which batches what arrives together
into chunks; the frames of one socket read are staged, written together when the read is
done (`write_staged`), and confirmed in order once durable.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from mainstem.broker.errors import BrokerError
from mainstem.broker.stream_service import ChunkLimits, PartitionClosed, PartitionService
from mainstem.logging_setup import describe_error
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.commands import response_code
from mainstem.protocols.rabbit_stream.constants import Key, ResponseCode
from mainstem.protocols.rabbit_stream.frames import PACKED_ID, unpacked
from mainstem.protocols.rabbit_stream.publishers import Publisher, Publishers, refusal
from mainstem.protocols.rabbit_stream.session import Session

# A chunk's bounds, whatever a Publish frame holds: Osiris cuts chunks by the batches
# its writer takes (at most 8,192 writes), so a subscription at `last` gets a slice of
# a large frame, never the whole frame.
CHUNK_LIMITS = ChunkLimits(entries=4096, bytes=1 << 20)


class Publishing:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.send = session.send
        self.stats = session.stats
        self.publishers: Publishers[PartitionService] = Publishers()
        # Each Publish frame's durability, in arrival order, with the confirms it owes
        # (its publishing ids packed as a PublishConfirm carries them).
        self.confirms: deque[tuple[asyncio.Future[None], Publisher[PartitionService],
                                   bytes]] = deque()
        self._confirm_ready = asyncio.Event()
        self.staging: set[PartitionService] = set()  # handed this read's Publish frames

    def start(self) -> None:
        self.session.start(self._confirm_loop())

    def write_staged(self) -> None:
        """One chunk per partition for the frames of one read, as Osiris batches its
        pending writes: they share one write, one index entry, one fsync, one Deliver."""
        for service in self.staging:
            service.appender.write_staged()
        self.staging.clear()

    def drop(self, gone: Callable[[PartitionService], bool]) -> set[str]:
        """Forget the publishers of partitions that are gone; the names they wrote to."""
        return self.publishers.drop(gone)

    def on_declare_publisher(self, frame: f.DeclarePublisher) -> None:
        try:
            _, partition = self.session.resolve(frame.stream, checking="write")
        except BrokerError as error:
            self.session.respond(Key.DECLARE_PUBLISHER, frame.correlation_id,
                                 response_code(error))
            return
        if frame.reference:  # starting over: publishes refused after a failed write end
            partition.appender.resume(frame.reference)
        self.send(self.publishers.declare(frame, partition))

    def rows(self) -> list[dict[str, object]]:
        """As RabbitMQ's /api/stream/publishers shows them, with the last stored sequence
        of a deduplicating publisher."""
        return [{"publisher_id": p.publisher_id, "reference": p.reference,
                 "queue": {"name": p.name, "vhost": self.session.namespace},
                 "published": p.published,
                 "sequence": p.target.appender.sequence(p.reference) if p.reference else None}
                for p in self.publishers.by_id.values()]

    def on_publish(self, frame: f.PublishBlock) -> None:
        """Hand the frame's messages to its partition's appender, which batches what
        arrives together into chunks, and queue the confirms they owe. The frame is staged
        whole, with no work per message, unless something in it needs that (ids that do
        not rise, a replica's forward, a block too big for a chunk): then message by
        message, so that duplicates are skipped one by one."""
        publisher = self.publishers.by_id.get(frame.publisher_id)
        if publisher is None:
            self.send(refusal(frame.publisher_id, unpacked(frame.packed_ids),
                              ResponseCode.PUBLISHER_DOES_NOT_EXIST))
            return
        appender, writer = publisher.target.appender, publisher.reference or None
        receipt = appender.append_block(
            frame.entries, frame.count, frame.num_records, writer=writer,
            first=frame.first_id, last=frame.last_id, filter_values=frame.filter_values,
            limits=CHUNK_LIMITS) if frame.rising else None
        if receipt is None:
            each = frame.publish()
            receipt = appender.append_entries(
                each.entries, all_simple=each.num_records == len(each.entries),
                writer=writer, sequences=each.publishing_ids if writer else None,
                filter_values=each.filter_values, limits=CHUNK_LIMITS)
        publisher.published += frame.count
        self.stats.publish += frame.count
        self.stats.publish_confirm += frame.count  # every stream publish is confirmed
        self.staging.add(publisher.target)
        # Duplicates are confirmed too, once everything written before them is durable.
        self.confirms.append((receipt.durable, publisher, frame.packed_ids))
        self._confirm_ready.set()

    async def _confirm_loop(self) -> None:
        """Confirm publishes in order, each once its chunk is durable; confirms for
        the same publisher that are ready together go out in one frame."""
        confirms = self.confirms
        while True:
            await self._confirm_ready.wait()
            self._confirm_ready.clear()
            while confirms:
                durable, publisher, ids = confirms.popleft()
                try:
                    await durable
                except PartitionClosed:  # the stream was deleted before the write
                    self.send(refusal(publisher.publisher_id, unpacked(ids),
                                      ResponseCode.STREAM_DOES_NOT_EXIST))
                    continue
                except Exception as error:  # disk full, file too big: these, not the link
                    self.session.log.warning("write.failed",
                                             extra={"error": describe_error(error)})
                    self.send(refusal(publisher.publisher_id, unpacked(ids),
                                      ResponseCode.STREAM_NOT_AVAILABLE))
                    continue
                if confirms and confirms[0][1] is publisher:
                    merged = [ids]  # joined once: frames merge in linear time
                    while confirms and confirms[0][1] is publisher and _succeeded(confirms[0][0]):
                        merged.append(confirms.popleft()[2])
                    ids = b"".join(merged)
                self.stats.confirm += len(ids) // PACKED_ID.size
                self.send(r.PublishConfirm(publisher.publisher_id, ids))

    async def on_query_publisher_sequence(self, frame: f.QueryPublisherSequence) -> None:
        try:
            _, partition = self.session.resolve(frame.stream, checking="read")
        except BrokerError as error:
            self.send(r.QueryPublisherSequenceResponse(frame.correlation_id,
                                                       response_code(error), 0))
            return
        appender = partition.appender
        if appender.forwarder is None:  # asking where it stands, it resumes from there
            appender.resume(frame.reference)
        try:  # a replica asks the leader: its own log may hold chunks never committed
            sequence = (appender.sequence(frame.reference) if appender.forwarder is None
                        else await appender.committed_sequence(frame.reference)) or 0
        except PartitionClosed:  # no leader answered
            self.send(r.QueryPublisherSequenceResponse(
                frame.correlation_id, ResponseCode.STREAM_NOT_AVAILABLE, 0))
            return
        self.send(r.QueryPublisherSequenceResponse(frame.correlation_id, ResponseCode.OK,
                                                   sequence))

    def on_delete_publisher(self, frame: f.DeletePublisher) -> None:
        self.send(self.publishers.delete(frame))


def _succeeded(durable: asyncio.Future[None]) -> bool:
    return durable.done() and durable.exception() is None
