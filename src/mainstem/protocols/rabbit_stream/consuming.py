"""A stream connection's consuming commands: Subscribe, Credit, Unsubscribe, the single
active consumer's ConsumerUpdate replies, StoreOffset, QueryOffset, ResolveOffsetSpec.

The rules (subscription ids, credit, who is active) live in `credit.Subscriptions`; this
carries out what they decide. A subscription ships committed chunks from the segment
files to the socket as they are, paced by credit (one credit = one chunk) and by the
socket (`PacedOutput`: a chunk goes as the socket takes it, so a consumer that stops
reading holds a piece of one chunk in the broker, not its backlog). A chunk is checked
before it goes: a damaged one ends its subscription with a MetadataUpdate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mainstem.broker.active_consumers import ActiveConsumer
from mainstem.broker.errors import BrokerError
from mainstem.broker.stream_service import (
    ChunkDamaged,
    PartitionClosed,
    PartitionService,
    waiting_out_tier,
)
from mainstem.broker.stream_service import Subscription as Reader
from mainstem.broker.streams import Stream
from mainstem.protocols.rabbit_stream import credit as c
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream import state as s
from mainstem.protocols.rabbit_stream.codec import encode_deliver_prefix
from mainstem.protocols.rabbit_stream.commands import resolve_offset, response_code
from mainstem.protocols.rabbit_stream.constants import Key, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.session import Session


@dataclass(slots=True, eq=False)
class Subscription:
    """What carries one subscription out: its reader, delivery task and group seat."""

    subscription_id: int
    name: str
    service: PartitionService
    reader: Reader  # credit, position and the chunks this subscriber wants
    task: asyncio.Task[None] | None = None
    membership: ActiveConsumer | None = None
    consumed: int = 0  # messages delivered


class Consuming:
    def __init__(self, session: Session, state: s.ConnectionState,
                 correlations: s.Correlations) -> None:
        self.session = session
        self.state = state  # which Deliver version the client asked for
        self.flows = c.Subscriptions(correlations)
        self.subscriptions: dict[int, Subscription] = {}
        self._reply_timers: dict[int, asyncio.TimerHandle] = {}  # ConsumerUpdates asked

    def close(self) -> None:
        """The connection is gone: end every subscription, wait for no reply."""
        for timer in self._reply_timers.values():
            timer.cancel()
        for subscription_id in list(self.subscriptions):
            self._flow(self.flows.end(subscription_id))

    def end_reading(self, gone: set[int]) -> set[str]:
        """End the subscriptions to partitions that are gone (by id of their service); the
        names they read."""
        ended = set()
        for subscription in list(self.subscriptions.values()):
            if id(subscription.service) in gone:
                ended.add(subscription.name)
                self._flow(self.flows.end(subscription.subscription_id))
        return ended

    def rows(self) -> list[dict[str, object]]:
        """As RabbitMQ's /api/stream/consumers shows them: the offset read next and the
        committed messages not sent yet."""
        rows: list[dict[str, object]] = []
        for sub in self.subscriptions.values():
            offset = sub.reader.position
            rows.append({"subscription_id": sub.subscription_id,
                         "queue": {"name": sub.name, "vhost": self.session.namespace},
                         "consumed": sub.consumed, "offset": offset,
                         "offset_lag": max(sub.service.committed_offset - offset, 0),
                         "credits": sub.reader.credit or 0,
                         "active": sub.membership is None or sub.membership.is_active})
        return rows

    def on_subscribe(self, frame: f.Subscribe) -> None:
        try:
            stream, partition = self.session.resolve(frame.stream, checking="read")
        except BrokerError as error:
            self.session.respond(Key.SUBSCRIBE, frame.correlation_id, response_code(error))
            return
        self._flow(self.flows.subscribe(frame), (stream, partition))

    def on_credit(self, frame: f.Credit) -> None:
        self._flow(self.flows.credit(frame))

    def on_unsubscribe(self, frame: f.Unsubscribe) -> None:
        self._flow(self.flows.unsubscribe(frame))

    def on_consumer_update_reply(self, frame: f.ConsumerUpdateReply) -> None:
        self._flow(self.flows.consumer_update_reply(frame))

    def _flow(self, actions: list[c.FlowAction],
              resolved: tuple[Stream, PartitionService] | None = None) -> None:
        """Carry out what the subscription rules decided; `resolved` is the stream of
        the Subscribe that asked to start reading."""
        for action in actions:
            match action:
                case s.Send(frame):
                    self.session.send(frame)
                case c.Grant(subscription_id, credit):
                    self.subscriptions[subscription_id].reader.grant(credit)
                case c.StartReading() if resolved is not None:
                    self._start_reading(action, resolved[1])
                case c.JoinGroup() if resolved is not None:
                    self._join_group(action, resolved[0])
                case c.StartDelivery(subscription_id, spec):
                    self._start_delivery(self.subscriptions[subscription_id], spec)
                case c.StopDelivery(subscription_id):
                    self._stop_delivery(self.subscriptions[subscription_id])
                case c.EndSubscription(subscription_id):
                    self._end_subscription(subscription_id)
                case c.SteppedDown(subscription_id):
                    membership = self.subscriptions[subscription_id].membership
                    if membership is not None:
                        membership.stepped_down()
                case c.AwaitReply(correlation_id):
                    self._reply_timers[correlation_id] = asyncio.get_running_loop().call_later(
                        self.session.ctx.limits.request_timeout_s, self._reply_overdue,
                        correlation_id)

    def _reply_overdue(self, correlation_id: int) -> None:
        """A ConsumerUpdate unanswered for the request timeout: as RabbitMQ, drop the
        connection; its subscriptions leave their groups, which go on without it."""
        self._reply_timers.pop(correlation_id, None)
        transport = self.session.transport
        if self.flows.awaiting(correlation_id) and not transport.is_closing():
            self.session.log.warning("consumer_update.timeout", extra={
                "correlation_id": correlation_id,
                "timeout_s": self.session.ctx.limits.request_timeout_s})
            transport.abort()

    def _start_reading(self, action: c.StartReading, partition: PartitionService) -> None:
        reader = partition.subscribe(partition.committed_offset, credit=action.credit,
                                     filter_values=action.filter_values,
                                     match_unfiltered=action.match_unfiltered)
        self.subscriptions[action.subscription_id] = Subscription(
            action.subscription_id, action.stream, partition, reader)
        self.session.ctx.add_consumer(str(action.subscription_id), action.stream,
                                      prefetch_count=action.credit, ack_required=False)

    def _start_delivery(self, subscription: Subscription, spec: f.OffsetSpec) -> None:
        subscription.reader.seek(resolve_offset(subscription.service, spec))
        subscription.task = self.session.start(self._deliver_loop(subscription))

    def _stop_delivery(self, subscription: Subscription) -> None:
        if subscription.task is not None:
            subscription.task.cancel()
            subscription.task = None

    async def _deliver_loop(self, subscription: Subscription) -> None:
        """Ship committed chunks as Deliver frames, one credit each: the chunk's header
        and data go from the segment file, after the frame's own header, as the socket
        takes them; the next chunk is read once this one has been handed over."""
        reader, service = subscription.reader, subscription.service
        session = self.session
        try:
            while True:
                # pushed to, a subscriber has no error to receive: it waits the tier out
                chunk = await waiting_out_tier(reader.next_view, session.log)
                header = encode_deliver_prefix(subscription.subscription_id,
                                               self.state.deliver_version, chunk.wire_size,
                                               service.committed_chunk_id)
                sending = session.output.send(reader.transfer(chunk, header))
                subscription.consumed += chunk.num_records
                session.stats.deliver_no_ack += chunk.num_records
                session.core.delivery_stats.delivered(
                    session.namespace, subscription.name, chunk.num_records,
                    chunk.location.send_size)
                del chunk  # a small chunk's bytes, read whole: not held while the socket waits
                if sending is not None:
                    await sending  # a consumer that does not read holds one piece, not the log
        except (PartitionClosed, ConnectionError):
            return
        except ChunkDamaged:  # reported by the stream service: logged and counted
            self._damaged(subscription)

    def _damaged(self, subscription: Subscription) -> None:
        """A damaged chunk lies ahead, nothing of it sent: the subscription ends and its
        client hears its stream is not available (MetadataUpdate, as for a stream gone),
        which rstream and RabbitMQ's clients surface to the application."""
        subscription.task = None  # this task, which ends as it returns
        self._flow(self.flows.end(subscription.subscription_id))
        self.session.send(r.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, subscription.name))

    def _end_subscription(self, subscription_id: int) -> None:
        subscription = self.subscriptions.pop(subscription_id)
        self.session.ctx.remove_consumer(str(subscription_id))
        self._stop_delivery(subscription)
        if subscription.membership is not None:
            subscription.membership.leave()

    def on_store_offset(self, frame: f.StoreOffset) -> None:
        # StoreOffset has no response: a failure can only be logged.
        session = self.session
        try:
            session.check("read", frame.stream)
            stream, index = session.core.streams.resolve(session.namespace, frame.stream)
            session.core.store_offset(session.namespace, stream.name, index, frame.reference,
                                      frame.offset)
        except BrokerError as error:
            session.log.info("offset.store_refused", extra={"stream": frame.stream,
                                                            "reason": error.message})

    def on_query_offset(self, frame: f.QueryOffset) -> None:
        session = self.session
        try:
            session.check("read", frame.stream)
            stream, index = session.core.streams.resolve(session.namespace, frame.stream)
            offset = session.core.query_offset(session.namespace, stream.name, index,
                                               frame.reference)
        except BrokerError as error:
            session.send(r.QueryOffsetResponse(frame.correlation_id, response_code(error), 0))
            return
        if offset is None:
            session.send(r.QueryOffsetResponse(frame.correlation_id, ResponseCode.NO_OFFSET, 0))
        else:
            session.send(r.QueryOffsetResponse(frame.correlation_id, ResponseCode.OK, offset))

    def on_resolve_offset_spec(self, frame: f.ResolveOffsetSpec) -> None:
        try:
            _, partition = self.session.resolve(frame.stream, checking="read")
        except BrokerError as error:
            self.session.send(r.ResolveOffsetSpecResponse(
                frame.correlation_id, response_code(error), OffsetType.OFFSET, 0))
            return
        offset = resolve_offset(partition, frame.offset_spec)
        self.session.send(r.ResolveOffsetSpecResponse(frame.correlation_id, ResponseCode.OK,
                                                      OffsetType.OFFSET, offset))

    # -- single active consumer ----------------------------------------------

    def _join_group(self, action: c.JoinGroup, stream: Stream) -> None:
        subscription = self.subscriptions[action.subscription_id]
        index = stream.partition_names.index(subscription.name)
        group = self.session.core.active_consumers.group(
            self.session.namespace, subscription.name, action.name,
            position=index if action.super_stream else None)
        subscription_id = action.subscription_id
        subscription.membership = group.join(
            activate=lambda: self._flow(self.flows.activation(subscription_id, True)),
            deactivate=lambda: self._flow(self.flows.activation(subscription_id, False)))
