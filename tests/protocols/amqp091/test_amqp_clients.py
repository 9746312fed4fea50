"""AMQP 0-9-1 with the other clients and across protocols: pika (blocking, asyncio), kombu,
stream queues shared with rstream, durable queues across a restart, and a parser fuzz."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import socket
import threading
from pathlib import Path

import aio_pika
import kombu
import pika
import pytest
from pika.adapters.asyncio_connection import AsyncioConnection
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    RawMessage,
    amqp_decoder,
)

from mainstem import Broker
from mainstem.config import ServerConfig
from mainstem.formats.amqp10 import Message, ULong, encode_message
from mainstem.testing import ThreadedBroker


def test_pika_blocking_confirms_get_and_large_bodies(mainstem_server: ThreadedBroker) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("big", durable=True)
    frame_max = connection._impl.params.frame_max
    bodies = [os.urandom(size) for size in (0, 1, frame_max - 8, frame_max * 3 + 17)]
    for body in bodies:
        channel.basic_publish("", "big", body, pika.BasicProperties(
            delivery_mode=2, headers={"i": 1, "s": "x", "b": True, "l": [1, "a"],
                                      "t": {"n": None}}))
    got = []
    for _ in bodies:
        _, properties, body = channel.basic_get("big", auto_ack=True)
        got.append(body)
    assert got == bodies
    assert properties.headers == {"i": 1, "s": "x", "b": True, "l": [1, "a"],
                                  "t": {"n": None}}
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", "missing", b"x", mandatory=True)
    connection.close()


def test_pika_asyncio_adapter_round_trip(mainstem_server: ThreadedBroker) -> None:
    received: list[bytes] = []

    def on_open(connection: AsyncioConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: pika.channel.Channel) -> None:
        def on_message(ch, method, _properties, body: bytes) -> None:
            received.append(body)
            ch.basic_ack(method.delivery_tag)
            ch.connection.close()

        def on_declared(_frame) -> None:
            channel.basic_consume("pq", on_message)
            channel.basic_publish("", "pq", b"via asyncio adapter")

        channel.queue_declare("pq", callback=on_declared)

    loop = asyncio.new_event_loop()
    connection = AsyncioConnection(pika.URLParameters(mainstem_server.urls["amqp"]),
                                   on_open_callback=on_open, custom_ioloop=loop)
    connection.add_on_close_callback(lambda *_: loop.stop())
    timer = loop.call_later(10, loop.stop)
    loop.run_forever()
    timer.cancel()
    loop.close()
    assert received == [b"via asyncio adapter"]


def test_kombu_publish_and_consume(mainstem_server: ThreadedBroker) -> None:
    exchange = kombu.Exchange("tasks", type="direct", durable=True)
    queue = kombu.Queue("kq", exchange, routing_key="job", durable=True)
    with kombu.Connection(mainstem_server.urls["amqp"], transport="pyamqp") as connection:
        producer = connection.Producer()
        producer.publish({"n": 1}, exchange=exchange, routing_key="job", declare=[queue],
                         serializer="json", delivery_mode=2)
        got: list[dict] = []
        with connection.Consumer(queue, callbacks=[lambda body, msg: (got.append(body),
                                                                      msg.ack())]):
            connection.drain_events(timeout=5)
    assert got == [{"n": 1}]


async def test_stream_queue_shared_with_rstream(broker: Broker) -> None:
    port = broker.ports["stream"]
    async with await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        await channel.declare_queue("events", durable=True,
                                    arguments={"x-queue-type": "stream"})
        await channel.default_exchange.publish(aio_pika.Message(
            b"from-amqp", content_type="text/plain", message_id="m-1",
            headers={"k": "v"}), "events")
        async with Producer("127.0.0.1", port=port, username="guest",
                            password="guest") as producer:
            await producer.send_wait("events", AMQPMessage(body=b"from-stream"))
        received: list[AMQPMessage] = []

        async def on_message(message: AMQPMessage, context) -> None:
            received.append(message)

        async with Consumer("127.0.0.1", port=port, username="guest",
                            password="guest") as consumer:
            await consumer.start()
            await consumer.subscribe("events", on_message, decoder=amqp_decoder,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST))
            for _ in range(100):
                if len(received) == 2:
                    break
                await asyncio.sleep(0.05)
        assert [m.body for m in received] == [b"from-amqp", b"from-stream"]
        assert received[0].properties.content_type == b"text/plain"
        assert received[0].application_properties == {b"k": b"v"}
        await channel.set_qos(prefetch_count=10)
        stream_queue = await channel.declare_queue("events", passive=True)
        got: list[aio_pika.abc.AbstractIncomingMessage] = []
        await stream_queue.consume(got.append, arguments={"x-stream-offset": "first"})
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.05)
        assert [m.body for m in got] == [b"from-amqp", b"from-stream"]
        assert (got[0].content_type, got[0].message_id) == ("text/plain", "m-1")
        assert [m.headers["x-stream-offset"] for m in got] == [0, 1]
        await got[1].ack(multiple=True)
        last: list[aio_pika.abc.AbstractIncomingMessage] = []
        channel2 = await connection.channel()
        await channel2.set_qos(prefetch_count=5)
        queue2 = await channel2.declare_queue("events", passive=True)
        await queue2.consume(last.append, arguments={"x-stream-offset": 1})
        await asyncio.sleep(0.2)
        assert [m.body for m in last] == [b"from-stream"]
        recent: list[aio_pika.abc.AbstractIncomingMessage] = []
        await queue2.consume(recent.append, arguments={"x-stream-offset": "1h"})  # an interval
        await asyncio.sleep(0.2)
        assert [m.body for m in recent] == [b"from-amqp", b"from-stream"]


RAW_BODIES = [b"raw-0", b"", b"\x00Su\xa0\xff truncated", b"\x00" * 3, b"raw-4"]


async def publish_raw_and_amqp(port: int) -> None:
    """Records that are not AMQP 1.0 (rstream's RawMessage), with one that is among them."""
    async with Producer("127.0.0.1", port=port, username="guest",
                        password="guest") as producer:
        await producer.create_stream("raw")
        for body in RAW_BODIES[:3]:
            await producer.send_wait("raw", RawMessage(body))
        await producer.send_wait("raw", AMQPMessage(body=b"amqp-1.0"))
        await producer.send_batch("raw", [RawMessage(body) for body in RAW_BODIES[3:]])
        await producer.send_wait("raw", RawMessage(encode_message(Message(  # not 0-9-1's
            application_properties={"big": ULong(2**64 - 1), "k": "v"}, body=b"ulong"))))


def test_a_stream_queue_delivers_records_that_are_not_amqp_1_0_as_their_bytes(
        mainstem_server: ThreadedBroker) -> None:
    asyncio.run(publish_raw_and_amqp(mainstem_server.ports["stream"]))
    parameters = pika.ConnectionParameters("127.0.0.1", mainstem_server.ports["amqp"])
    got: list[tuple[int, bytes]] = []
    headers: list[dict] = []
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=2)

        def on_message(channel, method, properties, body: bytes) -> None:
            got.append((properties.headers["x-stream-offset"], body))
            headers.append(properties.headers)
            channel.basic_ack(method.delivery_tag)
            if len(got) == 7:
                channel.stop_consuming()

        channel.basic_consume("raw", on_message, arguments={"x-stream-offset": "first"})
        connection.call_later(10, channel.stop_consuming)
        channel.start_consuming()
    expected = [*RAW_BODIES[:3], b"amqp-1.0", *RAW_BODIES[3:], b"ulong"]
    assert got == list(enumerate(expected))
    assert headers[6] == {"k": "v", "x-stream-offset": 6}  # the ulong header is dropped


async def test_stream_queue_needs_prefetch(broker: Broker) -> None:
    async with await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("s", durable=True,
                                            arguments={"x-queue-type": "stream"})
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed, match="prefetch"):
            await queue.consume(lambda m: None)


async def test_durable_queue_survives_restart_transient_does_not(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(data_dir=data) as broker, \
            await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        await channel.declare_exchange("ex", aio_pika.ExchangeType.TOPIC, durable=True)
        durable = await channel.declare_queue("keep", durable=True,
                                              arguments={"x-max-priority": 3})
        await durable.bind("ex", "a.#")
        await channel.declare_queue("gone", durable=False)
        ex = await channel.get_exchange("ex")
        for i in range(5):
            await ex.publish(aio_pika.Message(
                f"p{i}".encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT), "a.b")
        await ex.publish(aio_pika.Message(b"transient"), "a.b")
        acked = await durable.get()
        await acked.ack()
    async with Broker(data_dir=data) as broker, \
            await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("keep", passive=True)
        ex = await channel.get_exchange("ex")
        await ex.publish(aio_pika.Message(b"after"), "a.x")  # the binding came back
        bodies = []
        while (m := await queue.get(no_ack=True, fail=False)) is not None:
            bodies.append(m.body)
        assert bodies == [b"p1", b"p2", b"p3", b"p4", b"after"]
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).declare_queue("gone", passive=True)


def _handshake(port: int) -> socket.socket:
    """A raw client through connection.open, so fuzz bytes reach the frame parser."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    sock.recv(65536)  # start
    start_ok = (b"\x00\x0a\x00\x0b" + b"\x00\x00\x00\x00" + b"\x05PLAIN"
                + len(b"\0guest\0guest").to_bytes(4, "big") + b"\0guest\0guest" + b"\x05en_US")
    sock.sendall(_frame(1, 0, start_ok))
    sock.recv(65536)  # tune
    sock.sendall(_frame(1, 0, b"\x00\x0a\x00\x1f\x07\xff\x00\x02\x00\x00\x00\x00"))
    sock.sendall(_frame(1, 0, b"\x00\x0a\x00\x28\x01/\x00\x00"))
    assert b"\x00\x0a\x00\x29" in sock.recv(65536)  # open-ok
    return sock


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return bytes([kind]) + channel.to_bytes(2, "big") + len(payload).to_bytes(4, "big") + \
        payload + b"\xce"


def test_frame_parser_fuzz_never_harms_the_server(mainstem_server: ThreadedBroker) -> None:
    port = mainstem_server.ports["amqp"]
    rng = random.Random(7)
    seeds = [_frame(1, 1, b"\x00\x14\x00\x0a\x00"), _frame(1, 1, b"\x00\x3c\x00\x28" + b"\x00" * 8),
             _frame(2, 1, b"\x00\x3c\x00\x00" + b"\x00" * 10), _frame(8, 0, b"")]
    for _ in range(60):
        sock = _handshake(port)
        data = bytearray(b"".join(rng.choice(seeds) for _ in range(rng.randint(1, 4))))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = bytearray(rng.randbytes(rng.randint(1, 200)))
        sock.sendall(bytes(data))
        sock.settimeout(0.5)
        with contextlib.suppress(TimeoutError, ConnectionError):
            sock.recv(65536)
        sock.close()
    connection = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    channel = connection.channel()
    channel.queue_declare("alive")
    channel.basic_publish("", "alive", b"still serving")
    assert channel.basic_get("alive", auto_ack=True)[2] == b"still serving"
    connection.close()
    assert threading.active_count() >= 1


def test_wrong_protocol_header_gets_ours_back(mainstem_server: ThreadedBroker) -> None:
    sock = socket.create_connection(("127.0.0.1", mainstem_server.ports["amqp"]), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x08\x00")
    assert sock.recv(8) == b"AMQP\x00\x00\x09\x01"
    assert sock.recv(8) == b""  # and the socket is closed
    sock.close()


def test_channel_and_consumer_limits(tmp_path: Path) -> None:
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        channel_max=3, max_consumers_per_queue=2)
    with ThreadedBroker(tmp_path / "data", config=config) as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.urls["amqp"]))
        channels = [connection.channel() for _ in range(3)]
        with pytest.raises(pika.exceptions.NoFreeChannels):  # tuned down to 3 channels
            connection.channel()
        channels[0].queue_declare("limited")
        for _ in range(2):
            channels[0].basic_consume("limited", lambda *_: None)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channels[0].basic_consume("limited", lambda *_: None)
        assert refused.value.reply_code == 406 and "consumer limit of 2" in \
            refused.value.reply_text
        connection.close()
        sock = _handshake(broker.ports["amqp"])  # a raw client opens a fourth anyway
        for number in (1, 2, 3):
            sock.sendall(_frame(1, number, b"\x00\x14\x00\x0a\x00"))
            assert b"\x00\x14\x00\x0b" in sock.recv(65536)  # open-ok
        sock.sendall(_frame(1, 4, b"\x00\x14\x00\x0a\x00"))
        close = sock.recv(65536)
        assert close[7:11] == b"\x00\x0a\x00\x32"  # connection.close
        assert close[11:13] == (530).to_bytes(2, "big") and b"channel_max" in close
        sock.close()


CONNECTION_CLOSE = b"\x00\x0a\x00\x32"


def _answer_close(sock: socket.socket) -> bytes:
    """Read until the server's connection.close, answer close-ok, and return the close's
    arguments (reply code first) once the server hung up."""
    received = b""
    while CONNECTION_CLOSE not in received:
        chunk = sock.recv(65536)
        assert chunk, f"hung up without connection.close: {received!r}"
        received += chunk
    arguments = received.split(CONNECTION_CLOSE, 1)[1]
    sock.sendall(_frame(1, 0, b"\x00\x0a\x00\x33"))  # close-ok
    with contextlib.suppress(ConnectionError):
        while sock.recv(65536):
            pass
    return arguments


async def test_an_idle_connection_closed_by_an_administrator_hears_why(broker: Broker) -> None:
    """The connection waits for the socket when the close request comes: it gets
    connection.close 320 with the reason, and ends after the client's close-ok."""
    sock = await asyncio.to_thread(_handshake, broker.ports["amqp"])
    with sock:
        (connection,) = broker.connections.list()
        answered = asyncio.ensure_future(asyncio.to_thread(_answer_close, sock))
        await broker.connections.close(connection, "maintenance window")
        arguments = await answered
    assert int.from_bytes(arguments[:2], "big") == 320
    assert b"maintenance window" in arguments
    assert broker.connections.list() == []


async def test_shutdown_closes_an_idle_connection_with_connection_forced(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path / "data") as broker:
        sock = await asyncio.to_thread(_handshake, broker.ports["amqp"])
        answered = asyncio.ensure_future(asyncio.to_thread(_answer_close, sock))
    with sock:
        arguments = await answered
    assert int.from_bytes(arguments[:2], "big") == 320
    assert b"broker forced connection closure with reason 'shutdown'" in arguments
