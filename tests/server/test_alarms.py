"""Resource alarms on the Iggy, BSON event and segment protocols, with real clients: while a
(tiny-watermark) memory alarm holds, publishers are refused with the protocol's error or
held back, consumers keep draining, and everything works again once it clears."""

from __future__ import annotations

import asyncio

import pytest
from iggy_py import IggyClient as PyIggy
from iggy_py import PollingStrategy, SendMessage

from mainstem import Broker
from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClient, IggyClientError, Message
from mainstem.client.segment import SegmentClient
from mainstem.protocols.iggy.codec import ErrorCode


async def set_alarm(broker: Broker, on: bool) -> None:
    broker.alarm_monitor.watermarks.memory_high_watermark = 1e-6 if on else 1.0
    await asyncio.to_thread(broker.alarm_monitor.check)
    assert broker.core.alarms.blocked is on


async def test_iggy_send_is_refused_while_polls_go_on(broker: Broker) -> None:
    client = PyIggy(f"127.0.0.1:{broker.ports['iggy']}")
    await client.connect()
    await client.login_user("guest", "guest")
    await client.create_stream("shop", 1)
    await client.create_topic("shop", "orders", partitions_count=1, topic_id=1)
    await client.send_messages("shop", "orders", 1, [SendMessage("before")])
    await set_alarm(broker, True)
    with pytest.raises(RuntimeError):
        await client.send_messages("shop", "orders", 1, [SendMessage("refused")])
    own = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await own.login("guest", "guest")
    with pytest.raises(IggyClientError) as refused:
        await own.send("shop", "orders", [Message(b"refused")], partition=1)
    assert refused.value.code == ErrorCode.CANNOT_APPEND_MESSAGE
    polled = await client.poll_messages("shop", "orders", 1, PollingStrategy.First(), 10, False)
    assert [m.payload() for m in polled] == [b"before"]  # consumers keep draining
    await set_alarm(broker, False)
    await client.send_messages("shop", "orders", 1, [SendMessage("after")])
    polled = await client.poll_messages("shop", "orders", 1, PollingStrategy.First(), 10, False)
    assert [m.payload() for m in polled] == [b"before", b"after"]
    await own.close()


async def test_bson_publish_and_commit_fail_while_subscribers_drain(broker: Broker) -> None:
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    await client.create_channel("feed")
    await client.publish("feed", {"n": 0})
    await client.start_tx(1)
    await client.publish("feed", {"n": 2}, session=1)
    await set_alarm(broker, True)
    with pytest.raises(EventsError) as refused:
        await client.publish("feed", {"n": 1})
    assert refused.value.code == "RESOURCE_ALARM"
    with pytest.raises(EventsError) as held:
        await client.commit_tx(1)
    assert held.value.code == "RESOURCE_ALARM"
    subscription = await client.subscribe("feed", start_pos=0)
    assert (await subscription.next()).event == {"n": 0}
    await set_alarm(broker, False)
    await client.publish("feed", {"n": 1})
    await client.commit_tx(1)  # the transaction stayed open through the alarm
    assert [(await subscription.next()).event["n"] for _ in range(2)] == [1, 2]
    await client.close()


async def test_segment_appends_are_held_until_the_alarm_clears(broker: Broker) -> None:
    writer = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    reader = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    await writer.create("/logs/0")
    appender = await writer.appender("/logs/0")
    appender.append_block([b"first"])
    stored = await appender.flush()
    await set_alarm(broker, True)
    appender.append_block([b"second"])
    with pytest.raises(TimeoutError):
        await appender.flush(timeout=0.5)
    assert (await reader.read_all("/logs/0")).endswith(b"first")  # reads go on
    assert len(await reader.read_all("/logs/0")) == stored
    await set_alarm(broker, False)
    assert await appender.flush() > stored
    assert (await reader.read_all("/logs/0")).endswith(b"second")
    await writer.close()
    await reader.close()
