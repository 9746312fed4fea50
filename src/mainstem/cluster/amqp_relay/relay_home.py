"""The home's side of an AMQP relay link: another node's clients using queues live here.

A `HomeLink` runs what the node relays on this node's own live queues
(`VirtualHost.queues[name]`, whatever their kind): publishes (confirmed as the queue
confirms its own), subscriptions (each a `HomeConsumer` of the queue, with the window
of unsettled deliveries the node asked for), settles, basic.get, purges and counts. A
queue that is not live here (gone, or a `RemoteQueue`: this node is not its home any
more) refuses, so nothing is relayed twice. When the link ends, its consumers leave
their queues and what they had delivered unsettled is requeued, as when a channel dies.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from mainstem.broker.amqp.queues.manager import QueueManager
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.remote import NotHere, RemoteQueue, Settlement
from mainstem.broker.errors import BrokerError
from mainstem.cluster.amqp_relay import relay_wire as rw
from mainstem.cluster.amqp_relay.relay import Outbox, error_kind
from mainstem.cluster.replication.leader import read_frame
from mainstem.cluster.replication.wire import FrameType, WireError

# A delivery made over this link and not settled yet: its queue, the message, and the
# consumer it went to (None for basic.get).
_Unsettled = tuple[ClassicQueue, QueueMessage, "HomeConsumer | None"]


class HomeConsumer:
    """A consumer on another node, as the queue here sees it: credit while fewer than
    `prefetch` of its deliveries are unsettled."""

    no_ack = False  # a no-ack client's node settles each delivery once it sent it

    def __init__(self, link: HomeLink, queue: ClassicQueue, subscription: int, window: int,
                 exclusive: bool, in_transit: bool) -> None:
        self.link = link
        self.queue = queue
        self.subscription = subscription
        self.tag = f"relayed-{link.peer}-{subscription}"
        self.prefetch = window
        self.exclusive = exclusive
        self.unsettled = 0  # or, `in_transit`, not yet handed on to the client there
        self.in_transit = in_transit
        self.started = False  # no credit until the node has its answer

    def has_credit(self) -> bool:
        return self.started and self.unsettled < self.prefetch

    def deliver(self, queue: ClassicQueue, message: QueueMessage) -> None:
        self.unsettled += 1
        queue.stats.delivered(no_ack=False, by_get=False, redelivered=message.redelivered)
        delivery = self.link.track(queue, message, self)
        self.link.out.send(rw.encode_delivery(FrameType.RELAY_DELIVER, self.subscription,
                                              delivery, 0, message))

    def cancelled_by_server(self) -> None:
        self.link.cancelled(self)


class HomeLink:
    """One node's relay link, served by this node."""

    def __init__(self, queues: QueueManager, node: str, peer: str,
                 writer: asyncio.StreamWriter) -> None:
        self.queues = queues
        self.node = node
        self.peer = peer
        self.out = Outbox(writer)
        self._ids = itertools.count(1)
        self._unsettled: dict[int, _Unsettled] = {}
        self._consumers: dict[int, HomeConsumer] = {}

    def close(self) -> None:
        """The node left the cluster (its lease lapsed): stop waiting for its settles;
        the read ends and what it had unsettled is requeued."""
        self.out.writer.close()

    async def serve(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                kind, body = await read_frame(reader, rw.MAX_RELAY_FRAME)
                if kind == FrameType.RELAY_PUBLISH:
                    self._publish(rw.decode_publish(body))
                elif kind == FrameType.RELAY_SETTLE:
                    self._settle(*rw.decode_settle(body))
                elif kind == FrameType.RELAY_CALL:
                    self._call(rw.decode_json(body))
                else:
                    raise WireError(f"unexpected frame {kind} on a relay link")
        finally:
            self._end()

    def _live(self, vhost: str, name: str) -> ClassicQueue:
        host = self.queues.vhosts.get(vhost)
        queue = None if host is None else host.queues.get(name)
        if queue is None or isinstance(queue, RemoteQueue) or queue.deleted:
            raise NotHere(f"queue '{name}' in vhost '{vhost}' is not live on node "
                          f"'{self.node}' at the moment (no longer, or not yet): retry")
        return queue

    def track(self, queue: ClassicQueue, message: QueueMessage,
              consumer: HomeConsumer | None) -> int:
        delivery = next(self._ids)
        self._unsettled[delivery] = (queue, message, consumer)
        return delivery

    # -- publishes ----------------------------------------------------------------------

    def _publish(self, publish: rw.Publish) -> None:
        try:
            queue = self._live(publish.vhost, publish.queue)
        except NotHere:
            result: asyncio.Future[None] | bool | None = False
        else:
            result = queue.publish(publish.message, publish.confirm)
        if not publish.confirm:
            return
        if isinstance(result, asyncio.Future):
            result.add_done_callback(
                lambda done: self._confirm(publish.request, not done.cancelled()
                                           and done.exception() is None))
        else:
            self._confirm(publish.request, result is not False)

    def _confirm(self, request: int, accepted: bool) -> None:
        self.out.send(rw.encode_confirm(request, accepted))

    # -- settles ------------------------------------------------------------------------

    def _settle(self, how: Settlement, deliveries: tuple[int, ...]) -> None:
        credited: set[ClassicQueue] = set()
        requeued: dict[ClassicQueue, list[QueueMessage]] = {}
        for delivery in deliveries:
            found = self._unsettled.pop(delivery, None)
            if found is None:
                continue
            queue, message, consumer = found
            if consumer is not None and not consumer.in_transit:
                consumer.unsettled -= 1
                credited.add(queue)
            if queue.deleted:
                continue  # deleted, or no longer led here: the new leader redelivers
            if how is Settlement.ACK:
                queue.ack(message)
            elif how is Settlement.REJECT:
                queue.reject(message)
            else:
                requeued.setdefault(queue, []).append(message)
        for queue, messages in requeued.items():
            queue.requeue(messages)
        for queue in credited:
            queue.dispatch()

    # -- calls --------------------------------------------------------------------------

    def _call(self, call: dict[str, Any]) -> None:
        request = int(call.get("id", 0))
        try:
            if call.get("op") == "cancel":
                self._cancel(int(call["subscription"]))
                return
            if call.get("op") == "credit":
                self._credit(int(call["subscription"]), int(call["count"]))
                return
            queue = self._live(str(call["vhost"]), str(call["queue"]))
            reply = self._run(queue, request, call)
        except BrokerError as error:
            reply = {"error": error.message, "kind": error_kind(error)}
        except (KeyError, TypeError, ValueError) as error:
            raise WireError(f"bad relay call: {error!r}") from error
        if request and reply is not None:
            self.out.send(rw.encode_json(FrameType.RELAY_REPLY, {"id": request, **reply}))

    def _run(self, queue: ClassicQueue, request: int, call: dict[str, Any]
             ) -> dict[str, Any] | None:
        """Run one call; its reply, or None when it answered otherwise (RELAY_GOT)."""
        op = call["op"]
        if op == "consume":
            self._consume(queue, request, int(call["subscription"]), int(call["window"]),
                          bool(call["exclusive"]), bool(call.get("in_transit")))
            return None
        if op == "get":
            return self._get(queue, request, bool(call["no_ack"]))
        if op == "purge":
            return {"count": queue.purge()}
        if op == "counts":
            return {"ready": queue.ready_count, "consumers": queue.consumer_count}
        raise WireError(f"unknown relay call {op!r}")

    def _consume(self, queue: ClassicQueue, request: int, subscription: int, window: int,
                 exclusive: bool, in_transit: bool) -> None:
        consumer = HomeConsumer(self, queue, subscription, window, exclusive, in_transit)
        queue.add_consumer(consumer)  # raises AccessRefused if exclusive use conflicts
        self._consumers[subscription] = consumer
        # The answer goes before any delivery (the link keeps the order).
        self.out.send(rw.encode_json(FrameType.RELAY_REPLY, {"id": request}))
        consumer.started = True
        queue.dispatch()

    def _credit(self, subscription: int, count: int) -> None:
        """Deliveries reached a client without a prefetch: the window reopens (what it
        holds unacked is its own affair, as RabbitMQ sends such a consumer everything)."""
        consumer = self._consumers.get(subscription)
        if consumer is not None and consumer.in_transit:
            consumer.unsettled = max(0, consumer.unsettled - count)
            consumer.queue.dispatch()

    def _cancel(self, subscription: int) -> None:
        """basic.cancel: what it had delivered stays unsettled until settled."""
        consumer = self._consumers.pop(subscription, None)
        if consumer is not None:
            consumer.started = False
            consumer.queue.remove_consumer(consumer)

    def cancelled(self, consumer: HomeConsumer) -> None:
        """The queue ended a consumer (deleted, or no longer led here)."""
        if self._consumers.pop(consumer.subscription, None) is not None:
            self.out.send(rw.encode_cancelled(consumer.subscription))

    def _get(self, queue: ClassicQueue, request: int, no_ack: bool) -> dict[str, Any] | None:
        message = queue.get()
        if message is None:
            return {"ready": queue.ready_count}
        queue.stats.delivered(no_ack=no_ack, by_get=True, redelivered=message.redelivered)
        if no_ack:
            queue.settle(message)
            delivery = 0
        else:
            queue.unacked_count += 1
            delivery = self.track(queue, message, None)
        self.out.send(rw.encode_delivery(FrameType.RELAY_GOT, request, delivery,
                                         queue.ready_count, message))
        return None

    def _end(self) -> None:
        """The node's link ended: its consumers go, and what they (and its gets) had
        unsettled is requeued, as when a channel dies."""
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            consumer.started = False
            if not consumer.queue.deleted:
                consumer.queue.remove_consumer(consumer)
        self._settle(Settlement.REQUEUE, tuple(self._unsettled))
