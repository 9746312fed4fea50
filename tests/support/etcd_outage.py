"""etcd stopped for longer than the lease TTL under confirmed AMQP publishing to a stream
queue, then started again: how long after etcd's return the first confirm comes (issue
39, item 8). Shared by tests/cluster/test_etcd_return.py and bench/cluster_chaos.py."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aio_pika

from mainstem.testing_cluster import LocalCluster


class ConfirmClock:
    """One publisher through a node, a message at a time, noting when each confirm came
    (nacks are passed over: it publishes the next)."""

    def __init__(self, port: int, queue: str) -> None:
        self.port, self.queue = port, queue
        self.confirms: list[float] = []  # monotonic times

    async def run(self, stop: asyncio.Event) -> None:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{self.port}/")
        try:
            channel = await connection.channel(publisher_confirms=True)
            sent = 0
            while not stop.is_set():
                sent += 1
                with contextlib.suppress(aio_pika.exceptions.DeliveryError):
                    await channel.default_exchange.publish(
                        aio_pika.Message(f"m{sent}".encode()), routing_key=self.queue)
                    self.confirms.append(time.monotonic())
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 3)

    def first_after(self, moment: float) -> float | None:
        return next((t for t in self.confirms if t > moment), None)


async def first_confirm_after_etcd_returns(cluster: LocalCluster, queue: str,
                                           down_s: float, wait_s: float = 30) -> float:
    """Seconds from etcd's return to the first confirm after it, publishing through the
    queue's first node (node1) and a replica (node2); the later of the two."""
    connection = await aio_pika.connect(
        f"amqp://guest:guest@127.0.0.1:{cluster.nodes['node1'].ports['amqp']}/")
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "stream"})
    await connection.close()
    clocks = [ConfirmClock(cluster.nodes[name].ports["amqp"], queue)
              for name in ("node1", "node2")]
    stop = asyncio.Event()
    running = [asyncio.ensure_future(clock.run(stop)) for clock in clocks]
    try:
        while min(len(clock.confirms) for clock in clocks) < 20:
            await asyncio.sleep(0.05)
        cluster.etcd.stop()
        await asyncio.sleep(down_s)
        await asyncio.to_thread(cluster.etcd.start)
        returned = time.monotonic()
        while time.monotonic() - returned < wait_s:
            firsts = [clock.first_after(returned) for clock in clocks]
            if all(first is not None for first in firsts):
                return max(first for first in firsts if first is not None) - returned
            await asyncio.sleep(0.05)
        return float("inf")
    finally:
        stop.set()
        await asyncio.gather(*running, return_exceptions=True)
