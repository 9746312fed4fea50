"""No object's files are found by a path made of its name: `.`, `..`, very long names and
names that escape alike stay apart across vhosts and restarts (pika, aio-pika, rstream), and
a data directory in the old, name-derived layout is moved to the new one on start."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

from mainstem import Broker
from mainstem.broker.auth import Auth
from mainstem.broker.catalog import Catalog
from mainstem.broker.layout import storage_name
from mainstem.broker.settings import CoreSettings
from mainstem.testing import ThreadedBroker

TIMEOUT_S = 10
LONG_NAME = "é" * 127 + "x"  # 255 bytes, the AMQP limit; 763 once percent-encoded


def add_tenants(data_dir: Path, users: dict[str, list[str]]) -> None:
    """Users (password = name) with full rights on their vhosts only, before the broker runs."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with Catalog.open(data_dir / "catalog.sqlite") as catalog:
        auth = Auth(catalog, CoreSettings())
        for user, vhosts in users.items():
            if catalog.get_user(user) is None:
                auth.add_user(user, user)
            for vhost in vhosts:
                if catalog.get_namespace(vhost) is None:
                    catalog.add_namespace(vhost)
                auth.set_permissions(user, vhost)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@contextlib.contextmanager
def amqp_channel(server: ThreadedBroker, user: str, vhost: str) -> Iterator[Any]:
    """A pika channel with publisher confirms: a publish returns once it is durable."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1", server.ports["amqp"], vhost, pika.PlainCredentials(user, user))
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        yield channel
    finally:
        connection.close()


def publish(chan: Any, queue: str, body: bytes) -> None:
    chan.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def drain(chan: Any, queue: str) -> list[bytes]:
    bodies = []
    while True:
        _, _, body = chan.basic_get(queue, auto_ack=True)
        if body is None:
            return bodies
        bodies.append(body)


TENANTS = {"alice": "v1", "bob": "v2"}


def test_dot_queues_of_two_vhosts_keep_their_own_messages(data_dir: Path) -> None:
    add_tenants(data_dir, {user: [vhost] for user, vhost in TENANTS.items()})
    with ThreadedBroker(data_dir) as server:
        for user, vhost in TENANTS.items():
            with amqp_channel(server, user, vhost) as chan:
                for queue in ("..", "."):
                    chan.queue_declare(queue, durable=True)
                    publish(chan, queue, f"{vhost} {queue}".encode())
    with ThreadedBroker(data_dir) as server:
        for user, vhost in TENANTS.items():
            with amqp_channel(server, user, vhost) as chan:
                for queue in ("..", "."):
                    assert drain(chan, queue) == [f"{vhost} {queue}".encode()]
                    publish(chan, queue, b"again")
                    chan.queue_delete(queue)
                chan.queue_declare("still-open")  # the deletes kept the connection
    with ThreadedBroker(data_dir) as server:
        for user, vhost in TENANTS.items():
            for queue in ("..", "."):
                with amqp_channel(server, user, vhost) as chan, \
                        pytest.raises(ChannelClosedByBroker) as missing:
                    chan.queue_declare(queue, passive=True)
                assert missing.value.reply_code == 404


def test_a_255_byte_queue_name_is_durable(data_dir: Path) -> None:
    with ThreadedBroker(data_dir) as server, amqp_channel(server, "guest", "/") as chan:
        chan.queue_declare(LONG_NAME, durable=True)
        publish(chan, LONG_NAME, b"kept")
    with ThreadedBroker(data_dir) as server, amqp_channel(server, "guest", "/") as chan:
        assert drain(chan, LONG_NAME) == [b"kept"]


def legacy_directory_name(name: str) -> str:
    """The old layout's directory for a name: escaped, long ones cut and suffixed with a hash."""
    quoted = quote(name, safe="-_").replace(".", "%2E")
    if len(quoted) <= 120:
        return quoted
    return f"{quoted[:95]}~{hashlib.sha256(name.encode()).hexdigest()[:24]}"


# A vhost whose name is another vhost's old directory name: both got one directory.
VHOST_A = "t" * 200
VHOST_B = legacy_directory_name(VHOST_A)


async def test_streams_of_vhosts_with_colliding_old_names_stay_apart(data_dir: Path) -> None:
    add_tenants(data_dir, {"guest": ["/", VHOST_A, VHOST_B]})
    streams = ["s", "..", "L" * 255]
    async with Broker(data_dir) as broker:
        for vhost in (VHOST_A, VHOST_B):
            async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                                password="guest", vhost=vhost) as producer:
                for stream in streams:
                    await producer.create_stream(stream)
                    await producer.send_wait(stream, AMQPMessage(body=vhost[-3:].encode()))
    async with Broker(data_dir) as broker:
        for vhost in (VHOST_A, VHOST_B):
            got = await first_bodies(broker.ports["stream"], vhost, streams)
            assert got == {stream: [vhost[-3:].encode()] for stream in streams}


async def first_bodies(port: int, vhost: str, streams: list[str]) -> dict[str, list[bytes]]:
    received: dict[str, list[bytes]] = {stream: [] for stream in streams}
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        received[context.stream].append(bytes(message.body))
        if all(received.values()):
            done.set()

    async with Consumer("127.0.0.1", port=port, username="guest", password="guest",
                        vhost=vhost) as consumer:
        await consumer.start()
        for stream in streams:
            await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
        await asyncio.sleep(0.1)  # anything more would show up now
    return received


async def test_an_old_layout_is_moved_on_start(data_dir: Path) -> None:
    add_tenants(data_dir, {"guest": ["/", "v1"]})
    async with Broker(data_dir) as broker:
        for vhost, queue in (("/", "q"), ("v1", ".")):
            url = f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/{quote(vhost, safe='')}"
            async with await aio_pika.connect(url) as connection:
                chan = await connection.channel()  # with publisher confirms
                await chan.declare_queue(queue, durable=True)
                await chan.default_exchange.publish(
                    aio_pika.Message(b"old " + queue.encode(), delivery_mode=2), queue)
        broker.core.streams.create("/", "orders", partitions=2)
        await broker.core.streams.partition("/", "orders", 1).append([b"o1"])
    # Put the files where the old layout kept them: escaped names, `.` meaning the
    # vhost's own directory, and no layout marker.
    queues, streams = data_dir / "queues", data_dir / "streams"
    os.renames(queues / storage_name("queue", "/", "q"), queues / "%2F" / "q")
    for path in (queues / storage_name("queue", "v1", ".")).iterdir():
        os.renames(path, queues / "v1" / path.name)
    os.renames(streams / storage_name("stream", "/", "orders"), streams / "%2F" / "orders")
    for root in (queues, streams):
        (root / "layout").unlink()

    async with Broker(data_dir) as broker:
        for vhost, queue in (("/", "q"), ("v1", ".")):
            url = f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/{quote(vhost, safe='')}"
            async with await aio_pika.connect(url) as connection:
                chan = await connection.channel()
                declared = await chan.declare_queue(queue, durable=True)
                message = await declared.get(no_ack=True)
                assert message.body == b"old " + queue.encode()
        chunk = broker.core.streams.partition("/", "orders", 1).read_chunk(0)
        assert [bytes(body) for _, body in chunk.records()] == [b"o1"]
    assert not (queues / "%2F").exists() and not (streams / "%2F").exists()
    assert sorted(p.name for p in (queues / "v1").iterdir()) == []
