"""Replicated streams on a real three-node cluster and a real etcd: rstream publishes to
the leader with confirms, every node's Metadata names the same leader and replicas, and an
rstream consumer reads everything through every node."""

from __future__ import annotations

import asyncio

from rstream import (
    ConfirmationStatus,
    Producer,
)

from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import stream_metadata
from tests.support.rstream_reads import read_with_rstream
from tests.support.stream_crash import credentials, numbered


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
            await producer.send_batch("orders", numbered(first, first + 99),
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
        assert await read_with_rstream(node.ports["stream"], "orders",
                                       expected=1000, quiet_s=2.0) == expected
