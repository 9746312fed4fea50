"""The RabbitMQ Stream protocol, driven by the real rstream and rbfly clients
against a real mainstem server on loopback."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import rbfly.streams as rbfly
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetSpecification,
    OffsetType,
    Producer,
    RouteType,
    SuperStreamConsumer,
    SuperStreamCreationOption,
    SuperStreamProducer,
    amqp_decoder,
    exceptions,
    schema,
)
from rstream.client import Client, ClientPool

from mainstem import Broker
from mainstem.client.stream import Endpoint, StreamClient, StreamClientError
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.protocols.rabbit_stream.responses import TieredSegmentsResponse

Received = list[tuple[int, bytes]]


def connect_args(broker: Broker, **overrides: object) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest", **overrides}


async def publish(broker: Broker, stream: str, bodies: list[bytes], **send: object) -> None:
    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream(stream, exists_ok=True)
        await producer.send_batch(stream, [AMQPMessage(body=b) for b in bodies], **send)
        await producer.send_wait(stream, AMQPMessage(body=b"__sync__"), **send)


async def consume(broker: Broker, stream: str, spec: ConsumerOffsetSpecification,
                  until: int, timeout: float = 10) -> Received:
    """(offset, body) of messages read from `spec` until `until` have arrived."""
    received: Received = []
    enough = asyncio.Event()

    async def on_message(message: AMQPMessage, context) -> None:
        received.append((context.offset, bytes(message.body)))
        if len(received) >= until:
            enough.set()

    async with Consumer(**connect_args(broker)) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=spec)
        await asyncio.wait_for(enough.wait(), timeout)
    return received


async def raw_client(broker: Broker, **overrides: object) -> Client:
    """rstream's low-level client: one connection, frames and handlers by hand."""
    args = connect_args(broker, **overrides)
    pool = ClientPool(args.pop("host"), args.pop("port"), vhost=args.pop("vhost", "/"),
                      frame_max=1 << 20, heartbeat=60, load_balancer_mode=False, max_retries=1,
                      **args)
    return await pool.get(connection_name="test")


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


async def test_publish_and_consume_from_first(broker: Broker) -> None:
    await publish(broker, "s", bodies("m", 300))
    got = await consume(broker, "s", ConsumerOffsetSpecification(OffsetType.FIRST), 301)
    assert [body for _, body in got] == [*bodies("m", 300), b"__sync__"]
    assert [offset for offset, _ in got] == list(range(301))


async def test_every_offset_specification(broker: Broker) -> None:
    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream("s")
        for batch in range(3):
            await producer.send_batch("s", [AMQPMessage(body=b) for b in bodies(f"b{batch}-", 10)])
            await producer.send_wait("s", AMQPMessage(body=f"end{batch}".encode()))
            await asyncio.sleep(0.05)  # distinct chunk timestamps
        partition = broker.core.streams.partition("/", "s")
        middle_ts = partition._segments[0].index.timestamps[2]
    total = partition.committed_offset

    first = await consume(broker, "s", ConsumerOffsetSpecification(OffsetType.FIRST), total)
    assert first[0] == (0, b"b0-0")
    at = await consume(broker, "s", ConsumerOffsetSpecification(OffsetType.OFFSET, 15), 3)
    assert at[0][0] == 15  # the client skips the chunk's records before the offset
    last = await consume(broker, "s", ConsumerOffsetSpecification(OffsetType.LAST), 1)
    # LAST is the start of the last chunk (frames that arrive together share one chunk).
    assert last[0] == (partition.committed_chunk_id, dict(first)[partition.committed_chunk_id])
    assert partition.committed_chunk_id > 0
    stamped = await consume(broker, "s",
                            ConsumerOffsetSpecification(OffsetType.TIMESTAMP, middle_ts), 1)
    assert stamped[0][0] == partition._segments[0].index.chunk_ids[2]

    async def publish_later() -> None:
        await asyncio.sleep(0.3)
        await publish(broker, "s", [b"after"])

    later = asyncio.create_task(publish_later())
    following = await consume(broker, "s", ConsumerOffsetSpecification(OffsetType.NEXT), 1)
    await later
    assert following[0] == (total, b"after")


async def test_deduplication_survives_reconnect_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def send(broker: Broker, ids: range) -> None:
        async with Producer(**connect_args(broker)) as producer:
            await producer.create_stream("d", exists_ok=True)
            for publishing_id in ids:
                message = AMQPMessage(body=f"id{publishing_id}".encode())
                message.publishing_id = publishing_id
                await producer.send_wait("d", message, publisher_name="app-1")

    async with Broker(data_dir=data) as broker:
        await send(broker, range(1, 11))
        await send(broker, range(5, 16))  # ids 5..10 were stored: only 11..15 are new
        client = await raw_client(broker)
        assert await client.query_publisher_sequence("d", "app-1") == 15
        await client.close()
    async with Broker(data_dir=data) as broker:
        await send(broker, range(1, 21))
        got = await consume(broker, "d", ConsumerOffsetSpecification(OffsetType.FIRST), 20)
    assert [body for _, body in got] == [f"id{i}".encode() for i in range(1, 21)]


async def test_duplicates_within_one_batch_of_frames_are_stored_once(broker: Broker) -> None:
    """A resend that arrives in the same read as the original (staged, not yet written)
    is still recognised as a duplicate."""
    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream("dd")
        batch = []
        for publishing_id in [1, 2, 3, 2, 3, 4, 5]:
            message = AMQPMessage(body=f"id{publishing_id}".encode())
            message.publishing_id = publishing_id
            batch.append(message)
        await producer.send_batch("dd", batch[:3], publisher_name="dup")
        await producer.send_batch("dd", batch[3:6], publisher_name="dup")
        await producer.send_wait("dd", batch[6], publisher_name="dup")
    got = await consume(broker, "dd", ConsumerOffsetSpecification(OffsetType.FIRST), 5)
    assert [body for _, body in got] == [b"id1", b"id2", b"id3", b"id4", b"id5"]


async def test_credit_bounds_the_chunks_in_flight(broker: Broker) -> None:
    async with Producer(**connect_args(broker)) as producer:
        await producer.create_stream("c")
        for i in range(6):  # six chunks
            await producer.send_wait("c", AMQPMessage(body=f"chunk{i}".encode()))
    client = await raw_client(broker)
    delivered: list[int] = []

    async def on_deliver(frame: schema.Deliver) -> None:
        delivered.append(frame.chunk_first_offset)

    # rstream queues Deliver frames per subscription: the handler's name is its id.
    client.add_handler(schema.Deliver, on_deliver, name="1")
    await client.run_queue_listener_task(1, on_deliver)
    await client.subscribe("c", subscription_id=1, initial_credit=2,
                           offset_spec=OffsetSpecification(OffsetType.FIRST, None))
    await asyncio.sleep(0.3)
    assert delivered == [0, 1]
    await client.credit(1, 3)
    await asyncio.sleep(0.3)
    assert delivered == [0, 1, 2, 3, 4]
    await client.close()


async def test_offsets_are_tracked_across_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(data_dir=data) as broker:
        await publish(broker, "t", bodies("m", 5))
        async with Consumer(**connect_args(broker)) as consumer:
            await consumer.store_offset("t", "reader-1", 3)
            assert await consumer.query_offset("t", "reader-1") == 3
            with pytest.raises(exceptions.OffsetNotFound):
                await consumer.query_offset("t", "nobody")
    async with Broker(data_dir=data) as broker, Consumer(**connect_args(broker)) as consumer:
        assert await consumer.query_offset("t", "reader-1") == 3


async def test_super_stream_routes_by_key_and_every_partition_is_consumed(
        broker: Broker) -> None:
    routed: dict[str, list[bytes]] = {}
    async def routing_key(message: AMQPMessage) -> str:
        return message.application_properties["id"]

    async with SuperStreamProducer(**connect_args(broker), super_stream="orders",
                                   routing=RouteType.Hash, routing_extractor=routing_key,
                                   super_stream_creation_option=SuperStreamCreationOption(3)
                                   ) as producer:
        for i in range(60):
            message = AMQPMessage(body=f"o{i}".encode(), application_properties={"id": str(i)})
            await producer.send(message)
        await asyncio.sleep(0.5)
    for partition, stream_partition in enumerate(broker.core.streams.get("/", "orders")
                                                 .partitions):
        assert stream_partition.committed_offset > 0, f"partition {partition} got nothing"
    received: list[tuple[str, bytes]] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context) -> None:
        received.append((context.stream, bytes(message.body)))
        routed.setdefault(context.stream, []).append(bytes(message.body))
        if len(received) == 60:
            done.set()

    async with SuperStreamConsumer(**connect_args(broker), super_stream="orders") as consumer:
        await consumer.subscribe(on_message, decoder=amqp_decoder)
        await asyncio.wait_for(done.wait(), 10)
    assert sorted(body for _, body in received) == sorted(bodies("o", 60))
    assert set(routed) == {"orders-0", "orders-1", "orders-2"}
    client = await raw_client(broker)
    assert await client.partitions("orders") == ["orders-0", "orders-1", "orders-2"]
    assert await client.route("1", "orders") == ["orders-1"]
    await client.delete_super_stream("orders")
    assert broker.core.streams.find("/", "orders") is None
    await client.close()


async def test_single_active_consumer_fails_over(broker: Broker) -> None:
    await publish(broker, "sac", bodies("a", 3))
    received: dict[str, list[bytes]] = {"one": [], "two": []}
    activations: list[str] = []

    def listener_for(name: str):
        async def on_update(is_active: bool, context) -> OffsetSpecification:
            if is_active:
                activations.append(name)
            return OffsetSpecification(OffsetType.FIRST, 0)
        return on_update

    def handler_for(name: str):
        async def on_message(message: AMQPMessage, context) -> None:
            received[name].append(bytes(message.body))
        return on_message

    properties = {"single-active-consumer": "true", "name": "group-1"}
    one = Consumer(**connect_args(broker))
    two = Consumer(**connect_args(broker))
    await one.start()
    await two.start()
    await one.subscribe("sac", handler_for("one"), decoder=amqp_decoder, properties=properties,
                        consumer_update_listener=listener_for("one"))
    await two.subscribe("sac", handler_for("two"), decoder=amqp_decoder, properties=properties,
                        consumer_update_listener=listener_for("two"))
    await asyncio.sleep(0.5)
    assert received["one"] == [*bodies("a", 3), b"__sync__"]
    assert received["two"] == []
    await one.close()
    await asyncio.sleep(0.5)
    assert activations == ["one", "two"]
    assert received["two"] == [*bodies("a", 3), b"__sync__"]
    await two.close()


async def test_deleting_a_stream_tells_its_subscribers(broker: Broker) -> None:
    await publish(broker, "doomed", [b"x"])
    client = await raw_client(broker)
    updates: list[str] = []

    async def on_update(frame: schema.MetadataUpdate) -> None:
        updates.append(frame.metadata_info.stream)

    client.add_handler(schema.MetadataUpdate, on_update, name="test")
    await client.subscribe("doomed", subscription_id=1, initial_credit=10,
                           offset_spec=OffsetSpecification(OffsetType.FIRST, None))
    async with Producer(**connect_args(broker)) as producer:
        await producer.delete_stream("doomed")
    await asyncio.sleep(0.3)
    assert updates == ["doomed"]
    assert not await client.stream_exists("doomed")
    await client.close()


async def test_stream_arguments_and_stats(broker: Broker) -> None:
    client = await raw_client(broker)
    await client.create_stream("r", {"max-age": "1h", "max-length-bytes": 10_000_000,
                                     "stream-max-segment-size-bytes": 1_000_000,
                                     "queue-leader-locator": "least-leaders"})
    stream = broker.core.streams.get("/", "r")
    assert stream.retention.max_age_ms == 3_600_000
    assert stream.retention.max_bytes == 10_000_000
    with pytest.raises(exceptions.StreamAlreadyExists):
        await client.create_stream("r")
    with pytest.raises(exceptions.PreconditionFailed):
        await client.create_stream("bad", {"max-length-bytes": "lots"})
    leader, replicas = await client.query_leader_and_replicas("r")
    assert (leader.host, leader.port, replicas) == ("127.0.0.1", broker.ports["stream"], [])
    await client.close()


async def test_wrong_password_is_refused(broker: Broker) -> None:
    with pytest.raises(exceptions.AuthenticationFailure):
        await raw_client(broker, password="wrong")


async def test_permissions_are_enforced(broker: Broker) -> None:
    broker.core.auth.add_user("reader", "secret")
    broker.core.auth.set_permissions("reader", "/", configure="^$", write="^$", read=".*")
    await publish(broker, "p", [b"x"])
    client = await raw_client(broker, username="reader", password="secret")
    with pytest.raises(exceptions.AccessRefused):
        await client.create_stream("mine")
    with pytest.raises(exceptions.AccessRefused):
        await client.declare_publisher("p", None, 1)
    await client.close()
    got = await consume(broker, "p", ConsumerOffsetSpecification(OffsetType.FIRST), 1)
    assert got[0][1] == b"x"
    with pytest.raises(exceptions.VirtualHostAccessFailure):
        await raw_client(broker, username="reader", password="secret", vhost="elsewhere")


def stream_stats(broker: Broker, user: str, password: str, stream: str) -> int:
    """The first offset StreamStats gives, over mainstem's own stream client."""
    endpoint = Endpoint("127.0.0.1", broker.ports["stream"], user, password, "/")
    with StreamClient(endpoint) as client:
        return client.offsets(stream).first


async def test_stream_stats_needs_read_permission(broker: Broker) -> None:
    await publish(broker, "p", [b"x"])
    broker.core.auth.add_user("writer", "secret")
    broker.core.auth.set_permissions("writer", "/", configure=".*", write=".*", read="^$")
    for stream in ("p", "missing"):  # refused before the stream is looked up
        with pytest.raises(StreamClientError) as refused:
            await asyncio.to_thread(stream_stats, broker, "writer", "secret", stream)
        assert refused.value.code == ResponseCode.ACCESS_REFUSED
    assert await asyncio.to_thread(stream_stats, broker, "guest", "guest", "p") == 0


def tiered_segments(broker: Broker, user: str, stream: str) -> TieredSegmentsResponse:
    endpoint = Endpoint("127.0.0.1", broker.ports["stream"], user, "secret" if user != "guest"
                        else "guest", "/")
    with StreamClient(endpoint) as client:
        return client.tiered_segments(stream)


async def test_tiered_segments_is_checked_as_a_subscribe(broker: Broker) -> None:
    """mainstem's own command: read permission first, then the stream; no tier, none."""
    await publish(broker, "p", [b"x"])
    broker.core.auth.add_user("blind", "secret")
    broker.core.auth.set_permissions("blind", "/", configure=".*", write=".*", read="^$")
    for stream in ("p", "missing"):
        with pytest.raises(StreamClientError) as refused:
            await asyncio.to_thread(tiered_segments, broker, "blind", stream)
        assert refused.value.code == ResponseCode.ACCESS_REFUSED
    with pytest.raises(StreamClientError) as missing:
        await asyncio.to_thread(tiered_segments, broker, "guest", "missing")
    assert missing.value.code == ResponseCode.STREAM_DOES_NOT_EXIST
    answer = await asyncio.to_thread(tiered_segments, broker, "guest", "p")
    assert (answer.response_code, answer.url, answer.segments) == (ResponseCode.OK, "", [])


async def test_rbfly_publishes_and_reads(broker: Broker) -> None:
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:{broker.ports['stream']}/"
    client = rbfly.streams_client(url)
    await client.create_stream("rb")
    async with client.publisher("rb", name="rb-pub") as publisher:
        for i in range(100):
            await publisher.send(f"rb{i}".encode())
    read: list[bytes] = []

    async def read_all() -> None:
        async for message in client.subscribe("rb", offset=rbfly.Offset.FIRST):
            read.append(message)
            if len(read) == 100:
                return

    await asyncio.wait_for(read_all(), 10)
    assert read == bodies("rb", 100)
    assert broker.core.streams.partition("/", "rb").sequences.get("rb-pub") == 100
    await client.disconnect()


async def test_tail_subscriber_is_woken_by_a_publish(broker: Broker) -> None:
    await publish(broker, "tail", [b"first"])
    started = time.monotonic()

    async def publish_soon() -> None:
        await asyncio.sleep(0.2)
        await publish(broker, "tail", [b"second"])

    task = asyncio.create_task(publish_soon())
    got = await consume(broker, "tail", ConsumerOffsetSpecification(OffsetType.NEXT), 1)
    await task
    assert got[0][1] == b"second"
    assert time.monotonic() - started < 5


async def test_filtered_publish_and_subscribe(broker: Broker) -> None:
    """Publish v2 carries filter values; a filtered subscription gets the matching ones."""

    async def region(message: AMQPMessage) -> str:
        return message.application_properties["region"]

    async with Producer(**connect_args(broker), filter_value_extractor=region) as producer:
        await producer.create_stream("filtered")
        for i in range(20):
            message = AMQPMessage(body=f"f{i}".encode(),
                                  application_properties={"region": "eu" if i % 2 else "us"})
            await producer.send_wait("filtered", message)
    received: list[bytes] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context) -> None:
        received.append(bytes(message.body))
        if len(received) == 10:
            done.set()

    only_eu = FilterConfiguration(
        values_to_filter=["eu"],
        predicate=lambda m: m.application_properties[b"region"] == b"eu")
    async with Consumer(**connect_args(broker)) as consumer:
        await consumer.start()
        await consumer.subscribe("filtered", on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST), filter_input=only_eu)
        await asyncio.wait_for(done.wait(), 10)
    assert received == [f"f{i}".encode() for i in range(1, 20, 2)]
