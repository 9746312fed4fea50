"""Debian's rabbitmqadmin (RabbitMQ 3.10.8) against mainstem's management API: every
command that applies to what mainstem has."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pika
import pytest
from rstream import Consumer

from mainstem import Broker

RABBITMQADMIN = "/usr/bin/rabbitmqadmin"
TIMEOUT_S = 30


async def admin(broker: Broker, *args: str, check: bool = True) -> str:
    """Run rabbitmqadmin as guest; its standard output."""
    process = await asyncio.create_subprocess_exec(
        RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(broker.ports["admin"]), "-u", "guest",
        "-p", "guest", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    if check:
        assert process.returncode == 0, (args, out.decode(), err.decode())
    return out.decode()


async def listed(broker: Broker, kind: str, *options: str) -> list[dict]:
    return json.loads(await admin(broker, *options, "--format", "raw_json", "list", kind))


async def test_declare_publish_get_purge_delete(broker):
    await admin(broker, "declare", "queue", "name=orders", "durable=true")
    await admin(broker, "declare", "queue", "name=events", "queue_type=stream")
    await admin(broker, "declare", "exchange", "name=shop", "type=topic")
    await admin(broker, "declare", "binding", "source=shop", "destination=orders",
                "routing_key=order.*")
    queues = {q["name"]: q for q in await listed(broker, "queues")}
    assert queues["orders"]["type"] == "classic" and queues["events"]["type"] == "stream"
    assert any(e["name"] == "shop" and e["type"] == "topic"
               for e in await listed(broker, "exchanges"))
    assert any(b["source"] == "shop" and b["destination"] == "orders"
               and b["routing_key"] == "order.*" for b in await listed(broker, "bindings"))

    for i in range(3):
        await admin(broker, "publish", "exchange=shop", "routing_key=order.new",
                    f"payload=hello {i}")
    unrouted = await admin(broker, "publish", "exchange=shop", "routing_key=nowhere",
                           "payload=x")
    assert "NOT routed" in unrouted
    got = json.loads(await admin(broker, "--format", "raw_json", "get", "queue=orders",
                                 "count=2"))
    assert [m["payload"] for m in got] == ["hello 0", "hello 1"]
    assert got[0]["exchange"] == "shop" and got[0]["routing_key"] == "order.new"
    assert got[1]["message_count"] == 1
    taken = json.loads(await admin(broker, "--format", "raw_json", "get", "queue=orders",
                                   "ackmode=ack_requeue_false"))
    assert taken[0]["payload"] == "hello 0" and taken[0]["redelivered"] is True
    assert (await admin_queue(broker, "orders"))["messages"] == 2

    await admin(broker, "purge", "queue", "name=orders")
    assert (await admin_queue(broker, "orders"))["messages"] == 0

    await admin(broker, "delete", "binding", "source=shop", "destination_type=queue",
                "destination=orders", "properties_key=order.*")
    assert not any(b["source"] == "shop" for b in await listed(broker, "bindings"))
    await admin(broker, "delete", "exchange", "name=shop")
    await admin(broker, "delete", "queue", "name=orders")
    await admin(broker, "delete", "queue", "name=events")
    names = {q["name"] for q in await listed(broker, "queues")}
    assert not names & {"orders", "events"}
    assert "shop" not in {e["name"] for e in await listed(broker, "exchanges")}


async def admin_queue(broker: Broker, name: str) -> dict:
    return next(q for q in await listed(broker, "queues") if q["name"] == name)


async def test_overview_channels_connections_and_consumers(broker):
    await admin(broker, "declare", "queue", "name=work")
    await admin(broker, "publish", "routing_key=work", "payload=one", "exchange=amq.default")
    await admin(broker, "publish", "routing_key=work", "payload=two", "exchange=amq.default")
    parameters = pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": "holder"})
    connection = await asyncio.to_thread(pika.BlockingConnection, parameters)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.basic_qos, prefetch_count=10)
        await asyncio.to_thread(channel.basic_consume, "work", lambda *a: None)
        await asyncio.to_thread(connection.process_data_events, 0.5)

        overview = json.loads(await admin(broker, "--format", "raw_json", "show", "overview"))
        assert overview[0]["rabbitmq_version"]
        assert overview[0]["object_totals"]["channels"] == 1
        assert overview[0]["queue_totals"]["messages_unacknowledged"] == 2
        queue = await admin_queue(broker, "work")
        assert queue["messages_unacknowledged"] == 2 and queue["consumers"] == 1
        channels = await listed(broker, "channels")
        assert len(channels) == 1 and channels[0]["user"] == "guest"
        assert channels[0]["messages_unacknowledged"] == 2
        connections = await listed(broker, "connections")
        assert [c["user_provided_name"] for c in connections] == ["holder"]
        assert connections[0]["channels"] == 1
        consumers = await listed(broker, "consumers")
        assert [c["queue"]["name"] for c in consumers] == ["work"]
        assert consumers[0]["channel_details"]["name"] == channels[0]["name"]
        assert channels[0]["name"] in await admin(broker, "list", "channels")  # a table
        vhosts = {v["name"]: v for v in await listed(broker, "vhosts")}
        assert vhosts["/"]["messages_unacknowledged"] == 2

        await admin(broker, "close", "connection", f"name={connections[0]['name']}")
        with pytest.raises(pika.exceptions.ConnectionClosed):
            await asyncio.to_thread(connection.process_data_events, 2)
        assert await listed(broker, "connections") == []
    finally:
        if connection.is_open:
            await asyncio.to_thread(connection.close)


async def test_users_vhosts_permissions(broker):
    await admin(broker, "declare", "vhost", "name=staging")
    await admin(broker, "declare", "user", "name=alice", "password=s3cret",
                "tags=administrator")
    await admin(broker, "declare", "permission", "vhost=staging", "user=alice",
                "configure=.*", "write=.*", "read=.*")
    assert "staging" in {v["name"] for v in await listed(broker, "vhosts")}
    assert "alice" in {u["name"] for u in await listed(broker, "users")}
    assert {"user": "alice", "vhost": "staging", "configure": ".*", "write": ".*",
            "read": ".*"} in await listed(broker, "permissions")
    await broker.core.login("alice", "s3cret", "127.0.0.1")
    # a user from RabbitMQ with its salted SHA-256 hash (of "ops-secret")
    await admin(broker, "declare", "user", "name=bob", "tags=",
                "password_hash=H5oDxBvOn/mO9+decJFJr99vDyplg3tHaTM+khZkvhWlZJ0f",
                "hashing_algorithm=rabbit_password_hashing_sha256")
    await broker.core.login("bob", "ops-secret", "127.0.0.1")
    await admin(broker, "delete", "user", "name=bob")
    await admin(broker, "delete", "permission", "vhost=staging", "user=alice")
    await admin(broker, "delete", "user", "name=alice")
    await admin(broker, "delete", "vhost", "name=staging")
    assert "alice" not in {u["name"] for u in await listed(broker, "users")}
    assert "staging" not in {v["name"] for v in await listed(broker, "vhosts")}


async def test_parameters_are_empty(broker):
    for kind in ("parameters", "vhost_limits"):
        assert await listed(broker, kind) == []


async def test_declare_policy_and_operator_policy(broker):
    await admin(broker, "declare", "policy", "name=cap", "pattern=^capped$",
                'definition={"max-length": 2}', "apply-to=queues", "priority=3")
    await admin(broker, "declare", "operator_policy", "name=ops", "pattern=^capped",
                'definition={"max-length": 1}')
    await admin(broker, "declare", "queue", "name=capped")
    for i in range(3):
        await admin(broker, "publish", "routing_key=capped", f"payload=m{i}")
    queue = await admin_queue(broker, "capped")
    assert queue["messages"] == 1 and (queue["policy"], queue["operator_policy"]) == (
        "cap", "ops")
    [policy] = await listed(broker, "policies")
    assert (policy["name"], policy["priority"], policy["apply-to"]) == ("cap", 3, "queues")
    assert [p["name"] for p in await listed(broker, "operator_policies")] == ["ops"]
    await admin(broker, "delete", "policy", "name=cap")
    await admin(broker, "delete", "operator_policy", "name=ops")
    assert await listed(broker, "policies") == []


async def test_export_and_import(broker, tmp_path: Path):
    await admin(broker, "declare", "queue", "name=kept")
    await admin(broker, "declare", "exchange", "name=fan", "type=fanout")
    await admin(broker, "declare", "binding", "source=fan", "destination=kept")
    exported = tmp_path / "definitions.json"
    await admin(broker, "export", str(exported))
    definitions = json.loads(exported.read_text())
    assert {"name": "kept", "vhost": "/"}.items() <= next(
        q for q in definitions["queues"] if q["name"] == "kept").items()
    await admin(broker, "delete", "queue", "name=kept")
    await admin(broker, "delete", "exchange", "name=fan")
    await admin(broker, "import", str(exported))
    assert "kept" in {q["name"] for q in await listed(broker, "queues")}
    assert any(b["source"] == "fan" and b["destination"] == "kept"
               for b in await listed(broker, "bindings"))


@pytest.mark.parametrize("args", [("list", "nodes"), ("list", "exchanges", "name", "type")])
async def test_table_listings(broker, args):
    assert "name" in await admin(broker, *args)


async def test_list_queues_counts_stream_subscribers(broker):
    await admin(broker, "declare", "queue", "name=ticks", "queue_type=stream")

    async def on_message(message, context) -> None:
        pass

    async with Consumer("127.0.0.1", broker.ports["stream"], username="guest",
                        password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe("ticks", on_message)
        queues = {q["name"]: q for q in await listed(broker, "queues")}
        assert queues["ticks"]["consumers"] == 1
