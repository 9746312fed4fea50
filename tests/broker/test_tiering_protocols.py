"""Tiered reads on every protocol (issue 32): one broker with a directory tier, streams
whose old segments were tiered once, read through each protocol's real client exactly as
local data; then the tier taken away: request/response protocols answer an error (naming
the stream, never a server path: the broker's log has it), push consumers wait and deliver
once it is back, uploads wait and resume."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import bson
import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

from mainstem.broker.layout import storage_name
from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClient, IggyClientError, Polling
from mainstem.client.segment import SegmentClient, SegmentClientError, split_events
from mainstem.log.segment_file import first_chunk_id_of
from mainstem.protocols.iggy.codec import ErrorCode
from mainstem.protocols.segment import codec as sc
from mainstem.testing import ThreadedBroker
from tests.broker.test_tiering import tiered_config

ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
BATCH = 20  # messages per chunk
HISTORY = 1000  # messages in the stream every protocol reads
COLD = 300  # messages in each stream read only once the tier is gone
COLD_STREAMS = ("cold-iggy", "cold-segment", "cold-bson", "cold-amqp", "cold-stream",
                "cold-projection", "cold-upload")


def event(i: int) -> dict[str, object]:
    return {"i": i, "pad": "x" * 380}


def record(i: int) -> bytes:
    """Event i as the log stores it: a BSON document, which every other protocol reads as
    an opaque body (its first byte, the length's low byte, is not an AMQP 1.0 section)."""
    return bson.encode(event(i))


LENGTH = len(record(0))
assert LENGTH % 256 != 0 and all(len(record(i)) == LENGTH for i in (0, HISTORY))


@dataclasses.dataclass
class Tiered:
    broker: ThreadedBroker
    data: Path
    tier: Path

    def connect(self) -> dict[str, object]:
        return {"host": "127.0.0.1", "port": self.broker.ports["stream"],
                "username": "guest", "password": "guest"}

    def firsts(self, stream: str) -> list[int]:
        """The first offsets of the stream's tiered segments (their object names)."""
        directory = storage_name("stream", "/", stream)
        return sorted(first_chunk_id_of(p.name)
                      for p in self.tier.glob(f"{directory}/0/*.segment"))

    def local_firsts(self, stream: str) -> list[int]:
        directory = self.data / "streams" / storage_name("stream", "/", stream) / "0"
        return sorted(int(p.stem) for p in directory.glob("*.segment"))

    @property
    def gone(self) -> Path:
        return self.tier.with_name("tier-away")

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        """The tier directory renamed (an unmounted share) for the block, or until
        `back()`."""
        self.tier.rename(self.gone)
        try:
            yield
        finally:
            self.back()

    def back(self) -> None:
        if self.gone.exists():
            self.gone.rename(self.tier)


async def publish(tiered: Tiered, stream: str, start: int, count: int) -> None:
    """Events [start, start + count) in chunks of BATCH, each confirmed before the next and
    a few ms apart (so chunks have distinct timestamps)."""
    confirmed = 0
    progress = asyncio.Event()

    async def on_confirm(_: object) -> None:
        nonlocal confirmed
        confirmed += 1
        progress.set()

    async with Producer(**tiered.connect()) as producer:  # type: ignore[arg-type]
        await producer.create_stream(stream, arguments=ARGUMENTS, exists_ok=True)
        for first in range(start, start + count, BATCH):
            await producer.send_batch(stream, [record(i) for i in range(first, first + BATCH)],
                                      on_publish_confirm=on_confirm)
            while confirmed < first - start + BATCH:
                progress.clear()
                await asyncio.wait_for(progress.wait(), 30)
            await asyncio.sleep(0.003)


async def wait_tiered(tiered: Tiered, stream: str, local_segments: int = 4) -> None:
    """Until the stream's old segments are in the tier and gone from local disk."""
    for _ in range(1500):
        local = tiered.local_firsts(stream)
        if tiered.firsts(stream) and local and len(local) <= local_segments \
                and tiered.firsts(stream)[-1] < local[0]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{stream} not tiered: {tiered.local_firsts(stream)}")


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    root = tmp_path_factory.mktemp("tiering")
    data, tier = root / "data", root / "tier"
    with ThreadedBroker(data, config=tiered_config(data, tier)) as broker:
        setup = Tiered(broker, data, tier)

        async def fill() -> None:
            await publish(setup, "history", 0, HISTORY)
            for name in COLD_STREAMS:
                await publish(setup, name, 0, COLD)
            for name in ("history", *COLD_STREAMS):
                await wait_tiered(setup, name)
        asyncio.run(fill())
        yield setup


# -- clients ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stream_consumer(tiered: Tiered, stream: str, spec: ConsumerOffsetSpecification
                          ) -> AsyncIterator[asyncio.Queue[tuple[int, bytes]]]:
    """(offset, body) of each message an rstream subscription delivers."""
    got: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

    async def on_message(message: bytes, context: object) -> None:
        got.put_nowait((context.offset, bytes(message)))  # type: ignore[attr-defined]

    async with Consumer(**tiered.connect()) as consumer:  # type: ignore[arg-type]
        await consumer.start()
        await consumer.subscribe(stream, on_message, offset_specification=spec)
        yield got


async def stream_consume(tiered: Tiered, stream: str, spec: ConsumerOffsetSpecification,
                         count: int) -> list[tuple[int, bytes]]:
    async with stream_consumer(tiered, stream, spec) as got:
        return await take(got, count)


@contextlib.asynccontextmanager
async def amqp_consumer(tiered: Tiered, stream: str, offset: object
                        ) -> AsyncIterator[asyncio.Queue[tuple[int, bytes]]]:
    """(x-stream-offset, body) of each delivery from an AMQP 0-9-1 stream queue consumer,
    each acknowledged."""
    got: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
    async with await aio_pika.connect(tiered.broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=100)
        queue = await channel.declare_queue(stream, durable=True,
                                            arguments={"x-queue-type": "stream"}, passive=True)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.put_nowait((message.headers["x-stream-offset"], message.body))  # type: ignore[arg-type]
            await message.ack()

        await queue.consume(on_message, arguments={"x-stream-offset": offset})
        yield got


async def take(queue: asyncio.Queue[tuple[int, bytes]], count: int, timeout: float = 30
               ) -> list[tuple[int, bytes]]:
    return [await asyncio.wait_for(queue.get(), timeout) for _ in range(count)]


async def iggy_client(tiered: Tiered) -> IggyClient:
    client = await IggyClient.connect("127.0.0.1", tiered.broker.ports["iggy"])
    await client.login("guest", "guest")
    return client


async def iggy_poll(client: IggyClient, stream: str, start: int, end: int
                    ) -> list[tuple[int, bytes]]:
    """(offset, payload) of messages [start, end), polled by offset."""
    out: list[tuple[int, bytes]] = []
    while start < end:
        polled = await client.poll("/", stream, 1, Polling.OFFSET, start, count=end - start)
        out += [(m.offset, m.payload) for m in polled.messages]
        start = out[-1][0] + 1
    return out


def expected(start: int, end: int) -> list[tuple[int, bytes]]:
    return [(i, record(i)) for i in range(start, end)]


# -- 1. every protocol reads tiered data as local data ---------------------------------


async def test_stream_subscribe_from_first_and_from_an_offset(tiered: Tiered) -> None:
    got = await stream_consume(tiered, "history",
                               ConsumerOffsetSpecification(OffsetType.FIRST), HISTORY)
    assert got == expected(0, HISTORY)
    middle = tiered.firsts("history")[2] + 1  # inside a tiered segment's first chunk
    got = await stream_consume(tiered, "history",
                               ConsumerOffsetSpecification(OffsetType.OFFSET, middle),
                               HISTORY - middle)
    assert got == expected(middle, HISTORY)


async def test_stream_subscribe_by_timestamp_starts_in_the_tier(tiered: Tiered) -> None:
    """Each chunk has its own millisecond: a timestamp is its chunk's start."""
    at = 3 * BATCH
    assert at < tiered.firsts("history")[-1]  # tiered
    timestamp = await chunk_timestamp(tiered, "history", at)
    got = await stream_consume(tiered, "history",
                               ConsumerOffsetSpecification(OffsetType.TIMESTAMP, timestamp),
                               HISTORY - at)
    assert got == expected(at, HISTORY)


async def chunk_timestamp(tiered: Tiered, stream: str, offset: int) -> int:
    """The store time (ms) of the chunk at `offset`, as the BSON subscription reports it."""
    async with await EventsClient.connect("127.0.0.1", tiered.broker.ports["bson"],
                                          "guest", "guest") as client:
        subscription = await client.subscribe(stream, start_pos=offset)
        return (await subscription.next()).timestamp


async def test_amqp_stream_queue_consumer_from_first_and_from_an_offset(tiered: Tiered) -> None:
    async with amqp_consumer(tiered, "history", "first") as got:
        assert await take(got, HISTORY) == expected(0, HISTORY)
    middle = tiered.firsts("history")[3] + 5
    async with amqp_consumer(tiered, "history", middle) as got:
        assert await take(got, HISTORY - middle) == expected(middle, HISTORY)


async def test_iggy_poll_by_offset(tiered: Tiered) -> None:
    client = await iggy_client(tiered)
    try:
        assert await iggy_poll(client, "history", 0, HISTORY) == expected(0, HISTORY)
        middle = tiered.firsts("history")[4] + 7
        assert await iggy_poll(client, "history", middle, middle + 30) == \
            expected(middle, middle + 30)
    finally:
        await client.close()


async def test_bson_subscription_from_the_start(tiered: Tiered) -> None:
    async with await EventsClient.connect("127.0.0.1", tiered.broker.ports["bson"],
                                          "guest", "guest") as client:
        subscription = await client.subscribe("history", start_pos=0)
        got = []
        for _ in range(HISTORY):
            received = await subscription.next()
            got.append((received.pos, received.event))
            await subscription.ack()
    assert got == [(i, event(i)) for i in range(HISTORY)]


async def test_segment_reads_by_byte_offset(tiered: Tiered) -> None:
    """Event N starts at segment byte N * (8 + LENGTH): every event is LENGTH bytes."""
    client = await SegmentClient.connect("127.0.0.1", tiered.broker.ports["segment"])
    try:
        assert await client.read_events("/history/0") == [record(i) for i in range(HISTORY)]
        middle = tiered.firsts("history")[5] + 3
        got = await client.read("/history/0", middle * (8 + LENGTH) + 8,
                                LENGTH + 2 * (8 + LENGTH))
        assert bytes(got.data[:LENGTH]) == record(middle)  # from mid-frame: the event's data
        assert split_events(bytes(got.data[LENGTH:])) == [record(middle + 1),
                                                          record(middle + 2)]
    finally:
        await client.close()


# -- 2. the tier gone: request/response protocols answer an error, push consumers wait ----


def logged(caplog: pytest.LogCaptureFixture, event: str) -> int:
    return sum(1 for r in caplog.records if r.getMessage() == event)


async def test_iggy_poll_of_a_tiered_range_answers_an_error_then_recovers(
        tiered: Tiered, caplog: pytest.LogCaptureFixture) -> None:
    client = await iggy_client(tiered)
    try:
        local = tiered.local_firsts("cold-iggy")[0]
        with tiered.away():
            with pytest.raises(IggyClientError) as refused:
                await client.poll("/", "cold-iggy", 1, Polling.OFFSET, 0, count=10)
            assert refused.value.code == ErrorCode.CANNOT_READ_MESSAGE
            # Iggy's error reply is a code alone: the broker's log names the tier
            assert any(str(tiered.tier) in getattr(r, "error", "") for r in caplog.records
                       if r.getMessage() == "tier.unavailable")
            # the connection stays, and local data reads as before
            assert await iggy_poll(client, "cold-iggy", local, local + 5) == \
                expected(local, local + 5)
        assert await iggy_poll(client, "cold-iggy", 0, COLD) == expected(0, COLD)
    finally:
        await client.close()


async def test_segment_read_of_a_tiered_range_answers_tier_unavailable_then_recovers(
        tiered: Tiered) -> None:
    client = await SegmentClient.connect("127.0.0.1", tiered.broker.ports["segment"])
    try:
        with tiered.away():
            with pytest.raises(SegmentClientError) as refused:
                await client.read("/cold-segment/0", 0, 1000)
            assert isinstance(refused.value.reply, sc.TierUnavailable)
            # the client hears a generic reason; the tier's path is in the broker's log only
            assert str(tiered.tier) not in refused.value.reply.message
            assert "tier" in refused.value.reply.message
            info = await client.info("/cold-segment/0")  # the connection stays
            assert info.write_offset == COLD * (8 + LENGTH)
        assert await client.read_events("/cold-segment/0") == [record(i) for i in range(COLD)]
    finally:
        await client.close()


async def test_bson_subscription_into_the_tier_ends_with_an_error_frame(
        tiered: Tiered) -> None:
    async with await EventsClient.connect("127.0.0.1", tiered.broker.ports["bson"],
                                          "guest", "guest") as client:
        with tiered.away():
            subscription = await client.subscribe("cold-bson", start_pos=0)
            with pytest.raises(EventsError) as ended:
                await subscription.next()
            assert ended.value.code == "TIER_UNAVAILABLE"
            assert "'cold-bson'" in ended.value.message  # the channel, not the tier's path
            assert str(tiered.tier.parent) not in ended.value.message
            await client.ping()  # the connection stays
        subscription = await client.subscribe("cold-bson", start_pos=0)
        got = [(r.pos, r.event) for r in [await subscription.next() for _ in range(COLD)]]
        assert got == [(i, event(i)) for i in range(COLD)]


PUSH_CONSUMERS = {  # each from the first offset of its own never-read stream
    "amqp": lambda tiered: amqp_consumer(tiered, "cold-amqp", "first"),
    "stream": lambda tiered: stream_consumer(tiered, "cold-stream",
                                             ConsumerOffsetSpecification(OffsetType.FIRST)),
}


@pytest.mark.parametrize("kind", sorted(PUSH_CONSUMERS))
async def test_a_push_consumer_waits_for_the_tier_and_delivers_once(
        tiered: Tiered, caplog: pytest.LogCaptureFixture, kind: str) -> None:
    """An AMQP stream queue consumer and a stream subscriber have no error to receive."""
    caplog.set_level(logging.INFO, logger="mainstem")
    with tiered.away():
        async with PUSH_CONSUMERS[kind](tiered) as got:
            await asyncio.sleep(2.5)  # two retries at least
            assert got.empty()
            assert logged(caplog, "tier.unavailable") == 1  # once per wait
            tiered.back()
            assert await take(got, COLD) == expected(0, COLD)
            await asyncio.sleep(0.3)
            assert got.empty()  # nothing twice
    assert logged(caplog, "tier.available") == 1


async def test_a_projection_waits_for_the_tier_and_folds_every_event_once(
        tiered: Tiered, caplog: pytest.LogCaptureFixture) -> None:
    async with await EventsClient.connect("127.0.0.1", tiered.broker.ports["bson"],
                                          "guest", "guest") as client:

        async def documents() -> list[dict[str, object]]:
            return [document async for document in client.query("cold-docs")]

        with tiered.away():
            await client.create_projection("cold", "cold-projection", "cold-docs", "i",
                                           fold="increment")
            await asyncio.sleep(2.5)
            assert await documents() == []
            assert logged(caplog, "tier.unavailable") == 1
        for _ in range(500):
            folded = await documents()
            if len(folded) == COLD:
                break
            await asyncio.sleep(0.02)
        # "increment" adds i to each document's i: twice would show
        assert sorted(d["i"] for d in folded) == list(range(COLD))


async def test_uploads_wait_while_the_tier_is_gone_and_resume(
        tiered: Tiered, caplog: pytest.LogCaptureFixture) -> None:
    before = tiered.firsts("cold-upload")
    with tiered.away():
        await publish(tiered, "cold-upload", COLD, COLD)
        await asyncio.sleep(0.5)  # rounds every 50 ms
        directory = storage_name("stream", "/", "cold-upload")
        gone = tiered.gone.glob(f"{directory}/0/*.segment")
        assert sorted(first_chunk_id_of(p.name) for p in gone) == before
        assert not tiered.tier.exists()  # not made again on the local disk
        local = tiered.local_firsts("cold-upload")
        assert local[0] > before[-1] and len(local) > 6  # the local segments stay
        assert logged(caplog, "tier.round_failed") >= 1
    await wait_tiered(tiered, "cold-upload")
    assert tiered.firsts("cold-upload")[:len(before)] == before
    assert len(tiered.firsts("cold-upload")) > len(before)
    got = await stream_consume(tiered, "cold-upload",
                               ConsumerOffsetSpecification(OffsetType.FIRST), 2 * COLD)
    assert got == expected(0, 2 * COLD)
