"""Idle and stalled connections cost the broker little memory: a connection's receive
buffer takes memory only as bytes arrive, and a stream consumer that stops reading holds a
piece of one chunk, not its backlog; what it held returns when it closes (the broker runs
as a real process; its RSS is read from /proc)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import TypeVar

import pytest

from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient, Polling
from mainstem.client.segment import SegmentClient
from mainstem.client.stream import StreamClient
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.iggy.codec import CONSUMER, Consumer, encode_request
from mainstem.protocols.iggy.commands import LoginUser, Message, PollMessages
from mainstem.protocols.segment import codec as segment_codec
from tests.support.amqp_raw import RawClient
from tests.support.server_process import kill, rss_bytes, start_server, started_ports
from tests.support.stream_stall import publish, stalled_consumer

CONNECTIONS = 60  # per protocol whose connections receive into buffers of their own
T = TypeVar("T")
PROTOCOLS = ("stream", "bson", "segment")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Popen, Path]]:
    log = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log, "--workers", "0")
    try:
        yield process, log
    finally:
        kill(process)


def open_sockets(pid: int) -> int:
    return sum(1 for fd in Path(f"/proc/{pid}/fd").iterdir()
               if fd.readlink().name.startswith("socket:"))


def test_idle_connections_do_not_each_hold_a_receive_buffer(
        server: tuple[Popen, Path]) -> None:
    process, log = server
    ports = started_ports(process, log)
    sockets: list[socket.socket] = []
    try:
        sockets.append(socket.create_connection(("127.0.0.1", ports["stream"])))  # warm-up
        time.sleep(0.5)
        before, sockets_before = rss_bytes(process.pid), open_sockets(process.pid)
        for protocol in PROTOCOLS:
            sockets += [socket.create_connection(("127.0.0.1", ports[protocol]))
                        for _ in range(CONNECTIONS)]
        deadline = time.monotonic() + 20
        while open_sockets(process.pid) < sockets_before + CONNECTIONS * len(PROTOCOLS):
            assert time.monotonic() < deadline, "the broker did not accept every connection"
            time.sleep(0.05)
        time.sleep(0.5)  # each handler has started and taken its socket over
        per_connection = (rss_bytes(process.pid) - before) / (CONNECTIONS * len(PROTOCOLS))
        print(f"broker RSS per idle connection: {per_connection / 1024:.0f} KiB")
        # A receive buffer is 1 MiB: had each connection taken one, this would be ≥ 1 MiB.
        assert per_connection < 128 * 1024
    finally:
        for sock in sockets:
            sock.close()


STALLED = 40  # stream consumers that subscribe with credit and never read
STALLED_LIMIT = 64 * 1024  # broker memory each may hold


def settled_rss(pid: int, timeout: float = 30.0) -> int:
    """The broker's RSS once it stops changing by more than 1 MiB in half a second."""
    deadline = time.monotonic() + timeout
    last = rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) < 1 << 20:
            return now
        last = now
    return last


def rss_per_connection(pid: int, open_one: Callable[[], T], count: int, what: str
                       ) -> tuple[float, list[T]]:
    """The broker's RSS taken by each of `count` connections `open_one` opens (after one
    more, opened first, that pays first-use costs), and every connection opened."""
    opened = [open_one()]
    before = settled_rss(pid)
    opened += [open_one() for _ in range(count)]
    after = settled_rss(pid)
    per_connection = (after - before) / count
    print(f"broker RSS per {what}: {per_connection / 1024:.1f} KiB "
          f"({before >> 20} -> {after >> 20} MiB)")
    return per_connection, opened


def test_stalled_stream_consumers_hold_a_small_bounded_buffer_each(
        server: tuple[Popen, Path]) -> None:
    process, log = server
    port = started_ports(process, log)["stream"]
    # 12 MiB in chunks read whole (40 KiB), then 12 MiB in chunks sent by sendfile (400 KiB)
    publish(port, "stalled", 300, 10, 4096)
    publish(port, "stalled", 30, 100, 4096)
    per_connection, sockets = rss_per_connection(
        process.pid, lambda: stalled_consumer(port, "stalled"), STALLED, "stalled consumer")
    try:
        stalled = rss_bytes(process.pid)
        assert per_connection <= STALLED_LIMIT
        time.sleep(2)  # still stalled: nothing more is taken on
        assert rss_bytes(process.pid) - stalled < STALLED * STALLED_LIMIT
    finally:
        for sock in sockets:
            sock.close()
    # The broker lets them go and serves a consumer that reads.
    with StreamClient.connect(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/") as client:
        end = client.offsets("stalled").end
        records = sum(chunk.header.num_records for chunk in client.chunks("stalled", 0, end))
    assert records == end == 300 * 10 + 30 * 100


BSON_STALLED_LIMIT = 1 << 20  # the chunk being read (here 400 KB) and 64 KiB of frames


def test_stalled_bson_subscribers_hold_their_chunk_not_megabytes_of_frames(
        server: tuple[Popen, Path]) -> None:
    """A subscriber that stops reading holds the chunk its subscription is at and 64 KiB
    of RECEV frames; it used to hold 4 MiB of frames (4,296 KiB per connection)."""
    process, log = server
    port = started_ports(process, log)["bson"]

    async def run() -> float:
        publisher = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
        await publisher.create_channel("stalled")
        for i in range(60):  # 24 MB in 400 KB chunks
            await publisher.publish_many("stalled", [{"i": i, "pad": "x" * 4000}] * 100)
        clients = [publisher]

        async def stall() -> None:
            client = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
            clients.append(client)
            await client.subscribe("stalled", start_pos=0)
            client._writer.transport.pause_reading()  # reads nothing more

        try:
            await stall()  # warm-up
            before = await asyncio.to_thread(settled_rss, process.pid)
            for _ in range(STALLED):
                await stall()
            stalled = await asyncio.to_thread(settled_rss, process.pid)
        finally:
            for client in clients:
                client._writer.transport.abort()
        return (stalled - before) / STALLED

    per_connection = asyncio.run(run())
    print(f"broker RSS per stalled BSON subscriber: {per_connection / 1024:.1f} KiB")
    assert per_connection <= BSON_STALLED_LIMIT


AMQP_STALLED = 20
# A window of the chunk (64 KiB), the output queued before the connection stops (up to its
# 128 KiB write limit), and a record per unacknowledged delivery (~120 B: the kernel's socket
# buffers take ~600 of these 4 KiB messages before the broker stops sending). Measured
# exactly (tracemalloc), that is ~289 KiB; the RSS reads 83-307 KiB, as freed heap is reused.
AMQP_STALLED_LIMIT = 320 * 1024


def publish_to_stream_queue(port: int, queue: str, batches: int, size: int) -> None:
    """Batches of 500 publishes sent at once with confirms: AMQP's chunks of megabytes."""
    client = RawClient(port)
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue=queue, durable=True,
                                  arguments={"x-queue-type": "stream"}))
    client.expect(m.QueueDeclareOk, 1)
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk, 1)
    sent = 0
    for batch in range(batches):
        client.sock.sendall(b"".join(client.publish(1, "", queue, bytes([batch]) * size)
                                     for _ in range(500)))
        sent += 500
        while (ack := client.expect(m.BasicAck, 1)).delivery_tag < sent:
            assert isinstance(ack, m.BasicAck)
    client.close()


def stalled_amqp_consumer(port: int, queue: str) -> RawClient:
    """A consumer of the stream queue from its start, with a 4 KiB receive buffer and
    prefetch for every message, that is never read again."""
    client = RawClient(port, receive_buffer=4096)
    client.open_channel(1)
    client.send(1, m.BasicQos(prefetch_count=60_000))
    client.expect(m.BasicQosOk, 1)
    client.send(1, m.BasicConsume(queue=queue, arguments={"x-stream-offset": "first"}))
    client.expect(m.BasicConsumeOk, 1)
    return client


def test_stalled_amqp_stream_queue_consumers_hold_a_window_of_the_chunk(
        server: tuple[Popen, Path]) -> None:
    """An AMQP consumer of a stream queue that stops reading holds a window of the chunk it
    is in, not the chunk: AMQP-written chunks run to megabytes (it held ~2.7 MB before)."""
    process, log = server
    port = started_ports(process, log)["amqp"]
    publish_to_stream_queue(port, "stalled-sq", 6, 4096)  # 12 MB in chunks of ~2 MB
    per_connection, clients = rss_per_connection(
        process.pid, lambda: stalled_amqp_consumer(port, "stalled-sq"), AMQP_STALLED,
        "stalled AMQP stream-queue consumer")
    try:
        assert per_connection <= AMQP_STALLED_LIMIT
    finally:
        for client in clients:
            client.close()
    # A consumer that reads gets every message.
    reader = RawClient(port)
    reader.open_channel(1)
    reader.send(1, m.BasicQos(prefetch_count=5_000))
    reader.send(1, m.BasicConsume(queue="stalled-sq", no_ack=False,
                                  arguments={"x-stream-offset": "first"}))
    received = 0
    deadline = time.monotonic() + 60
    while received < 3000 and time.monotonic() < deadline:
        frames = reader.read(timeout=1.0)
        delivered = [method for _, method in frames if isinstance(method, m.BasicDeliver)]
        received += len(delivered)
        if delivered:
            reader.send(1, m.BasicAck(delivery_tag=delivered[-1].delivery_tag, multiple=True))
    reader.close()
    assert received == 3000


def rss_held_by_requests(pid: int, port: int, requests: bytes) -> int:
    """The broker's RSS taken while a connection with a 4 KiB receive buffer that sent
    `requests` at once reads none of the answers."""
    before = settled_rss(pid)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(requests)
        return settled_rss(pid) - before


PIPELINED_POLLS = 100  # each asks for all 16 MB: an Iggy poll answers at most 1 MiB
IGGY_STALLED_LIMIT = 4 << 20  # one poll's answer and what waits with it


def test_pipelined_iggy_polls_of_a_client_that_stops_reading_wait_for_its_socket(
        server: tuple[Popen, Path]) -> None:
    """A client that sends a hundred polls at once and reads nothing holds about one
    poll's answer in the broker; every answer used to be made and held (~800 MB here)."""
    process, log = server
    port = started_ports(process, log)["iggy"]

    async def fill() -> None:
        async with await IggyClient.connect("127.0.0.1", port) as client:
            await client.login("guest", "guest")
            await client.create_stream("piped", 1)
            await client.create_topic(1, "t", partitions=1)
            for batch in range(64):  # 16 MB
                await client.send(1, 1, [Message(bytes([batch]) * 16384)] * 16, partition=1)

    asyncio.run(fill())
    poll = PollMessages(Consumer(CONSUMER, 1), 1, 1, 1, Polling.OFFSET, 0, 1_000_000, False)
    login = LoginUser("guest", "guest")
    held = rss_held_by_requests(process.pid, port, encode_request(login.code, login.encode())
                                + encode_request(poll.code, poll.encode()) * PIPELINED_POLLS)
    print(f"broker RSS held by {PIPELINED_POLLS} pipelined polls: {held >> 10} KiB")
    assert held <= IGGY_STALLED_LIMIT


# One read's answer (at most 8 MiB) in the few copies it goes through: read, framed, cut
# into partial frames, the transport's buffer (the allocator keeps their pages).
SEGMENT_STALLED_LIMIT = 48 << 20


def test_pipelined_segment_reads_of_a_client_that_stops_reading_wait_for_its_socket(
        server: tuple[Popen, Path]) -> None:
    """A client that sends a hundred 8 MiB reads at once and reads nothing holds one answer
    in the broker, however many it asked for; every answer used to be made and held
    (~800 MB here)."""
    process, log = server
    port = started_ports(process, log)["segment"]

    async def fill() -> None:
        client = await SegmentClient.connect("127.0.0.1", port)
        await client.create("/piped/0")
        appender = await client.appender("/piped/0")
        for batch in range(64):  # 16 MB
            appender.append_block([bytes([batch]) * 16384] * 16)
        await appender.flush()
        await client.close()

    asyncio.run(fill())
    held = rss_held_by_requests(process.pid, port,
                                segment_codec.Authenticate("guest", "guest").encode()
                                + segment_codec.ReadSegment("/piped/0", 0, 8 << 20).encode()
                                * PIPELINED_POLLS)
    print(f"broker RSS held by {PIPELINED_POLLS} pipelined segment reads: {held >> 10} KiB")
    assert held <= SEGMENT_STALLED_LIMIT
