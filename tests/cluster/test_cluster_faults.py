"""Faults a replicated stream must ride out with nothing acknowledged lost: a follower
frozen (SIGSTOP) and resumed, etcd restarted, every node restarted in turn under
traffic, and a node brought back with an old copy of its data directory.

One cluster for the module: each test has a stream of its own, and what it stops (a
node, etcd) runs again after it (restored_cluster)."""

from __future__ import annotations

import asyncio
import shutil
import signal

import pytest

from mainstem.broker import layout
from mainstem.client.stream import StreamClientError
from mainstem.testing_cluster import LocalCluster, Node
from tests.support.cluster_clients import (
    FollowingPublisher,
    amqp_message,
    bodies_on,
    check_history,
    stream_client,
    wait_for_count,
)


async def check_every_node(cluster: LocalCluster, publisher: FollowingPublisher) -> None:
    for node in cluster.live():
        port = node.ports["stream"]
        await wait_for_count(port, publisher.stream, len(publisher.confirmed))
        check_history(bodies_on(port, publisher.stream), publisher.confirmed, publisher.sent)


def stepped_down(node: Node, stream: str) -> bool:
    """Whether `node` has stepped down as leader of `stream` (the module's other streams
    have leaders too)."""
    storage = layout.storage_name("stream", "/", stream)
    return any(event["stream"] == storage for event in node.log_events("replica.stepped_down"))


async def test_a_frozen_follower_drops_out_of_sync_and_catches_up(
        restored_cluster: LocalCluster) -> None:
    cluster, stream = restored_cluster, "frozen-follower"
    publisher = FollowingPublisher(cluster, stream)
    await publisher.create()
    await publisher.publish(1_000)
    await publisher.settle()
    cluster.kill("node3", signal.SIGSTOP)
    try:
        await publisher.publish(2_000)
        await publisher.settle()  # the leader and node2 are a majority: confirms go on
    finally:
        cluster.kill("node3", signal.SIGCONT)
    await publisher.publish(500)
    await publisher.settle()
    await publisher.close()
    assert len(publisher.confirmed) == 3_500
    await check_every_node(cluster, publisher)


async def test_etcd_restarted_under_traffic(restored_cluster: LocalCluster) -> None:
    cluster, stream = restored_cluster, "etcd-restart"
    publisher = FollowingPublisher(cluster, stream)
    await publisher.create()
    await publisher.publish(1_000)
    await publisher.settle()
    cluster.etcd.stop()
    await publisher.publish(500)  # leaders keep leading for the lease's TTL without etcd
    await asyncio.sleep(1)
    cluster.etcd.start()
    await publisher.publish(1_000)
    await publisher.settle()
    await publisher.close()
    await check_every_node(cluster, publisher)


async def test_rolling_restart_under_traffic(restored_cluster: LocalCluster) -> None:
    cluster, stream = restored_cluster, "rolling-restart"
    publisher = FollowingPublisher(cluster, stream)
    await publisher.create()
    await publisher.publish(500)
    await publisher.settle()
    for name in ("node1", "node2", "node3"):
        cluster.kill(name, signal.SIGTERM)
        await publisher.publish(500)
        cluster.start(name)
        await publisher.settle()
        await wait_for_count(cluster.nodes[name].ports["stream"], stream,
                             len(publisher.confirmed))
    await publisher.publish(500)
    await publisher.settle()
    await publisher.close()
    assert len(publisher.confirmed) == 2_500
    await check_every_node(cluster, publisher)


async def test_a_node_with_an_old_data_directory_catches_up(
        restored_cluster: LocalCluster) -> None:
    cluster, stream = restored_cluster, "old-data"
    publisher = FollowingPublisher(cluster, stream)
    await publisher.create()
    await publisher.publish(1_000)
    await publisher.settle()
    node2 = cluster.nodes["node2"]
    cluster.kill("node2", signal.SIGTERM)
    old = node2.data_dir.with_name("node2-old")
    shutil.copytree(node2.data_dir, old)
    cluster.start("node2")
    await publisher.publish(1_000)
    await publisher.settle()
    cluster.kill("node2", signal.SIGKILL)
    shutil.rmtree(node2.data_dir)
    old.rename(node2.data_dir)
    cluster.start("node2")
    await publisher.publish(500)
    await publisher.settle()
    await publisher.close()
    await check_every_node(cluster, publisher)


async def test_a_leader_cut_off_from_etcd_stops_taking_writes(
        restored_cluster: LocalCluster) -> None:
    """etcd frozen for longer than the lease TTL: the leader steps down (its leadership
    may be anyone's now), drops its publishers with a MetadataUpdate as RabbitMQ does, and
    takes no write until etcd answers again; then publishing resumes and nothing
    acknowledged is lost."""
    cluster, stream = restored_cluster, "cut-off"
    publisher = FollowingPublisher(cluster, stream)
    await publisher.create()
    await publisher.publish(500)
    await publisher.settle()
    await publisher.close()
    leader = cluster.nodes["node1"]
    etcd = cluster.etcd.process
    assert etcd is not None
    client = stream_client(leader.ports["stream"])
    client.declare_publisher(1, "frozen", stream)
    etcd.send_signal(signal.SIGSTOP)
    try:
        for _ in range(200):
            if stepped_down(leader, stream):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the leader kept leading without etcd")
        client.declare_publisher(2, "", stream)  # the frames before its answer are read
        assert client.unavailable == [stream]
        with pytest.raises(StreamClientError):  # publisher 1 is gone
            client.publish(1, [(1, amqp_message(b"to a dropped publisher"))])
        messages = [(i, amqp_message(f"late{i}".encode())) for i in range(1, 11)]
        pending = asyncio.ensure_future(asyncio.to_thread(client.publish, 2, messages))
        await asyncio.sleep(1)
        assert not pending.done(), "a write was confirmed while etcd was unreachable"
    finally:
        etcd.send_signal(signal.SIGCONT)
    await pending  # confirmed once a leader is elected again
    client.close()
    publisher = FollowingPublisher(cluster, stream, name="after")
    await publisher.publish(500)
    await publisher.settle()
    await publisher.close()
    for node in cluster.live():
        await wait_for_count(node.ports["stream"], stream, 1_010)
