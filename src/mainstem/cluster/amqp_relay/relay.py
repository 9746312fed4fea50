"""Relaying AMQP traffic to the node where a queue is live (its home).

A client may use any queue through any node, as with RabbitMQ. Where a queue is not live
here, the vhost holds a `RemoteQueue`, which asks this module's `Relay` (the broker's
`QueueRelay`) to reach the queue's home: one `RelayLink` per home node, a connection to
its replication listener that carries every vhost's and queue's traffic — publishes,
subscriptions and their deliveries, settles, basic.get, purges and counts (frames in
`relay_wire`; the home's side is `relay_home`).

A link sends frames in the order they were made (so one node's publishes to one queue
stay in order) and batches those of one turn of the event loop into one write. When it
breaks, or its home leaves the cluster, every confirm it owes fails (basic.nack), every
subscription ends (basic.cancel to the client) and the home requeues what it had
delivered over it unsettled; later settles of those deliveries are dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.remote import NotHere, RelayedMessage, RelaySubscriber, Settlement
from mainstem.broker.errors import AccessRefused, BrokerError, NotFound
from mainstem.cluster.amqp_relay import relay_wire as rw
from mainstem.cluster.replication.leader import read_frame
from mainstem.cluster.replication.wire import FrameType, WireError

if TYPE_CHECKING:
    from mainstem.cluster.context import Peers

log = logging.getLogger("mainstem.cluster")

CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 10.0  # a home that does not answer a call by then is taken as gone
BACKLOG_BYTES = 4 * 1024 * 1024  # unsent bytes past which publishers wait for the link
RETRY_S = 0.5  # after a link broke, its home is taken as unreachable this long

# The kinds of broker errors a home answers a call with, and back.
ERROR_KINDS: dict[str, type[BrokerError]] = {
    "access_refused": AccessRefused, "not_found": NotFound, "not_here": NotHere}


def error_kind(error: BrokerError) -> str:
    return next((kind for kind, cls in ERROR_KINDS.items() if isinstance(error, cls)),
                "not_here")


class RelayFailed(Exception):
    """A relayed publish was refused by its home, or its link broke before the answer."""


class Outbox:
    """What one side of a link sends, written together once per turn of the loop."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._frames: list[bytes] = []
        self._drained: asyncio.Future[None] | None = None

    def send(self, data: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self._flush)
        self._frames.append(data)

    def backlog(self) -> asyncio.Future[None] | None:
        """Done once the socket took what was queued past BACKLOG_BYTES."""
        if self._drained is None:
            if self.writer.transport.get_write_buffer_size() < BACKLOG_BYTES:
                return None
            self._drained = asyncio.ensure_future(self._drain())
        return self._drained

    async def _drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            pass  # the link is over: its reader fails what it owed
        finally:
            self._drained = None

    def _flush(self) -> None:
        frames, self._frames = self._frames, []
        if not self.writer.is_closing():
            self.writer.writelines(frames)


class ServedLink(Protocol):
    """Another node's link to this one, served here (`relay_home.HomeLink`)."""

    peer: str

    async def serve(self, reader: asyncio.StreamReader) -> None: ...

    def close(self) -> None: ...


class Relay:
    """This node's links to queues' homes; implements `broker.amqp.queues.remote.QueueRelay`."""

    def __init__(self, peers: Peers) -> None:
        self.peers = peers
        self.node_name = peers.me
        self._links: dict[str, RelayLink] = {}
        self._served: dict[str, set[ServedLink]] = {}  # other nodes' links to this one

    def reaches(self, home: str) -> bool:
        """Another live node, and not one whose link just broke: a publisher to a dead
        home that etcd still names is refused without a connection attempt each time."""
        if home == self.node_name or home not in self.peers.nodes:
            return False
        link = self._links.get(home)
        return link is None or link.ended_at is None \
            or asyncio.get_running_loop().time() - link.ended_at >= RETRY_S

    def _link(self, home: str) -> RelayLink:
        link = self._links.get(home)
        if link is None or link.closed:
            link = self._links[home] = RelayLink(self.peers, home)
        return link

    def publish(self, home: str, vhost: str, queue: str, message: QueueMessage,
                confirm: bool) -> asyncio.Future[None] | None:
        return self._link(home).publish(vhost, queue, message, confirm)

    async def subscribe(self, home: str, vhost: str, queue: str, subscriber: RelaySubscriber,
                        *, window: int, exclusive: bool, in_transit: bool) -> Subscription:
        return await self._link(home).subscribe(vhost, queue, subscriber, window, exclusive,
                                                in_transit)

    def backlog(self, home: str) -> asyncio.Future[None] | None:
        link = self._links.get(home)
        return None if link is None else link.backlog()

    def settle(self, route: object, deliveries: Sequence[int], how: Settlement) -> None:
        if isinstance(route, RelayLink):
            route.settle(deliveries, how)

    async def get(self, home: str, vhost: str, queue: str, no_ack: bool
                  ) -> tuple[RelayedMessage | None, int]:
        reply = await self._link(home).call("get", vhost, queue, no_ack=no_ack)
        return reply.get("message"), int(reply["ready"])

    async def purge(self, home: str, vhost: str, queue: str) -> int:
        return int((await self._link(home).call("purge", vhost, queue))["count"])

    async def counts(self, home: str, vhost: str, queue: str) -> tuple[int, int]:
        reply = await self._link(home).call("counts", vhost, queue)
        return int(reply["ready"]), int(reply["consumers"])

    async def serve(self, home_link: ServedLink, reader: asyncio.StreamReader) -> None:
        """Serve another node's link to this one until it ends."""
        served = self._served.setdefault(home_link.peer, set())
        served.add(home_link)
        try:
            await home_link.serve(reader)
        finally:
            served.discard(home_link)

    def node_left(self, name: str) -> None:
        """A node's lease lapsed (dead, frozen, cut off): whatever its links still wait
        for will not come, either way."""
        link = self._links.pop(name, None)
        if link is not None:
            link.close()
        for home_link in self._served.pop(name, set()):
            home_link.close()

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


class Subscription:
    """A consumer subscribed at a home over a link."""

    def __init__(self, link: RelayLink, subscription: int) -> None:
        self.link = link
        self.subscription = subscription

    def cancel(self) -> None:
        self.link.unsubscribe(self.subscription)

    def handed_on(self, count: int) -> None:
        self.link.notify("credit", subscription=self.subscription, count=count)


class RelayLink:
    """The connection to one home node. Frames made before it is connected wait, in
    order, and go first."""

    def __init__(self, peers: Peers, home: str) -> None:
        self.home = home
        self.ended_at: float | None = None  # the loop's time
        self._early: list[bytes] = []
        self._out: Outbox | None = None
        self._ids = itertools.count(1)
        self._confirms: dict[int, asyncio.Future[None]] = {}
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._subscribers: dict[int, RelaySubscriber] = {}
        self._task = asyncio.get_running_loop().create_task(self._run(peers))

    @property
    def closed(self) -> bool:
        return self.ended_at is not None

    def _send(self, data: bytes) -> None:
        if self._out is not None:
            self._out.send(data)
        else:
            self._early.append(data)

    # -- what the node asks ---------------------------------------------------------------

    def publish(self, vhost: str, queue: str, message: QueueMessage, confirm: bool
                ) -> asyncio.Future[None] | None:
        confirmed: asyncio.Future[None] | None = None
        request = 0
        if confirm:
            confirmed = asyncio.get_running_loop().create_future()
            if self.closed:
                confirmed.set_exception(RelayFailed(f"no link to node '{self.home}'"))
                return confirmed
            request = next(self._ids)
            self._confirms[request] = confirmed
        if not self.closed:
            self._send(rw.encode_publish(request, vhost, queue, message, confirm))
        return confirmed

    async def call(self, op: str, vhost: str, queue: str, **arguments: Any) -> dict[str, Any]:
        """Run `op` at the home; raises the broker error it answers with, or NotHere if
        the link breaks or the home does not answer in time."""
        if self.closed:
            raise self._gone("its link is down")
        request = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[request] = answer
        self._send(rw.encode_json(FrameType.RELAY_CALL, {
            "id": request, "op": op, "vhost": vhost, "queue": queue, **arguments}))
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                reply = await answer
        except TimeoutError:
            raise self._gone(f"no answer in {CALL_TIMEOUT_S:.0f} s") from None
        finally:
            self._calls.pop(request, None)
        if "error" in reply:
            raise ERROR_KINDS.get(str(reply.get("kind")), NotHere)(str(reply["error"]))
        return reply

    def notify(self, op: str, **arguments: Any) -> None:
        """A call nobody waits for (id 0: the home does not answer)."""
        if not self.closed:
            self._send(rw.encode_json(FrameType.RELAY_CALL, {"id": 0, "op": op, **arguments}))

    async def subscribe(self, vhost: str, queue: str, subscriber: RelaySubscriber,
                        window: int, exclusive: bool, in_transit: bool) -> Subscription:
        subscription = next(self._ids)
        self._subscribers[subscription] = subscriber  # deliveries may follow the reply
        try:
            await self.call("consume", vhost, queue, subscription=subscription,
                            window=window, exclusive=exclusive, in_transit=in_transit)
        except BaseException:
            self.unsubscribe(subscription)  # a home that took it late lets it go
            raise
        return Subscription(self, subscription)

    def unsubscribe(self, subscription: int) -> None:
        self._subscribers.pop(subscription, None)
        self.notify("cancel", subscription=subscription)

    def backlog(self) -> asyncio.Future[None] | None:
        return None if self._out is None else self._out.backlog()

    def settle(self, deliveries: Sequence[int], how: Settlement) -> None:
        if not self.closed and deliveries:
            self._send(rw.encode_settle(how, tuple(deliveries)))

    # -- the connection -------------------------------------------------------------------

    async def _run(self, peers: Peers) -> None:
        writer: asyncio.StreamWriter | None = None
        reason = "closed"
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, connected = await peers.dial(self.home, FrameType.RELAY_HELLO)
            writer = connected
            self._out = Outbox(connected)
            early, self._early = self._early, []
            for data in early:
                self._out.send(data)
            while True:
                kind, body = await read_frame(reader, rw.MAX_RELAY_FRAME)
                self._receive(kind, body)
        except (OSError, KeyError, TimeoutError, asyncio.IncompleteReadError,
                WireError) as error:
            reason = str(error) or type(error).__name__
            log.info("relay.link_lost", extra={"home": self.home, "error": reason})
        finally:
            self._end(reason)
            if writer is not None:
                writer.close()

    def _receive(self, kind: int, body: bytes) -> None:
        if kind == FrameType.RELAY_DELIVER:
            subscription, _, message = rw.decode_delivery(body, self)
            subscriber = self._subscribers.get(subscription)
            if subscriber is None:  # cancelled meanwhile: it goes back
                self.settle((message.delivery,), Settlement.REQUEUE)
            else:
                subscriber.relayed(message)
        elif kind == FrameType.RELAY_CONFIRM:
            request, accepted = rw.decode_confirm(body)
            confirmed = self._confirms.pop(request, None)
            if confirmed is not None and not confirmed.done():
                if accepted:
                    confirmed.set_result(None)
                else:
                    confirmed.set_exception(RelayFailed(f"node '{self.home}' refused it"))
        elif kind == FrameType.RELAY_REPLY:
            reply = rw.decode_json(body)
            self._answer(int(reply.get("id", 0)), reply)
        elif kind == FrameType.RELAY_GOT:
            request, ready, message = rw.decode_delivery(body, self)
            self._answer(request, {"message": message, "ready": ready})
        elif kind == FrameType.RELAY_CANCELLED:
            subscriber = self._subscribers.pop(rw.decode_cancelled(body), None)
            if subscriber is not None:
                subscriber.ended()
        else:
            raise WireError(f"unexpected frame {kind} on a relay link")

    def _answer(self, request: int, reply: dict[str, Any]) -> None:
        answer = self._calls.pop(request, None)
        if answer is not None and not answer.done():
            answer.set_result(reply)
        elif isinstance(message := reply.get("message"), RelayedMessage):
            self.settle((message.delivery,), Settlement.REQUEUE)  # its get gave up

    def _gone(self, why: str) -> NotHere:
        return NotHere(f"the queue's home, node '{self.home}', is out of this node's reach "
                       f"at the moment ({why}): retry")

    def _end(self, reason: str) -> None:
        """No answer will come: confirms fail, calls fail, subscriptions end."""
        self.ended_at = asyncio.get_running_loop().time()
        self._early.clear()
        failed = RelayFailed(f"the link to node '{self.home}' broke: {reason}")
        for confirmed in self._confirms.values():
            if not confirmed.done():
                confirmed.set_exception(failed)
        for answer in self._calls.values():
            if not answer.done():
                answer.set_exception(self._gone(f"its link broke: {reason}"))
        self._confirms.clear()
        self._calls.clear()
        subscribers, self._subscribers = self._subscribers, {}
        for subscriber in subscribers.values():
            subscriber.ended()

    def close(self) -> None:
        self._task.cancel()
