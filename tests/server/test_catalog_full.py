"""A catalog write the disk refuses is answered with the protocol's error, on every
protocol, and the connection stays: the same request succeeds on it once space returns.

The server runs with the disk alarm off; the test lowers its file-size limit
(RLIMIT_FSIZE, through prlimit) to 0, so every write to a file fails (EFBIG, which
SQLite reports as an I/O error, as it reports ENOSPC as a full disk), and raises it again
for "space returns". Each request changes metadata only: no log file is written.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker
from rstream import Producer
from rstream import exceptions as stream_errors

from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClient, IggyClientError
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.protocols.iggy.codec import ErrorCode
from mainstem.protocols.segment import codec as sc
from tests.support.server_process import ServerProcess

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
UNLIMITED = resource.RLIM_INFINITY


class Server(ServerProcess):
    @contextmanager
    def disk_full(self) -> Iterator[None]:
        """No file of the server grows or is written until the block ends."""
        resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (0, UNLIMITED))
        try:
            yield
        finally:
            resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (UNLIMITED, UNLIMITED))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path) as running:
        yield running


async def test_stream_create_stream_answers_internal_error(server: Server) -> None:
    async with Producer("127.0.0.1", server.ports["stream"], username="guest",
                        password="guest") as producer:
        with server.disk_full(), pytest.raises(stream_errors.InternalError):
            await producer.create_stream("s")
        await producer.create_stream("s")  # the same connection, space back
        assert await producer.stream_exists("s")


def test_amqp_exchange_declare_closes_the_channel_not_the_connection(server: Server) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", server.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest")))
    try:
        channel = connection.channel()
        with server.disk_full(), pytest.raises(ChannelClosedByBroker) as refused:
            channel.exchange_declare("x", "direct", durable=True)
        assert refused.value.reply_code == 406
        assert "could not store" in refused.value.reply_text
        assert connection.is_open
        connection.channel().exchange_declare("x", "direct", durable=True)
    finally:
        connection.close()


async def test_http_answers_507(server: Server) -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{server.ports['admin']}",
                                     headers=ADMIN) as http:
        with server.disk_full():
            async with http.put("/api/vhosts/team") as response:
                assert response.status == 507
                assert (await response.json())["error"] == "insufficient_storage"
        async with http.put("/api/vhosts/team") as response:
            assert response.status == 201


async def test_iggy_create_topic_answers_an_error_and_the_connection_stays(
        server: Server) -> None:
    async with await IggyClient.connect("127.0.0.1", server.ports["iggy"]) as client:
        await client.login("guest", "guest")
        await client.create_stream("s", 1)
        with server.disk_full():
            for create in (client.create_stream("s2", 2), client.create_topic(1, "t", 1, 1)):
                with pytest.raises(IggyClientError) as refused:
                    await create
                assert refused.value.code == ErrorCode.ERROR
        await client.create_stream("s2", 2)
        await client.create_topic(1, "t", 1, 1)
        assert await client.topic_partitions(1, 1) == 1


async def test_bson_create_channel_answers_storage_failed(server: Server) -> None:
    async with await EventsClient.connect("127.0.0.1", server.ports["bson"], "guest",
                                          "guest") as client:
        with server.disk_full(), pytest.raises(EventsError) as refused:
            await client.create_channel("c")
        assert refused.value.code == "STORAGE_FAILED"
        assert "could not store" in str(refused.value)
        assert await client.list_channels() == []
        assert not await client.create_channel("c")
        assert await client.list_channels() == ["c"]


async def test_segment_create_answers_storage_failed_and_the_connection_stays(
        server: Server) -> None:
    client = await SegmentClient.connect("127.0.0.1", server.ports["segment"])
    try:
        with server.disk_full(), pytest.raises(SegmentClientError) as refused:
            await client.create("/orders/0")
        assert isinstance(refused.value.reply, sc.StorageFailed)
        assert "could not store" in refused.value.reply.message
        assert not (await client.info("/orders/0")).exists
        await client.create("/orders/0")
        assert (await client.info("/orders/0")).exists
    finally:
        await client.close()
