"""A write the file system refuses is never acknowledged, on every protocol.

The server runs with a file-size limit (RLIMIT_FSIZE) and the disk alarm off: the kernel
refuses the segment write that crosses it (EFBIG, the same OSError path as ENOSPC, and
what beats the alarm's check of the free space). What was acknowledged before must all be
there after a SIGKILL and a restart; what was refused is answered with an error that
names no server path. (The stream protocol's publisher without a name: its conformance
tests.)
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from rstream import ConfirmationStatus, Producer, RawMessage

from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClient, IggyClientError, Message, Polling
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.protocols.iggy.codec import ErrorCode
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.protocols.segment import codec as c
from tests.support.server_process import ServerProcess, kill, start_server, started_ports

FILE_LIMIT = 1_000_000  # bytes per file: a segment file stops growing here


class Server(ServerProcess):
    """A `mainstem serve` whose files cannot grow past FILE_LIMIT until it restarts."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path, preexec_fn=_limit_file_size)

    def restart_without_limit(self) -> None:
        kill(self.process)
        self.process = start_server(self.data_dir, self.log_path)
        self.ports = started_ports(self.process, self.log_path)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path) as running:
        yield running


# -- segment protocol ---------------------------------------------------------------

SEGMENT = "/full/0"
EVENTS = [b"%05d" % i + b"e" * 1019 for i in range(4000)]  # 40 blocks of 100 x 1 KiB


async def test_a_refused_segment_append_fails_the_writer_and_nothing_past_it_is_acked(
        server: Server) -> None:
    """40 blocks of 100 x 1 KiB events against a 1 MB file: the appends that cross it are
    refused. Then one small block that would fit (sent once the refusal happened) must not
    be stored past the gap: the connection ends with StorageFailed, DataAppended never
    runs ahead of what the segment holds, and after a SIGKILL, a restart and a resend
    from the stored level, the segment holds every event once, in order."""
    client = await SegmentClient.connect("127.0.0.1", server.ports["segment"])
    await client.create(SEGMENT)
    appender = await client.appender(SEGMENT)
    for start in range(0, len(EVENTS) - 100, 100):
        appender.append_block(EVENTS[start:start + 100])
    with pytest.raises(SegmentClientError) as refused:
        await appender.flush()
    appender.append_block(EVENTS[-100:-99])  # small: would fit under the limit
    await asyncio.sleep(0.2)
    acked = client.acks.get(appender.connection_id, 0)
    await client.close()

    assert isinstance(refused.value.reply, c.StorageFailed)
    assert "could not store" in refused.value.reply.message
    assert str(server.data_dir) not in refused.value.reply.message
    checker = await SegmentClient.connect("127.0.0.1", server.ports["segment"])
    stored = (await checker.info(SEGMENT)).write_offset
    await checker.close()
    assert 0 < acked <= stored < sum(map(c.event_length, EVENTS))

    server.restart_without_limit()
    client = await SegmentClient.connect("127.0.0.1", server.ports["segment"])
    kept = await client.read_events(SEGMENT)
    assert kept == EVENTS[:len(kept)] and sum(map(c.event_length, kept)) >= acked
    appender.client = client
    assert await appender.setup() == sum(map(c.event_length, kept))
    await appender.resend()
    appender.append_block(EVENTS[-99:])
    await appender.flush()
    assert await client.read_events(SEGMENT) == EVENTS
    await client.close()


# -- Iggy ---------------------------------------------------------------------------


async def test_a_refused_iggy_send_gets_its_error_code_and_the_connection_stays(
        server: Server) -> None:
    """Sends of 100 x 1 KiB until the file refuses one: that send answers
    CANNOT_APPEND_MESSAGE (as under the disk alarm) and the connection stays: a small send
    that fits is stored on it. After a restart every confirmed message is there, in order,
    and none of the refused ones."""
    client = await IggyClient.connect("127.0.0.1", server.ports["iggy"])
    await client.login("guest", "guest")
    await client.create_stream("full", 1)
    await client.create_topic(1, "t", partitions=1, topic_id=1)
    confirmed: list[bytes] = []
    with pytest.raises(IggyClientError) as refused:
        for batch in range(20):
            payloads = [b"%02d-%03d" % (batch, i) + b"m" * 1018 for i in range(100)]
            await client.send(1, 1, [Message(p) for p in payloads], partition=1)
            confirmed += payloads
    assert refused.value.code == ErrorCode.CANNOT_APPEND_MESSAGE
    await client.send(1, 1, [Message(b"small")], partition=1)  # the same connection
    confirmed.append(b"small")
    await client.close()

    server.restart_without_limit()
    client = await IggyClient.connect("127.0.0.1", server.ports["iggy"])
    await client.login("guest", "guest")
    polled = await client.poll(1, 1, 1, Polling.OFFSET, 0, count=10_000)
    assert [m.payload for m in polled.messages] == confirmed
    await client.close()


# -- BSON events --------------------------------------------------------------------


async def test_refused_bson_publishes_answer_storage_failed_without_a_path(
        server: Server) -> None:
    """Pipelined PUBLISHes of 1 KiB events until the file refuses them: STORAGE_FAILED,
    whose message names the cause, not the server's files; the connection stays. After a
    restart every event acknowledged is there, in order."""
    client = await EventsClient.connect("127.0.0.1", server.ports["bson"], "guest", "guest")
    await client.create_channel("full")
    acked: list[int] = []
    with pytest.raises(EventsError) as refused:
        for batch in range(20):
            events = [{"n": batch * 100 + i, "pad": "p" * 1000} for i in range(100)]
            await client.publish_many("full", events)
            acked += [event["n"] for event in events]
    refused_batch = {batch * 100 + i for i in range(100)}  # part of it may be stored
    assert refused.value.code == "STORAGE_FAILED"
    assert "could not store" in str(refused.value)
    assert str(server.data_dir) not in str(refused.value) and "/" not in str(refused.value)
    await client.publish("full", {"n": -1})  # the same connection takes what fits
    acked.append(-1)
    await client.close()

    server.restart_without_limit()
    async with await EventsClient.connect("127.0.0.1", server.ports["bson"], "guest",
                                          "guest") as client:
        subscription = await client.subscribe("full", start_pos=0)
        stored = [(await subscription.next()).event["n"]]
        while stored[-1] != -1 and len(stored) < 2100:
            stored.append((await subscription.next()).event["n"])
    assert [n for n in stored if n not in refused_batch] == acked


# -- AMQP 0-9-1 ---------------------------------------------------------------------


def test_refused_amqp_publishes_are_nacked_and_the_channel_stays(server: Server) -> None:
    """Persistent 1 KiB publishes with confirms into a durable queue until its journal
    file refuses them: basic.nack, and the channel and connection stay. After a restart
    the queue holds every confirmed message, in order."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", server.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest")))
    channel = connection.channel()
    channel.queue_declare("full", durable=True)
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    confirmed: list[bytes] = []
    with pytest.raises(pika.exceptions.NackError):
        for n in range(2000):
            body = b"%04d" % n + b"q" * 1020
            channel.basic_publish("", "full", body, persistent)
            confirmed.append(body)
    # The channel goes on, and what was refused is not in the queue (a nack: not stored).
    assert channel.queue_declare("full", passive=True).method.message_count == len(confirmed)
    connection.close()

    server.restart_without_limit()
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", server.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest")))
    channel = connection.channel()
    stored = []
    while (got := channel.basic_get("full", auto_ack=True))[0] is not None:
        stored.append(got[2])
    connection.close()
    assert stored == confirmed


# -- RabbitMQ Stream ----------------------------------------------------------------


async def test_a_deduplicating_publisher_is_refused_after_a_failed_write_until_declared_again(
        server: Server) -> None:
    """A named publisher's frame the file system refuses gets PublishError; its next
    publish (small enough to fit) is refused too: stored, its id would make a resend of
    the refused ids look like duplicates, confirmed but never stored. Declared again (a
    new connection), it goes on from what is stored."""
    statuses: dict[int, int] = {}
    wanted = {"count": 0}
    answered = asyncio.Event()

    async def on_status(status: ConfirmationStatus) -> None:
        statuses[status.message_id] = 0 if status.is_confirmed else status.response_code
        if len(statuses) >= wanted["count"]:
            answered.set()

    async def publish(producer: Producer, bodies: list[bytes]) -> None:
        wanted["count"] = len(statuses) + len(bodies)
        answered.clear()
        await producer.send_batch("dedup", [RawMessage(body) for body in bodies],
                                  publisher_name="p", on_publish_confirm=on_status)
        await asyncio.wait_for(answered.wait(), 10)

    port = server.ports["stream"]
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream("dedup")
        for _ in range(3):  # 3 frames of 100 x 4 KB: the third crosses the limit
            await publish(producer, [b"x" * 4096] * 100)
        await publish(producer, [b"small"])
    codes = [statuses[publishing_id] for publishing_id in sorted(statuses)]
    assert codes == [0] * 200 + [ResponseCode.STREAM_NOT_AVAILABLE] * 101
    statuses.clear()
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await publish(producer, [b"again"])
    assert statuses == {201: 0}
