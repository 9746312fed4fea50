"""Replicated streams on a real three-node cluster and a real etcd: rstream publishes to
the leader, reads through every node, and finds the leader again after it is killed."""

from __future__ import annotations

import asyncio
import contextlib

from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from mainstem.testing_cluster import LocalCluster


def credentials(port: int) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": port, "username": "guest", "password": "guest"}


def numbered(first: int, count: int) -> list[AMQPMessage]:
    batch = []
    for i in range(first, first + count):
        message = AMQPMessage(body=f"m{i}".encode())
        message.publishing_id = i
        batch.append(message)
    return batch


async def read_all(port: int, stream: str, expected: int) -> list[bytes]:
    """Every message of `stream` read through the node at `port` (rstream may follow
    the metadata to another replica), until `expected` arrived or 2 s pass idle."""
    bodies: list[bytes] = []
    arrived = asyncio.Event()

    async def on_message(message: AMQPMessage, context) -> None:
        bodies.append(bytes(message.body))
        arrived.set()

    async with Consumer(**credentials(port)) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST, None))
        for _ in range(100):
            if len(bodies) >= expected:
                break
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), 2.0)
            except TimeoutError:
                break
    return bodies


async def stream_metadata(port: int, stream: str):
    producer = Producer(**credentials(port))
    await producer.start()
    try:
        client = await producer._get_or_create_client(stream)
        return await client.query_leader_and_replicas(stream)
    finally:
        with contextlib.suppress(Exception):
            await producer.close()


async def test_a_stream_created_on_one_node_is_replicated_to_all(
        mainstem_cluster: LocalCluster) -> None:
    node1 = mainstem_cluster.nodes["node1"]
    confirmed: set[int] = set()

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.add(status.message_id)

    async with Producer(**credentials(node1.ports["stream"])) as producer:
        await producer.create_stream("orders")
        for first in range(1, 1001, 100):
            await producer.send_batch("orders", numbered(first, 100),
                                      on_publish_confirm=on_confirm)
        for _ in range(200):
            if len(confirmed) == 1000:
                break
            await asyncio.sleep(0.05)
    assert confirmed == set(range(1, 1001))
    expected = [f"m{i}".encode() for i in range(1, 1001)]
    for node in mainstem_cluster.nodes.values():
        leader, replicas = await stream_metadata(node.ports["stream"], "orders")
        assert leader.port == node1.ports["stream"]
        assert sorted(r.port for r in replicas) == sorted(
            n.ports["stream"] for n in mainstem_cluster.nodes.values() if n is not node1)
        assert await read_all(node.ports["stream"], "orders", 1000) == expected
