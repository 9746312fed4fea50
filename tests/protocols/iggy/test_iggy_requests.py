"""The server's request readers (requests.py, and the login in state.py) read what
mainstem's client encodes (commands.py) in the seed generation, and the replicated
generation's own forms."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import commands as cmd
from mainstem.protocols.iggy import layouts, records
from mainstem.protocols.iggy import requests as rq
from mainstem.protocols.iggy.codec import Code
from mainstem.protocols.iggy.state import IggyState, Login

from .test_iggy_codec import (
    consumers,
    group_idents,
    headers,
    idents,
    long_strings,
    names,
    u8,
    u32,
    u64,
)

SEED, VSR = layouts.SEED, layouts.VSR
messages = st.builds(cmd.Message, st.binary(max_size=40), st.integers(1, 2**128 - 1), headers)
partitionings = st.one_of(
    st.builds(cmd.Partitioning, st.just(cmd.BALANCED)),
    st.builds(cmd.Partitioning.partition, u32),
    st.builds(cmd.Partitioning, st.just(cmd.MESSAGES_KEY), st.binary(min_size=1, max_size=20)),
)


def routed(reader: rq.BodyReader[object], layout: layouts.SeedLayout, body: bytes) -> object:
    """What the handler a body is routed to receives, as in the connection."""
    seen: list[object] = []

    async def handle(request: object) -> bytes:
        seen.append(request)
        return b"answered"

    async def run() -> bytes:
        return await rq.route(reader, handle)(layout, c.Reader(memoryview(body)))

    assert asyncio.run(run()) == b"answered"
    return seen[0]


def read_body(reader: rq.BodyReader[object], layout: layouts.SeedLayout,
                  body: bytes) -> object:
    r = c.Reader(memoryview(body))
    request = reader(layout, r)
    r.end()
    return request


def index(partition_id: int) -> int | None:
    return partition_id - 1 if partition_id else None


def topic(stream: rq.Ident, name: rq.Ident) -> rq.TopicRef:
    return rq.TopicRef(stream, name)


@settings(max_examples=80)
@given(st.builds(cmd.SendMessages, idents, idents, partitionings,
                 st.lists(messages, min_size=1, max_size=4)))
def test_a_seed_send_reads_as_its_topic_partitioning_and_entries(sent: cmd.SendMessages) -> None:
    got = read_body(rq.read_send, SEED, sent.encode())
    entries = [records.entry(m.id.to_bytes(16, "little"),
                             c.encode_headers(m.headers) if m.headers else b"", m.payload)
               for m in sent.messages]
    assert got == rq.Send(topic(sent.stream, sent.topic), sent.partitioning.kind,
                          sent.partitioning.value, entries)


@settings(max_examples=80)
@given(st.builds(cmd.PollMessages, consumers, idents, idents, u32, u8, u64, u32, st.booleans()))
def test_a_seed_poll_reads_with_partitions_from_zero(poll: cmd.PollMessages) -> None:
    assert read_body(rq.read_poll, SEED, poll.encode()) == rq.Poll(
        poll.consumer, topic(poll.stream, poll.topic), index(poll.partition_id), poll.polling,
        poll.value, poll.count, poll.auto_commit)


@settings(max_examples=80)
@given(st.builds(cmd.StoreConsumerOffset, consumers, idents, idents, u32, u64),
       st.builds(cmd.GetConsumerOffset, consumers, idents, idents, u32))
def test_seed_offset_requests(store: cmd.StoreConsumerOffset,
                              get: cmd.GetConsumerOffset) -> None:
    assert read_body(rq.read_store_offset, SEED, store.encode()) == rq.StoreOffset(
        store.consumer, topic(store.stream, store.topic), index(store.partition_id), store.offset)
    assert read_body(rq.read_get_offset, SEED, get.encode()) == rq.OffsetRef(
        get.consumer, topic(get.stream, get.topic), index(get.partition_id))


@settings(max_examples=60)
@given(idents, idents, u32, names, group_idents,
       st.builds(cmd.CreateTopic, idents, u32, u32, u64, u64, names, st.sampled_from([1, 2]), u8))
def test_seed_management_requests(stream: rq.Ident, name: rq.Ident, number: int, text: str,
                                  group: rq.Ident, create: cmd.CreateTopic) -> None:
    ref = topic(stream, name)
    pair = cmd.TopicCommand(Code.GET_TOPIC, stream, name).encode()
    assert read_body(rq.read_client, SEED, cmd.GetClient(number).encode()) == number
    assert read_body(rq.read_stream, SEED, c.encode_identifier(stream)) == stream
    assert read_body(rq.read_topic, SEED, pair) == ref
    assert read_body(rq.read_new_stream, SEED,
                         cmd.CreateStream(number, text).encode()) == (number, text)
    partitions = cmd.PartitionsCommand(Code.CREATE_PARTITIONS, stream, name, number)
    assert read_body(rq.read_partitions, SEED, partitions.encode()) == rq.Partitions(
        ref, number)
    joined = cmd.GroupCommand(Code.JOIN_CONSUMER_GROUP, stream, name, group)
    assert read_body(rq.read_group, SEED, joined.encode()) == rq.GroupRef(ref, group)
    new_group = cmd.CreateConsumerGroup(stream, name, number, text)
    assert read_body(rq.read_new_group, SEED, new_group.encode()) == rq.CreateGroup(
        ref, number, text)
    got = read_body(rq.read_new_topic, SEED, create.encode())
    assert got == rq.CreateTopic(create.stream, layouts.NewTopic(
        create.topic_id, create.partitions, create.expiry_us, create.max_size, create.name,
        create.compression, create.replication_factor))


@settings(max_examples=60)
@given(st.builds(cmd.LoginUser, names, names, long_strings, long_strings))
def test_a_seed_login_reads_as_its_credentials(login: cmd.LoginUser) -> None:
    state = IggyState(1, {Code.LOGIN_USER}, "test")
    assert state.tell_framing(c.encode_request(Code.PING))
    read = state.receive(c.Request(Code.LOGIN_USER, memoryview(login.encode())))
    assert isinstance(read, Login)
    assert (read.username, read.password) == (login.username, login.password)


def vsr_partition(partition: int | None) -> bytes:
    return struct.pack("<BI", partition is not None, partition or 0)


def vsr_consumer(consumer: c.Consumer) -> bytes:
    return bytes((consumer.kind,)) + c.encode_identifier(consumer.id)


@settings(max_examples=80)
@given(consumers, idents, idents, st.none() | u32, u8, u64, u32, st.booleans(), u64)
def test_replicated_polls_and_offsets_carry_an_optional_partition(
        consumer: c.Consumer, stream: rq.Ident, name: rq.Ident, partition: int | None,
        polling: int, value: int, count: int, auto_commit: bool, offset: int) -> None:
    head = vsr_consumer(consumer) + c.encode_identifier(stream) + c.encode_identifier(name)
    head += vsr_partition(partition)
    ref = topic(stream, name)
    poll = head + struct.pack("<BQIB", polling, value, count, auto_commit)
    assert read_body(rq.read_poll, VSR, poll) == rq.Poll(
        consumer, ref, partition, polling, value, count, auto_commit)
    assert read_body(rq.read_get_offset, VSR, head) == rq.OffsetRef(consumer, ref, partition)
    for acknowledgement in (b"", b"\x01"):
        stored = head + c.U64.pack(offset) + acknowledgement
        assert read_body(rq.read_store_offset, VSR, stored) == rq.StoreOffset(
            consumer, ref, partition, offset)


def test_the_routed_handler_gets_the_request_and_trailing_bytes_are_refused() -> None:
    body = cmd.TopicCommand(Code.GET_TOPIC, 7, "t").encode()
    assert routed(rq.read_topic, SEED, body) == rq.TopicRef(7, "t")
    with pytest.raises(c.IggyError) as refused:
        routed(rq.read_topic, SEED, body + b"\x00")
    assert refused.value.code == c.ErrorCode.INVALID_FORMAT
