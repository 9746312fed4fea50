"""Single active consumer hand-off as RabbitMQ 3.11+ does it, through rstream: the active
consumer is stepped down with a ConsumerUpdate, and only once it has answered (or its
connection was dropped for not answering within the request timeout) is the next one
activated, so two consumers are never active on one partition."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rstream import (
    AMQPMessage,
    OffsetSpecification,
    OffsetType,
    SuperStreamConsumer,
    SuperStreamProducer,
    amqp_decoder,
)

from mainstem import Broker
from mainstem.config import ServerConfig

STEP_DOWN_S = 0.5  # how long the first consumer takes to answer its deactivation
REQUEST_TIMEOUT_MS = 600


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker with the default request timeout, 60 s."""
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    async with Broker(config=config) as running:
        yield running


@pytest.fixture
async def impatient_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker that drops a client leaving a ConsumerUpdate unanswered for 0.6 s."""
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    config = dataclasses.replace(config, request_timeout_ms=REQUEST_TIMEOUT_MS)
    async with Broker(config=config) as running:
        yield running


def connect_args(broker: Broker) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest", "super_stream": "handoff"}


PROPERTIES = {"single-active-consumer": "true", "name": "group", "super-stream": "handoff"}


class Member:
    """One SuperStreamConsumer of the group, noting when each partition told it what."""

    def __init__(self, broker: Broker, answer_after_s: float | None) -> None:
        self.consumer = SuperStreamConsumer(**connect_args(broker))
        self.answer_after_s = answer_after_s  # None: never answers a deactivation
        self.events: list[tuple[float, str, str]] = []  # (time, partition, what)
        self.received: list[tuple[float, str]] = []

    async def join(self) -> None:
        await self.consumer.start()
        await self.consumer.subscribe(self.on_message, decoder=amqp_decoder,
                                      properties=PROPERTIES,
                                      consumer_update_listener=self.on_update)

    async def on_update(self, is_active: bool, context) -> OffsetSpecification:
        now = time.monotonic()
        if is_active:
            self.events.append((now, context.stream, "activated"))
        else:
            self.events.append((now, context.stream, "asked to step down"))
            if self.answer_after_s is None:
                await asyncio.Event().wait()  # a consumer stuck in its listener
            await asyncio.sleep(self.answer_after_s)
            self.events.append((time.monotonic(), context.stream, "stepped down"))
        return OffsetSpecification(OffsetType.NEXT, 0)

    async def on_message(self, message: AMQPMessage, context) -> None:
        self.received.append((time.monotonic(), context.stream))

    def when(self, partition: str, what: str) -> float:
        return next(t for t, p, w in self.events if p == partition and w == what)


async def wait_until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def two_partitions(broker: Broker) -> None:
    async with SuperStreamConsumer(**connect_args(broker)) as admin:
        await admin.create_super_stream("handoff", n_partitions=2)


async def test_the_next_consumer_is_activated_only_once_the_active_one_stepped_down(
        broker: Broker) -> None:
    await two_partitions(broker)
    first, second = Member(broker, STEP_DOWN_S), Member(broker, 0)
    await first.join()
    await wait_until(lambda: len(first.events) == 2)  # active on both partitions
    await second.join()  # partition 1 goes to the second member (1 mod 2)
    await wait_until(lambda: any(w == "activated" for _, _, w in second.events)
                     and any(w == "stepped down" for _, _, w in first.events))
    stepped_down = first.when("handoff-1", "stepped down")
    activated = second.when("handoff-1", "activated")
    assert stepped_down - first.when("handoff-1", "asked to step down") >= STEP_DOWN_S
    assert activated >= stepped_down  # was STEP_DOWN_S before it
    assert [(p, w) for _, p, w in second.events] == [("handoff-1", "activated")]

    # Each partition's messages reach its one active consumer
    async with SuperStreamProducer(host="127.0.0.1", port=broker.ports["stream"],
                                   username="guest", password="guest", super_stream="handoff",
                                   routing_extractor=key_of) as producer:
        for i in range(20):
            await producer.send(AMQPMessage(body=b"m", application_properties={"k": str(i)}))
    await wait_until(lambda: len(first.received) + len(second.received) == 20)
    assert {p for _, p in first.received} == {"handoff-0"}
    assert {p for _, p in second.received} == {"handoff-1"}
    await asyncio.gather(first.consumer.close(), second.consumer.close())


async def key_of(message: AMQPMessage) -> str:
    return message.application_properties["k"]


async def test_a_consumer_that_never_steps_down_is_dropped_after_the_request_timeout(
        impatient_broker: Broker) -> None:
    broker = impatient_broker
    await two_partitions(broker)
    stuck, second = Member(broker, None), Member(broker, 0)
    await stuck.join()
    await wait_until(lambda: len(stuck.events) == 2)
    await second.join()
    await wait_until(lambda: any(w == "activated" for _, _, w in second.events))
    asked = stuck.when("handoff-1", "asked to step down")
    waited = second.when("handoff-1", "activated") - asked
    # RabbitMQ's request_timeout, shortened. Both times are taken where the clients read
    # the frames, so the step-down request's own delivery delay can shave a little off.
    assert waited >= REQUEST_TIMEOUT_MS / 1000 - 0.05
    # The stuck consumer's connection was closed: the second one has both partitions now
    await wait_until(lambda: {p for _, p, w in second.events if w == "activated"}
                     == {"handoff-0", "handoff-1"})
    await second.consumer.close()  # (closing `stuck` would wait on its dead connection)
