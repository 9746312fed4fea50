"""One real client per listener, behind one small interface, for the campaign: the fuzz
tests' canaries and the soak script's SIGKILL rounds.

A driver lives across server restarts: `connect(port)` for each server run, `publish`
returns once the server confirmed every body, `read_all` is everything stored in the
driver's destination in order, `resume` finishes what a kill interrupted where the protocol
can (the segment protocol's deduplicated resend) and returns the bodies it confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import aiohttp
import pika
from iggy_py import IggyClient as PyIggy
from iggy_py import PollingStrategy, SendMessage
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from mainstem.client.events import EventsClient
from mainstem.client.segment import Appender, SegmentClient, SegmentClientError
from mainstem.protocols.segment import codec as segment_codec

HOST = "127.0.0.1"
QUIET_S = 0.5  # a read is complete once nothing new arrived for this long


class Driver(Protocol):
    listener: str
    max_batch: int  # bodies per `publish` for which waiting on confirms stays cheap

    async def connect(self, port: int) -> None: ...
    async def publish(self, bodies: list[bytes]) -> None: ...
    async def read_all(self) -> list[bytes]: ...
    async def resume(self) -> list[bytes]: ...
    async def close(self) -> None: ...


class StreamDriver:
    """rstream publishing with confirms into a stream; a consumer from the first offset."""

    listener = "stream"
    max_batch = 1_000

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self.producer: Producer | None = None

    def _options(self) -> dict[str, object]:
        return {"host": HOST, "port": self.port, "username": "guest", "password": "guest"}

    async def connect(self, port: int) -> None:
        self.port = port
        self.producer = Producer(**self._options())
        await self.producer.start()
        await self.producer.create_stream(self.name, exists_ok=True)

    async def publish(self, bodies: list[bytes]) -> None:
        assert self.producer is not None
        answered: dict[int, bool] = {}
        arrived = asyncio.Event()

        def on_confirm(status: ConfirmationStatus) -> None:
            answered[status.message_id] = status.is_confirmed
            arrived.set()

        ids = await self.producer.send_batch(self.name, [AMQPMessage(body=b) for b in bodies],
                                             on_publish_confirm=on_confirm)
        while not all(i in answered for i in ids):  # confirms may precede send_batch's return
            arrived.clear()
            await arrived.wait()
        if not all(answered[i] for i in ids):
            raise RuntimeError(f"{self.name}: the server refused a publish")

    async def read_all(self) -> list[bytes]:
        bodies: list[bytes] = []
        arrived = asyncio.Event()

        async def on_message(message: AMQPMessage, _context: object) -> None:
            bodies.append(bytes(message.body))
            arrived.set()

        async with Consumer(**self._options()) as consumer:
            await consumer.start()
            await consumer.subscribe(self.name, on_message, decoder=amqp_decoder,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST, None))
            await _until_quiet(arrived)
        return bodies

    async def resume(self) -> list[bytes]:
        return []

    async def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.close(), 5)


class AmqpDriver:
    """pika with publisher confirms into a durable classic queue of persistent messages.

    Reading drains the queue, so the driver keeps what it drained: `read_all` is what was
    ever stored, in order."""

    listener = "amqp"
    max_batch = 1  # a blocking channel waits for each confirm in turn

    def __init__(self, name: str) -> None:
        self.name = name
        self.drained: list[bytes] = []
        self.connection: pika.BlockingConnection | None = None
        self.channel = None

    def _connect(self, port: int) -> None:
        self.connection = pika.BlockingConnection(pika.ConnectionParameters(HOST, port))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self.channel.queue_declare(self.name, durable=True)

    async def connect(self, port: int) -> None:
        await asyncio.to_thread(self._connect, port)

    def _publish(self, bodies: list[bytes]) -> None:
        persistent = pika.BasicProperties(delivery_mode=2)
        for body in bodies:
            self.channel.basic_publish("", self.name, body, persistent)  # returns once confirmed

    async def publish(self, bodies: list[bytes]) -> None:
        await asyncio.to_thread(self._publish, bodies)

    def _drain(self) -> None:
        while (got := self.channel.basic_get(self.name, auto_ack=True))[0] is not None:
            self.drained.append(got[2])

    async def read_all(self) -> list[bytes]:
        await asyncio.to_thread(self._drain)
        return list(self.drained)

    async def resume(self) -> list[bytes]:
        return []

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(connection.close)


class IggyDriver:
    """iggy-py: a stream with one single-partition topic; a send returns once stored."""

    listener = "iggy"
    max_batch = 1_000

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: PyIggy | None = None

    async def connect(self, port: int) -> None:
        self.client = PyIggy(f"{HOST}:{port}")
        await self.client.connect()
        await self.client.login_user("guest", "guest")
        try:
            await self.client.get_stream(self.name)
        except RuntimeError:  # StreamNameNotFound: the first run
            await self.client.create_stream(self.name)
            await self.client.create_topic(self.name, "t", partitions_count=1)

    async def publish(self, bodies: list[bytes]) -> None:
        assert self.client is not None
        await self.client.send_messages(self.name, "t", 1,
                                        [SendMessage(body.decode()) for body in bodies])

    async def read_all(self) -> list[bytes]:
        assert self.client is not None
        stored: list[bytes] = []
        while True:
            polled = await self.client.poll_messages(
                self.name, "t", 1, PollingStrategy.Offset(value=len(stored)), 1000, False)
            if not polled:
                return stored
            stored.extend(message.payload() for message in polled)

    async def resume(self) -> list[bytes]:
        return []

    async def close(self) -> None:
        self.client = None  # iggy-py closes its connection when the client is dropped


class EventsDriver:
    """mainstem's BSON events client: pipelined PUBLISHes, each acknowledged once stored."""

    listener = "bson"
    max_batch = 1_000

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: EventsClient | None = None

    async def connect(self, port: int) -> None:
        self.client = await EventsClient.connect(HOST, port, "guest", "guest")
        await self.client.create_channel(self.name)

    async def publish(self, bodies: list[bytes]) -> None:
        assert self.client is not None
        await self.client.publish_many(self.name, [{"b": body.decode()} for body in bodies])

    async def read_all(self) -> list[bytes]:
        assert self.client is not None
        subscription = await self.client.subscribe(self.name, start_pos=0)
        stored: list[bytes] = []
        with contextlib.suppress(TimeoutError):
            while True:
                stored.append((await subscription.next(timeout=QUIET_S)).event["b"].encode())
                if len(stored) % 500 == 0:
                    await subscription.ack()
        await subscription.unsubscribe()
        return stored

    async def resume(self) -> list[bytes]:
        return []

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


class SegmentDriver:
    """mainstem's segment client: one writer whose unacked events are resent, exactly once,
    on the next server run."""

    listener = "segment"
    max_batch = 1_000

    def __init__(self, name: str) -> None:
        self.segment = f"/{name}/0"
        self.client: SegmentClient | None = None
        self.appender: Appender | None = None

    async def connect(self, port: int) -> None:
        self.client = await SegmentClient.connect(HOST, port)
        with contextlib.suppress(SegmentClientError):  # it exists after a restart
            await self.client.create(self.segment)
        if self.appender is None:
            self.appender = await self.client.appender(self.segment)

    async def publish(self, bodies: list[bytes]) -> None:
        assert self.appender is not None
        self.appender.append_block(bodies)
        await self.appender.flush()

    async def resume(self) -> list[bytes]:
        """Resend what the last server run did not acknowledge; return it once stored."""
        assert self.appender is not None and self.client is not None
        self.appender.client = self.client
        await self.appender.setup()
        pending = [event for _, event in self.appender.unacked]
        await self.appender.resend()
        await self.appender.flush()
        return pending

    async def read_all(self) -> list[bytes]:
        assert self.client is not None
        if (await self.client.info(self.segment)).write_offset == 0:
            return []  # a read of an empty segment waits for data
        data = await self.client.read_all(self.segment)
        events, position = [], 0
        while position < len(data):
            _, length = segment_codec.HEADER.unpack_from(data, position)
            events.append(data[position + 8:position + 8 + length])
            position += 8 + length
        return events

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.close()


class AdminDriver:
    """The management API: a 'publish' creates virtual hosts, reading lists them."""

    listener = "admin"
    max_batch = 1_000

    def __init__(self, name: str) -> None:
        self.prefix = name
        self.http: aiohttp.ClientSession | None = None

    async def connect(self, port: int) -> None:
        self.http = aiohttp.ClientSession(
            f"http://{HOST}:{port}",
            headers={"Authorization": aiohttp.encode_basic_auth("guest", "guest")})

    async def publish(self, bodies: list[bytes]) -> None:
        assert self.http is not None
        for body in bodies:
            async with self.http.put(f"/api/vhosts/{self.prefix}-{body.decode()}",
                                     json={}) as response:
                response.raise_for_status()

    async def read_all(self) -> list[bytes]:
        assert self.http is not None
        async with self.http.get("/api/vhosts") as response:
            response.raise_for_status()
            names = [vhost["name"] for vhost in await response.json()]
        start = len(self.prefix) + 1
        return [name[start:].encode() for name in names if name.startswith(self.prefix + "-")]

    async def resume(self) -> list[bytes]:
        return []

    async def close(self) -> None:
        http, self.http = self.http, None
        if http is not None:
            await http.close()


DRIVERS: dict[str, type[Driver]] = {
    driver.listener: driver
    for driver in (StreamDriver, AmqpDriver, IggyDriver, EventsDriver, SegmentDriver,
                   AdminDriver)
}


async def canary(listener: str, port: int, tag: str) -> None:
    """A real client of `listener` publishes `tag` and reads it back, or this raises."""
    driver = DRIVERS[listener](f"canary-{tag}")
    try:
        await asyncio.wait_for(driver.connect(port), 10)
        body = tag.encode()
        await asyncio.wait_for(driver.publish([body]), 10)
        stored = await asyncio.wait_for(driver.read_all(), 10)
        assert stored.count(body) == 1, f"{listener} canary {tag!r} read back {stored!r}"
    finally:
        await driver.close()


async def _until_quiet(arrived: asyncio.Event) -> None:
    for _ in range(600):  # bounded
        arrived.clear()
        try:
            await asyncio.wait_for(arrived.wait(), QUIET_S)
        except TimeoutError:
            return
