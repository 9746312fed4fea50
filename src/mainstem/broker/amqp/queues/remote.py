"""A queue of the cluster that is live on another node.

Every node knows every shared queue (declarations succeed and bindings hold anywhere);
where one is not live here — a quorum queue whose journal another node leads, a classic
queue whose home is another node — this node holds a `RemoteQueue` in its place. What a
queue does with messages and consumers happens at its home node: a `RemoteQueue` relays
publishes, consumers, basic.get, purges and counts there through the `QueueRelay` the
cluster implements, and refuses them (naming the home) while it cannot reach it.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.queue import ClassicQueue, Consumer
from mainstem.broker.errors import PreconditionFailed

# Deliveries a home may have in flight to a consumer without a prefetch (or a no-ack one):
# bounds what waits here for the client's credit.
UNBOUNDED_WINDOW = 256


class NotHere(PreconditionFailed):
    """A queue is used on a node where it is not live and its home cannot be reached."""


class RelayedMessage(QueueMessage):
    """A message delivered by a queue's home: settling it goes back over the same link."""

    __slots__ = ("delivery", "route")

    def __init__(self, exchange: str, routing_key: str, properties: bytes, body: bytes, *,
                 delivery: int, route: object, delivery_count: int) -> None:
        super().__init__(exchange, routing_key, properties, body)
        self.delivery = delivery  # the home's id of this delivery
        self.route = route  # the link it came over: ids mean nothing on another one
        self.delivery_count = delivery_count


class Settlement(enum.IntEnum):
    """What a node tells a queue's home about a message relayed to one of its clients."""

    ACK = 1
    REJECT = 2  # dead-lettered if the queue says so
    REQUEUE = 3


class RelaySubscriber(Protocol):
    """A consumer of this node subscribed to a queue at its home."""

    def relayed(self, message: RelayedMessage) -> None:
        """A delivery from the home (unsettled there until settled through the relay)."""

    def ended(self) -> None:
        """The home cancelled the subscription, or the link to it broke."""


class RelaySubscription(Protocol):
    def cancel(self) -> None:
        """basic.cancel at the home (what it delivered stays unsettled until settled)."""

    def handed_on(self, count: int) -> None:
        """`count` deliveries reached the client: a window counted in transit reopens."""


class QueueRelay(Protocol):
    """How this node reaches AMQP queues live on another node (their home): what a
    `RemoteQueue` asks of the cluster. Errors are the broker's (`NotHere` when the home
    cannot be reached or does not hold the queue live)."""

    node_name: str  # this node's

    def reaches(self, home: str) -> bool:
        """Whether `home` is another live node of the cluster."""

    def publish(self, home: str, vhost: str, queue: str, message: QueueMessage,
                confirm: bool) -> asyncio.Future[None] | None:
        """Enqueue at the home; with `confirm`, a future done once the home has it as its
        own publish would be confirmed (failed if refused or the link broke)."""

    async def subscribe(self, home: str, vhost: str, queue: str, subscriber: RelaySubscriber,
                        *, window: int, exclusive: bool, in_transit: bool
                        ) -> RelaySubscription:
        """basic.consume at the home, with at most `window` deliveries unsettled (or, with
        `in_transit`, not yet handed on to the client)."""

    def backlog(self, home: str) -> asyncio.Future[None] | None:
        """While the link to `home` has more to write than it should hold: done once it
        caught up (publishers wait for it, as for a queue's pager)."""

    def settle(self, route: object, deliveries: Sequence[int], how: Settlement) -> None:
        """Settle deliveries that came over `route` (ignored once that link is gone: its
        home requeued them)."""

    async def get(self, home: str, vhost: str, queue: str, no_ack: bool
                  ) -> tuple[RelayedMessage | None, int]:
        """basic.get at the home: the message (None if empty) and how many stay ready."""

    async def purge(self, home: str, vhost: str, queue: str) -> int:
        """queue.purge at the home: how many ready messages it dropped."""

    async def counts(self, home: str, vhost: str, queue: str) -> tuple[int, int]:
        """The queue's ready messages and consumers at the home."""


class RemoteQueue(ClassicQueue):
    """Stands for a queue live on the node `home()` names (None while it has none)."""

    home: Callable[[], str | None] = staticmethod(lambda: None)  # set by the vhost
    home_node = ""  # a classic queue's home, live or not (a quorum queue's moves)
    vhost = ""  # set by the vhost, with `relay_of`
    relay_of: Callable[[], QueueRelay | None] = staticmethod(lambda: None)
    consumer_total: int | None = None  # the home's consumer count, as queue.delete asked it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._relayed: dict[Consumer, RelayedConsumer] = {}

    def not_here(self) -> NotHere:
        return NotHere(f"{self.kind} queue '{self.name}' {self.whereabouts()}")

    def touch(self) -> None:
        """x-expires runs at the home only: a copy here must not delete the queue."""

    def whereabouts(self) -> str:
        """Where the queue is, for a client refused here."""
        home, relay = self.home(), self.relay_of()
        if home is None:
            return "has no live node at the moment: retry"
        if relay is not None and home == relay.node_name:
            return "is being made live on this node: retry"
        return (f"is live on node '{home}', out of this node's reach at the moment: "
                "retry, or connect there")

    def _route(self) -> tuple[QueueRelay, str]:
        """The relay and the home to reach; NotHere while there is none to reach."""
        relay, home = self.relay_of(), self.home()
        if relay is None or home is None or not relay.reaches(home):
            raise self.not_here()
        return relay, home

    # -- publishing: forwarded to the home, confirmed once it has the message -----------

    def publish(self, message: QueueMessage, confirm: bool = False
                ) -> asyncio.Future[None] | bool | None:
        try:
            relay, home = self._route()
        except NotHere:
            return False  # refused: a confirming publisher gets basic.nack
        self.stats.publish += 1
        return relay.publish(home, self.vhost, self.name, message, confirm)

    @property
    def backlog(self) -> asyncio.Future[None] | None:
        relay, home = self.relay_of(), self.home()
        return None if relay is None or home is None else relay.backlog(home)

    # -- consumers: subscribed at the home, deliveries handed on within local credit -----

    def add_consumer(self, consumer: Consumer) -> None:
        raise self.not_here()  # consumers subscribe at the home: `subscribe`

    async def subscribe(self, consumer: Consumer) -> None:
        """basic.consume at the home; raises its refusal (AccessRefused: exclusive use)."""
        relay, home = self._route()
        relayed = RelayedConsumer(self, consumer, relay)
        bounded = bool(consumer.prefetch) and not consumer.no_ack
        relayed.subscription = await relay.subscribe(
            home, self.vhost, self.name, relayed,
            window=consumer.prefetch if bounded else UNBOUNDED_WINDOW,
            exclusive=consumer.exclusive, in_transit=not bounded and not consumer.no_ack)
        self._relayed[consumer] = relayed
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        relayed = self._relayed.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if relayed is not None:
            relayed.stop()

    def dispatch(self) -> None:
        """Credit may be back here (acks, a drained socket): hand on what waits."""
        for relayed in list(self._relayed.values()):
            relayed.hand_on()

    def _ended(self, consumer: Consumer) -> None:
        """The home cancelled a subscription or the link broke: basic.cancel to the client."""
        self._relayed.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        consumer.cancelled_by_server()

    # -- settling: what this node's clients decide goes to the home ---------------------

    def ack(self, message: QueueMessage) -> None:
        _settle([message], Settlement.ACK, self.relay_of())

    def reject(self, message: QueueMessage) -> None:
        _settle([message], Settlement.REJECT, self.relay_of())

    def requeue(self, messages: Iterable[QueueMessage]) -> None:
        _settle(messages, Settlement.REQUEUE, self.relay_of())

    def settle(self, message: QueueMessage) -> None:
        pass  # a no-ack basic.get was settled at the home

    # -- asked of the home --------------------------------------------------------------

    async def fetch(self, no_ack: bool) -> tuple[QueueMessage | None, int]:
        """basic.get at the home: the message (None if empty) and the ready count left."""
        relay, home = self._route()
        message, ready = await relay.get(home, self.vhost, self.name, no_ack)
        return message, ready

    def purge(self) -> int:
        raise self.not_here()  # asynchronous here: `purge_at_home`

    async def purge_at_home(self) -> int:
        relay, home = self._route()
        return await relay.purge(home, self.vhost, self.name)

    async def home_counts(self) -> tuple[int, int]:
        """The home's ready messages and consumers; (0, those here) while it cannot be
        reached, as a queue known here and live nowhere has."""
        try:
            relay, home = self._route()
            return await relay.counts(home, self.vhost, self.name)
        except NotHere:
            return 0, len(self.consumers)

    async def before_delete(self) -> None:
        """queue.delete checks if_unused and if_empty, and answers the message count,
        against the home's counts: they become this queue's."""
        self.ready_count, self.consumer_total = await self.home_counts()

    @property
    def consumer_count(self) -> int:
        total = self.consumer_total
        return len(self.consumers) if total is None else total

    def delete_storage(self) -> None:
        """Deleted here: the subscriptions at the home go too (its consumers were told)."""
        self._ready.close()
        relayed, self._relayed = self._relayed, {}
        for subscription in relayed.values():
            subscription.stop()

    async def close(self) -> None:
        self.stop_timers()
        self._ready.close()


class RelayedConsumer:
    """A consumer of this node subscribed at the queue's home: deliveries wait here until
    the consumer has credit (the channel's prefetch, the client's socket)."""

    def __init__(self, queue: RemoteQueue, consumer: Consumer, relay: QueueRelay) -> None:
        self.queue = queue
        self.consumer = consumer
        self.relay = relay
        self.subscription: RelaySubscription | None = None
        self.waiting: deque[RelayedMessage] = deque()

    def relayed(self, message: RelayedMessage) -> None:
        self.waiting.append(message)
        self.hand_on()

    def hand_on(self) -> None:
        consumer, waiting = self.consumer, self.waiting
        handed = 0
        while waiting and consumer.has_credit():
            message = waiting.popleft()
            consumer.deliver(self.queue, message)
            handed += 1
            if consumer.no_ack:  # settled once sent, as a local no-ack delivery is
                self.relay.settle(message.route, (message.delivery,), Settlement.ACK)
        if handed and not consumer.no_ack and not consumer.prefetch \
                and self.subscription is not None:
            self.subscription.handed_on(handed)  # the home's window counts what waits here

    def stop(self) -> None:
        """basic.cancel (or the channel closed): what never reached the client goes back."""
        self._give_back()
        if self.subscription is not None:
            self.subscription.cancel()

    def ended(self) -> None:
        self._give_back()
        self.queue._ended(self.consumer)

    def _give_back(self) -> None:
        _settle(self.waiting, Settlement.REQUEUE, self.relay)
        self.waiting.clear()


def _settle(messages: Iterable[QueueMessage], how: Settlement,
            relay: QueueRelay | None) -> None:
    """Settle relayed messages at their homes, one call per link they came over."""
    if relay is None:
        return
    by_route: dict[object, list[int]] = {}
    for message in messages:
        if isinstance(message, RelayedMessage):
            by_route.setdefault(message.route, []).append(message.delivery)
    for route, deliveries in by_route.items():
        relay.settle(route, deliveries, how)
