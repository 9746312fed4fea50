"""Each request body as the server reads it, sans-IO: typed, in either generation.

A reader takes the connection's layout (which says where the generations differ) and the
body, and returns what the request asks, partitions as indexes from 0 (None when the
client leaves the choice to the server). `route` pairs a reader with the handler of its
command, checks that nothing follows the body, and so the connection only dispatches.
The seed's bodies are those `commands` encodes for a client (round-tripped in the tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy.layouts import NewTopic, SeedLayout

Ident = int | str
T = TypeVar("T")
BodyReader = Callable[[SeedLayout, c.Reader], T]
Handler = Callable[[SeedLayout, c.Reader], Awaitable[bytes]]
# What follows the consumer's identifiers in the seed's bodies: see codec.read_consumer.
POLL_TAIL, GET_OFFSET_TAIL, STORE_OFFSET_TAIL = 18, 4, 12


@dataclass(frozen=True, slots=True)
class TopicRef:
    stream: Ident
    topic: Ident


@dataclass(frozen=True, slots=True)
class CreateTopic:
    stream: Ident
    topic: NewTopic


@dataclass(frozen=True, slots=True)
class Partitions:
    """CREATE_PARTITIONS and DELETE_PARTITIONS: how many to add or remove."""

    topic: TopicRef
    count: int


@dataclass(frozen=True, slots=True)
class GroupRef:
    topic: TopicRef
    group: Ident


@dataclass(frozen=True, slots=True)
class CreateGroup:
    topic: TopicRef
    wanted: int  # 0: the next free id
    name: str


@dataclass(frozen=True, slots=True)
class Send:
    topic: TopicRef
    partitioning: int  # commands.BALANCED, PARTITION_ID or MESSAGES_KEY
    value: bytes
    entries: list[bytes]  # the Osiris entries of the messages' records


@dataclass(frozen=True, slots=True)
class Poll:
    consumer: c.Consumer
    topic: TopicRef
    index: int | None
    polling: int  # 1 offset, 2 timestamp, 3 first, 4 last, 5 next
    value: int
    count: int
    auto_commit: bool


@dataclass(frozen=True, slots=True)
class OffsetRef:
    consumer: c.Consumer
    topic: TopicRef
    index: int | None


@dataclass(frozen=True, slots=True)
class StoreOffset:
    consumer: c.Consumer
    topic: TopicRef
    index: int | None
    offset: int


def route(read: BodyReader[T], handle: Callable[[T], Awaitable[bytes]]) -> Handler:
    """The handler of one command code: read its whole body, then hand it on."""
    def run(layout: SeedLayout, r: c.Reader) -> Awaitable[bytes]:
        request = read(layout, r)
        r.end()
        return handle(request)
    return run


def read_nothing(layout: SeedLayout, r: c.Reader) -> None:
    return None


def read_client(layout: SeedLayout, r: c.Reader) -> int:
    return r.u32()


def read_stream(layout: SeedLayout, r: c.Reader) -> Ident:
    return r.identifier()


def read_topic(layout: SeedLayout, r: c.Reader) -> TopicRef:
    return TopicRef(r.identifier(), r.identifier())


def read_new_stream(layout: SeedLayout, r: c.Reader) -> tuple[int, str]:
    return layout.new_stream(r)


def read_new_topic(layout: SeedLayout, r: c.Reader) -> CreateTopic:
    stream = r.identifier()
    return CreateTopic(stream, layout.new_topic(r))


def read_partitions(layout: SeedLayout, r: c.Reader) -> Partitions:
    return Partitions(read_topic(layout, r), r.u32())


def read_group(layout: SeedLayout, r: c.Reader) -> GroupRef:
    topic = read_topic(layout, r)
    return GroupRef(topic, layout.group(r))


def read_new_group(layout: SeedLayout, r: c.Reader) -> CreateGroup:
    topic = read_topic(layout, r)
    return CreateGroup(topic, *layout.new_group(r))


def read_send(layout: SeedLayout, r: c.Reader) -> Send:
    layout.send_prefix(r)
    topic = read_topic(layout, r)
    kind, length = r.u8(), r.u8()
    value = bytes(r.take(length))
    return Send(topic, kind, value, layout.entries(r))


def read_poll(layout: SeedLayout, r: c.Reader) -> Poll:
    consumer = layout.consumer(r, POLL_TAIL)
    topic = read_topic(layout, r)
    index = layout.partition(r)
    polling, value, count, auto_commit = r.u8(), r.u64(), r.u32(), r.u8()
    return Poll(consumer, topic, index, polling, value, count, bool(auto_commit))


def read_get_offset(layout: SeedLayout, r: c.Reader) -> OffsetRef:
    consumer = layout.consumer(r, GET_OFFSET_TAIL)
    topic = read_topic(layout, r)
    return OffsetRef(consumer, topic, layout.partition(r))


def read_store_offset(layout: SeedLayout, r: c.Reader) -> StoreOffset:
    consumer = layout.consumer(r, STORE_OFFSET_TAIL)
    topic = read_topic(layout, r)
    index = layout.partition(r)
    return StoreOffset(consumer, topic, index, layout.stored_offset(r))
