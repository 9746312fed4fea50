"""The audit log: every change made through the management API is one `admin.change` line
in the log of a real `mainstem serve`, made by aiohttp and closed by pika; never a
password or a hash. Changes made through the wire protocols (pika, rstream, mainstem's
Iggy and BSON clients) are the same lines with their protocol; a definitions import is
one line naming what it changed."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import signal

import aiohttp
import pika
from rstream import Producer

from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient
from tests.support.server_process import kill, start_server, started_ports

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
PASSWORD = "Sesame-Audit-7"
NEW_PASSWORD = "Sesame-Audit-8"


def rabbit_sha256_hash(password: str) -> str:
    """RabbitMQ's password_hash: base64 of a 4-byte salt and SHA-256(salt + password)."""
    salt = b"\x01\x02\x03\x04"
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


async def change(http: aiohttp.ClientSession, method: str, path: str, body=None,
                 status: int = 204, **headers: str) -> None:
    async with http.request(method, path, json=body, headers=headers) as response:
        assert response.status == status, await response.text()


async def test_every_change_through_the_api_is_one_audit_line(tmp_path):
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    password_hash = rabbit_sha256_hash(NEW_PASSWORD)
    try:
        ports = started_ports(process, log_path)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{ports['admin']}",
                                         headers=ADMIN) as http:
            await change(http, "PUT", "/api/vhosts/audited", {}, status=201)
            await change(http, "PUT", "/api/users/alice",
                         {"password": PASSWORD, "tags": "monitoring"}, status=201)
            await change(http, "PUT", "/api/users/alice",
                         {"password_hash": password_hash,
                          "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""})
            await change(http, "PUT", "/api/permissions/audited/alice",
                         {"configure": "^alice-", "write": ".*", "read": ".*"})
            await change(http, "PUT", "/api/queues/audited/orders", {"durable": True},
                         status=201)
            await change(http, "PUT", "/api/exchanges/audited/shop", {"type": "topic"},
                         status=201)
            await change(http, "POST", "/api/bindings/audited/e/shop/q/orders",
                         {"routing_key": "order.*"}, status=201)
            await change(http, "POST", "/api/exchanges/audited/shop/publish",  # not a change
                         {"routing_key": "order.new", "payload": "x",
                          "payload_encoding": "string", "properties": {}}, status=200)
            await change(http, "DELETE", "/api/queues/audited/orders/contents")
            await change(http, "DELETE", "/api/users/nobody", status=404)  # changed nothing
            async with http.get("/api/users") as response:  # a read
                assert response.status == 200

            params = pika.ConnectionParameters(
                "127.0.0.1", ports["amqp"], credentials=pika.PlainCredentials("guest", "guest"),
                client_properties={"connection_name": "nightly-job"})
            amqp = await asyncio.to_thread(pika.BlockingConnection, params)
            try:
                await change(http, "DELETE", "/api/connections/nightly-job",
                             **{"X-Reason": "maintenance"})
            finally:
                with contextlib.suppress(pika.exceptions.AMQPError):  # closed by the broker
                    await asyncio.to_thread(amqp.close)
            await change(http, "DELETE", "/api/queues/audited/orders")
            await change(http, "DELETE", "/api/exchanges/audited/shop")
            await change(http, "DELETE", "/api/permissions/audited/alice")
            await change(http, "DELETE", "/api/users/alice")
            await change(http, "DELETE", "/api/vhosts/audited")
    finally:
        kill(process, signal.SIGTERM)

    text = log_path.read_text()
    assert PASSWORD not in text and NEW_PASSWORD not in text and password_hash not in text
    lines = [json.loads(line) for line in text.splitlines()]
    changes = [entry for entry in lines if entry["event"] == "admin.change"]
    assert {(entry["user"], entry["peer"], entry["logger"]) for entry in changes} == {
        ("guest", "127.0.0.1", "mainstem.admin.audit")}
    assert [(entry["action"], entry["object"], entry["status"]) for entry in changes] == [
        ("vhosts.create", {"vhost": "audited"}, 201),
        ("users.create", {"user": "alice"}, 201),
        ("users.update", {"user": "alice"}, 204),
        ("permissions.update", {"vhost": "audited", "user": "alice"}, 204),
        ("queues.create", {"vhost": "audited", "name": "orders"}, 201),
        ("exchanges.create", {"vhost": "audited", "name": "shop"}, 201),
        ("bindings.create", {"vhost": "audited", "source": "shop", "kind": "q",
                             "destination": "orders"}, 201),
        ("queues.purge", {"vhost": "audited", "name": "orders"}, 204),
        ("connections.delete", {"name": "nightly-job"}, 204),
        ("queues.delete", {"vhost": "audited", "name": "orders"}, 204),
        ("exchanges.delete", {"vhost": "audited", "name": "shop"}, 204),
        ("permissions.delete", {"vhost": "audited", "user": "alice"}, 204),
        ("users.delete", {"user": "alice"}, 204),
        ("vhosts.delete", {"vhost": "audited"}, 204),
    ]
    details = [entry.get("details") for entry in changes]
    assert details[1] == {"tags": "monitoring", "credentials": "password"}
    assert details[2] == {"tags": "", "credentials": "password_hash"}
    assert details[3] == {"configure": "^alice-", "write": ".*", "read": ".*"}
    assert details[6] == {"routing_key": "order.*"}
    assert changes[8]["reason"] == "maintenance"


def amqp_changes(port: int) -> None:
    """Declare, bind, unbind and delete through pika, as user guest."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest")))
    try:
        channel = connection.channel()
        channel.exchange_declare("wire-x", "topic")
        channel.exchange_declare("wire-x", "topic")  # the same again: no change
        channel.queue_declare("wire-q", durable=True)
        channel.queue_declare("", exclusive=True)  # lives as the connection: not logged
        channel.queue_bind("wire-q", "wire-x", "a.*")
        channel.queue_unbind("wire-q", "wire-x", "a.*")
        channel.queue_delete("wire-q")
        channel.exchange_delete("wire-x")
    finally:
        connection.close()


def audit_lines(text: str) -> list[dict]:
    return [entry for entry in map(json.loads, text.splitlines())
            if entry["event"] == "admin.change"]


async def test_changes_through_the_protocols_are_audit_lines_too(tmp_path):
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    try:
        ports = started_ports(process, log_path)
        await asyncio.to_thread(amqp_changes, ports["amqp"])
        async with Producer("127.0.0.1", port=ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("wire-s")
            await producer.delete_stream("wire-s")
        iggy = await IggyClient.connect("127.0.0.1", ports["iggy"])
        try:
            await iggy.login("guest", "guest")
            await iggy.create_stream("shop")
            await iggy.create_topic("shop", "orders", partitions=1)
        finally:
            await iggy.close()
        events = await EventsClient.connect("127.0.0.1", ports["bson"], "guest", "guest")
        try:
            await events.create_channel("clicks")
            await events.create_binder("carts")
        finally:
            await events.close()
    finally:
        kill(process, signal.SIGTERM)

    changes = audit_lines(log_path.read_text())
    assert {(e["user"], e["peer"].rsplit(":", 1)[0]) for e in changes} == {
        ("guest", "127.0.0.1")}
    assert [(e["protocol"], e["action"], e["object"]) for e in changes] == [
        ("amqp", "exchanges.create", {"vhost": "/", "name": "wire-x"}),
        ("amqp", "queues.create", {"vhost": "/", "name": "wire-q"}),
        ("amqp", "bindings.create", {"vhost": "/", "source": "wire-x", "destination": "wire-q",
                                     "destination_type": "queue", "routing_key": "a.*"}),
        ("amqp", "bindings.delete", {"vhost": "/", "source": "wire-x", "destination": "wire-q",
                                     "destination_type": "queue", "routing_key": "a.*"}),
        ("amqp", "queues.delete", {"vhost": "/", "name": "wire-q"}),
        ("amqp", "exchanges.delete", {"vhost": "/", "name": "wire-x"}),
        ("stream", "streams.create", {"vhost": "/", "name": "wire-s"}),
        ("stream", "streams.delete", {"vhost": "/", "name": "wire-s"}),
        ("iggy", "vhosts.create", {"name": "shop"}),
        ("iggy", "streams.create", {"vhost": "shop", "name": "orders"}),
        ("bson", "channels.create", {"vhost": "/", "name": "clicks"}),
        ("bson", "binders.create", {"vhost": "/", "name": "carts"}),
    ]


async def test_a_definitions_import_is_one_line_naming_what_it_changed(tmp_path):
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    definitions = {"vhosts": [{"name": "moved"}],
                   "users": [{"name": "carol", "password_hash": rabbit_sha256_hash(PASSWORD),
                              "tags": []}],
                   "permissions": [{"user": "carol", "vhost": "moved", "configure": ".*",
                                    "write": ".*", "read": ".*"}],
                   "queues": [{"name": "q1", "vhost": "moved", "durable": True},
                              {"name": "q2", "vhost": "moved", "durable": True}]}
    try:
        ports = started_ports(process, log_path)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{ports['admin']}",
                                         headers=ADMIN) as http:
            await change(http, "POST", "/api/definitions", definitions)
    finally:
        kill(process, signal.SIGTERM)

    [line] = audit_lines(log_path.read_text())
    assert (line["protocol"], line["action"], line["object"]) == (
        "http", "definitions.import", {})
    assert line["imported"] == {"vhosts": 1, "users": 1, "permissions": 1, "queues": 2}
    assert line["warnings"] == []
