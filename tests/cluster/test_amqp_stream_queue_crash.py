"""An AMQP stream queue in a cluster: aio-pika publishes with confirms through the
stream's leader, the leader is SIGKILLed mid-publish, the publisher reconnects to another
node (which forwards its appends to the new leader) and goes on; every confirmed message
is then read exactly once, in order, through every node."""

from __future__ import annotations

import asyncio
import contextlib

import aio_pika

from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import bodies_on, check_history, wait_for_count

QUEUE = "audit"
BATCH = 50


def amqp_url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/"


async def publish_batch(channel: aio_pika.abc.AbstractChannel, first: int,
                        confirmed: set[int]) -> None:
    async def one(i: int) -> None:
        await channel.default_exchange.publish(
            aio_pika.Message(f"m{i}".encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=QUEUE)
        confirmed.add(i)

    await asyncio.gather(*(one(i) for i in range(first, first + BATCH)),
                         return_exceptions=True)


async def test_killing_the_leader_of_an_amqp_stream_queue_loses_no_confirmed_message(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    confirmed: set[int] = set()
    connection = await aio_pika.connect(amqp_url(cluster.nodes["node1"].ports["amqp"]))
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(QUEUE, durable=True, arguments={"x-queue-type": "stream"})
    sent = 0
    in_flight: list[asyncio.Task[None]] = []
    for _ in range(400):  # bounded: ends once enough are confirmed
        in_flight.append(asyncio.ensure_future(publish_batch(channel, sent + 1, confirmed)))
        sent += BATCH
        if len(in_flight) > 4:
            await in_flight.pop(0)
        if len(confirmed) >= 1_500:
            break
    cluster.kill("node1")
    await asyncio.gather(*in_flight, return_exceptions=True)
    acknowledged = set(confirmed)
    assert len(acknowledged) >= 1_500
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 3)

    # Another node takes the publisher; appends wait for the new leader, then go to it.
    connection = await aio_pika.connect(amqp_url(cluster.nodes["node2"].ports["amqp"]))
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(QUEUE, durable=True, arguments={"x-queue-type": "stream"})
    resumed: set[int] = set()
    for first in range(sent + 1, sent + 1_001, BATCH):
        await publish_batch(channel, first, resumed)
    await connection.close()
    assert resumed == set(range(sent + 1, sent + 1_001))
    acknowledged |= resumed

    for name in ("node2", "node3"):
        port = cluster.nodes[name].ports["stream"]
        await wait_for_count(port, QUEUE, len(acknowledged))
        check_history(bodies_on(port, QUEUE), acknowledged, sent + 1_000)
