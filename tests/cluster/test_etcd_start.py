"""A node started while etcd is unreachable waits for it (issue 39, item 6): it stays up,
logs that it waits, its health check (`is-in-service`) says so, and it joins once etcd
answers — the other nodes list it and it serves."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import aio_pika

from mainstem.testing_cluster import LocalCluster, Node
from mainstem.testing_wait import CAP_S
from tests.cluster.conftest import AUTH, wait_listing
from tests.support.cluster_clients import wait_for_count

QUEUE = "after-etcd"


def new_events(node: Node, since: int) -> list[dict[str, Any]]:
    """The JSON log lines `node` wrote past byte `since` (this start's)."""
    with open(node.log_path, "rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace").splitlines()
    assert not any("Traceback" in line for line in lines), "\n".join(lines[-40:])
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def health(admin_port: int) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{admin_port}/api/health/checks/is-in-service", headers=AUTH)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def listed(admin_port: int) -> set[str]:
    request = urllib.request.Request(f"http://127.0.0.1:{admin_port}/api/nodes", headers=AUTH)
    with urllib.request.urlopen(request, timeout=5) as response:
        return {row["name"] for row in json.load(response)}


async def waiting_admin_port(node: Node, since: int) -> int:
    """The admin port of `node`'s start, once it has logged that it waits for etcd."""
    deadline = time.monotonic() + CAP_S
    while time.monotonic() < deadline:
        assert node.alive, "the node exited while etcd was unreachable"
        events = new_events(node, since)
        ports = [e["port"] for e in events
                 if e.get("event") == "listener.started" and e.get("listener") == "admin"]
        if ports and any(e.get("event") == "cluster.waiting_for_etcd" for e in events):
            return int(ports[-1])
        await asyncio.sleep(0.1)
    raise AssertionError("the node never said it waits for etcd")


async def test_a_node_started_without_etcd_waits_and_joins(
        restored_cluster: LocalCluster) -> None:
    cluster = restored_cluster
    node1, node3 = cluster.nodes["node1"], cluster.nodes["node3"]
    cluster.kill("node3", signal.SIGTERM)  # revokes its lease: the others drop it
    for _ in range(100):
        if "node3" not in listed(node1.ports["admin"]):
            break
        await asyncio.sleep(0.1)
    assert "node3" not in listed(node1.ports["admin"])
    cluster.etcd.stop()
    since = node3.log_path.stat().st_size
    cluster.start("node3", wait=False)
    admin = await waiting_admin_port(node3, since)

    status, body = health(admin)
    assert status == 503 and "waiting for etcd" in body["reason"], body
    await asyncio.sleep(2)
    assert node3.alive
    assert health(admin)[0] == 503

    await asyncio.to_thread(cluster.etcd.start)
    await asyncio.to_thread(cluster.wait_started, "node3")
    assert health(admin) == (200, {"status": "ok"})
    await asyncio.to_thread(wait_listing, node1.ports["admin"], set(cluster.nodes))
    new_events(node3, since)  # still no traceback

    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{node3.ports['amqp']}/")
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(QUEUE, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(10):
        await channel.default_exchange.publish(aio_pika.Message(f"m{i}".encode()),
                                               routing_key=QUEUE)
    await connection.close()
    await wait_for_count(node1.ports["stream"], QUEUE, 10)
