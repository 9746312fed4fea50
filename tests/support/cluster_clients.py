"""Clients for cluster tests: a publisher that follows a stream's leader across
failovers, a reader of what one node itself serves, and a Jepsen-style history check."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

from rstream import ConfirmationStatus, Producer, amqp_decoder
from rstream.recovery import BackOffRecoveryStrategy

from mainstem.client.stream import StreamClient
from mainstem.testing_cluster import LocalCluster
from tests.support.stream_crash import credentials, numbered

BATCH = 100


async def stream_metadata(port: int, stream: str):  # -> (leader, replicas) of rstream
    """What the node at `port` answers to Metadata for `stream`, through rstream."""
    producer = Producer(**credentials(port))
    await producer.start()
    try:
        client = await producer._get_or_create_client(stream)
        return await client.query_leader_and_replicas(stream)
    finally:
        with contextlib.suppress(Exception):
            await producer.close()


def amqp_message(body: bytes) -> bytes:
    """An AMQP 1.0 message of one data section (what stream clients publish)."""
    return b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body


def stream_client(port: int, vhost: str = "/") -> StreamClient:
    return StreamClient.connect(
        f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/{quote(vhost, safe='')}")


def bodies_on(port: int, stream: str) -> list[bytes]:
    """Every committed message of `stream` as the node at `port` itself serves it."""
    client = stream_client(port)
    try:
        offsets = client.offsets(stream)
        bodies = []
        for chunk in client.chunks(stream, offsets.first, offsets.end):
            bodies += [bytes(amqp_decoder(bytes(e.body)).body) for e in chunk.entries()]
        return bodies
    finally:
        client.close()


def committed_end(port: int, stream: str, vhost: str = "/") -> int:
    """The offset after the last committed record of `stream` on the node at `port`."""
    client = stream_client(port, vhost)
    try:
        return client.offsets(stream).end
    finally:
        client.close()


async def wait_for_count(port: int, stream: str, count: int, timeout_s: float = 20, *,
                         vhost: str = "/") -> None:
    """Until the node at `port` serves at least `count` records (a replica catching up)."""
    for _ in range(int(timeout_s * 10)):
        with contextlib.suppress(Exception):
            if committed_end(port, stream, vhost) >= count:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the node at {port} did not reach {count} messages")


class FollowingPublisher:
    """Publishes numbered messages under one publisher name; when its connection fails
    (the leader died or stepped down) it opens another through any live node, whose
    metadata names the leader, and resends everything from its oldest unconfirmed
    message on, in order: the stream drops what it stored already, so nothing is stored
    twice. In order matters: deduplication drops any id at or below the last one stored,
    so a newer message stored before an older unconfirmed one would have the older one
    dropped (and confirmed) unstored when resent. Hence one batch in flight: the next
    goes only once the last is confirmed (rstream may learn of a failed publish only
    after it has sent newer ones through a new connection)."""

    def __init__(self, cluster: LocalCluster, stream: str, name: str = "following") -> None:
        self.cluster = cluster
        self.stream = stream
        self.name = name
        self.sent = 0  # highest publishing id sent
        self.confirmed: set[int] = set()
        self._producer: Producer | None = None
        self._floor = 1  # every id below it is confirmed
        self._refused = False  # a confirm failed (rstream fails them on MetadataUpdate)

    def _on_confirm(self, status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            self.confirmed.add(status.message_id)
        else:
            self._refused = True

    def _oldest_unconfirmed(self) -> int:
        while self._floor in self.confirmed:
            self._floor += 1
        return self._floor

    async def _connect(self) -> Producer:
        if self._producer is None:
            for node in self.cluster.live():
                # It reconnects on its own terms (resending in order): rstream's own
                # recovery would go on retrying a dropped producer's old address.
                producer = Producer(**credentials(node.ports["stream"]),
                                    recovery_strategy=BackOffRecoveryStrategy(enable=False))
                try:
                    await asyncio.wait_for(producer.start(), 5)
                except Exception:
                    continue
                self._producer = producer
                break
            else:
                raise ConnectionError("no live node accepts a connection")
        return self._producer

    async def _drop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.close(), 3)

    async def _send(self, first: int, last: int) -> None:
        for start in range(first, last + 1, BATCH):
            producer = await self._connect()
            end = min(start + BATCH - 1, last)
            await asyncio.wait_for(producer.send_batch(
                self.stream, numbered(start, end), self.name,
                on_publish_confirm=self._on_confirm), 5)
            await self._confirmed_through(end)

    async def _confirmed_through(self, last: int) -> None:
        for _ in range(500):
            if self._oldest_unconfirmed() > last:
                return
            if self._refused:
                break
            await asyncio.sleep(0.01)
        self._refused = False
        raise ConnectionError("a publish was refused or not confirmed: resend in order")

    async def create(self, arguments: dict[str, object] | None = None) -> None:
        """Create the stream through the first node (its leader, by RabbitMQ's default
        client-local placement)."""
        producer = await self._connect()
        await producer.create_stream(self.stream, arguments=arguments)

    async def publish(self, count: int) -> None:
        """Send `count` more messages, reconnecting and resending on failure."""
        first, self.sent = self.sent + 1, self.sent + count
        await self._with_retries(first, self.sent)

    async def settle(self, timeout_s: float = 30) -> None:
        """Until every message sent is confirmed, resending the unconfirmed ones to
        whichever node leads when confirms stop coming."""
        for _ in range(int(timeout_s / 2)):
            for _ in range(20):
                if len(self.confirmed) >= self.sent:
                    return
                await asyncio.sleep(0.1)
            await self._drop()
            await self._with_retries(self._oldest_unconfirmed(), self.sent)
        raise AssertionError(f"{self.sent - len(self.confirmed)} messages never confirmed")

    async def _with_retries(self, first: int, last: int) -> None:
        for _ in range(100):
            try:
                await self._send(first, last)
                return
            except Exception:
                await self._drop()
                await asyncio.sleep(0.2)
                first = self._oldest_unconfirmed()
                if first > last:
                    return
        raise AssertionError("the publisher found no leader to publish to")

    async def close(self) -> None:
        await self._drop()


def check_history(bodies: list[bytes], acknowledged: set[int], attempted: int) -> None:
    """As Jepsen's checkers: every acknowledged write is there exactly once, nothing was
    stored twice, nothing appears that was never sent, and the order is the send order
    (so nothing unacknowledged was reordered before an acknowledged write)."""
    ids = [int(body[1:]) for body in bodies]
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{duplicates} messages stored twice"
    missing = acknowledged - set(ids)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    backwards = next((k for k in range(1, len(ids)) if ids[k] < ids[k - 1]), None)
    assert backwards is None, (
        f"out of order at {backwards}: {ids[max(backwards - 3, 0):backwards + 3]}")
    assert all(1 <= i <= attempted for i in ids), "a message that was never sent"
