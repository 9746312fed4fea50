"""The segment store protocol against a real mainstem server on loopback, driven by
mainstem's own client (there is none on PyPI)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

from mainstem import Broker
from mainstem.client.segment import SegmentClient, SegmentClientError, split_events
from mainstem.config import ServerConfig
from mainstem.protocols.segment import codec as c

SEGMENT = "%2F/orders/0"
NS_SEGMENT = "/orders/0"


def frames_of(events: list[bytes]) -> bytes:
    return b"".join(c.Event(e).encode() for e in events)




@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(data_dir=tmp_path / "data") as running:
        running.core.segments.tail_wait_s = 0.3
        yield running


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[SegmentClient]:
    connected = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    yield connected
    await connected.close()


async def test_append_and_read_every_offset(client: SegmentClient) -> None:
    await client.create(NS_SEGMENT)
    appender = await client.appender(NS_SEGMENT)
    events = [bytes([i]) * (i + 1) for i in range(20)]
    appender.append_block(events[:10])
    appender.append_block(events[10:])
    assert await appender.flush() == len(frames_of(events))
    whole = await client.read_all(NS_SEGMENT)
    assert whole == frames_of(events)
    for offset in range(len(whole)):  # every offset, mid-event included
        got = await client.read(NS_SEGMENT, offset, 7)
        assert bytes(got.data) == whole[offset:offset + 7]
        assert got.offset == offset
    info = await client.info(NS_SEGMENT)
    assert (info.exists, info.write_offset) == (True, len(whole))


async def test_tail_wait_then_new_data(client: SegmentClient, broker: Broker) -> None:
    await client.create(NS_SEGMENT)
    got = await client.read(NS_SEGMENT, 0)
    assert (got.at_tail, bytes(got.data)) == (True, b"")
    appender = await client.appender(NS_SEGMENT)
    broker.core.segments.tail_wait_s = 5
    reading = asyncio.ensure_future(client.read(NS_SEGMENT, 0))
    await asyncio.sleep(0.1)
    appender.append_block([b"late"])
    got = await reading
    assert split_events(bytes(got.data)) == [b"late"]


async def test_exactly_once_across_reconnect(broker: Broker) -> None:
    port = broker.ports["segment"]
    first = await SegmentClient.connect("127.0.0.1", port)
    await first.create(NS_SEGMENT)
    appender = await first.appender(NS_SEGMENT)
    appender.append_block([b"a1", b"a2"])
    await appender.flush()
    appender.append_block([b"a3"])
    await first.close()  # a3 may or may not be stored
    second = await SegmentClient.connect("127.0.0.1", port)
    appender.client = second
    level = await appender.setup()
    appender.offset = max(appender.offset, level)
    # resend everything from the start: the server drops what it already has
    appender.unacked.clear()
    at = 0
    for event in (b"a1", b"a2", b"a3"):
        at += 8 + len(event)
        appender.unacked.append((at, event))
    await appender.resend()
    appender.append_block([b"a4"])
    await appender.flush()
    assert await second.read_events(NS_SEGMENT) == [b"a1", b"a2", b"a3", b"a4"]
    await second.close()


async def test_partial_messages_split_at_every_boundary(client: SegmentClient) -> None:
    await client.create(NS_SEGMENT)
    appender = await client.appender(NS_SEGMENT)
    events = [b"x" * 5, b"yy", b"z" * 9]
    body = frames_of(events)
    cid = appender.connection_id
    for cut in range(1, len(body)):
        # split the block's event bytes in two partial pieces around a second block
        start = appender.offset
        first, rest = body[:cut], body[cut:]
        out = c.BeginAppendBlock(cid, start, len(first)).encode()
        frames = []
        pos = 0
        for event in events:
            frame = c.Event(event).encode()
            lo, hi = pos, pos + len(frame)
            if hi <= cut:
                frames.append(("a", frame))
            elif lo >= cut:
                frames.append(("b", frame))
            else:
                frames.append(("a", c.Partial(c.PARTIAL_BEGIN, frame[:cut - lo]).encode()))
                frames.append(("b", c.Partial(c.PARTIAL_END, frame[cut - lo:]).encode()))
            pos = hi
        out += b"".join(f for k, f in frames if k == "a")
        out += c.EndAppendBlock(cid, start + len(first), len(first)).encode()
        out += c.BeginAppendBlock(cid, start + len(first), len(rest)).encode()
        out += b"".join(f for k, f in frames if k == "b")
        out += c.EndAppendBlock(cid, start + len(body), len(rest)).encode()
        client.writer.write(out)
        appender.offset = start + len(body)
        assert await appender.flush() == appender.offset
    assert await client.read_events(NS_SEGMENT) == events * (len(body) - 1)


async def test_several_appenders_on_one_connection(client: SegmentClient) -> None:
    await client.create("/s1/0")
    await client.create("/s2/0")
    one = await client.appender("/s1/0")
    two = await client.appender("/s2/0")
    for i in range(5):
        one.append_block([b"one%d" % i])
        two.append_block([b"two%d" % i])
    await one.flush()
    await two.flush()
    assert await client.read_events("/s1/0") == [b"one%d" % i for i in range(5)]
    assert await client.read_events("/s2/0") == [b"two%d" % i for i in range(5)]


async def test_seal_truncate_delete(client: SegmentClient) -> None:
    await client.create(NS_SEGMENT)
    with pytest.raises(SegmentClientError, match="SegmentAlreadyExists"):
        await client.create(NS_SEGMENT)
    appender = await client.appender(NS_SEGMENT)
    appender.append_block([b"e1", b"e2"])
    await appender.flush()
    await client.truncate(NS_SEGMENT, 10)
    with pytest.raises(SegmentClientError, match="SegmentIsTruncated"):
        await client.read(NS_SEGMENT, 0)
    got = await client.read(NS_SEGMENT, 10)
    assert split_events(bytes(got.data)) == [b"e2"]
    await client.seal(NS_SEGMENT)
    got = await client.read(NS_SEGMENT, 20)
    assert (got.at_tail, got.end_of_segment, bytes(got.data)) == (True, True, b"")
    with pytest.raises(SegmentClientError, match="SegmentIsSealed"):
        await client.appender(NS_SEGMENT)
    await client.delete(NS_SEGMENT)
    with pytest.raises(SegmentClientError, match="NoSuchSegment"):
        await client.read(NS_SEGMENT, 0)


async def test_authentication_required(broker: Broker) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["segment"])
    writer.write(c.ReadSegment(NS_SEGMENT, 0, 10).encode())
    reply = c.Decoder().feed(await reader.read(1000))
    assert isinstance(reply[0][0], c.AuthenticationFailed)
    writer.close()
    with pytest.raises(SegmentClientError, match="AuthenticationFailed"):
        await SegmentClient.connect("127.0.0.1", broker.ports["segment"], "guest", "wrong")


async def test_bad_input_is_an_error_not_a_crash(broker: Broker, client: SegmentClient) -> None:
    bad = [c.HEADER.pack(77, 0), c.HEADER.pack(9, 1 << 30), c.HEADER.pack(9, 2) + b"\x00\x05",
           c.Event(b"outside").encode()]
    for frame in bad:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["segment"])
        writer.write(c.Authenticate("guest", "guest").encode() + frame)
        replies = c.Decoder().feed(await asyncio.wait_for(reader.read(10000), 5))
        assert isinstance(replies[-1][0], c.ProtocolError), replies
        writer.close()
    await client.create(NS_SEGMENT)  # another connection is unaffected


async def test_rstream_reads_a_segments_events(client: SegmentClient, broker: Broker) -> None:
    await client.create("/shared/0")
    appender = await client.appender("/shared/0")
    events = [b"ev%d" % i for i in range(10)]
    appender.append_block(events)
    await appender.flush()
    received: list[bytes] = []
    done = asyncio.Event()

    async def on_message(message: bytes, context: object) -> None:
        received.append(bytes(message))
        if len(received) == len(events):
            done.set()

    async with Consumer("127.0.0.1", port=broker.ports["stream"], username="guest",
                        password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe("shared", on_message,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 10)
    assert received == events


async def test_block_length_mismatch_closes_only_that_connection(
        client: SegmentClient, broker: Broker) -> None:
    await client.create(NS_SEGMENT)
    other = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    appender = await other.appender(NS_SEGMENT)
    cid = appender.connection_id
    body = frames_of([b"abc"])
    other.writer.write(c.BeginAppendBlock(cid, 0, len(body)).encode() + body
                       + c.EndAppendBlock(cid, len(body) + 1, len(body) + 1).encode())
    with pytest.raises(SegmentClientError, match=r"ProtocolError.*disagrees"):
        await other.expect(c.DataAppended)
    await other.close()
    good = await client.appender(NS_SEGMENT)
    good.append_block([b"fine"])
    await good.flush()
    assert await client.read_events(NS_SEGMENT) == [b"fine"]  # nothing of "abc"


async def test_permissions_per_namespace(client: SegmentClient, broker: Broker) -> None:
    await client.create(NS_SEGMENT)
    auth = broker.core.auth
    auth.add_user("reader", "pw")
    auth.set_permissions("reader", "/", configure="", write="", read=".*")
    limited = await SegmentClient.connect("127.0.0.1", broker.ports["segment"], "reader", "pw")
    with pytest.raises(SegmentClientError, match=r"AuthenticationFailed.*write access"):
        await limited.appender(NS_SEGMENT)
    with pytest.raises(SegmentClientError, match=r"AuthenticationFailed.*configure access"):
        await limited.seal(NS_SEGMENT)
    got = await limited.read(NS_SEGMENT, 0)
    assert got.at_tail
    await limited.close()


async def test_large_reply_split_into_partials_and_idle_peer_dropped(tmp_path: Path) -> None:
    config = dataclasses.replace(
        ServerConfig.defaults(data_dir=tmp_path / "data", host="127.0.0.1", port=0),
        max_frame_size=64 * 1024, heartbeat_s=1)
    async with Broker(config=config) as running:
        client = await SegmentClient.connect("127.0.0.1", running.ports["segment"])
        await client.create(NS_SEGMENT)
        appender = await client.appender(NS_SEGMENT)
        events = [bytes([i]) * 50_000 for i in range(6)]
        appender.append_block(events[:1])  # frames up to the limit: one event per block
        for event in events[1:]:
            appender.append_block([event])
        await appender.flush()
        got = await client.read(NS_SEGMENT, 0, 1 << 20)  # > the frame limit: sent as partials
        assert split_events(bytes(got.data)) == events
        reader, writer = await asyncio.open_connection("127.0.0.1", running.ports["segment"])
        writer.write(c.Authenticate("guest", "guest").encode())
        started = asyncio.get_running_loop().time()
        while await asyncio.wait_for(reader.read(1000), 5):
            pass  # KeepAlives arrive until the server drops the silent peer
        assert asyncio.get_running_loop().time() - started < 4
        writer.close()
        await client.close()


async def test_fuzz_over_the_socket(broker: Broker, client: SegmentClient) -> None:
    rng = random.Random(8)
    port = broker.ports["segment"]
    types = sorted(c.MESSAGES)
    for _ in range(60):
        body = rng.randbytes(rng.randrange(40))
        frame = c.HEADER.pack(rng.choice(types), len(body)) + body
        if rng.random() < 0.3:
            frame = rng.randbytes(rng.randrange(1, 30))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(c.Authenticate("guest", "guest").encode() + frame)
        writer.write_eof()
        with contextlib.suppress(ConnectionError):
            while await asyncio.wait_for(reader.read(65536), 5):
                pass  # the server answers and closes, or waits for the rest, then sees EOF
        writer.close()
    await client.create(NS_SEGMENT)  # the server and other connections are unaffected
    assert (await client.info(NS_SEGMENT)).exists


async def test_an_idle_connection_does_not_hold_up_shutdown(tmp_path: Path) -> None:
    broker = Broker(data_dir=tmp_path / "data", shutdown_grace_s=10)
    await broker.start()
    idle = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await broker.stop()
    assert loop.time() - started < 5  # not the grace period: the connection ends at once
    await idle.close()
