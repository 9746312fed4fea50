"""The in-sync set on real nodes: a follower frozen (SIGSTOP) while a publisher waits for
confirms through the leader leaves the set within 0.8 x lease TTL, and the confirms go on
while it stays frozen (docs/cluster.md, "Failure handling"); a leader re-elected after
etcd was away for longer than a TTL is in its own in-sync set.

One cluster for the module (default lease TTL, 5 s); what a test stops runs again after
it (restored_cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import Any

import aio_pika
import aiohttp
import pytest

from mainstem.testing_cluster import LocalCluster
from tests.support.quorum_clients import HEADERS, amqp_url, wait_for_leader

LAG_TIMEOUT_S = 0.8 * 5  # 0.8 x the default lease TTL
# The lag check runs 8 times per timeout, then the in-sync set is written to
# etcd: on a loaded 2-core machine allow a few seconds more, far below the 10-13 s
# (until the follower came back) that issue 29 measured.
SLACK_S = 2.5
WATCHED_S = LAG_TIMEOUT_S + 6  # how long the follower stays frozen, publishing on
PUBLISHERS = 16  # steady writes: a healthy follower is always a little behind


async def longest_confirm_gap(channel: aio_pika.abc.AbstractChannel, queue: str,
                              seconds: float, started: float) -> float:
    """Publish with confirms, PUBLISHERS in flight, for `seconds` from `started`; the longest
    time without a confirm (a publish still unconfirmed at the end counts until then)."""
    last = [time.monotonic()]
    gap = [0.0]
    deadline = started + seconds

    async def publisher(n: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            message = aio_pika.Message(f"p{n}-{i}".encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.default_exchange.publish(
                    message, routing_key=queue), deadline - time.monotonic() + 0.1)
                now = time.monotonic()
                gap[0] = max(gap[0], now - last[0])
                last[0] = now

    await asyncio.gather(*(publisher(n) for n in range(PUBLISHERS)))
    return max(gap[0], min(time.monotonic(), deadline) - last[0])


@pytest.mark.parametrize("kind", ["quorum", "stream"])
async def test_confirms_go_on_while_a_follower_is_frozen(
        restored_cluster: LocalCluster, kind: str) -> None:
    cluster, queue = restored_cluster, f"frozen-follower-{kind}"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": kind})
        assert await wait_for_leader(cluster, "node1", queue) == "node1"  # client-local
        await longest_confirm_gap(channel, queue, 1.0, time.monotonic())  # warm
        cluster.kill("node3", signal.SIGSTOP)
        try:
            gap = await longest_confirm_gap(channel, queue, WATCHED_S, time.monotonic())
        finally:
            cluster.kill("node3", signal.SIGCONT)
        print(f"longest confirm gap ({kind}, node3 frozen): {gap:.2f} s")  # shown with -s
        assert gap < LAG_TIMEOUT_S + SLACK_S, f"confirms stalled {gap:.1f} s"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 3)


async def partition_status(cluster: LocalCluster, node: str, stream: str) -> dict[str, Any]:
    port = cluster.nodes[node].ports["admin"]
    async with aiohttp.ClientSession(headers=HEADERS) as http, \
            http.get(f"http://127.0.0.1:{port}/api/streams/%2F/{stream}") as response:
        assert response.status == 200, await response.text()
        partition: dict[str, Any] = (await response.json())["partitions"][0]
        return partition


async def test_a_leader_re_elected_after_an_etcd_restart_is_in_its_own_set(
        restored_cluster: LocalCluster) -> None:
    cluster, stream = restored_cluster, "etcd-away-isr"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(stream, durable=True,
                                    arguments={"x-queue-type": "stream"})
        await channel.default_exchange.publish(aio_pika.Message(b"before"), routing_key=stream)
    finally:
        await connection.close()
    before = await partition_status(cluster, "node1", stream)
    cluster.etcd.stop()
    await asyncio.sleep(5 + 1.5)  # longer than the lease TTL: every node loses its lease
    cluster.etcd.start()
    # The old leases lapse a TTL after etcd is back; the partition gets a leader again.
    deadline = time.monotonic() + 30
    status = before
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, AssertionError):
            status = await partition_status(cluster, "node1", stream)
            if (status["epoch"] > before["epoch"] and status["leader"] is not None
                    and status["leader"] in status["in_sync"]):
                break
        await asyncio.sleep(0.2)
    assert status["epoch"] > before["epoch"], status  # re-elected
    assert status["leader"] in status["in_sync"], status
