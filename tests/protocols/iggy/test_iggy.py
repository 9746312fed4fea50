"""The Iggy binary protocol, driven by the real iggy-py client and by mainstem's
own Iggy client, against a real mainstem server on loopback."""

from __future__ import annotations

import asyncio
import struct
import time
from datetime import timedelta
from pathlib import Path

import pytest
from apache_iggy import Consumer as ApacheConsumer
from apache_iggy import IggyClient as ApacheIggy
from apache_iggy import IggyExpiry, MaxTopicSize, TcpConfig, TcpReconnectionConfig
from apache_iggy import PollingStrategy as ApachePolling
from apache_iggy import SendMessage as SendMessage2
from iggy_py import IggyClient as PyIggy
from iggy_py import PollingStrategy, SendMessage
from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

from mainstem import Broker
from mainstem.cli import build_parser
from mainstem.client.iggy import (
    CONSUMER_GROUP,
    IggyClient,
    IggyClientError,
    Message,
    Polling,
)
from mainstem.config import load_config
from mainstem.protocols.iggy.codec import Code, ErrorCode, encode_identifier
from tests.support.server_process import loopback_listener_flags


async def py_client(broker: Broker) -> PyIggy:
    client = PyIggy(f"127.0.0.1:{broker.ports['iggy']}")
    await client.connect()
    await client.login_user("guest", "guest")
    return client


async def own_client(broker: Broker) -> IggyClient:
    client = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await client.login("guest", "guest")
    return client


async def test_two_brokers_in_one_process_number_their_clients_apart(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path / "a") as first, \
            Broker(data_dir=tmp_path / "b") as second:
        ids = []
        for broker in (first, second, first):
            client = await own_client(broker)
            ids.append((await client.me())["client_id"])
            await client.close()
    assert ids == [1, 1, 2]


async def test_iggy_py_streams_topics_and_every_polling_kind(broker: Broker) -> None:
    client = await py_client(broker)
    await client.ping()
    await client.create_stream("shop", 7)
    await client.create_topic("shop", "orders", partitions_count=2, topic_id=3)
    stream = await client.get_stream(7)
    assert (stream.id, stream.name, stream.topics_count) == (7, "shop", 1)
    topic = await client.get_topic("shop", 3)
    assert (topic.id, topic.name) == (3, "orders")
    before = int(time.time() * 1e6)
    await client.send_messages("shop", "orders", 2, [SendMessage(f"m{i}") for i in range(5)])
    await asyncio.sleep(0.01)
    await client.send_messages(7, 3, 2, [SendMessage("late")])

    async def payloads(strategy: PollingStrategy, count: int = 10, commit: bool = False
                       ) -> list[bytes]:
        polled = await client.poll_messages("shop", "orders", 2, strategy, count, commit)
        return [m.payload() for m in polled]

    everything = [b"m0", b"m1", b"m2", b"m3", b"m4", b"late"]
    assert await payloads(PollingStrategy.First()) == everything
    assert await payloads(PollingStrategy.Offset(value=4)) == [b"m4", b"late"]
    assert await payloads(PollingStrategy.Last(), count=2) == [b"m4", b"late"]
    assert await payloads(PollingStrategy.Timestamp(value=before)) == everything
    assert await payloads(PollingStrategy.Timestamp(value=int(time.time() * 1e6) + 10**7)) == []
    # auto-commit stores the last polled offset; Next continues after it
    assert await payloads(PollingStrategy.Next(), count=2, commit=True) == [b"m0", b"m1"]
    assert await payloads(PollingStrategy.Next(), count=2, commit=True) == [b"m2", b"m3"]
    assert await payloads(PollingStrategy.Next(), count=10) == [b"m4", b"late"]
    assert await payloads(PollingStrategy.First(), count=10) == everything
    assert (await client.get_topic(7, 3)).messages_count == 6
    polled = await client.poll_messages(7, 3, 1, PollingStrategy.First(), 10, False)
    assert polled == []


async def test_wrong_password_is_refused(broker: Broker) -> None:
    client = PyIggy(f"127.0.0.1:{broker.ports['iggy']}")
    await client.connect()
    with pytest.raises(RuntimeError):
        await client.login_user("guest", "wrong")
    own = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    with pytest.raises(IggyClientError) as refused:
        await own.login("guest", "wrong")
    assert refused.value.code == ErrorCode.INVALID_CREDENTIALS
    await own.ping()  # allowed before login
    with pytest.raises(IggyClientError) as unauthenticated:
        await own.streams()
    assert unauthenticated.value.code == ErrorCode.UNAUTHENTICATED
    await own.close()


async def test_headers_ids_and_partitioning_kinds(broker: Broker) -> None:
    client = await own_client(broker)
    await client.create_stream("s", 1)
    await client.create_topic(1, "t", partitions=3)
    headers = {"trace": (2, b"abc"), "n": (6, (42).to_bytes(4, "little", signed=True))}
    await client.send("s", "t", [Message(b"one", id=99, headers=headers)], partition=2)
    polled = await client.poll("s", "t", 2, Polling.FIRST)
    [message] = polled.messages
    assert (message.id, message.headers, message.payload) == (99, headers, b"one")
    # balanced: round robin over the three partitions
    for i in range(3):
        await client.send("s", "t", [Message(f"b{i}".encode())])
    counts = [len((await client.poll("s", "t", p, Polling.FIRST)).messages) for p in (1, 2, 3)]
    assert counts == [1, 2, 1]
    # messages key: the same key always lands in the same partition
    for _ in range(4):
        await client.send("s", "t", [Message(b"k")], key=b"customer-7")
    keyed = [[m.payload for m in (await client.poll("s", "t", p, Polling.FIRST)).messages]
             for p in (1, 2, 3)]
    assert sorted(p.count(b"k") for p in keyed) == [0, 0, 4]
    server_ids = [m.id for p in (1, 3) for m in (await client.poll("s", "t", p, Polling.FIRST))
                  .messages]
    assert len(set(server_ids)) == len(server_ids) and 0 not in server_ids
    with pytest.raises(IggyClientError) as missing:
        await client.send("s", "t", [Message(b"x")], partition=9)
    assert missing.value.code == ErrorCode.PARTITION_NOT_FOUND
    await client.close()


async def test_stats_clients_offsets_and_partitions(broker: Broker) -> None:
    client = await own_client(broker)
    other = await own_client(broker)
    await client.create_stream("s", 0)
    await client.create_topic("s", "t", partitions=1)
    await client.send("s", "t", [Message(b"x")] * 3, partition=1)
    stats = await client.stats()
    assert stats["messages_count"] == 3 and stats["clients_count"] == 2
    me = await client.me()
    assert me["client_id"] in {c["client_id"] for c in await client.clients()}
    assert (await other.client(int(me["client_id"])))["address"] == me["address"]
    assert await client.get_offset("s", "t", 1, consumer=5) is None
    await client.store_offset("s", "t", 1, 1, consumer=5)
    assert await client.get_offset("s", "t", 1, consumer=5) == 1
    polled = await client.poll("s", "t", 1, Polling.NEXT, consumer=5)
    assert [m.offset for m in polled.messages] == [2]
    await client.create_partitions("s", "t", 2)
    assert await client.topic_partitions("s", "t") == 3
    await client.send("s", "t", [Message(b"gone")], partition=3)
    await client.delete_partitions("s", "t", 2)
    assert await client.topic_partitions("s", "t") == 1
    with pytest.raises(IggyClientError) as removed:
        await client.poll("s", "t", 3, Polling.FIRST)
    assert removed.value.code == ErrorCode.PARTITION_NOT_FOUND
    assert await client.get_offset("s", "t", 1, consumer=5) == 1
    await client.create_partitions("s", "t", 2)  # a new partition 3 starts empty
    assert (await client.poll("s", "t", 3, Polling.FIRST)).messages == []
    with pytest.raises(IggyClientError):
        await client.delete_partitions("s", "t", 3)
    await client.delete_topic("s", "t")
    with pytest.raises(IggyClientError) as gone:
        await client.poll("s", "t", 1, Polling.FIRST)
    assert gone.value.code == ErrorCode.TOPIC_NAME_NOT_FOUND
    await client.delete_stream("s")
    assert "s" not in [name for _, name in await client.streams()]
    await client.close()
    await other.close()


async def test_consumer_group_rebalances_on_join_leave_and_disconnect(broker: Broker) -> None:
    a, b, c = [await own_client(broker) for _ in range(3)]
    await a.create_stream("s", 0)
    await a.create_topic("s", "t", partitions=4)
    await a.create_group("s", "t", 1, "workers")
    for p in range(1, 5):
        await a.send("s", "t", [Message(f"p{p}".encode())], partition=p)
    await a.join_group("s", "t", 1)
    group = await a.group("s", "t", "workers")
    assert sorted(p for ps in group.members.values() for p in ps) == [1, 2, 3, 4]
    await b.join_group("s", "t", 1)
    await c.join_group("s", "t", 1)
    group = await a.group("s", "t", 1)
    assert sorted(len(ps) for ps in group.members.values()) == [1, 1, 2]
    a_id = int((await a.me())["client_id"])
    # a member polls only its own partitions, with the group's stored offsets
    seen = set()
    for _ in range(len(group.members[a_id])):
        polled = await a.poll("s", "t", 0, Polling.NEXT, consumer=1, kind=CONSUMER_GROUP,
                              auto_commit=True)
        seen.add(polled.partition_id)
        assert polled.messages
    assert seen == set(group.members[a_id])
    await b.leave_group("s", "t", 1)
    group = await a.group("s", "t", 1)
    assert len(group.members) == 2 and sorted(len(p) for p in group.members.values()) == [2, 2]
    await c.close()
    for _ in range(50):
        group = await a.group("s", "t", 1)
        if len(group.members) == 1:
            break
        await asyncio.sleep(0.02)
    assert group.members == {a_id: [1, 2, 3, 4]}
    await a.close()
    await b.close()


async def test_message_expiry(broker: Broker) -> None:
    client = await own_client(broker)
    await client.create_stream("s", 0)
    await client.create_topic("s", "t", partitions=1, expiry_s=1)
    await client.send("s", "t", [Message(b"old")], partition=1)
    assert len((await client.poll("s", "t", 1, Polling.FIRST)).messages) == 1
    await asyncio.sleep(1.2)
    await client.send("s", "t", [Message(b"new")], partition=1)
    polled = await client.poll("s", "t", 1, Polling.FIRST)
    assert [m.payload for m in polled.messages] == [b"new"]
    await client.close()


async def test_topic_created_over_iggy_is_read_by_rstream(broker: Broker) -> None:
    # The Spark part of this acceptance item belongs to the Spark data source.
    client = await own_client(broker)
    await client.create_stream("/iggy", 0)
    await client.create_topic("/iggy", "events", partitions=1)
    await client.send("/iggy", "events",
                      [Message(b"hello", id=7, headers={"k": (2, b"v")}), Message(b"world")],
                      partition=1)
    await client.close()
    received: list[AMQPMessage] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: object) -> None:
        received.append(message)
        if len(received) == 2:
            done.set()

    async with Consumer("127.0.0.1", port=broker.ports["stream"], vhost="/iggy",
                        username="guest", password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe("events", on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 10)
    assert [bytes(m.body) for m in received] == [b"hello", b"world"]
    assert received[0].application_properties[b"iggy-id"] == (7).to_bytes(16, "big")


async def test_permissions_are_per_namespace(broker: Broker) -> None:
    admin = await own_client(broker)
    await admin.create_stream("private", 0)
    await admin.create_topic("private", "t", partitions=1)
    await asyncio.to_thread(broker.core.auth.add_user, "bob", "secret")
    bob = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await bob.login("bob", "secret")
    for attempt in (bob.send("private", "t", [Message(b"x")], partition=1),
                    bob.poll("private", "t", 1, Polling.FIRST),
                    bob.create_stream("mine", 0)):
        with pytest.raises(IggyClientError) as refused:
            await attempt
        assert refused.value.code == ErrorCode.UNAUTHORIZED
    assert await bob.streams() == []
    await bob.close()
    await admin.close()


async def test_stats_and_clients_take_the_administrator_or_monitoring_tag(broker: Broker
                                                                          ) -> None:
    auth = broker.core.auth
    await asyncio.to_thread(auth.add_user, "plain", "secret")
    await asyncio.to_thread(auth.add_user, "watcher", "secret", ("monitoring",))
    plain = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await plain.login("plain", "secret")
    me = await plain.me()  # a client's own details stay open to it
    for attempt in (plain.stats(), plain.clients(), plain.client(int(me["client_id"]))):
        with pytest.raises(IggyClientError) as refused:
            await attempt
        assert refused.value.code == ErrorCode.UNAUTHORIZED
    watcher = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await watcher.login("watcher", "secret")
    assert (await watcher.stats())["clients_count"] == 2
    assert len(await watcher.clients()) == 2
    await plain.close()
    await watcher.close()


async def apache_client(broker: Broker) -> ApacheIggy:
    """apache-iggy 0.9: the replicated (VSR) framing of the 2026 protocol."""
    client = ApacheIggy(TcpConfig(server_address=f"127.0.0.1:{broker.ports['iggy']}",
                                  reconnection=TcpReconnectionConfig(enabled=False)))
    await client.connect()
    await client.login_user("guest", "guest")
    return client


async def test_apache_iggy_streams_topics_send_and_poll(broker: Broker) -> None:
    client = await apache_client(broker)
    await client.ping()
    await client.create_stream("shop")
    await client.create_topic("shop", "orders", 2)
    assert await client.get_stream("nowhere") is None
    stream = await client.get_stream("shop")
    assert (stream.name, stream.topics_count) == ("shop", 1)
    topic = await client.get_topic("shop", "orders")
    assert [p.id for p in topic.partitions] == [0, 1]  # this generation counts from 0
    sent = await client.send_messages("shop", "orders", 1, [
        SendMessage2(f"m{i}", user_headers={"k": "v"}) for i in range(3)])
    assert [(c.partition_id, c.base_offset) for c in sent.confirmations] == [(1, 0)]
    sent = await client.send_messages("shop", "orders", 1, [SendMessage2(b"late")])
    assert sent.confirmations[0].base_offset == 3

    async def poll(strategy: ApachePolling, count: int = 10, commit: bool = False
                   ) -> list[bytes]:
        polled = await client.poll_messages("shop", "orders", consumer=ApacheConsumer.Single("c"),
                                            polling_strategy=strategy, count=count,
                                            auto_commit=commit, partition_id=1)
        return [m.payload() for m in polled]

    everything = [b"m0", b"m1", b"m2", b"late"]
    assert await poll(ApachePolling.First()) == everything
    assert await poll(ApachePolling.Offset(2)) == [b"m2", b"late"]
    assert await poll(ApachePolling.Next(), count=3, commit=True) == everything[:3]
    assert await poll(ApachePolling.Next()) == [b"late"]
    first = (await client.poll_messages("shop", "orders", consumer=ApacheConsumer.Single("c"),
                                        polling_strategy=ApachePolling.First(), count=1,
                                        auto_commit=False, partition_id=1))[0]
    assert (first.offset(), first.partition_id()) == (0, 1)
    assert {str(k): str(v) for k, v in (first.user_headers() or {}).items()} == \
        {'HeaderKey.String("k")': 'HeaderValue.String("v")'}
    # an omitted partition is the first one for a consumer
    assert await client.poll_messages("shop", "orders", consumer=ApacheConsumer.Single("c"),
                                      polling_strategy=ApachePolling.First(), count=10,
                                      auto_commit=False) == []
    # the 2024 generation reads the same records (its partition ids count from 1)
    seed = await py_client(broker)
    polled = await seed.poll_messages("shop", "orders", 2, PollingStrategy.First(), 10, False)
    assert [m.payload() for m in polled] == everything
    await seed.send_messages("shop", "orders", 2, [SendMessage("from 2024")])
    assert (await poll(ApachePolling.Offset(4)))[0] == b"from 2024"


async def test_apache_iggy_topic_options_and_refusals(broker: Broker) -> None:
    client = await apache_client(broker)
    await client.create_stream("s")
    await client.create_topic("s", "t", 1, message_expiry=IggyExpiry.ExpireDuration(
        timedelta(seconds=90)), max_topic_size=MaxTopicSize.Custom(1 << 20))
    topic = await client.get_topic("s", "t")
    expiry, max_size = topic.message_expiry, topic.max_topic_size
    assert isinstance(expiry, IggyExpiry.ExpireDuration) and isinstance(max_size,
                                                                       MaxTopicSize.Custom)
    assert (expiry.duration, max_size.bytes) == (timedelta(seconds=90), 1 << 20)
    with pytest.raises(RuntimeError, match="already exists"):
        await client.create_stream("s")
    with pytest.raises(RuntimeError, match="Feature is unavailable"):
        await client.get_stats()  # its reply changed shape in this generation
    stranger = ApacheIggy(TcpConfig(server_address=f"127.0.0.1:{broker.ports['iggy']}",
                                    reconnection=TcpReconnectionConfig(enabled=False)))
    await stranger.connect()
    with pytest.raises(RuntimeError, match="Invalid credentials"):
        await stranger.login_user("guest", "wrong")
    await client.logout_user()
    with pytest.raises(RuntimeError):
        await client.get_streams()
    seed = await py_client(broker)  # the 2024 layout on the next connection still works
    await seed.ping()


async def test_apache_iggy_lists_partitions_offsets_and_deletes(broker: Broker) -> None:
    client = await apache_client(broker)
    await client.create_stream("s")
    await client.create_topic("s", "t", 2)
    await client.create_topic("s", "u", 1)
    assert [(t.name, t.partitions_count) for t in await client.get_topics("s")] == \
        [("t", 2), ("u", 1)]
    assert "s" in [stream.name for stream in await client.get_streams()]
    await client.create_partitions("s", "t", 2)
    await client.delete_partitions("s", "t", 1)
    assert [p.id for p in (await client.get_topic("s", "t")).partitions] == [0, 1, 2]
    await client.send_messages("s", "t", 2, [SendMessage2("a"), SendMessage2("b")])
    await client.poll_messages("s", "t", consumer=ApacheConsumer.Single("c"),
                               polling_strategy=ApachePolling.First(), count=1, auto_commit=True,
                               partition_id=2)
    # the SDK has no call for GET_CONSUMER_OFFSET: it sends the command's own body
    request = b"\x01" + b"".join(encode_identifier(i) for i in ("c", "s", "t")) + \
        b"\x01" + struct.pack("<I", 2)
    stored = await client.send_binary_request(Code.GET_CONSUMER_OFFSET, request)
    assert struct.unpack("<IQQ", stored) == (2, 1, 0)  # partition, current offset, stored
    with pytest.raises(RuntimeError, match="Invalid command"):
        await client.update_stream("s", "renamed")  # an operation mainstem does not serve
    await client.create_consumer_group("s", "t", "g")
    await client.delete_consumer_group("s", "t", "g")
    assert await client.get_consumer_group("s", "t", "g") is None
    await client.delete_topic("s", "u")
    assert [t.name for t in await client.get_topics("s")] == ["t"]
    await client.delete_stream("s")
    assert await client.get_stream("s") is None
    # the SDK's producer makes its stream and topic when it finds none
    producer = await client.producer("made", "by-producer", topic_partitions_count=2)
    await producer.send([SendMessage2(f"x{i}") for i in range(3)])
    assert (await client.get_topic("made", "by-producer")).messages_count == 3


async def test_apache_iggy_consumer_groups(broker: Broker) -> None:
    a, b = await apache_client(broker), await apache_client(broker)
    await a.create_stream("s")
    await a.create_topic("s", "t", 2)
    for p in (0, 1):
        await a.send_messages("s", "t", p, [SendMessage2(f"p{p}m{i}") for i in range(2)])
    await a.create_consumer_group("s", "t", "workers")
    await a.join_consumer_group("s", "t", "workers")
    group = await a.get_consumer_group("s", "t", "workers")
    assert [m.partitions for m in group.members] == [[0, 1]]
    assert await a.get_consumer_group("s", "t", "idlers") is None

    async def poll(client: ApacheIggy) -> list[bytes]:
        polled = await client.poll_messages("s", "t", consumer=ApacheConsumer.Group("workers"),
                                            polling_strategy=ApachePolling.Next(), count=10,
                                            auto_commit=True)
        return [m.payload() for m in polled]

    assert await poll(a) + await poll(a) == [b"p0m0", b"p0m1", b"p1m0", b"p1m1"]
    await b.join_consumer_group("s", "t", "workers")
    group = await a.get_consumer_group("s", "t", "workers")
    assert sorted(m.partitions for m in group.members) == [[0], [1]]
    await a.send_messages("s", "t", 0, [SendMessage2("new0")])
    await a.send_messages("s", "t", 1, [SendMessage2("new1")])
    # each member reads its own partition from the group's stored offset
    assert sorted(await poll(a) + await poll(b)) == [b"new0", b"new1"]
    await b.leave_consumer_group("s", "t", "workers")
    assert [m.members_count for m in await a.get_consumer_groups("s", "t")] == [1]

    # the SDK's high-level consumer: creates and joins its group, commits as it goes
    # (a two-letter name is a 4-byte identifier, never a u32 group id, in this generation)
    consumer = await b.consumer_group("rd", "s", "t", batch_length=10,
                                      polling_strategy=ApachePolling.Next())
    got: list[bytes] = []

    async def take(n: int) -> None:
        async for message in consumer.iter_messages():
            got.append(message.payload())
            if len(got) == n:
                return

    await asyncio.wait_for(take(6), 10)
    assert sorted(got) == sorted([b"p0m0", b"p0m1", b"new0", b"p1m0", b"p1m1", b"new1"])
    await consumer.store_offset(0, 0)  # back to the first message of partition 0
    again = await b.poll_messages("s", "t", consumer=ApacheConsumer.Group("rd"),
                                  polling_strategy=ApachePolling.Next(), count=10,
                                  auto_commit=False, partition_id=0)
    assert [m.payload() for m in again] == [b"p0m1", b"new0"]


async def _metadata_node(broker: Broker) -> tuple[str, int]:
    """The host and TCP port of the one node in GetClusterMetadata's answer."""
    client = await own_client(broker)
    try:
        metadata = await client.request(Code.GET_CLUSTER_METADATA)
    finally:
        await client.close()
    offset = 4 + struct.unpack_from("<I", metadata)[0] + 4  # cluster name, node count
    offset += 4 + struct.unpack_from("<I", metadata, offset)[0]  # node name
    (size,) = struct.unpack_from("<I", metadata, offset)
    host = metadata[offset + 4:offset + 4 + size].decode()
    (port,) = struct.unpack_from("<H", metadata, offset + 4 + size)
    return host, port


@pytest.mark.parametrize(("flags", "env", "host"), [
    ([], {}, "127.0.0.1"),  # unset: the address the client reached
    (["--advertise-host", "node.example.test"], {}, "node.example.test"),
    (["--advertise-host", "node.example.test"], {"MAINSTEM_IGGY_ADVERTISED_HOST": "iggy.test"},
     "iggy.test"),  # the listener's own wins
])
async def test_cluster_metadata_advertises_the_configured_host(
        tmp_path: Path, flags: list[str], env: dict[str, str], host: str) -> None:
    args = build_parser().parse_args(["serve", *loopback_listener_flags(), *flags])
    async with Broker(tmp_path / "data", config=load_config(args, env), admin=False) as broker:
        assert await _metadata_node(broker) == (host, broker.ports["iggy"])
