"""A virtual host's metadata as RabbitMQ 3.11+ keeps it: description, tags and
default_queue_type set by PUT /api/vhosts/{vhost}, returned by GET, exported in
definitions, kept across a restart, and the default queue type given to a queue declared
(over AMQP, with pika) without x-queue-type."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pika

from mainstem import Broker
from mainstem.broker.catalog import Catalog, VhostMetadata

ORDERS = {"description": "Orders of the shop", "tags": ["prod", "eu"],
          "default_queue_type": "quorum"}


async def call(http: aiohttp.ClientSession, method: str, path: str, body: Any = None,
               status: int = 200) -> Any:
    async with http.request(method, path, json=body) as response:
        assert response.status == status, (method, path, await response.text())
        return await response.json() if response.status == 200 else None


def declare_untyped(broker: Broker, vhost: str, queue: str) -> None:
    params = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"], vhost,
                                       pika.PlainCredentials("guest", "guest"))
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        # as RabbitMQ: what a quorum queue or a stream cannot be stays classic
        channel.queue_declare(queue + "-mine", exclusive=True)
        channel.queue_declare(queue + "-passing", durable=False)
        queues = broker.core.queues.vhost(vhost).queues
        assert [queues[queue + end].settings.queue_type for end in ("-mine", "-passing")] \
            == ["classic", "classic"]
        channel.queue_delete(queue + "-passing")
    finally:
        connection.close()


async def test_metadata_is_stored_shown_and_exported(broker: Broker, http) -> None:
    await call(http, "PUT", "/api/vhosts/orders", {**ORDERS, "tags": "prod,eu"}, status=201)
    shown = await call(http, "GET", "/api/vhosts/orders")
    assert {key: shown[key] for key in ORDERS} == ORDERS
    assert shown["metadata"] == ORDERS
    listed = next(v for v in await call(http, "GET", "/api/vhosts") if v["name"] == "orders")
    assert listed["description"] == ORDERS["description"]
    exported = next(v for v in (await call(http, "GET", "/api/definitions"))["vhosts"]
                    if v["name"] == "orders")
    assert exported["metadata"] == ORDERS and exported["default_queue_type"] == "quorum"
    # a PUT changes the fields it names and keeps the others
    await call(http, "PUT", "/api/vhosts/orders", {"description": "Orders"}, status=204)
    again = await call(http, "GET", "/api/vhosts/orders")
    assert again["description"] == "Orders" and again["tags"] == ["prod", "eu"]
    # undeclared, a vhost's queues are classic, and it says so
    assert (await call(http, "GET", "/api/vhosts/%2F"))["default_queue_type"] == "classic"
    for bad in ({"default_queue_type": "lazy"}, {"description": 3}, {"tags": 7}):
        await call(http, "PUT", "/api/vhosts/orders", bad, status=400)


async def test_a_definitions_import_brings_the_metadata_and_a_re_export_keeps_it(
        broker: Broker, http) -> None:
    """A RabbitMQ 3.11+ export's vhost metadata (under "metadata") is imported, not
    dropped, and exported again the same."""
    vhost = {"name": "imported", "metadata": ORDERS}
    await call(http, "POST", "/api/definitions", {"vhosts": [vhost]}, status=204)
    shown = await call(http, "GET", "/api/vhosts/imported")
    assert shown["metadata"] == ORDERS
    exported = next(v for v in (await call(http, "GET", "/api/definitions"))["vhosts"]
                    if v["name"] == "imported")
    assert exported["metadata"] == ORDERS


async def test_the_default_queue_type_types_an_untyped_declaration(broker: Broker,
                                                                   http) -> None:
    await call(http, "PUT", "/api/vhosts/orders", ORDERS, status=201)
    await asyncio.to_thread(declare_untyped, broker, "orders", "placed")
    await asyncio.to_thread(declare_untyped, broker, "/", "plain")
    assert (await call(http, "GET", "/api/queues/orders/placed"))["type"] == "quorum"
    assert (await call(http, "GET", "/api/queues/%2F/plain"))["type"] == "classic"
    # a redeclaration without a type still matches the queue it finds
    await asyncio.to_thread(declare_untyped, broker, "orders", "placed")
    await call(http, "PUT", "/api/vhosts/logs", {"default_queue_type": "stream"}, status=201)
    assert (await call(http, "GET", "/api/aliveness-test/logs")) == {"status": "ok"}


def test_metadata_survives_reopening_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog.open(path) as catalog:
        assert catalog.put_namespace("orders", VhostMetadata("Orders", ("prod",), "stream"))
        assert not catalog.put_namespace("orders", VhostMetadata("Orders!", ("prod",), None))
    with Catalog.open(path) as catalog:
        record = catalog.get_namespace("orders")
        assert record is not None
        assert record.metadata == VhostMetadata("Orders!", ("prod",), None)
