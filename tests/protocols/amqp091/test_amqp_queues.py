"""AMQP 0-9-1 queues: declaration rules, every queue argument, consumers, acks, confirms and
transactions, driven by aio-pika against a real mainstem server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika import Message
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue
from aio_pika.exceptions import DeliveryError
from aiormq.exceptions import (
    AMQPError,
    ChannelAccessRefused,
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)

from mainstem import Broker
from mainstem.admin.resources import ClassicQueues


@pytest.fixture
async def connection(broker: Broker) -> AsyncIterator[AbstractConnection]:
    async with await aio_pika.connect(broker.urls["amqp"]) as opened:
        yield opened


@pytest.fixture
async def channel(connection: AbstractConnection) -> AbstractChannel:
    return await connection.channel()


async def drain(queue: AbstractQueue) -> list[bytes]:
    bodies = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        bodies.append(message.body)
    return bodies


async def publish(channel: AbstractChannel, queue: str, *bodies: bytes, **props: object
                  ) -> None:
    for body in bodies:
        await channel.default_exchange.publish(Message(body, **props), queue)


async def test_declare_rules(channel: AbstractChannel, connection: AbstractConnection) -> None:
    await channel.declare_queue("q", durable=True)
    with pytest.raises(ChannelPreconditionFailed, match="inequivalent arg 'durable'"):
        await channel.declare_queue("q", durable=False)
    channel = await connection.channel()
    with pytest.raises(ChannelNotFoundEntity, match="no queue 'nope'"):
        await channel.declare_queue("nope", passive=True)
    channel = await connection.channel()
    with pytest.raises(ChannelPreconditionFailed, match="x-message-ttl"):
        await channel.declare_queue("bad", arguments={"x-message-ttl": -1})
    channel = await connection.channel()
    with pytest.raises(ChannelPreconditionFailed, match="x-overflow"):
        await channel.declare_queue("bad", arguments={"x-overflow": "explode"})


async def test_purge_and_conditional_delete(channel: AbstractChannel,
                                            connection: AbstractConnection) -> None:
    queue = await channel.declare_queue("p")
    await publish(channel, "p", b"1", b"2", b"3")
    assert (await channel.declare_queue("p", passive=True)).declaration_result.message_count == 3
    assert (await queue.purge()).message_count == 3
    await publish(channel, "p", b"4")
    with pytest.raises(ChannelPreconditionFailed, match="not empty"):
        await queue.delete(if_empty=True)
    channel = await connection.channel()
    assert (await channel.queue_delete("p")).message_count == 1


async def test_delete_if_unused_and_server_sent_cancel(connection: AbstractConnection) -> None:
    channel = await connection.channel()
    queue = await channel.declare_queue("busy")
    await queue.consume(lambda m: None)
    with pytest.raises(ChannelPreconditionFailed, match="in use"):
        await queue.delete(if_unused=True)
    consuming = await (await connection.channel()).get_underlay_channel()
    cancelled: list[str | None] = []
    consuming.on_consumer_cancel_callbacks.add(lambda frame: cancelled.append(frame.consumer_tag))
    await consuming.queue_declare("watched")
    await consuming.basic_consume("watched", lambda m: None, consumer_tag="w")
    admin = await connection.channel()
    await admin.queue_delete("watched")
    await asyncio.sleep(0.05)
    assert cancelled == ["w"]
    with pytest.raises(ChannelNotFoundEntity):
        await (await connection.channel()).declare_queue("watched", passive=True)


async def test_consumers_share_round_robin_and_redelivery_after_death(broker: Broker) -> None:
    async with await aio_pika.connect(broker.urls["amqp"]) as keeper:
        channel = await keeper.channel()
        await channel.declare_queue("work")
        await publish(channel, "work", *[str(i).encode() for i in range(4)])
        dying = await aio_pika.connect(broker.urls["amqp"])
        dying_channel = await dying.channel()
        await dying_channel.set_qos(prefetch_count=10)
        got: list[aio_pika.abc.AbstractIncomingMessage] = []
        queue = await dying_channel.declare_queue("work", passive=True)
        await queue.consume(got.append)
        while len(got) < 4:
            await asyncio.sleep(0.01)
        assert [m.redelivered for m in got] == [False] * 4
        await dying.close()  # no acks: all four go back
        again = await channel.declare_queue("work", passive=True)
        redelivered = []
        while (message := await again.get(no_ack=True, fail=False)) is not None:
            redelivered.append((message.body, message.redelivered))
        assert redelivered == [(str(i).encode(), True) for i in range(4)]


async def test_prefetch_limits_unacked_and_acks_release(channel: AbstractChannel) -> None:
    await channel.set_qos(prefetch_count=2)
    queue = await channel.declare_queue("pf")
    await publish(channel, "pf", *[str(i).encode() for i in range(5)])
    got: list[aio_pika.abc.AbstractIncomingMessage] = []
    await queue.consume(got.append)
    await asyncio.sleep(0.1)
    assert len(got) == 2
    await got[0].ack()
    await asyncio.sleep(0.1)
    assert len(got) == 3
    await got[2].ack(multiple=True)
    await asyncio.sleep(0.1)
    assert [m.body for m in got] == [b"0", b"1", b"2", b"3", b"4"]


async def test_nack_requeue_reject_and_recover(channel: AbstractChannel) -> None:
    queue = await channel.declare_queue("nk")
    await publish(channel, "nk", b"a", b"b")
    first = await queue.get()
    await first.nack(requeue=True)
    again = await queue.get()
    assert (again.body, again.redelivered) == (b"a", True)
    await again.reject(requeue=False)  # no dead-letter exchange: dropped
    second = await queue.get()
    assert second.body == b"b"
    await channel.channel.basic_recover(requeue=True)
    back = await queue.get(no_ack=True)
    assert (back.body, back.redelivered) == (b"b", True)
    assert await queue.get(fail=False) is None


async def test_unknown_delivery_tag_closes_the_channel(channel: AbstractChannel) -> None:
    await channel.declare_queue("t")
    raw = await channel.get_underlay_channel()
    await raw.basic_ack(99)
    with pytest.raises(ChannelPreconditionFailed, match="unknown delivery tag 99"):
        await channel.declare_queue("t", passive=True)


async def test_message_ttl_per_queue_and_per_message(channel: AbstractChannel) -> None:
    await channel.declare_queue("ttl", arguments={"x-message-ttl": 100})
    await publish(channel, "ttl", b"old")
    await channel.declare_queue("msg-ttl")
    await publish(channel, "msg-ttl", b"short", expiration=0.1)
    await publish(channel, "msg-ttl", b"long", expiration=60)
    await asyncio.sleep(0.3)
    await publish(channel, "ttl", b"new")
    assert await drain(await channel.declare_queue("ttl", passive=True)) == [b"new"]
    assert await drain(await channel.declare_queue("msg-ttl", passive=True)) == [b"long"]


async def test_x_expires_deletes_an_unused_queue(channel: AbstractChannel,
                                                 connection: AbstractConnection) -> None:
    await channel.declare_queue("fleeting", arguments={"x-expires": 150})
    await asyncio.sleep(0.4)
    with pytest.raises(ChannelNotFoundEntity):
        await (await connection.channel()).declare_queue("fleeting", passive=True)


async def test_max_length_drop_head_and_dead_letter(channel: AbstractChannel) -> None:
    dead = await channel.declare_queue("dead")
    await channel.declare_exchange("dlx", aio_pika.ExchangeType.FANOUT)
    await dead.bind("dlx")
    await channel.declare_queue("short", arguments={
        "x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    await publish(channel, "short", b"1", b"2", b"3")
    assert await drain(await channel.declare_queue("short", passive=True)) == [b"2", b"3"]
    dropped = await dead.get(no_ack=True)
    assert dropped.body == b"1"
    death = dropped.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("maxlen", "short", 1)
    assert dropped.headers["x-first-death-reason"] == "maxlen"


async def test_max_length_bytes_reject_publish_nacks(channel: AbstractChannel) -> None:
    await channel.declare_queue("full", arguments={
        "x-max-length-bytes": 10, "x-overflow": "reject-publish"})
    await publish(channel, "full", b"12345678")
    with pytest.raises(DeliveryError):
        await publish(channel, "full", b"too much")
    assert await drain(await channel.declare_queue("full", passive=True)) == [b"12345678"]


async def test_dead_letter_on_reject_and_expiry_with_routing_key(channel: AbstractChannel
                                                                 ) -> None:
    await channel.declare_exchange("dlx", aio_pika.ExchangeType.DIRECT)
    retry = await channel.declare_queue("retry")
    await retry.bind("dlx", "again")
    source = await channel.declare_queue("src", arguments={
        "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "again"})
    await publish(channel, "src", b"rejected")
    message = await source.get()
    await message.reject(requeue=False)
    await publish(channel, "src", b"expired", expiration=0.05)
    await asyncio.sleep(0.3)  # expiry at the head happens without a consumer
    got = [await retry.get(no_ack=True), await retry.get(no_ack=True)]
    assert [m.body for m in got] == [b"rejected", b"expired"]
    assert [m.headers["x-death"][0]["reason"] for m in got] == ["rejected", "expired"]
    assert got[1].headers["x-death"][0]["original-expiration"] == "50"
    assert got[1].expiration is None
    assert got[0].routing_key == "again"


async def test_priority_queue(channel: AbstractChannel) -> None:
    queue = await channel.declare_queue("prio", arguments={"x-max-priority": 5})
    for body, priority in ((b"low", 1), (b"high", 5), (b"none", 0), (b"over", 9)):
        await publish(channel, "prio", body, priority=priority)
    assert await drain(queue) == [b"high", b"over", b"low", b"none"]


async def test_single_active_consumer(channel: AbstractChannel) -> None:
    queue = await channel.declare_queue("sac", arguments={"x-single-active-consumer": True})
    first: list[bytes] = []
    second: list[bytes] = []

    async def take(into: list[bytes], message: aio_pika.abc.AbstractIncomingMessage) -> None:
        into.append(message.body)
        await message.ack()

    tag = await queue.consume(lambda m: take(first, m))
    await queue.consume(lambda m: take(second, m))
    await publish(channel, "sac", b"1", b"2")
    await asyncio.sleep(0.1)
    await queue.cancel(tag)
    await publish(channel, "sac", b"3")
    await asyncio.sleep(0.1)
    assert (first, second) == ([b"1", b"2"], [b"3"])


async def test_exclusive_queue_locked_and_removed_on_disconnect(broker: Broker) -> None:
    owner = await aio_pika.connect(broker.urls["amqp"])
    await (await owner.channel()).declare_queue("mine", exclusive=True)
    async with await aio_pika.connect(broker.urls["amqp"]) as other:
        with pytest.raises(ChannelLockedResource):
            await (await other.channel()).declare_queue("mine", passive=True)
        await owner.close()
        await asyncio.sleep(0.05)
        with pytest.raises(ChannelNotFoundEntity):
            await (await other.channel()).declare_queue("mine", passive=True)


async def test_auto_delete_queue_goes_with_its_last_consumer(channel: AbstractChannel,
                                                             connection: AbstractConnection
                                                             ) -> None:
    queue = await channel.declare_queue("auto", auto_delete=True)
    tag = await queue.consume(lambda m: None)
    await queue.cancel(tag)
    with pytest.raises(ChannelNotFoundEntity):
        await (await connection.channel()).declare_queue("auto", passive=True)


async def test_mandatory_unroutable_is_returned(channel: AbstractChannel) -> None:
    returned: list[bytes] = []
    channel.return_callbacks.add(lambda _channel, message: returned.append(message.body))
    await channel.default_exchange.publish(Message(b"lost"), "no-such-queue", mandatory=True)
    await asyncio.sleep(0.05)
    assert returned == [b"lost"]


async def test_transactions_commit_and_rollback(connection: AbstractConnection) -> None:
    channel = await connection.channel(publisher_confirms=False)
    queue = await channel.declare_queue("tx")
    tx = channel.transaction()
    await tx.select()
    await publish(channel, "tx", b"rolled-back")
    await tx.rollback()
    await publish(channel, "tx", b"kept")
    assert (await channel.declare_queue("tx", passive=True)).declaration_result.message_count == 0
    await tx.commit()
    message = await queue.get()
    await message.ack()
    await tx.rollback()  # the ack is undone: the message is still unacked
    await tx.commit()
    assert await queue.get(fail=False) is None
    await channel.close()  # unacked goes back
    again = await (await connection.channel()).declare_queue("tx", passive=True)
    assert again.declaration_result.message_count == 1


async def test_wrong_password_and_vhost_refused(broker: Broker) -> None:
    port = broker.ports["amqp"]
    with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
        await aio_pika.connect(f"amqp://guest:wrong@127.0.0.1:{port}/")
    with pytest.raises((asyncio.CancelledError, AMQPError)):  # aiormq: Close, not Open-Ok
        await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/nowhere")


async def test_permissions_refused_per_resource(broker: Broker) -> None:
    auth = broker.core.auth
    await asyncio.to_thread(auth.add_user, "bob", "secret")
    auth.set_permissions("bob", "/", configure="^bob-.*", write="^bob-.*", read="^bob-.*")
    port = broker.ports["amqp"]
    async with await aio_pika.connect(f"amqp://bob:secret@127.0.0.1:{port}/") as connection:
        channel = await connection.channel()
        await channel.declare_queue("bob-q")
        with pytest.raises(ChannelAccessRefused, match="configure access"):
            await channel.declare_queue("alice-q")
        channel = await connection.channel()
        with pytest.raises(ChannelAccessRefused, match="write access"):
            await channel.default_exchange.publish(Message(b"x"), "bob-q")


async def test_management_rows_list_classic_queues_exchanges_bindings(
        broker: Broker, channel: AbstractChannel) -> None:
    queue = await channel.declare_queue("listed", durable=True)
    await channel.declare_exchange("listed-x", aio_pika.ExchangeType.TOPIC)
    await queue.bind("listed-x", "a.*")
    await publish(channel, "listed", b"1", b"2")
    provider = ClassicQueues(broker.core)
    rows = {row["name"]: row for row in provider.queues("/")}
    assert (rows["listed"]["messages_ready"], rows["listed"]["durable"]) == (2, True)
    assert {"name": "listed-x", "type": "topic"}.items() <= {
        row["name"]: row for row in provider.exchanges("/")}["listed-x"].items()
    assert [(b["source"], b["destination"], b["routing_key"])
            for b in provider.bindings("/")] == [("", "listed", "listed"),  # the default
                                                 ("listed-x", "listed", "a.*")]
    assert await provider.delete_queue("/", "listed")
    assert "listed" not in {row["name"] for row in provider.queues("/")}


async def test_memory_alarm_blocks_publishers_until_it_clears(
        broker: Broker, channel: AbstractChannel, caplog: pytest.LogCaptureFixture) -> None:
    queue = await channel.declare_queue("held")
    broker.core.alarms.set("memory", True)
    await asyncio.sleep(0.05)
    assert "blocked by: 'low on memory'" in caplog.text  # aiormq logs connection.blocked
    publishing = asyncio.ensure_future(publish(channel, "held", b"waits"))
    await asyncio.sleep(0.2)
    assert not publishing.done()
    broker.core.alarms.set("memory", False)
    await asyncio.wait_for(publishing, 5)
    assert "was unblocked" in caplog.text
    assert await drain(queue) == [b"waits"]

