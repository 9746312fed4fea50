"""Quorum queues in a cluster: the journal replicates as a stream does and the queue is
live on its leader. aio-pika publishes with confirms to the leader, which is SIGKILLed
mid-publish; the new leader replays the journal, so every confirmed message is consumed
from it exactly once, in order; the killed node catches up on restart and, leading again,
holds the same queue. Acks replicate: what was acked before the leader died stays gone.

One cluster for the module: each test has a queue of its own, and the nodes it kills or
freezes run again after it (restored_cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import aio_pika
import pytest

from mainstem.broker import layout
from mainstem.cluster.etcd import EtcdClient
from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import check_history
from tests.support.quorum_clients import (
    QUORUM,
    amqp_url,
    journal_directory,
    publish_numbered,
    queue_row,
    read_queue,
    wait_caught_up,
    wait_for_leader,
    wait_until_live,
)

BATCH = 50
CONFIRMED_BEFORE_KILL = 1_500


async def test_killing_a_quorum_queue_leader_loses_no_confirmed_message(
        restored_cluster: LocalCluster) -> None:
    cluster, queue = restored_cluster, "orders"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(queue, durable=True, arguments=QUORUM)
    row = await queue_row(cluster, "node2", queue)  # any node knows it, as RabbitMQ's do
    assert (row["type"], row["leader"]) == ("quorum", "node1")
    assert sorted(row["members"]) == sorted(row["online"]) == ["node1", "node2", "node3"]

    confirmed: set[int] = set()
    sent = 0
    in_flight: list[asyncio.Task[None]] = []
    for _ in range(400):  # bounded: ends once enough are confirmed
        in_flight.append(asyncio.ensure_future(
            publish_numbered(channel, queue, sent + 1, BATCH, confirmed)))
        sent += BATCH
        if len(in_flight) > 4:
            await in_flight.pop(0)
        if len(confirmed) >= CONFIRMED_BEFORE_KILL:
            break
    cluster.kill("node1")
    acknowledged = set(confirmed)  # no confirm can come from a dead node
    await asyncio.gather(*in_flight, return_exceptions=True)
    assert len(acknowledged) >= CONFIRMED_BEFORE_KILL
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 3)

    leader = await wait_for_leader(cluster, "node2", queue, other_than="node1")
    contents = await read_queue(cluster, leader, queue)
    bodies = [body for body, _ in contents]
    check_history(bodies, acknowledged, sent)
    assert all(redelivered for _, redelivered in contents)  # the old leader may have sent them

    # The killed node comes back, drops the tail it never committed and catches up.
    cluster.start("node1")
    await wait_caught_up(cluster, "node1", leader, queue)
    # Leading again (the others stopped, leader first), it holds the same queue.
    for name in sorted({"node2", "node3"}, key=lambda n: n != leader):
        cluster.kill(name, signal.SIGTERM)
    assert await wait_for_leader(cluster, "node1", queue) == "node1"
    assert [body for body, _ in await read_queue(cluster, "node1", queue)] == bodies


async def test_acks_replicate_and_other_nodes_relay_to_the_leader(
        restored_cluster: LocalCluster) -> None:
    cluster, queue = restored_cluster, "jobs"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(queue, durable=True, arguments=QUORUM)
    confirmed: set[int] = set()
    await publish_numbered(channel, queue, 1, 200, confirmed)
    assert confirmed == set(range(1, 201))
    consumer = await connection.channel()
    declared = await consumer.declare_queue(queue, passive=True)
    for i in range(1, 101):
        message = await declared.get(no_ack=False)
        assert message.body == f"m{i}".encode() and not message.redelivered
        await message.ack()
    # The journal commits in order: once this is confirmed, so are the acks before it.
    await publish_numbered(channel, queue, 201, 1, confirmed)
    assert 201 in confirmed

    # Another node knows the queue (declarations succeed) and relays to its leader.
    other = await aio_pika.connect(amqp_url(cluster, "node2"))
    elsewhere = await (await other.channel()).declare_queue(queue, durable=True,
                                                            arguments=QUORUM)
    relayed = await elsewhere.get()
    assert (relayed.body, relayed.redelivered) == (b"m101", False)
    await relayed.reject(requeue=True)
    await other.close()

    cluster.kill("node1")
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 3)
    leader = await wait_for_leader(cluster, "node2", queue, other_than="node1")
    bodies = [body for body, _ in await read_queue(cluster, leader, queue)]
    assert bodies == [f"m{i}".encode() for i in range(101, 202)]

    # Deleted through a node where it is not live, it goes from every node, journals too.
    standby = next(n for n in ("node2", "node3") if n != leader)
    other = await aio_pika.connect(amqp_url(cluster, standby))
    await (await other.channel()).queue_delete(queue)
    await other.close()
    for _ in range(100):  # bounded wait for the other nodes to apply the deletion
        if not any(journal_directory(cluster, n, queue).exists() for n in ("node2", "node3")):
            break
        await asyncio.sleep(0.1)
    assert not any(journal_directory(cluster, n, queue).exists() for n in ("node2", "node3"))
    connection = await aio_pika.connect(amqp_url(cluster, leader))
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await (await connection.channel()).declare_queue(queue, passive=True)
    await connection.close()


async def test_a_leader_that_steps_down_cancels_its_consumers(
        restored_cluster: LocalCluster) -> None:
    cluster, queue = restored_cluster, "steps"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(queue, durable=True,
                                arguments={**QUORUM, "x-quorum-initial-group-size": 2})
    members = (await queue_row(cluster, "node1", queue))["members"]
    assert len(members) == 2 and "node1" in members

    # With its follower frozen, the leader holds a message it cannot commit: it neither
    # confirms nor delivers it (the new leader could lack it), until the follower acks.
    follower = next(n for n in members if n != "node1")
    cluster.kill(follower, signal.SIGSTOP)
    confirmed: set[int] = set()
    unconfirmed = asyncio.ensure_future(publish_numbered(channel, queue, 1, 1, confirmed))
    for _ in range(100):  # bounded: until the leader has it queued
        if (await queue_row(cluster, "node1", queue))["messages"] == 1:
            break
        await asyncio.sleep(0.05)
    probe = await (await connection.channel()).declare_queue(queue, passive=True)
    assert await probe.get(fail=False) is None
    assert not unconfirmed.done()
    cluster.kill(follower, signal.SIGCONT)
    await asyncio.wait_for(unconfirmed, 20)
    assert confirmed == {1}
    await publish_numbered(channel, queue, 2, 19, confirmed)
    consumer = await connection.channel()
    await consumer.set_qos(prefetch_count=5)
    cancelled: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    (await consumer.get_underlay_channel()).on_consumer_cancel_callbacks.add(
        lambda frame: cancelled.done() or cancelled.set_result(frame.consumer_tag))
    received: list[bytes] = []

    async def receive(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        received.append(message.body)

    declared = await consumer.declare_queue(queue, passive=True)
    tag = await declared.consume(receive)
    for _ in range(100):  # bounded: until the prefetch is delivered
        if len(received) == 5:
            break
        await asyncio.sleep(0.05)
    assert received == [f"m{i}".encode() for i in range(1, 6)]

    # Its leader key taken away, as when its lease lapses: node1 stops leading the queue
    # and cancels its consumers (basic.cancel); they re-consume where it is live again.
    etcd = EtcdClient([cluster.etcd.endpoint])
    await etcd.delete(f"/mainstem/leaders/{layout.storage_name('queue', '/', queue)}/0")
    await etcd.close()
    assert await asyncio.wait_for(cancelled, 10) == tag
    leader = await wait_until_live(cluster, queue)
    contents = await read_queue(cluster, leader, queue)
    assert [body for body, _ in contents] == [f"m{i}".encode() for i in range(1, 21)]
    assert all(redelivered for _, redelivered in contents)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 3)
