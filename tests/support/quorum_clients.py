"""Clients for quorum queue tests in a cluster: aio-pika publishing with confirms and
reading a queue back, the queue's leader as the management API reports it, and its
journal's in-sync set and files as etcd and the nodes' disks hold them."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aio_pika
import aiohttp

from mainstem.broker import layout
from mainstem.cluster.etcd import EtcdClient
from mainstem.log.segment_file import SEGMENT_SUFFIX
from mainstem.testing_cluster import LocalCluster

QUORUM = {"x-queue-type": "quorum"}
HEADERS = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


def amqp_url(cluster: LocalCluster, node: str) -> str:
    return f"amqp://guest:guest@127.0.0.1:{cluster.nodes[node].ports['amqp']}/"


async def publish_numbered(channel: aio_pika.abc.AbstractChannel, queue: str, first: int,
                           count: int, confirmed: set[int]) -> None:
    """Publish m{first}.. with confirms, all in flight at once; adds each confirmed id."""
    async def one(i: int) -> None:
        await channel.default_exchange.publish(aio_pika.Message(f"m{i}".encode()),
                                               routing_key=queue)
        confirmed.add(i)

    await asyncio.gather(*(one(i) for i in range(first, first + count)),
                         return_exceptions=True)


async def read_queue(cluster: LocalCluster, node: str, queue: str
                     ) -> list[tuple[bytes, bool]]:
    """Every message of `queue` on `node` as (body, redelivered), consumed without acking
    them: closing the connection puts them all back."""
    connection = await aio_pika.connect(amqp_url(cluster, node))
    try:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        expected = declared.declaration_result.message_count
        seen: list[tuple[bytes, bool]] = []

        async def consume() -> None:
            async with declared.iterator() as messages:
                async for message in messages:
                    seen.append((message.body, bool(message.redelivered)))
                    if len(seen) == expected:
                        break

        if expected:
            await asyncio.wait_for(consume(), 30)
        return seen
    finally:
        await connection.close()


async def queue_row(cluster: LocalCluster, node: str, queue: str) -> dict:
    """GET /api/queues/%2F/QUEUE on `node`."""
    port = cluster.nodes[node].ports["admin"]
    async with aiohttp.ClientSession(headers=HEADERS) as http, \
            http.get(f"http://127.0.0.1:{port}/api/queues/%2F/{queue}") as response:
        assert response.status == 200, await response.text()
        row: dict = await response.json()
        return row


async def wait_for_leader(cluster: LocalCluster, node: str, queue: str,
                          other_than: str | None = None, timeout_s: float = 20) -> str:
    """The queue's leader as `node` reports it, once there is one (not `other_than`)."""
    for _ in range(int(timeout_s * 10)):
        with contextlib.suppress(aiohttp.ClientError, AssertionError):
            leader = (await queue_row(cluster, node, queue)).get("leader")
            if leader is not None and leader != other_than:
                return str(leader)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no new leader of {queue} seen from {node}")


def journal_directory(cluster: LocalCluster, node: str, queue: str) -> Path:
    return (cluster.nodes[node].data_dir / "queues"
            / layout.storage_name("queue", "/", queue))


def journal_bytes(cluster: LocalCluster, node: str, queue: str) -> list[bytes]:
    """The journal's segment files on `node`'s disk, in order."""
    return [path.read_bytes() for path in
            sorted(journal_directory(cluster, node, queue).glob("*" + SEGMENT_SUFFIX))]


async def wait_caught_up(cluster: LocalCluster, node: str, leader: str, queue: str,
                         timeout_s: float = 30) -> None:
    """Until `node` is in the journal's in-sync set (etcd) and its journal files are
    the leader's, byte for byte."""
    etcd = EtcdClient([cluster.etcd.endpoint])
    key = f"/mainstem/isr/{layout.storage_name('queue', '/', queue)}/0"
    try:
        for _ in range(int(timeout_s * 10)):
            isr = await etcd.get(key)
            if isr is not None and node in isr.json() and \
                    journal_bytes(cluster, node, queue) == journal_bytes(cluster, leader, queue):
                return
            await asyncio.sleep(0.1)
    finally:
        await etcd.close()
    raise AssertionError(f"{node} did not catch up with {leader} on {queue}")


async def wait_until_live(cluster: LocalCluster, queue: str, timeout_s: float = 20) -> str:
    """The node leading `queue` (etcd's leader key), once the queue is live there: it
    takes a basic.get (a standby refuses one). The message got, if any, goes back."""
    etcd = EtcdClient([cluster.etcd.endpoint])
    key = f"/mainstem/leaders/{layout.storage_name('queue', '/', queue)}/0"
    try:
        for _ in range(int(timeout_s * 10)):
            found = await etcd.get(key)
            if found is not None:
                leader = str(found.json()["node"])
                connection = await aio_pika.connect(amqp_url(cluster, leader))
                try:
                    channel = await connection.channel()
                    await (await channel.declare_queue(queue, passive=True)).get(fail=False)
                    return leader
                except aio_pika.exceptions.ChannelPreconditionFailed:
                    pass
                finally:
                    await connection.close()
            await asyncio.sleep(0.1)
    finally:
        await etcd.close()
    raise AssertionError(f"{queue} did not become live on its leader")
