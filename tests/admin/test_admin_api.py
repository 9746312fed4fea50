"""The management API, metrics and alarms, driven by a real HTTP client (aiohttp) and
real protocol clients (rstream) against a real broker."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import aiohttp
import pika
import pytest
from rstream import AMQPMessage, Consumer, Producer

from mainstem import Broker
from mainstem.client.events import EventsClient
from mainstem.config import AlarmConfig, ServerConfig
from tests.admin.conftest import ADMIN

TIMEOUT_S = 10


async def get(http: aiohttp.ClientSession, path: str, status: int = 200):
    async with http.get(path) as response:
        assert response.status == status, await response.text()
        return await response.json() if response.content_type == "application/json" else None


async def send(http: aiohttp.ClientSession, method: str, path: str, body=None,
               status: int = 204) -> None:
    async with http.request(method, path, json=body) as response:
        assert response.status == status, await response.text()


def stream_args(broker: Broker) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}


async def publish(broker: Broker, stream: str, count: int) -> None:
    async with Producer(**stream_args(broker)) as producer:
        await producer.create_stream(stream, exists_ok=True)
        for i in range(count):
            await producer.send_wait(stream, AMQPMessage(body=b"%d" % i))


async def until(condition, timeout: float = TIMEOUT_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_api_needs_an_administrator(broker):
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    broker.core.auth.add_user("plain", "secret")
    async with aiohttp.ClientSession(base) as session:
        for headers in ({}, {"Authorization": aiohttp.encode_basic_auth("guest", "wrong")},
                        {"Authorization": aiohttp.encode_basic_auth("plain", "secret")},
                        {"Authorization": "Basic !!!"}):
            async with session.get("/api/overview", headers=headers) as response:
                assert response.status == 401
                assert (await response.json())["error"] == "not_authorised"
        async with session.get("/api/overview", headers=ADMIN) as response:
            assert response.status == 200
        for path in ("/metrics", "/metrics/per-object", "/metrics/detailed"):
            # they name every vhost, queue and stream: open on the prometheus port only
            async with session.get(path) as response:
                assert response.status == 401
            async with session.get(path, headers=ADMIN) as response:
                assert response.status == 200


async def test_vhosts_users_and_permissions(broker, http):
    await send(http, "PUT", "/api/vhosts/prod", {}, status=201)
    await send(http, "PUT", "/api/vhosts/prod", {})
    assert {v["name"] for v in await get(http, "/api/vhosts")} == {"/", "prod"}
    assert (await get(http, "/api/vhosts/%2F"))["name"] == "/"

    await send(http, "PUT", "/api/users/ops", {"password": "pw", "tags": "administrator"},
               status=201)
    assert (await get(http, "/api/users/ops")) == {"name": "ops", "tags": ["administrator"],
                                                   "limits": {}}
    await send(http, "PUT", "/api/permissions/prod/ops",
               {"configure": "^ops-", "write": ".*", "read": ".*"})
    assert await get(http, "/api/permissions/prod/ops") == {
        "user": "ops", "vhost": "prod", "configure": "^ops-", "write": ".*", "read": ".*"}
    # ops, and guest: the creator of a vhost gets full permissions in it
    assert {p["user"] for p in await get(http, "/api/vhosts/prod/permissions")} == \
        {"ops", "guest"}
    # the new administrator logs in to the API, and on the stream protocol to "prod"
    ops = {"Authorization": aiohttp.encode_basic_auth("ops", "pw")}
    async with http.get("/api/overview", headers=ops) as response:
        assert response.status == 200
    async with Producer(**{**stream_args(broker), "username": "ops", "password": "pw",
                           "vhost": "prod"}) as producer:
        await producer.create_stream("ops-events")
    await send(http, "PUT", "/api/permissions/prod/nobody", {}, status=404)

    await send(http, "DELETE", "/api/permissions/prod/ops")
    await get(http, "/api/permissions/prod/ops", status=404)
    await send(http, "DELETE", "/api/vhosts/prod")
    assert broker.core.streams.find("prod", "ops-events") is None
    await send(http, "DELETE", "/api/users/ops")
    await get(http, "/api/users/ops", status=404)
    await send(http, "PUT", "/api/users/x", {"tags": ""}, status=400)  # no password


async def test_streams_offsets_and_queues(broker, http):
    await publish(broker, "orders", 10)
    await send(http, "PUT", "/api/streams/%2F/parted", {"partitions": 3}, status=201)
    broker.core.store_offset("/", "orders", 0, "billing", 3)

    orders = await get(http, "/api/streams/%2F/orders")
    assert orders["messages"] == 10
    assert orders["partitions"] == [{"index": 0, "name": "orders", "first_offset": 0,
                                     "last_offset": 9, "committed_offset": 10,
                                     "size_bytes": orders["size_bytes"], "segments": 1,
                                     # all local without a tier
                                     "local_bytes": orders["size_bytes"], "tiered_bytes": 0,
                                     "tiered_segments": 0, "local_first_offset": 0,
                                     "damaged_chunks": 0}]
    assert orders["size_bytes"] > 10
    parted = await get(http, "/api/streams/%2F/parted")
    assert [p["name"] for p in parted["partitions"]] == ["parted-0", "parted-1", "parted-2"]
    assert await get(http, "/api/streams/%2F/orders/offsets") == [
        {"vhost": "/", "stream": "orders", "partition": 0, "reference": "billing",
         "offset": 3, "lag": 6}]

    queues = {q["name"]: q for q in await get(http, "/api/queues/%2F")}
    assert queues["orders"]["type"] == "stream" and queues["orders"]["messages"] == 10
    # every vhost has RabbitMQ's predeclared exchanges, even before an AMQP client came
    assert {e["name"] for e in await get(http, "/api/exchanges")} == {
        "", "amq.direct", "amq.fanout", "amq.headers", "amq.match", "amq.topic"}
    assert await get(http, "/api/bindings") == []
    await send(http, "DELETE", "/api/queues/%2F/orders")
    await get(http, "/api/streams/%2F/orders", status=404)
    await send(http, "DELETE", "/api/streams/%2F/parted")
    assert await get(http, "/api/streams") == []
    overview = await get(http, "/api/overview")
    assert overview["object_totals"]["streams"] == 0


async def test_binders_and_projections(broker, http):
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    await client.create_channel("visits")
    await client.publish_many("visits", [{"page": p, "n": 1} for p in "abab"])
    await send(http, "PUT", "/api/projections/%2F/per_page", {
        "channel": "visits", "binder": "pages", "id_field": "page", "fold": "increment",
        "matcher": {"n": {"$gt": 0}}}, status=201)
    await send(http, "PUT", "/api/projections/%2F/bad", {
        "channel": "visits", "binder": "pages", "id_field": "page", "fold": "sum"}, status=400)
    await send(http, "PUT", "/api/projections/nowhere/p", {
        "channel": "visits", "binder": "pages", "id_field": "page"}, status=404)

    async def folded() -> bool:
        return (await get(http, "/api/projections/%2F"))[0]["lag"] == 0
    await until(folded)
    assert await get(http, "/api/projections") == [{
        "vhost": "/", "name": "per_page", "channel": "visits", "binder": "pages",
        "id_field": "page", "fold": "increment", "matcher": {"n": {"$gt": 0}},
        "position": 4, "lag": 0}]
    assert await get(http, "/api/binders/%2F/pages") == {
        "vhost": "/", "name": "pages", "documents": 2, "projections": ["per_page"]}
    assert await get(http, "/api/binders/%2F/pages/documents?limit=1") == [{"page": "a",
                                                                             "n": 2}]
    await get(http, "/api/binders/%2F/pages/documents?limit=0", status=400)
    async with http.get("/metrics/per-object") as response:
        metrics = await response.text()
    assert 'mainstem_binder_documents{binder="pages",vhost="/"} 2.0' in metrics
    assert 'mainstem_projection_lag{projection="per_page",vhost="/"} 0.0' in metrics
    await send(http, "PUT", "/api/binders/%2F/empty", status=201)
    await send(http, "PUT", "/api/binders/%2F/empty")
    assert [b["name"] for b in await get(http, "/api/binders")] == ["empty", "pages"]
    assert await client.list_binders() == ["empty", "pages"]

    await send(http, "DELETE", "/api/binders/%2F/pages")  # with the projection filling it
    await get(http, "/api/binders/%2F/pages", status=404)
    assert await get(http, "/api/projections") == []
    await client.publish("visits", {"page": "c", "n": 1})
    await asyncio.sleep(0.2)
    assert await client.list_binders() == ["empty"]  # nothing recreated it
    await send(http, "DELETE", "/api/projections/%2F/per_page", status=404)
    await client.close()


async def test_connections_are_listed_and_closed(broker, http):
    closed = asyncio.Event()
    producer = Producer(**stream_args(broker), on_close_handler=lambda *_: closed.set())
    await producer.start()
    try:
        rows = await get(http, "/api/connections")
        assert len(rows) == 1
        row = rows[0]
        assert row["protocol"] == "stream" and row["port"] == broker.ports["stream"]
        assert row["peer_host"] == "127.0.0.1" and row["ssl"] is False
        assert row["recv_oct"] > 0 and row["send_oct"] > 0
        assert (await get(http, f"/api/connections/{row['id']}"))["name"] == row["name"]

        await send(http, "DELETE", "/api/connections/" + aiohttp.helpers.quote(
            row["name"], safe=""))
        assert await get(http, "/api/connections") == []
        await send(http, "DELETE", "/api/connections/999", status=404)
    finally:
        await producer.close()


async def test_metrics(broker, http):
    await publish(broker, "metered", 5)
    broker.core.store_offset("/", "metered", 0, "app", 1)
    async with Producer(**stream_args(broker)), http.get("/metrics/per-object") as response:
        text = await response.text()
    assert 'mainstem_connections{protocol="stream"} 1.0' in text
    assert 'mainstem_stream_messages_in_total{stream="metered",vhost="/"} 5.0' in text
    assert 'mainstem_consumer_lag{partition="0",reference="app",stream="metered",vhost="/"} 3.0' \
        in text
    assert 'mainstem_alarm{resource="memory"} 0.0' in text
    fsyncs = next(line for line in text.splitlines()
                  if line.startswith("mainstem_fsync_seconds_count"))
    assert float(fsyncs.split()[1]) >= 1  # batch policy: at least one fsync per confirm round
    assert "mainstem_stream_size_bytes" in text


async def test_a_brokers_metrics_count_only_its_own_fsyncs(broker, http, tmp_path):
    async with Broker(data_dir=tmp_path / "other") as other:
        await publish(other, "elsewhere", 5)  # fsyncs of another broker in this process
    async with http.get("/metrics") as response:
        text = await response.text()
    fsyncs = next(line for line in text.splitlines()
                  if line.startswith("mainstem_fsync_seconds_count"))
    assert float(fsyncs.split()[1]) == 0


async def test_openapi_lists_the_paths(http):
    document = await get(http, "/api/openapi.json")
    assert document["openapi"].startswith("3.")
    for path in ("/api/overview", "/api/connections/{name}", "/api/streams/{vhost}/{name}",
                 "/api/permissions/{vhost}/{user}", "/api/queues"):
        assert path in document["paths"]
    assert "delete" in document["paths"]["/api/connections/{name}"]


async def test_alarms_set_and_clear_by_themselves(tmp_path):
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        alarms=AlarmConfig(memory_high_watermark=1e-6, disk_free_limit=2**62,
                           check_interval_ms=50),
    )
    async with Broker(config=config) as broker, aiohttp.ClientSession(
            f"http://127.0.0.1:{broker.ports['admin']}", headers=ADMIN) as http:
        alarms = broker.core.alarms
        assert alarms.active == {"memory", "disk"} and alarms.blocked
        overview = await get(http, "/api/overview")
        assert overview["mem_alarm"] and overview["disk_free_alarm"]
        assert overview["alarms"] == ["disk", "memory"]
        async with http.get("/metrics") as response:
            assert 'mainstem_alarm{resource="disk"} 1.0' in await response.text()
        changes: list[frozenset[str]] = []
        alarms.subscribe(changes.append)
        waiter = asyncio.ensure_future(alarms.wait_clear())
        await asyncio.sleep(0.2)
        assert not waiter.done()  # a publisher waiting here is held back

        broker.alarm_monitor.watermarks.memory_high_watermark = 1.0
        broker.alarm_monitor.watermarks.disk_free_limit = 1
        await asyncio.wait_for(waiter, TIMEOUT_S)
        assert not alarms.blocked and changes[-1] == frozenset()
        assert not (await get(http, "/api/overview"))["mem_alarm"]


async def test_connection_limit(tmp_path):
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        max_connections=2, max_unauthenticated_connections=0,  # silent sockets may fill it
    )
    async with Broker(config=config) as broker:
        port = broker.ports["stream"]
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: asyncio.sleep(0, len(broker.connections) == 2))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed at once
        writer.close()
        for _, held_writer in held:
            held_writer.close()
        await until(lambda: asyncio.sleep(0, len(broker.connections) == 0))
        await publish(broker, "limited", 1)  # room again for a real client


def test_admin_listener_flags_and_limits():
    from mainstem.cli import build_parser
    from mainstem.config import load_config

    args = build_parser().parse_args(["serve", "--listener", "admin=127.0.0.1:0",
                                      "--max-connections", "5", "--channel-max", "64"])
    config = load_config(args, {"MAINSTEM_MEMORY_HIGH_WATERMARK": "0.6",
                                "MAINSTEM_DISK_FREE_LIMIT": "1GB"})
    assert (config.admin.host, config.admin.port, config.admin.enabled) == ("127.0.0.1", 0, True)
    assert config.max_connections == 5 and config.limits().channel_max == 64
    assert config.alarms == AlarmConfig(0.6, 10**9, 1000)
    disabled = load_config(build_parser().parse_args(["serve", "--disable", "admin"]), {})
    assert disabled.admin.enabled is False


async def test_a_connection_is_closed_by_its_client_given_name(broker, http):
    """README: the client's `connection_name` (pika's client_properties, rstream's
    connection_name) is `user_provided_name`, and DELETE closes the connection by it."""
    producer = Producer(**stream_args(broker), connection_name="orders-writer")
    await producer.start()
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": "billing-reader"})
    amqp = await asyncio.to_thread(pika.BlockingConnection, params)
    try:
        rows = await get(http, "/api/connections")
        assert {row["user_provided_name"] for row in rows} == {"orders-writer",
                                                                "billing-reader"}
        assert (await get(http, "/api/connections/orders-writer"))["protocol"] == "stream"
        await send(http, "DELETE", "/api/connections/orders-writer")
        await send(http, "DELETE", "/api/connections/billing-reader")
        with pytest.raises(pika.exceptions.ConnectionClosed):
            await asyncio.to_thread(amqp.process_data_events, 2)
        names = {row["user_provided_name"] for row in await get(http, "/api/connections")}
        assert not names & {"orders-writer", "billing-reader"}
        await send(http, "DELETE", "/api/connections/no-such-name", status=404)
    finally:
        await producer.close()
        if amqp.is_open:
            await asyncio.to_thread(amqp.close)


async def test_stream_subscribers_count_as_the_queues_consumers(broker, http):
    """As RabbitMQ shows a stream queue's stream-protocol consumers in /api/queues."""
    await publish(broker, "ticks", 3)

    async def on_message(message, context) -> None:
        pass

    async with Consumer(**stream_args(broker)) as first, \
            Consumer(**stream_args(broker)) as second:
        for consumer in (first, second):
            await consumer.start()
            await consumer.subscribe("ticks", on_message)
        [row] = [q for q in await get(http, "/api/queues") if q["name"] == "ticks"]
        assert row["type"] == "stream" and row["consumers"] == 2
        one = await get(http, "/api/queues/%2F/ticks")
        assert one["consumers"] == 2 and len(one["consumer_details"]) == 2

    async def unsubscribed():
        return (await get(http, "/api/queues/%2F/ticks"))["consumers"] == 0
    await until(unsubscribed)


async def test_topic_permissions_over_http(broker, http):
    """RabbitMQ's /api/topic-permissions: set, listed, enforced on AMQP, cleared."""
    rule = {"exchange": "amq.topic", "write": "^metrics\\.", "read": ""}
    await send(http, "PUT", "/api/topic-permissions/%2F/guest", rule)
    await send(http, "PUT", "/api/topic-permissions/%2F/guest",
               {**rule, "write": "(unclosed"}, status=400)
    await send(http, "PUT", "/api/topic-permissions/%2F/nobody", rule, status=404)
    listed = [{"user": "guest", "vhost": "/", **rule}]
    assert await get(http, "/api/topic-permissions") == listed
    assert await get(http, "/api/topic-permissions/%2F/guest") == listed

    def publish_with(key: str) -> None:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.ports["amqp"],
            credentials=pika.PlainCredentials("guest", "guest")))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("amq.topic", key, b"x")
        finally:
            if connection.is_open:
                connection.close()

    await asyncio.to_thread(publish_with, "metrics.cpu")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        await asyncio.to_thread(publish_with, "logs.app")
    assert refused.value.reply_code == 403

    broker.core.auth.add_user("watcher", "watcher", tags=["monitoring"])
    watcher = {"Authorization": aiohttp.encode_basic_auth("watcher", "watcher")}
    async with http.get("/api/topic-permissions", headers=watcher) as response:
        assert response.status == 401  # administrators only, as in RabbitMQ
    await send(http, "DELETE", "/api/topic-permissions/%2F/guest/amq.topic")
    await get(http, "/api/topic-permissions/%2F/guest", status=404)
    await send(http, "DELETE", "/api/topic-permissions/%2F/guest", status=404)
    await asyncio.to_thread(publish_with, "logs.app")


async def test_overview_keeps_a_short_history_of_samples(broker, http):
    """As RabbitMQ's `?lengths_age=&lengths_incr=&msg_rates_age=&msg_rates_incr=`: the
    samples of the queue totals and the node's counters, newest first, `incr` apart."""
    assert "samples" not in (await get(http, "/api/overview"))["queue_totals"].get(
        "messages_ready_details", {})  # only when asked, as RabbitMQ

    def publish_three() -> None:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.ports["amqp"],
            credentials=pika.PlainCredentials("guest", "guest")))
        channel = connection.channel()
        channel.queue_declare("kept", durable=True)
        for n in range(3):
            channel.basic_publish("", "kept", b"%d" % n)
        connection.close()

    await asyncio.to_thread(publish_three)
    path = "/api/overview?lengths_age=60&lengths_incr=2&msg_rates_age=60&msg_rates_incr=2"

    async def history() -> dict | None:
        overview = await get(http, path)
        ready = overview["queue_totals"]["messages_ready_details"]["samples"]
        published = overview["message_stats"]["publish_details"]["samples"]
        return overview if len(ready) >= 3 and ready[0]["sample"] == 3 \
            and published[0]["sample"] == 3 else None

    await until(history, timeout=20)
    overview = await history()
    assert overview is not None
    for samples in (overview["queue_totals"]["messages_ready_details"]["samples"],
                    overview["message_stats"]["publish_details"]["samples"]):
        times = [s["timestamp"] for s in samples]
        assert all(later - earlier >= 1500 for later, earlier in itertools.pairwise(times))
    assert "rate" in overview["message_stats"]["publish_details"]  # the rate stays

    await send(http, "PUT", "/api/vhosts/team", {}, status=201)
    broker.core.auth.add_user("manager", "manager", tags=["management"])
    broker.core.auth.set_permissions("manager", "team")
    manager = {"Authorization": aiohttp.encode_basic_auth("manager", "manager")}
    async with http.get(path, headers=manager) as response:
        theirs = await response.json()
    # the queue in "/" is not theirs; the node's counters are for monitors
    assert {s["sample"] for s in theirs["queue_totals"]["messages_ready_details"]["samples"]} \
        == {0}
    assert "message_stats" not in theirs
