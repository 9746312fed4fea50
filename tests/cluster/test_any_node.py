"""Clients on any node: a replica forwards appends to the partition's leader, so a
stream publisher or a BSON event publisher connected to a replica is confirmed once the
leader commits, and readers on every node see the same log; users, vhosts (with
their metadata) and permissions made on one node hold on every node."""

from __future__ import annotations

import asyncio

import aiohttp
import rbfly.streams as rbfly

from mainstem.client.events import EventsClient
from mainstem.client.stream import StreamClient
from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import (
    amqp_message,
    bodies_on,
    stream_client,
    wait_for_count,
)


async def test_a_publisher_on_a_replica_is_forwarded_to_the_leader(
        cluster: LocalCluster) -> None:
    ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
    creator = stream_client(ports["node1"])
    assert creator.create_stream("forwarded")
    creator.close()
    for name, first in (("node2", 1), ("node3", 101)):  # replicas: their leader is node1
        client = stream_client(ports[name])
        stored = client.declare_publisher(1, "writer", "forwarded")
        assert stored == (-1 if first == 1 else first - 1)  # the sequence replicated too
        client.publish(1, [(i, amqp_message(f"m{i}".encode())) for i in range(first, first + 100)])
        client.publish(1, [(i, amqp_message(b"again")) for i in range(first, first + 100)])
        client.close()  # the second publish repeated ids: the leader dropped it
    expected = [f"m{i}".encode() for i in range(1, 201)]
    for port in ports.values():
        await wait_for_count(port, "forwarded", 200)
        assert bodies_on(port, "forwarded") == expected


async def test_rbfly_publishes_through_a_replica_and_reads_from_another(
        cluster: LocalCluster) -> None:
    ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
    creator = stream_client(ports["node1"])
    assert creator.create_stream("rb")  # led by node1
    creator.close()
    publishing = rbfly.streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{ports['node2']}/")
    async with publishing.publisher("rb", name="rb-pub") as publisher:
        for i in range(100):
            await publisher.send(f"rb{i}".encode())
    reading = rbfly.streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{ports['node3']}/")
    read: list[bytes] = []

    async def read_all() -> None:
        async for message in reading.subscribe("rb", offset=rbfly.Offset.FIRST):
            read.append(message)
            if len(read) == 100:
                return

    await asyncio.wait_for(read_all(), 20)
    expected = [f"rb{i}".encode() for i in range(100)]
    assert read == expected
    for port in ports.values():
        await wait_for_count(port, "rb", 100)
        assert bodies_on(port, "rb") == expected


async def test_bson_events_published_on_every_node_reach_one_channel(
        cluster: LocalCluster) -> None:
    nodes = list(cluster.nodes.values())
    clients = [await EventsClient.connect("127.0.0.1", node.ports["bson"], "guest", "guest")
               for node in nodes]
    try:
        assert not await clients[0].create_channel("orders")  # a stream, adopted by the cluster
        await clients[0].publish("orders", {"n": 0})
        for k, client in enumerate(clients):
            await wait_for_count(nodes[k].ports["stream"], "orders", 1)
            await client.publish_many("orders", [{"n": k * 100 + i} for i in range(1, 51)])
        subscription = await clients[2].subscribe("orders", start_pos=0)
        received = [(await subscription.next()).event["n"] for _ in range(151)]
    finally:
        for client in clients:
            await client.close()
    assert sorted(received) == [0, *range(1, 51), *range(101, 151), *range(201, 251)]
    per_node = [[n for n in received if k * 100 < n <= k * 100 + 50] for k in range(3)]
    assert all(part == sorted(part) for part in per_node)  # each node's order kept
    await asyncio.sleep(0)


async def test_users_vhosts_and_permissions_made_on_one_node_work_on_every_node(
        cluster: LocalCluster) -> None:
    """Created through node1's management API, a vhost, a user and its permissions let
    that user in through every node; deleted through node2, they are gone everywhere."""
    nodes = list(cluster.nodes.values())
    admin_headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=admin_headers) as http:
        admin = f"http://127.0.0.1:{nodes[0].ports['admin']}/api"
        assert (await http.put(f"{admin}/vhosts/shop", json={
            "description": "The shop", "default_queue_type": "quorum"})).status == 201
        other = f"http://127.0.0.1:{nodes[1].ports['admin']}/api"
        assert (await http.put(f"{other}/vhosts/shop", json={
            "tags": ["prod"]})).status == 204  # metadata changed on another node
        for node in nodes:
            await _wait_for_metadata(http, node.ports["admin"], {
                "description": "The shop", "tags": ["prod"], "default_queue_type": "quorum"})
        assert (await http.put(f"{admin}/users/ann", json={
            "password": "s3cret", "tags": ""})).status in (201, 204)
        assert (await http.put(f"{admin}/permissions/shop/ann", json={
            "configure": ".*", "write": ".*", "read": ".*"})).status in (201, 204)
        for node in nodes:
            for _ in range(50):
                try:
                    client = StreamClient.connect(
                        f"rabbitmq-stream://ann:s3cret@127.0.0.1:{node.ports['stream']}/shop")
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"ann cannot log in through {node.name}")
            client.close()
        assert (await http.delete(f"{other}/users/ann")).status == 204
        for node in nodes:
            for _ in range(50):
                try:
                    StreamClient.connect(
                        f"rabbitmq-stream://ann:s3cret@127.0.0.1:{node.ports['stream']}/shop"
                    ).close()
                except Exception:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"ann deleted on node2 still logs in through {node.name}")


async def _wait_for_metadata(http: aiohttp.ClientSession, port: int,
                             metadata: dict[str, object]) -> None:
    """Bounded: the vhost's metadata reaches the node through the cluster's store."""
    shown = None
    for _ in range(100):
        async with http.get(f"http://127.0.0.1:{port}/api/vhosts/shop") as response:
            shown = (await response.json()).get("metadata") if response.status == 200 else None
        if shown == metadata:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"node on {port} shows {shown}, not {metadata}")
