"""Damaged chunks on every protocol (issue 40): a broker wrote streams whose old segments
went to a tier and stopped; four bytes were flipped in a chunk of each stream, on local
disk or in the tier; a second broker, which never wrote those chunks, serves them. Each
reader gets the events before the damage once, then its protocol's error; nothing of the
damaged chunk is delivered; the broker logs the chunk once, counts it, and the health
check and the stream's API row show the partition damaged."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import aiohttp
import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType
from rstream.utils import OnClosedErrorInfo

from mainstem.broker.layout import storage_name
from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClientError, Polling
from mainstem.client.segment import SegmentClient, SegmentClientError, split_events
from mainstem.formats.chunk import parse_header
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.guard import GUARD
from mainstem.log.segment_file import FILE_HEADER_SIZE, first_chunk_id_of
from mainstem.protocols.iggy.codec import ErrorCode
from mainstem.protocols.segment import codec as sc
from mainstem.testing import ThreadedBroker
from tests.broker.test_tiering import tiered_config
from tests.broker.test_tiering_protocols import (
    LENGTH,
    Tiered,
    event,
    expected,
    iggy_client,
    publish,
    record,
    wait_tiered,
)

COUNT = 300  # events in each stream: 15 chunks of 20
PROTOCOLS = ("stream", "amqp", "iggy", "segment", "bson")
WHERE = ("local", "tiered")
WAIT_S = 30  # for a client to be told (generous: a loaded machine)


@dataclasses.dataclass
class Damaged(Tiered):
    chunks: dict[str, int] = dataclasses.field(default_factory=dict)  # stream -> chunk id


def chunk_starts(path: Path) -> list[tuple[int, int, int]]:
    """(file position, chunk id, data start) of each chunk of a segment file."""
    raw = path.read_bytes()
    pos, found = FILE_HEADER_SIZE, []
    while pos < len(raw):
        header = parse_header(raw[pos:pos + HEADER_SIZE])
        found.append((pos, header.chunk_id, header.data_start))
        pos += header.size + GUARD.size
    return found


def flip(path: Path, at: int) -> None:
    """Four bytes inverted at `at`, as a bad sector or a bit rot would leave them."""
    with path.open("r+b") as file:
        file.seek(at)
        data = file.read(4)
        file.seek(at)
        file.write(bytes(b ^ 0xFF for b in data))


def damage_first_chunk(path: Path) -> int:
    """Damage the data of the segment's first chunk (not its last: recovery rescans a
    segment's last chunk at start and would cut it); its chunk id."""
    chunks = chunk_starts(path)
    assert len(chunks) >= 2 and chunks[0][1] == first_chunk_id_of(path.name)
    pos, chunk_id, data_start = chunks[0]
    flip(path, pos + data_start + 100)
    return chunk_id


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Damaged]:
    root = tmp_path_factory.mktemp("damage")
    data, tier = root / "data", root / "tier"
    names = [f"{protocol}-{where}" for protocol in PROTOCOLS for where in WHERE]
    with ThreadedBroker(data, config=tiered_config(data, tier)) as writer:
        setup = Damaged(writer, data, tier)

        async def fill() -> None:
            for name in names:
                await publish(setup, name, 0, COUNT)
            for name in names:
                await wait_tiered(setup, name)
        asyncio.run(fill())
    for name in names:
        directory = storage_name("stream", "/", name)
        if name.endswith("-local"):
            local = sorted((data / "streams" / directory / "0").glob("*.segment"))
            target = local[0]  # sealed: more segments follow it
            assert len(local) >= 2
        else:
            target = sorted(tier.glob(f"{directory}/0/*.segment"))[1]
        setup.chunks[name] = damage_first_chunk(target)
        assert setup.chunks[name] > 0  # events before it to deliver
    shutil.rmtree(data / "tier-cache", ignore_errors=True)  # every tiered read comes from the tier
    # the scrub off: what is tested here is that readers find the damage themselves
    config = tiered_config(data, tier)
    config = dataclasses.replace(config, storage=dataclasses.replace(config.storage,
                                                                     scrub_rate=0))
    with ThreadedBroker(data, config=config) as reader:
        setup.broker = reader
        yield setup


# -- what the broker reports -----------------------------------------------------------


async def admin_get(damaged: Damaged, path: str) -> tuple[int, str]:
    auth = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    url = f"http://127.0.0.1:{damaged.broker.ports['admin']}{path}"
    async with aiohttp.ClientSession(headers=auth) as http, http.get(url) as response:
        return response.status, await response.text()


async def damaged_counter(damaged: Damaged) -> int:
    _, text = await admin_get(damaged, "/metrics")
    [line] = [line for line in text.splitlines()
              if line.startswith("mainstem_chunks_damaged_total ")]
    return int(float(line.split()[1]))


@contextlib.asynccontextmanager
async def reported_once(damaged: Damaged, caplog: pytest.LogCaptureFixture, name: str,
                        where: str) -> AsyncIterator[None]:
    """The block reads the damaged chunk of stream `name`: afterwards it was logged once
    (stream, partition, chunk id, where), counted once, and shows in the health check and
    the stream's row."""
    caplog.set_level(logging.INFO, logger="mainstem")
    before = await damaged_counter(damaged)
    yield
    chunk_id = damaged.chunks[name]
    logged = [r for r in caplog.records if r.getMessage() == "chunk.damaged"]
    assert [(r.stream, r.partition, r.chunk_id, r.where) for r in logged] == [  # type: ignore[attr-defined]
        (name, 0, chunk_id, where)]
    assert await damaged_counter(damaged) == before + 1
    status, health = await admin_get(damaged, "/api/health/checks/stream-damage")
    assert status == 503
    assert f'"stream": "{name}", "partition": 0, "chunks": [{{"chunk_id": {chunk_id}, ' \
           f'"where": "{where}"}}]' in health
    status, row = await admin_get(damaged, f"/api/streams/%2F/{name}")
    assert status == 200 and '"damaged_chunks": 1' in row


# -- each protocol's reader ------------------------------------------------------------


@pytest.mark.parametrize("where", WHERE)
async def test_a_stream_subscriber_gets_the_events_before_then_a_metadata_update(
        damaged: Damaged, caplog: pytest.LogCaptureFixture, where: str) -> None:
    name = f"stream-{where}"
    got: list[tuple[int, bytes]] = []
    closed: asyncio.Queue[OnClosedErrorInfo] = asyncio.Queue()

    async def on_message(message: bytes, context: object) -> None:
        got.append((context.offset, bytes(message)))  # type: ignore[attr-defined]

    async def on_close(info: OnClosedErrorInfo) -> None:
        closed.put_nowait(info)

    async with reported_once(damaged, caplog, name, where), Consumer(
            **damaged.connect(), on_close_handler=on_close) as consumer:  # type: ignore[arg-type]
        await consumer.start()
        await consumer.subscribe(name, on_message, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST)))
        info = await asyncio.wait_for(closed.get(), WAIT_S)
        await asyncio.sleep(0.2)  # nothing more follows
    assert (info.reason, info.streams) == ("Metadata Update", [name])
    assert got == expected(0, damaged.chunks[name])


@pytest.mark.parametrize("where", WHERE)
async def test_an_amqp_stream_queue_consumer_is_cancelled_after_the_events_before(
        damaged: Damaged, caplog: pytest.LogCaptureFixture, where: str) -> None:
    name = f"amqp-{where}"
    got: list[tuple[int, bytes]] = []
    cancelled: asyncio.Queue[str] = asyncio.Queue()
    async with reported_once(damaged, caplog, name, where), \
            await aio_pika.connect(damaged.broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        (await channel.get_underlay_channel()).on_consumer_cancel_callbacks.add(
            lambda frame: cancelled.put_nowait(frame.consumer_tag))
        await channel.set_qos(prefetch_count=100)
        queue = await channel.declare_queue(name, durable=True, passive=True,
                                            arguments={"x-queue-type": "stream"})

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append((message.headers["x-stream-offset"], message.body))  # type: ignore[arg-type]
            await message.ack()

        tag = await queue.consume(on_message, arguments={"x-stream-offset": "first"})
        assert await asyncio.wait_for(cancelled.get(), WAIT_S) == tag
    assert got == expected(0, damaged.chunks[name])


@pytest.mark.parametrize("where", WHERE)
async def test_an_iggy_poll_answers_invalid_message_checksum_and_the_connection_stays(
        damaged: Damaged, caplog: pytest.LogCaptureFixture, where: str) -> None:
    name = f"iggy-{where}"
    client = await iggy_client(damaged)
    got: list[tuple[int, bytes]] = []
    try:
        async with reported_once(damaged, caplog, name, where):
            with pytest.raises(IggyClientError) as refused:
                for _ in range(COUNT):  # bounded: each poll returns at least one message
                    polled = await client.poll("/", name, 1, Polling.OFFSET, len(got),
                                               count=50)
                    got += [(m.offset, m.payload) for m in polled.messages]
            assert refused.value.code == ErrorCode.INVALID_MESSAGE_CHECKSUM
        assert got == expected(0, damaged.chunks[name])
        await client.ping()  # the connection stays
    finally:
        await client.close()


@pytest.mark.parametrize("where", WHERE)
async def test_a_segment_read_answers_data_damaged_and_the_connection_stays(
        damaged: Damaged, caplog: pytest.LogCaptureFixture, where: str) -> None:
    name = f"segment-{where}"
    client = await SegmentClient.connect("127.0.0.1", damaged.broker.ports["segment"])
    data = b""
    try:
        async with reported_once(damaged, caplog, name, where):
            with pytest.raises(SegmentClientError) as refused:
                for _ in range(COUNT):  # bounded: each read returns at least one event
                    data += bytes((await client.read(f"/{name}/0", len(data), 50_000)).data)
            assert isinstance(refused.value.reply, sc.DataDamaged)
        assert split_events(data) == [record(i) for i in range(damaged.chunks[name])]
        assert (await client.info(f"/{name}/0")).write_offset == COUNT * (8 + LENGTH)
    finally:
        await client.close()


@pytest.mark.parametrize("where", WHERE)
async def test_a_bson_subscription_ends_with_a_data_damaged_subresponse(
        damaged: Damaged, caplog: pytest.LogCaptureFixture, where: str) -> None:
    name = f"bson-{where}"
    got: list[tuple[int, object]] = []
    async with await EventsClient.connect("127.0.0.1", damaged.broker.ports["bson"],
                                          "guest", "guest") as client:
        async with reported_once(damaged, caplog, name, where):
            subscription = await client.subscribe(name, start_pos=0)
            with pytest.raises(EventsError) as ended:
                for _ in range(COUNT):
                    received = await subscription.next(timeout=WAIT_S)
                    got.append((received.pos, received.event))
                    await subscription.ack()
            assert ended.value.code == "DATA_DAMAGED"
            assert str(damaged.data) not in ended.value.message
        await client.ping()  # the connection stays
    assert got == [(i, event(i)) for i in range(damaged.chunks[name])]

