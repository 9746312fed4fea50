"""The BSON event protocol through mainstem's own client (mainstem.client.events) against a
real server: every frame, matchers, durable subscriptions, flow control, transactions,
binders, queries, projections, and interop with rstream."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import bson
import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

from mainstem import Broker
from mainstem.client.events import EventsClient, EventsError
from mainstem.config import ServerConfig
from mainstem.protocols.bson_events.codec import encode_frame
from tests.support.binder_waits import wait_for_document


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        max_unacked_events=5, max_unacked_results=3)
    async with Broker(config=config) as running:
        yield running


async def connect(broker: Broker, **options) -> EventsClient:
    return await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest",
                                      **options)


async def take(subscription, count: int) -> list:
    return [await subscription.next() for _ in range(count)]


async def test_publish_and_subscribe_from_a_position_and_a_timestamp(broker) -> None:
    client = await connect(broker)
    assert await client.create_channel("orders") is False
    assert await client.create_channel("orders") is True
    assert "orders" in await client.list_channels()
    await client.publish("orders", {"n": 0})
    await asyncio.sleep(0.02)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.02)
    await client.publish_many("orders", [{"n": i} for i in range(1, 4)])
    from_start = await client.subscribe("orders", start_pos=0)
    assert [r.event["n"] for r in await take(from_start, 4)] == [0, 1, 2, 3]
    from_time = await client.subscribe("orders", start_timestamp=middle)
    got = await take(from_time, 3)
    assert [(r.pos, r.event["n"]) for r in got] == [(1, 1), (2, 2), (3, 3)]
    assert all(r.timestamp >= middle for r in got)
    live = await client.subscribe("orders")  # no position: only what comes next
    await client.publish("orders", {"n": 4})
    assert (await live.next()).event == {"n": 4}
    await client.ping()
    await client.close()


async def test_matchers_with_every_operator(broker) -> None:
    client = await connect(broker)
    await client.create_channel("m")
    events = [{"id": 1, "kind": "a", "total": 5, "tags": ["x"], "addr": {"city": "Oslo"}},
              {"id": 2, "kind": "b", "total": 15, "tags": ["y", "z"]},
              {"id": 3, "kind": "a", "total": 25, "addr": {"city": "Rome"}}]
    await client.publish_many("m", events)
    cases = {
        "equality": ({"kind": "a"}, [1, 3]), "dot path": ({"addr.city": "Rome"}, [3]),
        "$eq": ({"total": {"$eq": 15}}, [2]), "$ne": ({"kind": {"$ne": "a"}}, [2]),
        "$gt/$lt": ({"total": {"$gt": 5, "$lt": 25}}, [2]),
        "$gte/$lte": ({"total": {"$gte": 15, "$lte": 25}}, [2, 3]),
        "$in": ({"tags": {"$in": ["z", "x"]}}, [1, 2]), "$nin": ({"kind": {"$nin": ["a"]}}, [2]),
        "$exists": ({"addr": {"$exists": False}}, [2]),
        "$and": ({"$and": [{"kind": "a"}, {"total": {"$gt": 10}}]}, [3]),
        "$or": ({"$or": [{"id": 1}, {"total": 15}]}, [1, 2]),
        "$not": ({"total": {"$not": {"$gt": 10}}}, [1]),
    }
    for name, (matcher, expected) in cases.items():
        subscription = await client.subscribe("m", start_pos=0, matcher=matcher)
        got = await take(subscription, len(expected))
        assert [r.event["id"] for r in got] == expected, name
        await client.publish("m", {"id": 99, "kind": "marker"})  # non-matching ones advance
        await subscription.close()
    with pytest.raises(EventsError, match="INVALID_MATCHER"):
        await client.subscribe("m", matcher={"total": {"$regexish": 1}})
    await client.close()


async def test_ackev_flow_control_holds_a_slow_subscriber(broker) -> None:
    client = await connect(broker)
    await client.create_channel("flow")
    await client.publish_many("flow", [{"i": i} for i in range(12)])
    subscription = await client.subscribe("flow", start_pos=0)
    await asyncio.sleep(0.2)
    assert subscription.events.qsize() == 5  # max_unacked_events in flight, no more
    await subscription.ack()  # nothing taken yet: nothing acknowledged
    await subscription.ack_oldest()  # ACKEV without pos frees exactly one place
    await asyncio.sleep(0.2)
    assert subscription.events.qsize() == 6
    await take(subscription, 6)
    await subscription.ack()  # up to the last one taken: five more come
    await asyncio.sleep(0.2)
    assert subscription.events.qsize() == 5
    await client.close()


async def test_ackev_without_pos_acknowledges_only_the_oldest_event(broker) -> None:
    client = await connect(broker)
    await client.create_channel("one")
    await client.publish_many("one", [{"i": i} for i in range(8)])
    subscription = await client.subscribe("one", start_pos=0, durable_id="w")
    assert (await subscription.next()).event == {"i": 0}
    await wait_for_in_flight(subscription, 4)  # the window is full: 0..4 were sent
    await subscription.ack_oldest()
    await client.ping()
    await client.close()
    client = await connect(broker)
    resumed = await client.subscribe("one", start_pos=0, durable_id="w")
    assert [r.event["i"] for r in await take(resumed, 3)] == [1, 2, 3]
    await client.close()


async def wait_for_in_flight(subscription, queued: int) -> None:
    for _ in range(100):
        if subscription.events.qsize() >= queued:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{queued} events never arrived")


async def test_durable_subscription_resumes_after_reconnect_and_restart(tmp_path) -> None:
    data = tmp_path / "data"
    async with Broker(data_dir=data) as broker:
        client = await connect(broker)
        await client.create_channel("d")
        await client.publish_many("d", [{"i": i} for i in range(6)])
        subscription = await client.subscribe("d", start_pos=0, durable_id="worker")
        await take(subscription, 3)
        await subscription.ack()  # acknowledged up to i=2
        await client.close()
        client = await connect(broker)
        resumed = await client.subscribe("d", start_pos=0, durable_id="worker")
        assert [r.event["i"] for r in await take(resumed, 2)] == [3, 4]
        await resumed.ack()
        await resumed.close()  # SUBCLOSE keeps the position
        await client.close()
    async with Broker(data_dir=data) as broker:
        client = await connect(broker)
        resumed = await client.subscribe("d", durable_id="worker")
        assert [r.event["i"] for r in await take(resumed, 1)] == [5]
        await resumed.unsubscribe()  # forgets the position
        again = await client.subscribe("d", start_pos=0, durable_id="worker")
        assert (await again.next()).event["i"] == 0
        await client.close()


async def test_transactions(broker) -> None:
    client = await connect(broker)
    await client.create_channel("tx")
    watcher = await client.subscribe("tx", start_pos=0)
    await client.start_tx(7)
    with pytest.raises(EventsError, match="TX_IN_PROGRESS"):
        await client.start_tx(7)
    await client.publish("tx", {"step": 1}, session=7)
    await client.publish("tx", {"step": 2}, session=7)
    await asyncio.sleep(0.1)
    assert watcher.events.empty()  # invisible until the commit
    await client.commit_tx(7)
    assert [r.event["step"] for r in await take(watcher, 2)] == [1, 2]
    await client.start_tx(8)
    await client.publish("tx", {"step": "discarded"}, session=8)
    await client.abort_tx(8)
    for bad in (client.commit_tx(8), client.abort_tx(9)):
        with pytest.raises(EventsError, match="NO_TX"):
            await bad
    await client.publish("tx", {"step": 3})
    assert (await watcher.next()).event["step"] == 3  # the aborted event never appears
    await client.close()


async def test_binders_queries_and_projections(broker) -> None:
    client = await connect(broker)
    await client.create_channel("sales")
    await client.create_projection("totals", "sales", "by_customer", "customer",
                                   fold="increment", matcher={"amount": {"$gt": 0}})
    await client.publish_many("sales", [
        {"customer": "ann", "amount": 5, "count": 1}, {"customer": "bob", "amount": 3,
                                                        "count": 1},
        {"customer": "ann", "amount": 7, "count": 1}, {"customer": "ann", "amount": -1,
                                                        "count": 1}])
    for _ in range(100):
        doc = await client.find_by_id("by_customer", "ann")
        if doc is not None and doc["count"] == 2:
            break
        await asyncio.sleep(0.02)
    assert (doc["amount"], doc["count"]) == (12, 2)
    assert await client.list_binders() == ["by_customer"]
    assert await client.create_binder("by_customer") is True
    found = [d async for d in client.query("by_customer", {"amount": {"$gte": 3}})]
    assert sorted(d["customer"] for d in found) == ["ann", "bob"]
    assert [d async for d in client.query("by_customer", {"amount": 1000})] == []
    assert await client.find_by_id("by_customer", "nobody") is None
    await client.close()


async def test_query_results_wait_for_queryack(broker) -> None:
    client = await connect(broker)
    await client.create_channel("many")
    await client.create_projection("p", "many", "docs", "i", fold="replace")
    await client.publish_many("many", [{"i": i} for i in range(10)])
    for _ in range(100):
        if await client.find_by_id("docs", 9) is not None:
            break
        await asyncio.sleep(0.02)
    results = client.query("docs", {}, ack=False)
    first = [await results.__anext__() for _ in range(3)]
    assert len(first) == 3
    with pytest.raises(TimeoutError):  # max_unacked_results = 3: nothing more comes
        await asyncio.wait_for(results.__anext__(), 0.3)
    await results.aclose()
    acked = [d async for d in client.query("docs", {})]
    assert sorted(d["i"] for d in acked) == list(range(10))
    await client.close()


async def test_a_bulk_load_hands_over_to_the_live_projection(broker) -> None:
    client = await connect(broker)
    await client.create_channel("clicks")
    await client.create_projection("counts", "clicks", "per_page", "page", fold="increment")
    await client.publish_many("clicks", [{"page": "a", "n": 1}] * 3 + [{"page": "b", "n": 1}])
    await wait_for_document(client, "per_page", "b", lambda d: d["n"] == 1)
    # A rebuild computed elsewhere: up to offset 3 (the first three clicks) it says a=30,
    # which differs from the live a=3, so the swap shows; offset 3 onward is live again.
    abandoned = await client.begin_load("per_page")
    await client.load_documents(abandoned, [("stale", {"page": "stale"})])
    load = await client.begin_load("per_page")  # discards the abandoned load
    with pytest.raises(EventsError) as refused:
        await client.load_documents(abandoned, [("x", {"page": "x"})])
    assert refused.value.code == "NOT_FOUND"
    await client.load_documents(load, [("a", {"page": "a", "n": 30})])
    await client.load_documents(load, [("a", {"page": "a", "n": 30}), (7, {"page": 7})])
    assert await client.find_by_id("per_page", "a") == {"page": "a", "n": 3}  # not yet
    with pytest.raises(EventsError) as wrong:
        await client.hand_over(load, "counts", "clicks", "elsewhere", "page", "increment",
                               None, 3)
    assert wrong.value.code == "INVALID_ARGUMENT"
    assert await client.hand_over(load, "counts", "clicks", "per_page", "page", "increment",
                                  None, 3) == 2
    await wait_for_document(client, "per_page", "b", lambda d: d["n"] == 1)
    assert await client.find_by_id("per_page", "a") == {"page": "a", "n": 30}
    assert await client.find_by_id("per_page", 7) == {"page": 7}
    assert await client.find_by_id("per_page", "stale") is None
    await client.publish("clicks", {"page": "a", "n": 1})
    await wait_for_document(client, "per_page", "a", lambda d: d["n"] == 31)
    with pytest.raises(EventsError) as done:  # a load is used once
        await client.hand_over(load, "counts", "clicks", "per_page", "page", "increment",
                               None, 3)
    assert done.value.code == "NOT_FOUND"
    await client.close()


async def test_only_configure_on_its_binder_redefines_or_hands_over_a_projection(broker
                                                                                   ) -> None:
    owner = await connect(broker)
    await owner.create_channel("sales")
    await owner.create_projection("totals", "sales", "by_customer", "customer")
    original = broker.core.binders.projection("/", "totals")
    broker.core.auth.add_user("u1", "pw")
    broker.core.auth.set_permissions("u1", "/", "^u1-", "^u1-", "^u1-")
    other = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "u1", "pw")
    await other.create_channel("u1-sales")
    with pytest.raises(EventsError) as redefined:
        await other.create_projection("totals", "u1-sales", "u1-binder", "customer")
    assert redefined.value.code == "ACCESS_REFUSED"
    load = await other.begin_load("u1-binder")
    with pytest.raises(EventsError) as handed:
        await other.hand_over(load, "totals", "u1-sales", "u1-binder", "customer", "merge",
                              None, 0)
    assert handed.value.code == "ACCESS_REFUSED"
    assert broker.core.binders.projection("/", "totals") == original
    # its own projection: declared, redefined and handed over
    await other.create_projection("u1-totals", "u1-sales", "u1-binder", "customer")
    await other.create_projection("u1-totals", "u1-sales", "u1-binder", "customer", "increment")
    assert await other.hand_over(load, "u1-totals", "u1-sales", "u1-binder", "customer",
                                 "merge", None, 0) == 0
    await other.close()
    await owner.close()


async def test_bad_input_gets_failed_responses_and_keeps_the_connection(broker) -> None:
    client = await connect(broker)
    await client.create_channel("c")
    with pytest.raises(EventsError, match="NO_SUCH_CHANNEL"):
        await client.publish("nowhere", {"a": 1})
    for kind, body, code in (("PUBLISH", {"channel": "c", "event": "text"}, "INVALID_FRAME"),
                             ("NOSUCHFRAME", {}, "UNKNOWN_FRAME"),
                             ("FINDBYID", {"binder": "x"}, "INVALID_FRAME"),
                             ("STARTTX", {"sessID": "one"}, "INVALID_FRAME")):
        with pytest.raises(EventsError, match=code):
            await client._request(kind, body)
    with pytest.raises(EventsError, match="EVENT_TOO_LARGE"):
        await client.publish("c", {"blob": b"x" * (4 * 1024 * 1024 + 1)})
    await client.ping()  # still connected
    await client.close()


def _raw_session(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(encode_frame("CONNECT", {"version": "1.0", "username": "guest",
                                          "password": "guest", "rID": 1}))
    assert bson.decode(_read_document(sock))["frame"]["ok"] is True
    return sock


def _read_document(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    (length,) = struct.unpack("<i", head)
    return head + sock.recv(length - 4, socket.MSG_WAITALL)


async def test_frames_missing_their_rid_and_bad_queryack_get_errors(broker) -> None:
    port = broker.ports["bson"]

    def raw_checks() -> None:
        sock = _raw_session(port)
        for kind, body in (("SUBSCRIBE", {"channel": "c"}), ("STARTTX", {"rID": None}),
                           ("QUERYACK", {"queryID": {"a": 1}}),
                           ("QUERYACK", {"queryID": [1, 2]})):
            sock.sendall(encode_frame(kind, body))
            frame = bson.decode(_read_document(sock))["frame"]
            assert (frame["ok"], frame["errCode"], "rID" in frame) == (
                False, "INVALID_FRAME", False), (kind, body, frame)
        sock.sendall(encode_frame("PING", {"rID": 7}))
        assert bson.decode(_read_document(sock))["frame"] == {"ok": True, "rID": 7}
        sock.sendall(encode_frame("PING", {}))  # not in the document: no rID needed
        assert bson.decode(_read_document(sock))["frame"] == {"ok": True}
        sock.close()

    await asyncio.to_thread(raw_checks)


async def test_connect_rules_and_framing_errors_close(broker) -> None:
    port = broker.ports["bson"]
    with pytest.raises(EventsError, match="AUTHENTICATION_FAILED"):
        await EventsClient.connect("127.0.0.1", port, "guest", "wrong")
    with pytest.raises(EventsError, match="UNSUPPORTED_VERSION"):
        await EventsClient.connect("127.0.0.1", port, "guest", "guest", version="9.0")

    def raw_checks() -> None:
        early = socket.create_connection(("127.0.0.1", port), timeout=5)
        early.sendall(encode_frame("PING", {"rID": 1}))  # before CONNECT: closed
        assert early.recv(100) == b""
        for garbage in (b"\x03\x00\x00\x00", b"\x10\x00\x00\x00" + b"\xff" * 12):
            sock = _raw_session(port)
            sock.sendall(garbage)
            assert sock.recv(100) == b""
        sock = _raw_session(port)
        sock.sendall(b"\x00" * 3)
        sock.sendall(b"\x00")  # length 0 arrives in two reads: still a framing error
        assert sock.recv(100) == b""

    await asyncio.to_thread(raw_checks)
    client = await connect(broker)
    await client.ping()  # others unaffected
    await client.close()


async def test_channel_is_a_stream_read_by_rstream(broker) -> None:
    client = await connect(broker)
    await client.create_channel("shared")
    await client.publish_many("shared", [{"i": i} for i in range(3)])
    received: list[bytes] = []

    async def on_message(message: bytes, context) -> None:
        received.append(bytes(message))

    async with Consumer("127.0.0.1", port=broker.ports["stream"], username="guest",
                        password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe("shared", on_message, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST)))
        for _ in range(100):
            if len(received) == 3:
                break
            await asyncio.sleep(0.02)
    assert [bson.decode(r) for r in received] == [{"i": i} for i in range(3)]
    await client.close()


def test_fuzzed_frames_never_reach_other_connections(mainstem_server) -> None:
    """Random bytes and mutated BSON frames at live sessions: the server answers or closes
    each of them, and a bystander session keeps working."""
    import random

    port = mainstem_server.ports["bson"]
    rng = random.Random(11)
    bystander = _raw_session(port)
    seeds = [encode_frame("PUBLISH", {"channel": "c", "event": {"a": 1}, "rID": 2}),
             encode_frame("SUBSCRIBE", {"channel": "c", "rID": 3, "matcher": {"a": {"$gt": 0}}}),
             encode_frame("QUERY", {"queryID": 1, "binder": "b", "matcher": {}, "rID": 4}),
             encode_frame("STARTTX", {"sessID": 1, "rID": 5})]
    for _ in range(80):
        sock = _raw_session(port)
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(4, len(data))] = rng.randrange(256)
        if rng.random() < 0.25:
            data = bytearray(rng.randbytes(rng.randint(1, 64)))
        sock.sendall(bytes(data))
        sock.settimeout(0.3)
        with contextlib.suppress(TimeoutError, ConnectionError):
            sock.recv(65536)
        sock.close()
    bystander.sendall(encode_frame("PING", {"rID": 99}))
    reply = bson.decode(_read_document(bystander))
    assert reply == {"type": "RESPONSE", "frame": {"ok": True, "rID": 99}}
    bystander.close()
