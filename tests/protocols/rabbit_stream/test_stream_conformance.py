"""Stream-protocol behaviour that clients depend on, as RabbitMQ shows it: frame size,
how Osiris cuts chunks, deduplication, connection properties, advertised host,
server-side filtering and publish errors. Real clients (rstream) where one exposes the
behaviour, raw frames where none does."""

from __future__ import annotations

import asyncio
import resource
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetType,
    Producer,
    RawMessage,
    amqp_decoder,
)
from rstream.client import ClientPool
from rstream.encoding import decode_frame

from mainstem import Broker
from mainstem.cli import build_parser
from mainstem.config import load_config
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.protocols.rabbit_stream.constants import RESPONSE_FLAG, Key, ResponseCode
from mainstem.protocols.rabbit_stream.constants import OffsetType as WireOffset
from mainstem.testing import ThreadedBroker
from tests.protocols.rabbit_stream.test_stream_robustness import HEADER, RawClient, response_code
from tests.support.server_process import (
    MAINSTEM,
    clean_env,
    kill,
    loopback_listener_flags,
    start_server,
    started_ports,
    wait_for_event,
)

DELIVER_CHUNK = struct.Struct(">BBBHIqQQ")  # subscription, magic, type, entries, records,
# timestamp, epoch, chunk id


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedBroker]:
    """One broker on its own thread: rstream talks to it, and so can blocking raw sockets."""
    with ThreadedBroker(tmp_path_factory.mktemp("conformance") / "data") as running:
        yield running


def connect_args(broker: Broker | ThreadedBroker) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}


async def send_one_frame(broker: ThreadedBroker, stream: str, messages: list,
                         publisher: str | None = None) -> set[int]:
    """`messages` in one Publish frame (rstream's send_batch does not split a batch);
    returns the publishing ids confirmed, once every message was."""
    confirmed: set[int] = set()
    done = asyncio.Event()

    async def on_confirm(confirmation) -> None:
        confirmed.add(confirmation.message_id)
        if len(confirmed) == len(ids):
            done.set()

    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream(stream, exists_ok=True)
        ids = set(await producer.send_batch(stream, messages, publisher_name=publisher,
                                            on_publish_confirm=on_confirm))
        await asyncio.wait_for(done.wait(), 30)
    return confirmed


async def consume(broker: ThreadedBroker, stream: str, spec: OffsetType, until: int,
                  settle: float = 0.0) -> list[tuple[int, bytes]]:
    """(offset, body) read from `spec` until `until` messages arrived (and, with `settle`,
    that many seconds passed without more)."""
    received: list[tuple[int, bytes]] = []
    enough = asyncio.Event()

    async def on_message(body: bytes, context) -> None:
        received.append((context.offset, bytes(body)))
        if len(received) >= until:
            enough.set()

    async with Consumer(**connect_args(broker)) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message,
                                 offset_specification=ConsumerOffsetSpecification(spec))
        await asyncio.wait_for(enough.wait(), 30)
        await asyncio.sleep(settle)
    return received


# -- item 9: large Publish frames ------------------------------------------------


async def test_a_frame_of_more_messages_than_a_chunk_can_count_is_stored(broker: ThreadedBroker
                                                                         ) -> None:
    """70,000 one-byte messages fit one 1 MiB frame but not one chunk's 16-bit count."""
    count = 70_000
    await send_one_frame(broker, "many", [RawMessage(b"m") for _ in range(count)])
    got = await consume(broker, "many", OffsetType.FIRST, count)
    assert [offset for offset, _ in got] == list(range(count))


async def test_a_batch_over_frame_max_in_one_frame_is_refused_as_rabbitmq_4_does(
        broker: ThreadedBroker, caplog: pytest.LogCaptureFixture) -> None:
    """rstream's send_batch puts 100,000 messages in one 1.5 MB Publish frame. RabbitMQ
    3.10 took it; 4.x closes with FRAME_TOO_LARGE, and so does mainstem: nothing is
    stored, every message is reported unconfirmed, other connections go on."""
    failed: list[int] = []
    every_one = asyncio.Event()

    async def on_confirm(confirmation) -> None:
        assert not confirmation.is_confirmed
        failed.append(confirmation.message_id)
        if len(failed) == 100_000:
            every_one.set()

    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream("too-large", exists_ok=True)
        await producer.send_batch("too-large", [RawMessage(b"abc") for _ in range(100_000)],
                                  on_publish_confirm=on_confirm)
        await asyncio.wait_for(every_one.wait(), 30)
    assert sorted(failed) == list(range(1, 100_001))
    assert "frame of 1500009 bytes exceeds the limit of 1048572" in caplog.text  # its Close
    await send_one_frame(broker, "too-large", [RawMessage(b"fits")])
    assert await consume(broker, "too-large", OffsetType.FIRST, 1, settle=0.3) == [
        (0, b"fits")]


def test_frame_max_bounds_the_whole_frame_as_rabbitmq_does(broker: ThreadedBroker) -> None:
    """RabbitMQ closes with FRAME_TOO_LARGE when size prefix + frame exceeds frame_max."""
    client = RawClient(broker.ports["stream"]).open(frame_max=4096)
    client.send(HEADER.pack(4096 - 3, Key.PUBLISH, 1))  # 4,097 bytes with its prefix
    assert response_code(client.frame_with_key(Key.CLOSE)) == ResponseCode.FRAME_TOO_LARGE
    assert client.is_closed_by_server()


# -- item 10: chunks the way Osiris cuts them -----------------------------------


async def test_last_delivers_the_last_chunk_of_a_large_frame(broker: ThreadedBroker) -> None:
    count = 4_999
    await send_one_frame(broker, "big", [RawMessage(b"%d" % i) for i in range(count)])
    got = await consume(broker, "big", OffsetType.LAST, 1, settle=0.5)
    first = got[0][0]
    assert 0 < first < count  # the frame was cut: `last` starts inside it
    assert [offset for offset, _ in got] == list(range(first, count))


def test_the_first_chunk_of_a_stream_carries_epoch_1(broker: ThreadedBroker) -> None:
    client = RawClient(broker.ports["stream"]).open()
    client.send(encode(f.CreateStream(5, "epoch", {})))
    client.frame_with_key(Key.CREATE_STREAM | RESPONSE_FLAG)
    client.send(encode(f.DeclarePublisher(6, 1, "", "epoch")))
    client.frame_with_key(Key.DECLARE_PUBLISHER | RESPONSE_FLAG)
    client.send(encode(f.Publish(1, [1], [memoryview(b"\0\0\0\2hi")], 1, 2)))
    client.frame_with_key(Key.PUBLISH_CONFIRM)
    client.send(encode(f.Subscribe(7, 1, "epoch", f.OffsetSpec(WireOffset.FIRST), 10)))
    body = client.frame_with_key(Key.DELIVER)
    _, magic, _, entries, records, _, epoch, chunk_id = DELIVER_CHUNK.unpack_from(body)
    assert (magic, entries, records, chunk_id) == (0x50, 1, 1, 0)
    assert epoch == 1


async def test_a_deliver_frame_carries_the_trailer_length_osiris_writes(
        broker: ThreadedBroker) -> None:
    """rstream's test_deliver: RabbitMQ's chunk for publisher `test-reference` declares a
    24-byte trailer, one Osiris tracking entry (type, id size, id, sequence u64)."""
    await send_one_frame(broker, "trailer", [RawMessage(b"one"), RawMessage(b"two")],
                         publisher="test-reference")
    client = RawClient(broker.ports["stream"]).open()
    client.send(encode(f.Subscribe(7, 1, "trailer", f.OffsetSpec(WireOffset.FIRST), 10)))
    deliver = decode_frame(struct.pack(">HH", Key.DELIVER, 1)
                           + client.frame_with_key(Key.DELIVER))  # rstream's decoder
    client.close()
    assert (deliver.num_entries, deliver.num_records, deliver.chunk_first_offset) == (2, 2, 0)
    assert deliver.trailer_length == 2 + len("test-reference") + 8
    assert deliver._reserved == 0  # bloom filter size and reserved bytes


# -- item 11: deduplication inside one frame ------------------------------------


async def test_duplicates_inside_one_frame_are_dropped_and_confirmed(
        broker: ThreadedBroker) -> None:
    batch = []
    for publishing_id in [1, 2, 3, 2, 3, 4, 4, 6, 5]:
        message = RawMessage(b"id%d" % publishing_id)
        message.publishing_id = publishing_id
        batch.append(message)
    confirmed = await send_one_frame(broker, "dedup", batch, publisher="app")
    assert confirmed == {1, 2, 3, 4, 5, 6}  # every id, dropped ones too
    got = await consume(broker, "dedup", OffsetType.FIRST, 4, settle=0.3)
    assert [body for _, body in got] == [b"id1", b"id2", b"id3", b"id4", b"id6"]


# -- item 12: peer properties are kept -------------------------------------------


async def test_peer_properties_are_shown_and_the_connection_closed_by_name(
        tmp_path: Path) -> None:
    """Against `mainstem serve` (on uvloop, whose closed sockets raised ValueError in the
    traffic counters): the stream connection's properties are listed, the management API
    closes it by name, and its "connection.closed" line is logged."""
    log_path = tmp_path / "server.log"
    server = start_server(tmp_path / "data", log_path)
    try:
        ports = started_ports(server, log_path)
        args = {"host": "127.0.0.1", "port": ports["stream"], "username": "guest",
                "password": "guest"}
        admin = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
        async with aiohttp.ClientSession(f"http://127.0.0.1:{ports['admin']}",
                                         headers=admin) as http:
            producer = Producer(**args, connection_name="orders-app")
            await producer.start()
            try:
                async with http.get("/api/connections") as response:
                    (row,) = await response.json()
                properties = row["client_properties"]
                assert properties["connection_name"] == "orders-app"
                assert properties["product"] == "RabbitMQ Stream"
                assert "version" in properties
                assert row["user_provided_name"] == "orders-app"
                name = aiohttp.helpers.quote(row["name"], safe="")
                async with http.get("/api/connections/" + name) as response:
                    assert (await response.json())["client_properties"] == properties
                async with http.delete("/api/connections/" + name) as response:
                    assert response.status == 204
                closed = await asyncio.to_thread(
                    wait_for_event, server, log_path, "connection.closed")
            finally:
                await producer.close()
    finally:
        kill(server)
    assert closed["listener"] == "stream" and closed["level"] == "info"
    assert "Traceback" not in log_path.read_text()


# -- item 13: advertised host ----------------------------------------------------


async def advertised(broker: Broker, stream: str) -> tuple[tuple[str, str], tuple[str, int]]:
    """(host, port) from the Open response and from Metadata, as rstream reads them."""
    pool = ClientPool("127.0.0.1", broker.ports["stream"], username="guest", password="guest",
                      vhost="/", frame_max=1 << 20, heartbeat=60, load_balancer_mode=False,
                      max_retries=1)
    client = await pool.get(connection_name="advertised")
    try:
        await client.create_stream(stream)
        leader, _ = await client.query_leader_and_replicas(stream)
        properties = client.server_properties
        return ((properties["advertised_host"], properties["advertised_port"]),
                (leader.host, leader.port))
    finally:
        await pool.close()


def loopback_broker(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> Broker:
    """`mainstem serve`'s configuration from these flags and variables, on free ports."""
    args = build_parser().parse_args(["serve", *loopback_listener_flags(), *flags])
    return Broker(tmp_path / "data", config=load_config(args, env or {}), admin=False)


async def test_advertised_host_and_port_come_from_the_listener_configuration(
        tmp_path: Path) -> None:
    async with loopback_broker(tmp_path, "--advertise-host", "node.example.test", env={
            "MAINSTEM_STREAM_ADVERTISED_HOST": "stream.example.test",
            "MAINSTEM_STREAM_ADVERTISED_PORT": "15552"}) as broker:
        opened, metadata = await advertised(broker, "adv")
    assert opened == ("stream.example.test", "15552")  # the listener's own wins
    assert metadata == ("stream.example.test", 15552)


async def test_the_advertise_host_flag_is_what_open_and_metadata_answer(
        tmp_path: Path) -> None:
    async with loopback_broker(tmp_path, "--advertise-host", "node.example.test") as broker:
        opened, metadata = await advertised(broker, "adv")
        port = broker.ports["stream"]
    assert opened == ("node.example.test", str(port))
    assert metadata == ("node.example.test", port)



# -- issue 16 item 7: a failed write gets PublishError, not a dropped connection --


async def test_a_write_the_file_system_refuses_gets_publish_errors(tmp_path: Path) -> None:
    """The server runs with a 2 MB file-size limit (RLIMIT_FSIZE): the kernel refuses the
    segment write that crosses it (EFBIG; the same OSError path as ENOSPC), with the disk
    alarm off. Those messages get PublishError; the connection stays and stores more."""
    limit = 2_000_000
    log_path = tmp_path / "server.log"
    with open(log_path, "ab") as log_file:
        server = subprocess.Popen(
            [str(MAINSTEM), "serve", "--data-dir", str(tmp_path / "data"),
             "--disk-free-limit", "0", *loopback_listener_flags()],
            stdout=subprocess.DEVNULL, stderr=log_file, env=clean_env(),
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    try:
        port = started_ports(server, log_path)["stream"]
        statuses: dict[int, int] = {}
        all_answered = asyncio.Event()

        async def on_status(status) -> None:
            statuses[status.message_id] = 0 if status.is_confirmed else status.response_code
            if len(statuses) == 3 * 200:
                all_answered.set()

        async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
            await producer.create_stream("full")
            for _ in range(3):  # 3 frames of 200 x 4 KB: the third crosses the limit
                await producer.send_batch("full", [RawMessage(b"x" * 4096) for _ in range(200)],
                                          on_publish_confirm=on_status)
            await asyncio.wait_for(all_answered.wait(), 10)
            await producer.send_wait("full", RawMessage(b"small"))  # still connected
    finally:
        kill(server)
    codes = [statuses[publishing_id] for publishing_id in sorted(statuses)]
    assert codes[:400] == [0] * 400
    assert codes[400:] == [ResponseCode.STREAM_NOT_AVAILABLE] * 200


# -- item 14: server-side filtering ------------------------------------------------


async def test_the_broker_skips_chunks_whose_bloom_filter_rules_out_the_subscription(
        broker: ThreadedBroker) -> None:
    """One chunk per batch: the subscription for "eu" gets only the chunks that may hold
    an "eu" message. The client's predicate accepts everything, so what arrives is exactly
    what the broker sent."""

    async def region(message: AMQPMessage) -> str:
        return message.application_properties["region"]

    batches = [["us"] * 10, ["eu"] * 10, ["us"] * 10, ["us", "eu", "us"], ["apac"] * 5]
    async with Producer(**connect_args(broker), filter_value_extractor=region) as producer:
        await producer.create_stream("regions")
        for number, regions in enumerate(batches):
            confirmed = asyncio.Event()
            messages = [AMQPMessage(body=b"%d-%s" % (number, r.encode()),
                                    application_properties={"region": r}) for r in regions]
            left = {"count": len(messages)}

            async def on_confirm(status, left=left, confirmed=confirmed) -> None:
                left["count"] -= 1
                if not left["count"]:
                    confirmed.set()

            await producer.send_batch("regions", messages, on_publish_confirm=on_confirm)
            await asyncio.wait_for(confirmed.wait(), 10)

    await send_one_frame(broker, "regions", [AMQPMessage(body=b"5-none")])  # Publish v1

    assert await filtered(broker, "regions", match_unfiltered=False, expected=13) == [
        b"1-eu"] * 10 + [b"3-us", b"3-eu", b"3-us"]
    assert await filtered(broker, "regions", match_unfiltered=True, expected=14) == [
        b"1-eu"] * 10 + [b"3-us", b"3-eu", b"3-us", b"5-none"]


async def filtered(broker: ThreadedBroker, stream: str, *, match_unfiltered: bool,
                   expected: int) -> list[bytes]:
    """The bodies the broker sends a subscription filtering on "eu", from the start."""
    received: list[bytes] = []

    async def on_message(message: AMQPMessage, context) -> None:
        received.append(bytes(message.body))

    everything_the_broker_sends = FilterConfiguration(
        values_to_filter=["eu"], predicate=lambda message: True,
        match_unfiltered=match_unfiltered)
    async with Consumer(**connect_args(broker)) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST),
                                 filter_input=everything_the_broker_sends)
        for _ in range(100):
            if len(received) >= expected:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # and nothing more
    return received
