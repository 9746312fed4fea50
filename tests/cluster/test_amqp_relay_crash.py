"""Nothing confirmed is lost on the relayed path: persistent messages published with
confirms through node2 into a durable classic queue whose home is node1, node1 SIGKILLed
mid-publish and restarted; every confirmed message is then read through node3 exactly
once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import aio_pika

from mainstem.testing_cluster import LocalCluster
from tests.support.quorum_clients import amqp_url, read_queue

IN_FLIGHT = 100
KILL_AFTER = 500  # confirms seen before the home is killed


async def publish_until_failing(channel: aio_pika.abc.AbstractChannel, queue: str,
                                confirmed: list[int]) -> None:
    """Publish m1, m2, ..., persistent, at most IN_FLIGHT unconfirmed, recording confirms,
    until the first publish fails (the home's crash)."""
    slots = asyncio.Semaphore(IN_FLIGHT)
    failed = asyncio.Event()

    async def one(i: int) -> None:
        try:
            await channel.default_exchange.publish(aio_pika.Message(
                f"m{i}".encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)
            confirmed.append(i)
        except (aio_pika.exceptions.DeliveryError, aio_pika.exceptions.AMQPError):
            failed.set()
        finally:
            slots.release()

    pending = []
    for i in itertools.count(1):
        await slots.acquire()
        if failed.is_set():
            break
        pending.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*pending)


async def read_once_home_is_back(cluster: LocalCluster) -> list[tuple[bytes, bool]]:
    """The queue through node3, once node3 sees its home again (404 until then)."""
    for _ in range(200):
        with contextlib.suppress(aio_pika.exceptions.ChannelClosed):
            return await read_queue(cluster, "node3", "ledger")
        await asyncio.sleep(0.1)
    return await read_queue(cluster, "node3", "ledger")


async def test_confirmed_relayed_publishes_survive_the_homes_crash(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    home = await aio_pika.connect(amqp_url(cluster, "node1"))
    await (await home.channel()).declare_queue("ledger", durable=True)
    publisher = await aio_pika.connect(amqp_url(cluster, "node2"))
    channel = await publisher.channel(publisher_confirms=True)
    confirmed: list[int] = []
    publishing = asyncio.ensure_future(publish_until_failing(channel, "ledger", confirmed))
    for _ in range(600):
        if len(confirmed) >= KILL_AFTER:
            break
        await asyncio.sleep(0.05)
    cluster.kill("node1")
    await asyncio.wait_for(publishing, 60)
    for connection in (home, publisher):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 3)
    assert len(confirmed) >= KILL_AFTER

    cluster.start("node1")
    received = [body for body, _ in await read_once_home_is_back(cluster)]
    numbers = [int(body[1:]) for body in received]
    assert len(numbers) == len(set(numbers))  # exactly once
    assert numbers == sorted(numbers)  # in order
    assert set(confirmed) <= set(numbers), sorted(set(confirmed) - set(numbers))[:10]
