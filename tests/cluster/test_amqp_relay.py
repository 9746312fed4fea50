"""AMQP clients use a queue through any node: the node relays to the queue's home.

One cluster for the module (real etcd, three real nodes, aio-pika clients); each test
declares its own quorum queue through node1, so node1 leads it and the other nodes hold
it remote. Publishes with confirms go through node2, consumers, gets, nacks, purges and
counts through node2 or node3; the last test SIGKILLs the home under a relayed consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import AsyncIterator

import aio_pika
import pytest
import pytest_asyncio

from mainstem.testing_cluster import LocalCluster
from tests.support.quorum_clients import QUORUM, amqp_url, publish_numbered, queue_row

# A home out of reach (node1 dead, a new leader not live yet) is refused, and said so.
REFUSAL = r"out of this node's reach|has no leader|being made live|not live on node"
Connections = dict[str, aio_pika.abc.AbstractConnection]  # node name -> a client's


@pytest_asyncio.fixture
async def connections(cluster: LocalCluster) -> AsyncIterator[Connections]:
    """One client connection per live node, closed after the test."""
    opened = {node.name: await aio_pika.connect(amqp_url(cluster, node.name))
              for node in cluster.live()}
    yield opened
    for connection in opened.values():
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 3)


async def declare_led_by_node1(connections: Connections, cluster: LocalCluster,
                               queue: str) -> None:
    channel = await connections["node1"].channel()
    await channel.declare_queue(queue, durable=True, arguments=QUORUM)
    assert (await queue_row(cluster, "node2", queue))["leader"] == "node1"


async def publish_through(connection: aio_pika.abc.AbstractConnection, queue: str,
                          count: int) -> set[int]:
    channel = await connection.channel(publisher_confirms=True)
    confirmed: set[int] = set()
    await publish_numbered(channel, queue, 1, count, confirmed)
    return confirmed


async def counts(connection: aio_pika.abc.AbstractConnection, queue: str) -> tuple[int, int]:
    """(messages, consumers) of a passive queue.declare-ok."""
    declared = await (await connection.channel()).declare_queue(queue, passive=True)
    result = declared.declaration_result
    return result.message_count, result.consumer_count


async def counts_once_back(connection: aio_pika.abc.AbstractConnection, queue: str
                          ) -> tuple[int, int]:
    """The counts once they stop moving: a delivery the home sent just before a
    consumer's cancel reached it comes back (requeued) a moment after the cancel-ok."""
    found = await counts(connection, queue)
    for _ in range(20):  # bounded: a round trip or two
        await asyncio.sleep(0.05)
        found, before = await counts(connection, queue), found
        if found == before:
            break
    return found


def numbered(first: int, last: int) -> list[bytes]:
    return [f"m{i}".encode() for i in range(first, last + 1)]


async def test_publish_through_one_node_and_consume_through_another(
        cluster: LocalCluster, connections: Connections) -> None:
    queue = "relay-orders"
    await declare_led_by_node1(connections, cluster, queue)
    assert await publish_through(connections["node2"], queue, 500) == set(range(1, 501))
    assert await counts(connections["node3"], queue) == (500, 0)
    assert await counts(connections["node1"], queue) == (500, 0)  # all at the home

    channel = await connections["node3"].channel()
    await channel.set_qos(prefetch_count=50)
    declared = await channel.declare_queue(queue, passive=True)
    received: list[bytes] = []
    redelivered: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    async def receive(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        received.append(message.body)
        if message.redelivered:
            redelivered.append(message.body)
        if len(received) % 10 == 0:  # the prefetch (50) needs these to reach the home
            await message.ack(multiple=True)
        if len(received) == 500 and not done.done():
            done.set_result(None)

    tag = await declared.consume(receive)
    assert (await counts(connections["node2"], queue))[1] == 1  # the home's consumer count
    await asyncio.wait_for(done, 30)
    await asyncio.sleep(0.2)  # anything delivered twice would have come by now
    assert received == numbered(1, 500)
    assert redelivered == []
    await declared.cancel(tag)
    await channel.close()  # what the home still had unacked would go back now
    # Asked over node3's own link, after its acks and cancel: none came back.
    assert await counts_once_back(connections["node3"], queue) == (0, 0)


async def test_get_nack_requeue_and_purge_through_other_nodes(
        cluster: LocalCluster, connections: Connections) -> None:
    queue = "relay-jobs"
    await declare_led_by_node1(connections, cluster, queue)
    assert await publish_through(connections["node2"], queue, 10) == set(range(1, 11))

    getter = await (await connections["node2"].channel()).declare_queue(queue, passive=True)
    first = await getter.get()
    assert (first.body, first.redelivered) == (b"m1", False)
    await first.ack()
    second = await getter.get()
    assert (second.body, second.redelivered) == (b"m2", False)
    await second.nack(requeue=True)
    again = await getter.get()
    assert (again.body, again.redelivered) == (b"m2", True)
    await again.reject(requeue=True)
    assert await counts(connections["node2"], queue) == (9, 0)  # after node2's settles

    # A consumer through node3 nacks its first delivery: it comes back, redelivered.
    channel = await connections["node3"].channel()
    await channel.set_qos(prefetch_count=1)
    consumer = await channel.declare_queue(queue, passive=True)
    seen: list[tuple[bytes, bool]] = []
    async with consumer.iterator() as messages:
        async for message in messages:
            seen.append((message.body, bool(message.redelivered)))
            if len(seen) == 1:
                await message.nack(requeue=True)
                continue
            await message.ack()
            if len(seen) == 3:
                break
    assert seen == [(b"m2", True), (b"m2", True), (b"m3", False)]
    await channel.close()  # m4 may be on its way to it: it goes back
    assert await counts_once_back(connections["node3"], queue) == (7, 0)

    # basic.recover through node3: what the channel holds unacked comes again.
    recovering = await connections["node3"].channel()
    await recovering.set_qos(prefetch_count=2)
    held: list[tuple[bytes, bool]] = []

    async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        held.append((message.body, bool(message.redelivered)))

    await (await recovering.declare_queue(queue, passive=True)).consume(hold)
    for expected in (2, 4):
        for _ in range(100):  # bounded: until the prefetch is delivered
            if len(held) == expected:
                break
            await asyncio.sleep(0.05)
        if expected == 2:
            await (await recovering.get_underlay_channel()).basic_recover(requeue=True)
    # (m4 may have gone to the iterator above, before its cancel, and come back.)
    assert held[1:] == [(b"m5", False), (b"m4", True), (b"m5", True)]
    assert held[0][0] == b"m4"
    await recovering.close()
    assert await counts_once_back(connections["node3"], queue) == (7, 0)

    # An exclusive consumer through node2 keeps others out, wherever they connect.
    holder = await connections["node2"].channel()
    exclusive = await holder.declare_queue(queue, passive=True)

    async def leave(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        """Unacked: closing the channel puts it back."""

    await exclusive.consume(leave, exclusive=True)
    other = await (await connections["node3"].channel()).declare_queue(queue, passive=True)
    with pytest.raises(aio_pika.exceptions.ChannelClosed, match=r"ACCESS_REFUSED.*exclusive"):
        await other.consume(leave)
    await holder.close()

    # queue.delete's if_empty is checked at the home.
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed, match="not empty"):
        await (await connections["node3"].channel()).queue_delete(queue, if_empty=True)
    purger = await (await connections["node2"].channel()).declare_queue(queue, passive=True)
    assert (await purger.purge()).message_count == 7
    assert await counts(connections["node3"], queue) == (0, 0)
    assert await getter.get(fail=False) is None


async def test_no_ack_consumers_through_another_node(
        cluster: LocalCluster, connections: Connections) -> None:
    queue = "relay-no-ack"
    await declare_led_by_node1(connections, cluster, queue)
    # More than the home sends unsettled to a consumer without a prefetch (256): the
    # rest comes only if the node settles each delivery once sent.
    assert await publish_through(connections["node2"], queue, 400) == set(range(1, 401))
    channel = await connections["node3"].channel()
    received: list[bytes] = []

    async def consume() -> None:
        async with (await channel.declare_queue(queue, passive=True)).iterator(
                no_ack=True) as messages:
            async for message in messages:
                received.append(message.body)
                if len(received) == 400:
                    break

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(consume(), 15)
    assert received == numbered(1, 400)
    await channel.close()
    assert await counts_once_back(connections["node3"], queue) == (0, 0)  # none came back


async def test_a_consumer_without_prefetch_gets_every_message_before_it_acks(
        cluster: LocalCluster, connections: Connections) -> None:
    """RabbitMQ sends a consumer with no prefetch everything: the home's window counts
    only what waits on the relaying node, not what the client holds unacked."""
    queue = "relay-unbounded"
    await declare_led_by_node1(connections, cluster, queue)
    assert await publish_through(connections["node2"], queue, 400) == set(range(1, 401))
    channel = await connections["node3"].channel()
    held: list[aio_pika.abc.AbstractIncomingMessage] = []

    async def consume() -> None:
        async with (await channel.declare_queue(queue, passive=True)).iterator() as messages:
            async for message in messages:
                held.append(message)
                if len(held) == 400:
                    break

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(consume(), 15)
    assert [message.body for message in held] == numbered(1, 400)  # none acked yet
    await held[-1].ack(multiple=True)
    await channel.close()
    assert await counts_once_back(connections["node3"], queue) == (0, 0)


async def test_a_frozen_consumer_node_gives_its_deliveries_back(
        cluster: LocalCluster, connections: Connections) -> None:
    queue = "relay-frozen"
    await declare_led_by_node1(connections, cluster, queue)
    assert await publish_through(connections["node2"], queue, 20) == set(range(1, 21))
    held: list[bytes] = []

    async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        held.append(message.body)  # never acked

    channel = await connections["node3"].channel()
    await channel.set_qos(prefetch_count=5)
    await (await channel.declare_queue(queue, passive=True)).consume(hold)
    for _ in range(100):  # bounded: until the prefetch is delivered
        if len(held) == 5:
            break
        await asyncio.sleep(0.05)
    assert held == numbered(1, 5)
    assert await counts(connections["node2"], queue) == (15, 1)

    # node3 frozen: once its lease lapses (5 s), the home requeues what it held.
    cluster.kill("node3", signal.SIGSTOP)
    try:
        for _ in range(200):  # bounded: a lease TTL and a little
            if await counts(connections["node2"], queue) == (20, 0):
                break
            await asyncio.sleep(0.1)
        assert await counts(connections["node2"], queue) == (20, 0)
        got = await (await connections["node2"].channel()).declare_queue(queue, passive=True)
        first = await got.get(no_ack=True)
        assert (first.body, first.redelivered) == (b"m1", True)
    finally:
        cluster.kill("node3", signal.SIGCONT)
    for _ in range(200):  # bounded: node3 registers again and its links work anew
        with contextlib.suppress(aio_pika.exceptions.AMQPError, ConnectionError):
            fresh = await aio_pika.connect(amqp_url(cluster, "node3"))
            try:
                if await counts(fresh, queue) == (19, 0):
                    break
            finally:
                await fresh.close()
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("node3 did not relay to the queue's home again")


async def test_killing_the_home_cancels_relayed_consumers_and_loses_nothing(
        restored_cluster: LocalCluster, connections: Connections) -> None:
    cluster = restored_cluster  # node1 is killed: the cluster is whole again afterwards
    queue = "relay-crash"
    await declare_led_by_node1(connections, cluster, queue)
    confirmed = await publish_through(connections["node2"], queue, 300)
    assert confirmed == set(range(1, 301))

    received: list[bytes] = []
    cancelled: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def receive(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        received.append(message.body)
        await asyncio.sleep(0.002)  # slow enough to be mid-queue at the kill
        await message.ack()

    channel = await connections["node3"].channel()
    await channel.set_qos(prefetch_count=10)
    (await channel.get_underlay_channel()).on_consumer_cancel_callbacks.add(
        lambda frame: cancelled.done() or cancelled.set_result(frame.consumer_tag))
    tag = await (await channel.declare_queue(queue, passive=True)).consume(receive)
    for _ in range(100):  # bounded: until some are delivered
        if len(received) >= 50:
            break
        await asyncio.sleep(0.05)
    assert 50 <= len(received) < 300
    cluster.kill("node1")
    assert await asyncio.wait_for(cancelled, 10) == tag  # basic.cancel from node3

    # Until a new leader is live, the other nodes refuse rather than lose anything:
    # basic.nack, 406 naming node1 (out of reach) or saying there is no leader.
    confirming = await connections["node2"].channel(publisher_confirms=True)
    with pytest.raises(aio_pika.exceptions.DeliveryError):
        await confirming.default_exchange.publish(aio_pika.Message(b"refused"),
                                                  routing_key=queue)
    getter = await (await connections["node2"].channel()).declare_queue(queue, passive=True)
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed, match=REFUSAL):
        await getter.get()

    # Resubscribe through node3 until the new leader serves the queue again.
    for _ in range(200):  # bounded: an election takes a lease TTL (5 s)
        retry = await connections["node3"].channel()
        await retry.set_qos(prefetch_count=10)
        try:
            await (await retry.declare_queue(queue, passive=True)).consume(receive)
            break
        except aio_pika.exceptions.ChannelPreconditionFailed as refused:
            assert re.search(REFUSAL, str(refused)), refused
            await asyncio.sleep(0.1)
    for _ in range(300):  # bounded: until every confirmed message came
        if set(received) >= set(numbered(1, 300)):
            break
        await asyncio.sleep(0.05)
    assert set(received) == set(numbered(1, 300))  # at least once each, none lost
