"""Partitions are capped per stream on every protocol, checked before anything is allocated,
and a data directory with many partitions starts under a low descriptor limit, because log
files are opened on demand (an LRU of descriptors), not held open per segment."""

from __future__ import annotations

import asyncio
import dataclasses
import resource
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from iggy_py import IggyClient as PyIggy
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
from mainstem.broker.core import BrokerCore
from mainstem.broker.settings import CoreSettings
from mainstem.client.iggy import IggyClient, IggyClientError
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.config import ServerConfig, StorageConfig
from mainstem.protocols.iggy.codec import ErrorCode
from tests.support.server_process import kill, start_server, started_ports

REPLY_S = 5  # before the cap, these requests hung the broker's event loop
ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, int]]:
    """A broker in its own process, so that a hung event loop fails the test, not pytest."""
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    try:
        yield started_ports(process, log_path)
    finally:
        kill(process)


async def test_segment_create_beyond_the_cap_is_refused_at_once(
        server: dict[str, int]) -> None:
    client = await SegmentClient.connect("127.0.0.1", server["segment"])
    try:
        for name in ("/x/99999999999", "/wide/12000", "/edge/1000"):
            with pytest.raises(SegmentClientError, match="at most 1000 partitions"):
                await asyncio.wait_for(client.create(name), REPLY_S)
        await client.create("/fine/3")
        assert (await client.info("/fine/3")).exists
    finally:
        await client.close()


async def test_http_put_stream_beyond_the_cap_is_a_400(server: dict[str, int]) -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{server['admin']}",
                                     headers=ADMIN) as http:
        for partitions in (99_999_999, 1001):
            async with asyncio.timeout(REPLY_S):
                response = await http.put("/api/streams/%2F/x", json={"partitions": partitions})
            assert response.status == 400
            assert "at most 1000 partitions" in (await response.json())["reason"]
        async with http.get("/api/streams/%2F/x") as response:
            assert response.status == 404


@pytest.fixture
async def capped_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        storage=StorageConfig(max_partitions=8))
    async with Broker(config=config) as broker:
        yield broker


async def test_iggy_partitions_are_capped_per_topic(capped_broker: Broker) -> None:
    port = capped_broker.ports["iggy"]
    py_client = PyIggy(f"127.0.0.1:{port}")
    await py_client.connect()
    await py_client.login_user("guest", "guest")
    await py_client.create_stream("shop", 1)
    with pytest.raises(RuntimeError):
        await py_client.create_topic("shop", "wide", partitions_count=9)
    await py_client.create_topic("shop", "orders", partitions_count=5)
    async with await IggyClient.connect("127.0.0.1", port) as own:
        await own.login("guest", "guest")
        # within Iggy's per-request bound of 1000, but 5 + 4 is over the total of 8
        with pytest.raises(IggyClientError) as refused:
            await own.create_partitions("shop", "orders", 4)
        assert refused.value.code == ErrorCode.TOO_MANY_PARTITIONS
        await own.create_partitions("shop", "orders", 3)
        assert await own.topic_partitions("shop", "orders") == 8
    assert capped_broker.core.streams.find("shop", "wide") is None


STREAMS, PARTITIONS = 3, 100  # 300 partitions: 600 files, more than the limit below
NOFILE = 256


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


async def test_many_partitions_start_and_work_under_a_low_descriptor_limit(
        tmp_path: Path) -> None:
    data_dir, log_path = tmp_path / "data", tmp_path / "server.log"
    core = await BrokerCore.open(data_dir, CoreSettings())
    for s in range(STREAMS):
        core.streams.create("/", f"wide{s}", PARTITIONS)
    await core.close()
    # spread over every stream: more files than descriptors are kept, whatever the order
    names = [f"wide{s}-{i}" for s in range(STREAMS) for i in range(PARTITIONS)][::7]
    for start in (1, 2):  # a first start, and a restart after a graceful stop
        process = start_server(data_dir, log_path, preexec_fn=_low_descriptor_limit)
        try:
            port = started_ports(process, log_path)["stream"]
            await _publish_to_each(port, names)
            read = names[::5]
            assert await _bodies(port, read, start) == {
                name: [name.encode()] * start for name in read}
        finally:
            kill(process, signal.SIGTERM)


async def _publish_to_each(port: int, names: list[str]) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        for name in names:
            await producer.send_wait(name, AMQPMessage(body=name.encode()))


async def _bodies(port: int, streams: list[str], count: int) -> dict[str, list[bytes]]:
    """Every stream's first `count` message bodies, read by one consumer."""
    received: dict[str, list[bytes]] = {stream: [] for stream in streams}
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        received[context.stream].append(bytes(message.body))
        if all(len(bodies) >= count for bodies in received.values()):
            done.set()

    async with Consumer("127.0.0.1", port=port, username="guest", password="guest") as consumer:
        await consumer.start()
        for stream in streams:
            await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), REPLY_S)
    return received
