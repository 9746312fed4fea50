"""What operators see of a cluster through RabbitMQ's tools and `mainstem ctl`: the
nodes (`rabbitmqadmin list nodes`, `ctl nodes list`), and each stream's leader, epoch,
replicas, in-sync set and followers' lag (management API, `ctl streams replicas`,
/metrics/per-object)."""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp

from mainstem.broker.layout import storage_name
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.etcd_keys import path
from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import FollowingPublisher

RABBITMQADMIN = "/usr/bin/rabbitmqadmin"
HEADERS = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


async def rabbitmqadmin(port: int, *args: str) -> list[dict]:
    process = await asyncio.create_subprocess_exec(
        RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(port), "-u", "guest", "-p", "guest",
        "--format", "raw_json", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def ctl(port: int, *argv: str) -> list[dict]:
    """`mainstem ctl --json ARGV` against the node whose management port is `port`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mainstem", "ctl", "--url", f"http://127.0.0.1:{port}",
        "--json", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def test_nodes_leaders_replicas_and_lag(mainstem_cluster: LocalCluster) -> None:
    node1 = mainstem_cluster.nodes["node1"]
    listed = await rabbitmqadmin(node1.ports["admin"], "list", "nodes")
    assert sorted(node["name"] for node in listed) == ["node1", "node2", "node3"]
    assert all(node["running"] for node in listed)

    publisher = FollowingPublisher(mainstem_cluster, "watched")
    await publisher.create()
    await publisher.publish(1_000)
    await publisher.settle()
    await publisher.close()
    async with aiohttp.ClientSession(headers=HEADERS) as http:
        url = f"http://127.0.0.1:{node1.ports['admin']}/api"
        async with http.get(f"{url}/streams/%2F/watched") as response:
            partition = (await response.json())["partitions"][0]
        assert partition["leader"] == "node1"
        # its first epoch, one past etcd's revision when it was made (never 1 again)
        etcd = EtcdClient([mainstem_cluster.etcd.endpoint])
        try:
            epoch = await etcd.get(path("epochs", storage_name("stream", "/", "watched"), 0))
        finally:
            await etcd.close()
        assert epoch is not None and partition["epoch"] == int(epoch.value) > 1
        assert sorted(partition["replicas"]) == sorted(partition["in_sync"]) == [
            "node1", "node2", "node3"]
        assert partition["replica_lag"] == {"node2": 0, "node3": 0}
        follower = f"http://127.0.0.1:{mainstem_cluster.nodes['node2'].ports['admin']}/api"
        async with http.get(f"{follower}/queues/%2F/watched") as response:
            queue = await response.json()
        assert queue["leader"] == "node1"
        assert sorted(queue["online"]) == sorted(queue["members"]) == [
            "node1", "node2", "node3"]
        assert queue["messages"] == 1_000
        per_object = f"http://127.0.0.1:{node1.ports['admin']}/metrics/per-object"
        async with http.get(per_object) as response:
            exposition = await response.text()
        for replica in ("node2", "node3"):
            assert (f'mainstem_replication_lag{{partition="0",replica="{replica}",'
                    f'stream="watched",vhost="/"}} 0.0') in exposition
        assert 'mainstem_replicas_in_sync{partition="0",stream="watched",vhost="/"} 3.0' \
            in exposition
    nodes = await ctl(node1.ports["admin"], "nodes", "list")
    assert {(n["name"], n["host"]) for n in nodes} == {
        (f"node{i}", "127.0.0.1") for i in (1, 2, 3)}
    (replicas,) = await ctl(node1.ports["admin"], "streams", "replicas")
    assert replicas["leader"] == "node1" and replicas["lag"] == "node2=0,node3=0"
    assert set(replicas["in_sync"].split(",")) == {"node1", "node2", "node3"}
