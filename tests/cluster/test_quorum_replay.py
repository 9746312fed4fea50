"""A quorum queue's failover with a deep journal: the new leader replays it in slices, so
its event loop keeps answering meanwhile (issue 39: a replay in one go held it for
seconds, the node's lease lapsed and confirms stalled), and every message is delivered
once, in order, after it — those published while it replayed too."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import aio_pika
import pika

from mainstem.testing_cluster import LocalCluster
from tests.support.quorum_clients import QUORUM, amqp_url, wait_for_leader

DEPTH = 100_000  # messages in the journal: a replay in one go holds a loop for ~0.3-1 s
LOOP_BOUND_S = 0.1  # the longest a round trip to the new leader may take meanwhile
PROBE_EVERY_S = 0.005
BODY = b"x" * 20


def fill(port: int, queue: str) -> None:
    """DEPTH messages without confirms, then one with (all are in once it is confirmed),
    through pika: a client fast enough to fill a deep journal in a few seconds."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        for i in range(DEPTH):
            channel.basic_publish("", queue, b"%d" % i + BODY)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"last")
    finally:
        connection.close()


async def longest_round_trip(node: str, cluster: LocalCluster, stop: asyncio.Event) -> float:
    """basic.qos to `node` again and again until `stop`: the longest wait for its answer
    (the node's event loop answers it at once, unless something holds the loop)."""
    connection = await aio_pika.connect(amqp_url(cluster, node))
    longest = 0.0
    try:
        channel = await connection.channel()
        while not stop.is_set():
            started = time.monotonic()
            await channel.set_qos(prefetch_count=10)
            longest = max(longest, time.monotonic() - started)
            await asyncio.sleep(PROBE_EVERY_S)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 3)
    return longest


def consume_all(port: int, queue: str, count: int) -> list[bytes]:
    """Every message of the queue (no-ack), `count` expected: waits a little for more."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    bodies: list[bytes] = []
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=2_000)
        for _, _, body in channel.consume(queue, auto_ack=True, inactivity_timeout=1):
            if body is None:
                if len(bodies) >= count:
                    break  # a second with nothing more
                continue
            bodies.append(body)
    finally:
        connection.close()
    return bodies


async def test_a_new_leader_answers_while_it_replays_a_deep_journal(
        restored_cluster: LocalCluster) -> None:
    cluster, queue = restored_cluster, "deep"
    connection = await aio_pika.connect(amqp_url(cluster, "node1"))
    await (await connection.channel()).declare_queue(queue, durable=True, arguments=QUORUM)
    await asyncio.to_thread(fill, cluster.nodes["node1"].ports["amqp"], queue)

    stop = asyncio.Event()
    probes = {node: asyncio.ensure_future(longest_round_trip(node, cluster, stop))
              for node in ("node2", "node3")}
    # A publisher on each would-be leader publishes through the failover: what the new
    # leader is given while it replays goes after the replayed messages.
    during = {node: await aio_pika.connect(amqp_url(cluster, node)) for node in probes}
    await asyncio.sleep(0.5)
    cluster.kill("node1", signal.SIGTERM)  # it revokes its lease: an election at once
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 3)
    leader = await wait_for_leader(cluster, "node2", queue, other_than="node1")
    published = await publish_while_live(during[leader], queue)
    stop.set()
    longest = await probes[leader]
    await asyncio.gather(*probes.values(), return_exceptions=True)
    for other in during.values():
        await other.close()

    bodies = await asyncio.to_thread(consume_all, cluster.nodes[leader].ports["amqp"], queue,
                                     DEPTH + 1 + len(published))
    assert bodies == [b"%d" % i + BODY for i in range(DEPTH)] + [b"last"] + published
    assert longest < LOOP_BOUND_S, f"{leader}'s loop held {longest:.3f} s during the replay"


async def publish_while_live(connection: aio_pika.abc.AbstractConnection,
                             queue: str) -> list[bytes]:
    """Publish with confirms to the new leader from its election on, until the queue
    takes them (a few are refused while it is not live yet): the confirmed ones."""
    channel = await connection.channel(publisher_confirms=True)
    confirmed: list[bytes] = []
    for i in range(200):  # bounded: about ten seconds
        body = b"during-%d" % i
        try:
            await channel.default_exchange.publish(aio_pika.Message(body), queue)
        except aio_pika.exceptions.DeliveryError:
            await asyncio.sleep(0.05)
            continue
        confirmed.append(body)
        if len(confirmed) == 20:
            break
    return confirmed
