"""The fields dashboards and people read beside a queue's depth: `churn_rates` in
/api/overview, a queue's `idle_since` and consumer capacity, after real pika traffic."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pika

from mainstem import Broker

TIMEOUT_S = 15
RFC3339_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00")


async def get(http: aiohttp.ClientSession, path: str) -> Any:
    async with http.get(path) as response:
        assert response.status == 200
        return await response.json()


async def until(condition: Callable[[], Awaitable[Any]]) -> Any:
    """The condition's first truthy answer."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT_S
    while not (answer := await condition()):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)
    return answer


def connect(broker: Broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], credentials=pika.PlainCredentials("guest", "guest")))


def churn(broker: Broker) -> None:
    """A connection with two channels opens and closes; a queue is declared twice
    (created once) and deleted."""
    with connect(broker) as connection:
        channel = connection.channel()
        connection.channel().close()
        channel.queue_declare("passing")
        channel.queue_declare("passing")
        channel.queue_delete("passing")


async def test_churn_rates_move_with_connections_channels_and_queues(broker, http):
    before = (await get(http, "/api/overview"))["churn_rates"]
    assert set(before) >= {"connection_created", "connection_closed", "channel_created",
                           "channel_closed", "queue_declared", "queue_created",
                           "queue_deleted", "connection_created_details"}
    await asyncio.to_thread(churn, broker)

    async def moved() -> dict[str, Any] | None:
        rates = (await get(http, "/api/overview"))["churn_rates"]
        return rates if rates["connection_closed_details"]["rate"] > 0 else None

    after = await until(moved)
    assert {name: after[name] - before[name] for name in before if "details" not in name} == {
        "connection_created": 1, "connection_closed": 1, "channel_created": 2,
        "channel_closed": 2, "queue_declared": 2, "queue_created": 1, "queue_deleted": 1}
    assert after["queue_created_details"]["rate"] > 0


async def test_idle_since_is_set_once_a_queue_goes_quiet(broker, http):
    publisher = await asyncio.to_thread(connect, broker)
    try:
        channel = await asyncio.to_thread(publisher.channel)
        await asyncio.to_thread(channel.queue_declare, "quiet")
        await asyncio.to_thread(channel.basic_publish, "", "quiet", b"once")

        async def idle_since() -> str | None:
            row = await get(http, "/api/queues/%2F/quiet")
            return row.get("idle_since")

        first = await until(idle_since)
        assert RFC3339_MS.fullmatch(first)
        went_idle = datetime.fromisoformat(first)
        assert datetime.now(UTC) - timedelta(seconds=TIMEOUT_S) < went_idle <= datetime.now(UTC)
        await asyncio.to_thread(channel.basic_publish, "", "quiet", b"again")

        async def idle_again() -> str | None:
            since = await idle_since()
            return since if since is not None and since > first else None

        assert datetime.fromisoformat(await until(idle_again)) > went_idle
        rows = await get(http, "/api/queues")
        assert [row["name"] for row in rows if "idle_since" in row] == ["quiet"]
    finally:
        await asyncio.to_thread(publisher.close)


async def test_consumer_capacity_is_the_share_of_looks_a_consumer_could_take_more(
        broker, http):
    connection = await asyncio.to_thread(connect, broker)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.queue_declare, "work")
        await asyncio.to_thread(channel.basic_qos, prefetch_count=1)
        for i in range(3):
            await asyncio.to_thread(channel.basic_publish, "", "work", b"m%d" % i)
        deliveries: list[int] = []
        acking = False

        def on_message(ch, method, properties, body) -> None:
            deliveries.append(method.delivery_tag)
            if acking:
                ch.basic_ack(method.delivery_tag)

        await asyncio.to_thread(channel.basic_consume, "work", on_message)
        await asyncio.to_thread(connection.process_data_events, 0.5)
        assert len(deliveries) == 1  # prefetch 1: the consumer is full, two wait

        async def looked_at() -> dict[str, Any] | None:
            row = await get(http, "/api/queues/%2F/work")
            return row if "consumer_capacity" in row else None

        blocked = await until(looked_at)
        assert blocked["consumer_capacity"] == blocked["consumer_utilisation"] == 0.0
        acking = True
        await asyncio.to_thread(channel.basic_ack, deliveries[0])
        for _ in range(50):  # pika returns once it handled some events
            if len(deliveries) == 3:
                break
            await asyncio.to_thread(connection.process_data_events, 0.1)
        assert len(deliveries) == 3  # drained: the consumer waits with room for more

        async def served() -> float:
            return float((await get(http, "/api/queues/%2F/work"))["consumer_capacity"])

        assert 0 < await until(served) <= 1
        samples = await get(http, "/api/queues/%2F/work")
        assert samples["messages"] == 0
    finally:
        await asyncio.to_thread(connection.close)
