"""AMQP 0-9-1 exchanges and bindings, driven by aio-pika against a real mainstem server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika import ExchangeType, Message
from aio_pika.abc import AbstractChannel, AbstractQueue
from aiormq.exceptions import ChannelAccessRefused, ChannelNotFoundEntity, ChannelPreconditionFailed

from mainstem import Broker


@pytest.fixture
async def channel(broker: Broker) -> AsyncIterator[AbstractChannel]:
    connection = await aio_pika.connect(broker.urls["amqp"])
    async with connection:
        yield await connection.channel()


async def drain(queue: AbstractQueue) -> list[bytes]:
    """Every message now in the queue (basic.get until empty)."""
    bodies = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        bodies.append(message.body)
    return bodies


async def bound_queue(channel: AbstractChannel, exchange: str, key: str = "",
                      **arguments: object) -> AbstractQueue:
    queue = await channel.declare_queue(exclusive=True)
    await queue.bind(exchange, key, arguments=arguments or None)
    return queue


async def test_direct_fanout_and_default_exchange(channel: AbstractChannel) -> None:
    direct = await channel.declare_exchange("d", ExchangeType.DIRECT)
    fanout = await channel.declare_exchange("f", ExchangeType.FANOUT)
    red, blue = await bound_queue(channel, "d", "red"), await bound_queue(channel, "d", "blue")
    all_a, all_b = await bound_queue(channel, "f"), await bound_queue(channel, "f", "ignored")
    await direct.publish(Message(b"r"), "red")
    await direct.publish(Message(b"nobody"), "green")
    await fanout.publish(Message(b"x"), "any")
    await channel.default_exchange.publish(Message(b"by-name"), blue.name)
    await asyncio.sleep(0.05)
    assert await drain(red) == [b"r"]
    assert await drain(blue) == [b"by-name"]
    assert await drain(all_a) == [b"x"] and await drain(all_b) == [b"x"]


async def test_topic_wildcards(channel: AbstractChannel) -> None:
    topic = await channel.declare_exchange("t", ExchangeType.TOPIC)
    star = await bound_queue(channel, "t", "stock.*.nyse")
    hash_ = await bound_queue(channel, "t", "stock.#")
    exact = await bound_queue(channel, "t", "stock.ibm.nyse")
    for key in ("stock.ibm.nyse", "stock.nyse", "stock.a.b.nyse", "bond.x.nyse", "stock"):
        await topic.publish(Message(key.encode()), key)
    await asyncio.sleep(0.05)
    assert await drain(star) == [b"stock.ibm.nyse"]
    assert await drain(hash_) == [b"stock.ibm.nyse", b"stock.nyse", b"stock.a.b.nyse", b"stock"]
    assert await drain(exact) == [b"stock.ibm.nyse"]


async def test_topic_with_thousands_of_bindings(channel: AbstractChannel) -> None:
    topic = await channel.declare_exchange("many", ExchangeType.TOPIC)
    queue = await channel.declare_queue(exclusive=True)
    for i in range(2000):
        await queue.bind("many", f"device.{i}.#")
    for i in (0, 1999, 5000):
        await topic.publish(Message(str(i).encode()), f"device.{i}.temp")
    await asyncio.sleep(0.05)
    assert await drain(queue) == [b"0", b"1999"]


async def test_headers_all_and_any(channel: AbstractChannel) -> None:
    headers = await channel.declare_exchange("h", ExchangeType.HEADERS)
    all_ = await bound_queue(channel, "h", **{"x-match": "all", "a": 1, "b": "two"})
    any_ = await bound_queue(channel, "h", **{"x-match": "any", "a": 1, "b": "two"})
    await headers.publish(Message(b"both", headers={"a": 1, "b": "two", "c": 3}), "")
    await headers.publish(Message(b"one", headers={"a": 1}), "")
    await headers.publish(Message(b"none", headers={"a": 2}), "")
    await asyncio.sleep(0.05)
    assert await drain(all_) == [b"both"]
    assert await drain(any_) == [b"both", b"one"]


async def test_exchange_to_exchange_and_alternate_exchange(channel: AbstractChannel) -> None:
    await channel.declare_exchange("unrouted", ExchangeType.FANOUT)
    front = await channel.declare_exchange("front", ExchangeType.DIRECT,
                                           arguments={"alternate-exchange": "unrouted"})
    inner = await channel.declare_exchange("inner", ExchangeType.FANOUT, internal=True)
    await inner.bind(front, "to-inner")
    via_inner = await bound_queue(channel, "inner")
    leftovers = await bound_queue(channel, "unrouted")
    await front.publish(Message(b"routed"), "to-inner")
    await front.publish(Message(b"lost"), "elsewhere")
    await asyncio.sleep(0.05)
    assert await drain(via_inner) == [b"routed"]
    assert await drain(leftovers) == [b"lost"]
    await inner.unbind(front, "to-inner")
    await front.publish(Message(b"after-unbind"), "to-inner")
    await asyncio.sleep(0.05)
    assert await drain(via_inner) == []
    assert await drain(leftovers) == [b"after-unbind"]


async def test_publishing_to_an_internal_exchange_is_refused(broker: Broker) -> None:
    async with await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        await channel.declare_exchange("inside", ExchangeType.FANOUT, internal=True)
        raw = await channel.get_underlay_channel()  # aio-pika itself refuses to try
        with pytest.raises(ChannelAccessRefused, match="internal exchange 'inside'"):
            await raw.basic_publish(b"x", exchange="inside", routing_key="")
        assert channel.is_closed
        other = await connection.channel()  # the connection itself is fine
        await other.declare_exchange("inside", passive=True)


async def test_exchange_declare_rules(broker: Broker) -> None:
    async with await aio_pika.connect(broker.urls["amqp"]) as connection:
        channel = await connection.channel()
        with pytest.raises(ChannelNotFoundEntity):
            await channel.declare_exchange("missing", passive=True)
        channel = await connection.channel()
        await channel.declare_exchange("e1", ExchangeType.DIRECT)
        with pytest.raises(ChannelPreconditionFailed, match="inequivalent arg 'type'"):
            await channel.declare_exchange("e1", ExchangeType.FANOUT)
        channel = await connection.channel()
        with pytest.raises(ChannelAccessRefused, match="reserved prefix"):
            await channel.declare_exchange("amq.mine", ExchangeType.DIRECT)
        channel = await connection.channel()
        for name in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
            await channel.declare_exchange(name, passive=True)
        queue = await bound_queue(channel, "e1", "k")
        with pytest.raises(ChannelPreconditionFailed, match="in use"):
            await channel.exchange_delete("e1", if_unused=True)
        channel = await connection.channel()
        await channel.exchange_delete("e1")
        with pytest.raises(ChannelNotFoundEntity):
            await channel.declare_exchange("e1", passive=True)
        assert queue.name.startswith("amq.gen-")
