"""A stream queue's leader frozen (SIGSTOP) past its lease: AMQP publishers with confirms
connected to the two other nodes, which forward their appends, are answered once a new
leader is elected — the appends the frozen leader holds unanswered go to the new one —
not when the old one resumes (issue 39, item 5). Nothing confirmed is lost."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import aio_pika

from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import bodies_on, stream_metadata, wait_for_count

QUEUE = "frozen-leader"
FREEZE_S = 14.0  # longer than the lease (5 s) and an election, with room to spare
ANSWERED_WITHIN_S = 10.0  # from the freeze: the TTL, an election, a loaded machine
AFTER_FREEZE = 20  # answers each publisher must have for messages sent after the freeze


def amqp_url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/"


class Publisher:
    """Publishes p{tag}-{i} one at a time, each waiting for its confirm or nack."""

    def __init__(self, tag: str, port: int) -> None:
        self.tag, self.port = tag, port
        self.confirmed: set[int] = set()
        self.answered_after: list[float] = []  # monotonic times of answers to later sends
        self.frozen_at: float | None = None
        self.sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        connection = await aio_pika.connect(amqp_url(self.port))
        try:
            channel = await connection.channel(publisher_confirms=True)
            while not stop.is_set():
                self.sent += 1
                sent_at = time.monotonic()
                with contextlib.suppress(aio_pika.exceptions.DeliveryError):
                    await channel.default_exchange.publish(
                        aio_pika.Message(f"{self.tag}{self.sent}".encode()), routing_key=QUEUE)
                    self.confirmed.add(self.sent)
                if self.frozen_at is not None and sent_at > self.frozen_at:
                    self.answered_after.append(time.monotonic())
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 3)


async def leader_of(cluster: LocalCluster, port: int) -> str:
    """The queue's leader, once the node at `port` knows one."""
    for _ in range(100):
        with contextlib.suppress(Exception):  # not available: no leader yet
            leader, _ = await stream_metadata(port, QUEUE)
            return next(n.name for n in cluster.nodes.values()
                        if n.ports["stream"] == leader.port)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{QUEUE} has no leader")


async def test_publishers_through_other_nodes_follow_the_new_leader(
        restored_cluster: LocalCluster) -> None:
    cluster = restored_cluster
    first = cluster.nodes["node1"]
    connection = await aio_pika.connect(amqp_url(first.ports["amqp"]))
    channel = await connection.channel()
    await channel.declare_queue(QUEUE, durable=True, arguments={"x-queue-type": "stream"})
    await connection.close()
    leader = await leader_of(cluster, first.ports["stream"])
    others = [n for n in cluster.nodes.values() if n.name != leader]
    publishers = [Publisher(chr(ord("a") + k), n.ports["amqp"]) for k, n in enumerate(others)]
    stop = asyncio.Event()
    running = [asyncio.ensure_future(p.run(stop)) for p in publishers]
    while min(len(p.confirmed) for p in publishers) < 50:  # forwarding runs
        assert not any(task.done() for task in running)
        await asyncio.sleep(0.05)

    frozen_at = time.monotonic()
    for publisher in publishers:
        publisher.frozen_at = frozen_at
    cluster.kill(leader, signal.SIGSTOP)
    try:
        while time.monotonic() - frozen_at < ANSWERED_WITHIN_S:
            if min(len(p.answered_after) for p in publishers) >= AFTER_FREEZE:
                break
            await asyncio.sleep(0.1)
        answered = {p.tag: len(p.answered_after) for p in publishers}
        assert min(answered.values()) >= AFTER_FREEZE, (
            f"publishers answered {answered} within {ANSWERED_WITHIN_S} s of the freeze")
        await asyncio.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen_at)))
    finally:
        cluster.kill(leader, signal.SIGCONT)
    await asyncio.sleep(1)
    stop.set()
    await asyncio.gather(*running)

    confirmed = {f"{p.tag}{i}".encode() for p in publishers for i in p.confirmed}
    for node in cluster.nodes.values():  # the old leader too, once it has caught up
        await wait_for_count(node.ports["stream"], QUEUE, len(confirmed))
        missing = confirmed - set(bodies_on(node.ports["stream"], QUEUE))
        assert not missing, f"{node.name} lacks {len(missing)} confirmed, e.g. {min(missing)!r}"
