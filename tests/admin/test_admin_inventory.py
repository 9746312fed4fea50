"""mainstem's own objects on the management API (admin/inventory.py): stream publishers,
Iggy streams/topics/consumer groups and segments, made by real clients."""

from __future__ import annotations

import asyncio

import aiohttp
from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer

from mainstem import Broker
from mainstem.client.iggy import IggyClient, Message
from mainstem.client.segment import SegmentClient

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


async def get(broker: Broker, path: str, status: int = 200):
    async with aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}",
                                     headers=ADMIN) as http, http.get(path) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def test_stream_publishers_and_consumers_as_rabbitmq_lists_them(broker):
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    received: list[bytes] = []

    async def on_message(message, context) -> None:
        received.append(message)

    async with Producer(**args, connection_name="billing") as producer, \
            Consumer(**args) as consumer:
        await producer.create_stream("invoices")
        for n in range(3):
            await producer.send_wait("invoices", AMQPMessage(body=b"%d" % n))
        [publisher] = await get(broker, "/api/stream/publishers/%2F/invoices")
        assert publisher["queue"] == {"name": "invoices", "vhost": "/"}
        assert publisher["published"] == 3
        assert publisher["connection_details"]["user"] == "guest"
        [connection] = [c for c in await get(broker, "/api/connections")
                        if c["name"] == publisher["connection_details"]["name"]]
        assert connection["user_provided_name"] == "billing"
        await get(broker, "/api/stream/publishers/other", status=404)
        await get(broker, "/api/stream/publishers/%2F/other", status=404)

        await consumer.subscribe("invoices", on_message, initial_credit=1,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST))
        for _ in range(200):  # bounded: 10 s
            if len(received) == 3:
                break
            await asyncio.sleep(0.05)
        [subscription] = await get(broker, "/api/stream/consumers/%2F")
        assert subscription["queue"] == {"name": "invoices", "vhost": "/"}
        assert (subscription["consumed"], subscription["offset"],
                subscription["offset_lag"]) == (3, 3, 0)
        assert " -> " in subscription["connection_details"]["name"]
    assert await get(broker, "/api/stream/publishers") == []
    assert await get(broker, "/api/stream/consumers") == []


async def test_iggy_streams_topics_and_group_members(broker):
    async with await IggyClient.connect("127.0.0.1", broker.ports["iggy"]) as client:
        await client.login("guest", "guest")
        await client.create_stream("shop", 7)
        await client.create_topic("shop", "orders", partitions=3, topic_id=2)
        await client.send("shop", "orders", [Message(b"a"), Message(b"b")], key=b"k")
        await client.create_group("shop", "orders", 5, "billing")
        await client.join_group("shop", "orders", "billing")
        client_id = (await client.me())["client_id"]
        streams = {s["name"]: s for s in await get(broker, "/api/iggy/streams")}
    assert streams["shop"]["id"] == 7
    [topic] = streams["shop"]["topics"]
    assert (topic["id"], topic["name"], topic["partitions"], topic["messages"]) == \
        (2, "orders", 3, 2)
    assert topic["consumer_groups"] == [{
        "id": 5, "name": "billing", "generation": topic["consumer_groups"][0]["generation"],
        "members": [{"client_id": client_id, "partitions": [1, 2, 3]}]}]


async def test_segments_by_name_with_byte_range_and_seal(broker):
    client = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    try:
        await client.create("/logs/0")
        appender = await client.appender("/logs/0")
        appender.append_block([b"one", b"three"])
        await appender.flush()
        await client.seal("/logs/0")
    finally:
        await client.close()
    [segment] = await get(broker, "/api/segments")
    # each event is framed with an 8-byte header: 8 + 3 + 8 + 5
    assert segment == {"name": "/logs/0", "vhost": "/", "stream": "logs", "number": 0,
                       "sealed": True, "start_offset": 0, "write_offset": 24, "events": 2}
