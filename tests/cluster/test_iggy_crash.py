"""An Iggy topic in a cluster: messages sent through the topic's leader node, the leader
SIGKILLed mid-send, sending goes on through another node (by stream and topic names,
which every node knows), and every acknowledged message is polled exactly once, in order,
through every surviving node."""

from __future__ import annotations

import asyncio
import contextlib

from mainstem.client.iggy import IggyClient, Message, Polling
from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import check_history, wait_for_count

BATCH = 100


async def client_on(port: int) -> IggyClient:
    client = await IggyClient.connect("127.0.0.1", port)
    await client.login("guest", "guest")
    return client


async def send_batch(client: IggyClient, first: int) -> None:
    await client.send("shop", "orders", [Message(f"m{i}".encode())
                                         for i in range(first, first + BATCH)], partition=1)


async def poll_all(port: int) -> list[bytes]:
    client = await client_on(port)
    bodies: list[bytes] = []
    try:
        for _ in range(1_000):
            polled = await client.poll("shop", "orders", 1, Polling.OFFSET, len(bodies),
                                       count=1_000)
            if not polled.messages:
                return bodies
            bodies += [bytes(m.payload) for m in polled.messages]
    finally:
        await client.close()
    return bodies


async def test_killing_the_leader_of_an_iggy_topic_loses_no_acknowledged_message(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    client = await client_on(cluster.nodes["node1"].ports["iggy"])
    await client.create_stream("shop")
    await client.create_topic("shop", "orders", partitions=1)
    acknowledged: set[int] = set()
    sent = 0
    for _ in range(20):
        await send_batch(client, sent + 1)
        acknowledged |= set(range(sent + 1, sent + BATCH + 1))
        sent += BATCH
    pending = asyncio.ensure_future(send_batch(client, sent + 1))  # in flight at the kill
    sent += BATCH
    cluster.kill("node1")
    with contextlib.suppress(Exception):
        await pending
        acknowledged |= set(range(sent - BATCH + 1, sent + 1))
    with contextlib.suppress(Exception):
        await client.close()

    # node2 knows the namespace ("shop") and the topic's stream through the cluster; its
    # sends wait for the new leader, then are forwarded to it.
    client = await client_on(cluster.nodes["node2"].ports["iggy"])
    for _ in range(10):
        await send_batch(client, sent + 1)
        acknowledged |= set(range(sent + 1, sent + BATCH + 1))
        sent += BATCH
    await client.close()

    for name in ("node2", "node3"):
        node = cluster.nodes[name]
        await wait_for_count(node.ports["stream"], "orders", len(acknowledged), vhost="shop")
        check_history(await poll_all(node.ports["iggy"]), acknowledged, sent)
