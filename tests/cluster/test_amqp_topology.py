"""AMQP exchanges, bindings and queues are the cluster's: declared, bound or deleted
through one node, they are so on every node (with real aio-pika clients and the
management API); a classic queue is live on the node it was declared on, and every node
says so; a node that was away takes the cluster's topology when it returns; a dead
node's transient queues go everywhere, as in RabbitMQ.

One cluster for the module: each test has names of its own, and the tests that stop
node3 have it running again after them (restored_cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable

import aio_pika
import aiohttp
import pytest
from aio_pika.exceptions import ChannelClosed
from aiormq.exceptions import ChannelPreconditionFailed

from mainstem.cluster.etcd import EtcdClient
from mainstem.testing_cluster import LocalCluster
from tests.support.quorum_clients import HEADERS, amqp_url

NODES = ("node1", "node2", "node3")
# a race settles within milliseconds; a loaded machine (2 cores, several suites) is slower
SETTLED_WITHIN_S = 60


async def eventually(check: Callable[[], Awaitable[None]], timeout_s: float = 15) -> None:
    """Run `check` until it passes (the watch carries a change within milliseconds)."""
    for _ in range(int(timeout_s * 10) - 1):
        with contextlib.suppress(AssertionError, ChannelClosed, aiohttp.ClientError):
            await check()
            return
        await asyncio.sleep(0.1)
    await check()


async def api(cluster: LocalCluster, node: str, path: str) -> list[dict]:
    port = cluster.nodes[node].ports["admin"]
    async with aiohttp.ClientSession(headers=HEADERS) as http, \
            http.get(f"http://127.0.0.1:{port}/api/{path}") as response:
        assert response.status == 200, await response.text()
        rows: list[dict] = await response.json()
        return rows


async def channel_on(cluster: LocalCluster, node: str,
                     stack: contextlib.AsyncExitStack) -> aio_pika.abc.AbstractChannel:
    connection = await aio_pika.connect(amqp_url(cluster, node))
    stack.push_async_callback(connection.close)
    return await connection.channel()


async def exists(cluster: LocalCluster, node: str, kind: str, name: str) -> bool:
    """Whether a passive declaration of the exchange or queue succeeds on `node`."""
    async with contextlib.AsyncExitStack() as stack:
        channel = await channel_on(cluster, node, stack)
        try:
            if kind == "exchange":
                await channel.declare_exchange(name, passive=True)
            else:
                await channel.declare_queue(name, passive=True)
        except ChannelClosed as closed:
            assert "NOT_FOUND" in str(closed) or "404" in str(closed), closed
            return False
        return True


async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer that keeps its queue in use."""


def bindings_of(rows: list[dict], source: str) -> set[tuple[str, str, str]]:
    return {(row["destination"], row["destination_type"], row["routing_key"])
            for row in rows if row["source"] == source}


async def test_topology_made_on_one_node_holds_on_every_node(cluster: LocalCluster) -> None:
    async with contextlib.AsyncExitStack() as stack:
        one = await channel_on(cluster, "node1", stack)
        orders = await one.declare_exchange("orders", aio_pika.ExchangeType.TOPIC, durable=True)
        audit = await one.declare_exchange("audit", aio_pika.ExchangeType.FANOUT,
                                           durable=False, arguments={"x-note": 7})
        queue = await one.declare_queue("eu-orders", durable=True,
                                        arguments={"x-max-length": 1000})
        # In use at its home: its copies on other nodes must not expire it meanwhile.
        expiring = await one.declare_queue("in-use", arguments={"x-expires": 1000})
        await expiring.consume(ignore)
        await queue.bind(orders, "eu.*")
        await audit.bind(orders, "#")  # exchange to exchange

        expected = {("eu-orders", "queue", "eu.*"), ("audit", "exchange", "#")}
        for node in NODES[1:]:
            async def shared(node: str = node) -> None:
                assert bindings_of(await api(cluster, node, "bindings/%2F"), "orders") \
                    == expected
                exchanges = {row["name"]: row for row in await api(cluster, node,
                                                                   "exchanges/%2F")}
                assert exchanges["audit"]["type"] == "fanout"
                assert exchanges["audit"]["durable"] is False
                assert exchanges["audit"]["arguments"] == {"x-note": 7}
                queues = {row["name"]: row for row in await api(cluster, node, "queues/%2F")}
                assert queues["eu-orders"]["node"] == "node1"  # its home
                assert queues["eu-orders"]["arguments"] == {"x-max-length": 1000}
            await eventually(shared)

        # An exclusive queue is known everywhere, and refused to every other connection.
        owner = await aio_pika.connect(amqp_url(cluster, "node1"))
        reply = await (await owner.channel()).declare_queue("rpc-reply", exclusive=True)
        await reply.bind(orders, "rpc")

        async def locked_elsewhere() -> None:
            async with contextlib.AsyncExitStack() as inner:
                two = await channel_on(cluster, "node2", inner)
                with pytest.raises(ChannelClosed, match="RESOURCE_LOCKED"):
                    await two.declare_queue("rpc-reply", passive=True)
            queues = {row["name"]: row for row in await api(cluster, "node3", "queues/%2F")}
            assert queues["rpc-reply"]["exclusive"] is True
            assert queues["rpc-reply"]["node"] == "node1"
        await eventually(locked_elsewhere)
        await owner.close()  # the queue ends with its connection, everywhere

        async def reply_gone() -> None:
            assert "rpc-reply" not in {row["name"] for row in await api(cluster, "node2",
                                                                        "queues/%2F")}
            assert ("rpc-reply", "queue", "rpc") not in bindings_of(
                await api(cluster, "node3", "bindings/%2F"), "orders")
        await eventually(reply_gone)

        # Declarations through another node are checked against the cluster's objects.
        three = await channel_on(cluster, "node3", stack)
        with pytest.raises(ChannelClosed, match="PRECONDITION_FAILED"):
            await three.declare_queue("eu-orders", durable=True,
                                      arguments={"x-max-length": 5})
        three = await channel_on(cluster, "node3", stack)
        with pytest.raises(ChannelClosed, match="PRECONDITION_FAILED"):
            await three.declare_exchange("orders", aio_pika.ExchangeType.DIRECT, durable=True)

        # Changes through node3 reach node1, where the queue lives.
        three = await channel_on(cluster, "node3", stack)
        remote_audit = await three.declare_exchange("audit", passive=True)
        remote_queue = await three.declare_queue("eu-orders", passive=True)
        await remote_queue.unbind("orders", "eu.*")
        await remote_audit.unbind("orders", "#")
        await three.exchange_delete("audit")

        async def removed() -> None:
            assert bindings_of(await api(cluster, "node1", "bindings/%2F"), "orders") == set()
            assert not await exists(cluster, "node1", "exchange", "audit")
        await eventually(removed)

        await three.queue_delete("eu-orders")

        async def queue_gone() -> None:
            for node in NODES:
                assert not await exists(cluster, node, "queue", "eu-orders")
        await eventually(queue_gone)
        await asyncio.sleep(1.5)  # past x-expires since the declarations on other nodes
        for node in NODES:
            assert await exists(cluster, node, "queue", "in-use")


async def test_a_returning_node_takes_what_changed_while_it_was_away(
        restored_cluster: LocalCluster) -> None:
    cluster = restored_cluster
    async with contextlib.AsyncExitStack() as stack:
        one = await channel_on(cluster, "node1", stack)
        await one.declare_exchange("old", aio_pika.ExchangeType.DIRECT, durable=True)
        await one.declare_queue("kept", durable=True)

        async def on_node3() -> None:
            assert await exists(cluster, "node3", "exchange", "old")
        await eventually(on_node3)

        cluster.kill("node3", signal.SIGTERM)
        await one.exchange_delete("old")
        await one.declare_exchange("new", aio_pika.ExchangeType.FANOUT, durable=True)
        queue = await one.declare_queue("kept", passive=True)
        await queue.bind("new")

    cluster.start("node3")
    assert not await exists(cluster, "node3", "exchange", "old")  # deleted while away
    assert await exists(cluster, "node3", "exchange", "new")
    assert bindings_of(await api(cluster, "node3", "bindings/%2F"), "new") == {
        ("kept", "queue", "kept")}  # aio-pika binds with the queue name as key
    queues = {row["name"]: row for row in await api(cluster, "node3", "queues/%2F")}
    assert queues["kept"]["node"] == "node1"


async def test_a_dead_nodes_transient_queues_go_and_its_durable_ones_are_down(
        restored_cluster: LocalCluster) -> None:
    cluster = restored_cluster
    async with contextlib.AsyncExitStack() as stack:
        three = await channel_on(cluster, "node3", stack)
        await three.declare_queue("scratch", durable=False)
        await three.declare_queue("ledger", durable=True)
        owner = await aio_pika.connect(amqp_url(cluster, "node3"))  # open until node3 dies
        await (await owner.channel()).declare_queue("private", exclusive=True)

        async def known() -> None:
            assert await exists(cluster, "node1", "queue", "scratch")
            assert await exists(cluster, "node1", "queue", "ledger")
            assert "private" in {row["name"] for row in await api(cluster, "node1",
                                                                  "queues/%2F")}
        await eventually(known)
        cluster.kill("node3")
        stack.push_async_callback(owner.close)

    async def after_lease() -> None:  # the lease TTL is 5 s
        assert not await exists(cluster, "node1", "queue", "scratch")
        assert "private" not in {row["name"] for row in await api(cluster, "node1",
                                                                  "queues/%2F")}
        async with contextlib.AsyncExitStack() as stack:
            channel = await channel_on(cluster, "node1", stack)
            with pytest.raises(ChannelClosed, match=r"home node .node3. .* is down"):
                await channel.declare_queue("ledger", durable=True)  # as RabbitMQ answers
        queues = {row["name"]: row for row in await api(cluster, "node2", "queues/%2F")}
        assert "scratch" not in queues
        assert queues["ledger"]["node"] == "node3"
        assert queues["ledger"]["state"] == "down"
    await eventually(after_lease, timeout_s=20)

    cluster.start("node3")
    assert not await exists(cluster, "node3", "queue", "scratch")
    assert await exists(cluster, "node3", "queue", "ledger")  # its journal is there

    async def back_up() -> None:
        queues = {row["name"]: row for row in await api(cluster, "node2", "queues/%2F")}
        assert queues["ledger"]["state"] == "running"
    await eventually(back_up)


async def test_one_exchange_declared_two_ways_at_once_ends_the_same_everywhere(
        cluster: LocalCluster) -> None:
    """Two nodes declare one exchange differently at the same moment: each applies the
    other's record, and its own again if it came after, so all end where etcd's order
    ends, as the key etcd holds says."""
    async with contextlib.AsyncExitStack() as stack:
        one, two = [await channel_on(cluster, node, stack) for node in ("node1", "node2")]
        declared = await asyncio.gather(
            one.declare_exchange("raced", aio_pika.ExchangeType.DIRECT),
            two.declare_exchange("raced", aio_pika.ExchangeType.FANOUT),
            return_exceptions=True)
    # on a loaded machine one declare may reach its node after the other's record did:
    # then it is refused as RabbitMQ refuses an inequivalent redeclare, not raced
    refused = [d for d in declared if isinstance(d, BaseException)]
    assert len(refused) < 2 and all(
        isinstance(d, ChannelPreconditionFailed) and "inequivalent" in str(d)
        for d in refused), declared

    async def agreed() -> None:
        types = set()
        for node in NODES:
            rows = await api(cluster, node, "exchanges/%2F")
            types |= {row["type"] for row in rows if row["name"] == "raced"}
        assert len(types) == 1, types
        etcd = EtcdClient([cluster.etcd.endpoint])
        held = await etcd.get("/mainstem/catalog/amqp_exchange/%2F/raced")
        await etcd.close()
        assert held is not None and held.json()["type"] in types

    await eventually(agreed, timeout_s=SETTLED_WITHIN_S)
