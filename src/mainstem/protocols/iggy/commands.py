"""Iggy commands of the 2024 generation both ways, sans-IO: each request a client encodes,
each reply the server encodes and a client decodes.

`encode()` gives a request's payload (`codec.encode_request` adds the length and code) or
a reply's payload (`codec.encode_response` adds status and length); a reply's
`decode(reader)` reads one back. The server reads the requests with `requests.py` (through
`layouts`), whose tests read what these encode; it reads LOGIN_USER with its `decode`.

A request of one command code says it in a `code` property, not a class constant:
compiled (mypyc), a dataclass takes every name in its body for a field.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Self, TypeVar

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy.codec import (
    POLL_REPLY_HEADER,
    POLLED_HEADER,
    SEND_MESSAGE_HEADER,
    U32,
    Code,
    Reader,
)

Ident = int | str
T = TypeVar("T")
Headers = dict[str, tuple[int, bytes]]  # key -> (kind, value)

STREAM_INFO = struct.Struct("<IQIQQ")  # id, created at, topics, size, messages
SEED_TOPIC_INFO = struct.Struct("<IQIQBQBQQ")  # id, created, partitions, expiry, codec,
#                                                max size, replicas, size, messages
NEW_TOPIC = struct.Struct("<IIBQQB")  # id, partitions, compression, expiry, max size, replicas
POLL_TAIL = struct.Struct("<IBQIB")  # partition id, polling kind, value, count, auto commit
STORED_OFFSET = struct.Struct("<IQ")  # partition id, offset
OFFSET_INFO = struct.Struct("<IQQ")  # partition id, current offset, stored offset
GROUP_INFO = struct.Struct("<III")  # id, partitions, members
CLIENT_INFO = struct.Struct("<IIB")  # client id, user id, transport
CLIENT_GROUP = struct.Struct("<III")  # stream id, topic id, group id
STATS = struct.Struct("<IffQQQQQQQQIIIIQII")
STATS_FIELDS = ("process_id", "cpu_usage", "total_cpu_usage", "memory_usage", "total_memory",
                "available_memory", "run_time", "start_time", "read_bytes", "written_bytes",
                "messages_size_bytes", "streams_count", "topics_count", "partitions_count",
                "segments_count", "messages_count", "clients_count", "consumer_groups_count")
STATS_STRINGS = ("hostname", "os_name", "os_version", "kernel_version")
BALANCED, PARTITION_ID, MESSAGES_KEY = 1, 2, 3  # partitioning kinds of SEND_MESSAGES
POLLED_STATE: Final = 1  # a polled message's state byte: available


def decode_headers(raw: bytes) -> Headers:
    return {key: (kind, value) for key, kind, value in c.iter_headers(raw)}


def _pair(stream: Ident, topic: Ident) -> bytes:
    return c.encode_identifier(stream) + c.encode_identifier(topic)


def _consumer(consumer: c.Consumer) -> bytes:
    return bytes((consumer.kind,)) + c.encode_identifier(consumer.id)


# -- requests -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginUser:
    username: str
    password: str
    version: str = ""  # informative: the server reads and ignores these two
    context: str = ""

    @property
    def code(self) -> int:
        return Code.LOGIN_USER

    def encode(self) -> bytes:
        return (c.encode_name(self.username) + c.encode_name(self.password)
                + c.encode_long_string(self.version) + c.encode_long_string(self.context))

    @classmethod
    def decode(cls, r: Reader) -> Self:
        username, password = r.name("username"), r.name("password")
        if not r.remaining:
            return cls(username, password)
        return cls(username, password, r.long_string(), r.long_string())


@dataclass(frozen=True, slots=True)
class GetClient:
    client_id: int

    @property
    def code(self) -> int:
        return Code.GET_CLIENT

    def encode(self) -> bytes:
        return U32.pack(self.client_id)


@dataclass(frozen=True, slots=True)
class CreateStream:
    stream_id: int  # 0: the next free one
    name: str

    @property
    def code(self) -> int:
        return Code.CREATE_STREAM

    def encode(self) -> bytes:
        return U32.pack(self.stream_id) + c.encode_name(self.name)


@dataclass(frozen=True, slots=True)
class StreamCommand:
    """DELETE_STREAM, GET_STREAM, GET_TOPICS: a stream identifier."""

    code: int
    stream: Ident

    def encode(self) -> bytes:
        return c.encode_identifier(self.stream)


@dataclass(frozen=True, slots=True)
class TopicCommand:
    """DELETE_TOPIC, GET_TOPIC, GET_CONSUMER_GROUPS: stream and topic identifiers."""

    code: int
    stream: Ident
    topic: Ident

    def encode(self) -> bytes:
        return _pair(self.stream, self.topic)


@dataclass(frozen=True, slots=True)
class CreateTopic:
    stream: Ident
    topic_id: int  # 0: the next free one
    partitions: int
    expiry_us: int
    max_size: int
    name: str
    compression: int = 1  # none
    replication_factor: int = 1

    @property
    def code(self) -> int:
        return Code.CREATE_TOPIC

    def encode(self) -> bytes:
        return (c.encode_identifier(self.stream)
                + NEW_TOPIC.pack(self.topic_id, self.partitions, self.compression, self.expiry_us,
                                 self.max_size, self.replication_factor)
                + c.encode_name(self.name))


@dataclass(frozen=True, slots=True)
class PartitionsCommand:
    """CREATE_PARTITIONS, DELETE_PARTITIONS: stream, topic and a partition count."""

    code: int
    stream: Ident
    topic: Ident
    count: int

    def encode(self) -> bytes:
        return _pair(self.stream, self.topic) + U32.pack(self.count)


@dataclass(slots=True)
class Message:
    payload: bytes
    id: int = 0
    headers: Headers = field(default_factory=dict)

    def encode(self) -> bytes:
        headers = c.encode_headers(self.headers) if self.headers else b""
        return (SEND_MESSAGE_HEADER.pack(self.id.to_bytes(16, "little"), len(headers)) + headers
                + U32.pack(len(self.payload)) + self.payload)


@dataclass(frozen=True, slots=True)
class Partitioning:
    """Where SEND_MESSAGES goes: balanced, a partition id, or the hash of a key."""

    kind: int
    value: bytes = b""

    @classmethod
    def partition(cls, partition_id: int) -> Partitioning:
        return cls(PARTITION_ID, U32.pack(partition_id))

    def encode(self) -> bytes:
        return bytes((self.kind, len(self.value))) + self.value


@dataclass(slots=True)
class SendMessages:
    stream: Ident
    topic: Ident
    partitioning: Partitioning
    messages: list[Message]

    @property
    def code(self) -> int:
        return Code.SEND_MESSAGES

    def encode(self) -> bytes:
        return b"".join([_pair(self.stream, self.topic), self.partitioning.encode(),
                         *[m.encode() for m in self.messages]])


@dataclass(frozen=True, slots=True)
class PollMessages:
    consumer: c.Consumer
    stream: Ident
    topic: Ident
    partition_id: int  # from 1; 0 lets the server choose
    polling: int  # 1 offset, 2 timestamp, 3 first, 4 last, 5 next
    value: int
    count: int
    auto_commit: bool

    @property
    def code(self) -> int:
        return Code.POLL_MESSAGES

    def encode(self) -> bytes:
        return (_consumer(self.consumer) + _pair(self.stream, self.topic)
                + POLL_TAIL.pack(self.partition_id, self.polling, self.value, self.count,
                                 self.auto_commit))


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset:
    consumer: c.Consumer
    stream: Ident
    topic: Ident
    partition_id: int
    offset: int

    @property
    def code(self) -> int:
        return Code.STORE_CONSUMER_OFFSET

    def encode(self) -> bytes:
        return (_consumer(self.consumer) + _pair(self.stream, self.topic)
                + STORED_OFFSET.pack(self.partition_id, self.offset))


@dataclass(frozen=True, slots=True)
class GetConsumerOffset:
    consumer: c.Consumer
    stream: Ident
    topic: Ident
    partition_id: int

    @property
    def code(self) -> int:
        return Code.GET_CONSUMER_OFFSET

    def encode(self) -> bytes:
        return _consumer(self.consumer) + _pair(self.stream, self.topic) + \
            U32.pack(self.partition_id)


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    stream: Ident
    topic: Ident
    group_id: int
    name: str

    @property
    def code(self) -> int:
        return Code.CREATE_CONSUMER_GROUP

    def encode(self) -> bytes:
        return _pair(self.stream, self.topic) + U32.pack(self.group_id) + \
            c.encode_name(self.name)


@dataclass(frozen=True, slots=True)
class GroupCommand:
    """DELETE, JOIN, LEAVE and GET_CONSUMER_GROUP: stream, topic and group identifiers.
    The server also takes a bare u32 group id (the seed's form), so a 2-byte string
    identifier reads as one: name groups with 1 or 3+ bytes."""

    code: int
    stream: Ident
    topic: Ident
    group: Ident

    def encode(self) -> bytes:
        return _pair(self.stream, self.topic) + c.encode_identifier(self.group)


# -- replies ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoggedIn:
    user_id: int

    def encode(self) -> bytes:
        return U32.pack(self.user_id)

    @classmethod
    def decode(cls, r: Reader) -> Self:
        return cls(r.u32())


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream in GET_STREAM (then its topics) and GET_STREAMS (one after another)."""

    id: int
    created_us: int
    topics: int
    size: int
    messages: int
    name: str

    def encode(self) -> bytes:
        return STREAM_INFO.pack(self.id, self.created_us, self.topics, self.size,
                                self.messages) + c.encode_name(self.name)

    @classmethod
    def decode(cls, r: Reader) -> Self:
        stream_id, created_us, topics, size, messages = STREAM_INFO.unpack(
            r.take(STREAM_INFO.size))
        return cls(stream_id, created_us, topics, size, messages, r.name("stream name"))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic in GET_TOPIC (then its partitions) and GET_STREAM; compression "none" and
    one replica, always."""

    id: int
    created_us: int
    partitions: int
    expiry_us: int
    max_size: int
    size: int
    messages: int
    name: str

    def encode(self) -> bytes:
        return SEED_TOPIC_INFO.pack(self.id, self.created_us, self.partitions, self.expiry_us,
                                    1, self.max_size, 1, self.size, self.messages) + \
            c.encode_name(self.name)

    @classmethod
    def decode(cls, r: Reader) -> Self:
        (topic_id, created_us, partitions, expiry_us, _, max_size, _, size,
         messages) = SEED_TOPIC_INFO.unpack(r.take(SEED_TOPIC_INFO.size))
        return cls(topic_id, created_us, partitions, expiry_us, max_size, size, messages,
                   r.name("topic name"))


def add_polled_message(out: list[bytes | memoryview], offset: int, timestamp_us: int,
                       raw_id: bytes, checksum: int, headers: bytes,
                       payload: bytes | memoryview) -> None:
    """One message of a POLL_MESSAGES reply (its id as u128 LE), appended to `out` in parts
    to join."""
    if headers:
        out += (POLLED_HEADER.pack(offset, POLLED_STATE, timestamp_us, raw_id, checksum),
                U32.pack(len(headers)), headers, U32.pack(len(payload)), payload)
    else:
        out += (_POLLED_PLAIN.pack(offset, POLLED_STATE, timestamp_us, raw_id, checksum, 0,
                                   len(payload)), payload)


_POLLED_PLAIN: Final = struct.Struct(POLLED_HEADER.format + "II")  # and both lengths, no headers


@dataclass(slots=True)
class PolledMessage:
    offset: int
    timestamp: int  # microseconds
    id: int
    checksum: int
    headers: Headers
    payload: bytes


@dataclass(slots=True)
class Polled:
    """The POLL_MESSAGES reply."""

    partition_id: int
    current_offset: int
    messages: list[PolledMessage]

    def encode(self) -> bytes:
        out: list[bytes | memoryview] = [
            POLL_REPLY_HEADER.pack(self.partition_id, self.current_offset, len(self.messages))]
        for m in self.messages:
            add_polled_message(out, m.offset, m.timestamp, m.id.to_bytes(16, "little"), m.checksum,
                               c.encode_headers(m.headers), m.payload)
        return b"".join(out)

    @classmethod
    def decode(cls, r: Reader) -> Self:
        """One tight loop over the reply (a client's hot path); a truncated reply raises
        struct.error or IggyError."""
        buf, pos = r.buf, r.pos
        partition_id, current, count = POLL_REPLY_HEADER.unpack_from(buf, pos)
        pos += POLL_REPLY_HEADER.size
        unpack_head, unpack_u32 = POLLED_HEADER.unpack_from, U32.unpack_from
        messages = []
        for _ in range(count):
            offset, _state, timestamp, raw_id, checksum = unpack_head(buf, pos)
            pos += POLLED_HEADER.size
            (length,) = unpack_u32(buf, pos)
            headers = decode_headers(buf[pos + 4:pos + 4 + length].tobytes()) if length else {}
            pos += 4 + length
            (length,) = unpack_u32(buf, pos)
            payload = buf[pos + 4:pos + 4 + length].tobytes()
            pos += 4 + length
            messages.append(PolledMessage(offset, timestamp, int.from_bytes(raw_id, "little"),
                                          checksum, headers, payload))
        r.pos = pos
        r.take(0)  # past the end: truncated
        return cls(partition_id, current, messages)


@dataclass(frozen=True, slots=True)
class OffsetInfo:
    """The GET_CONSUMER_OFFSET reply (an empty reply: no offset stored)."""

    partition_id: int
    current_offset: int
    stored_offset: int

    def encode(self) -> bytes:
        return OFFSET_INFO.pack(self.partition_id, self.current_offset, self.stored_offset)

    @classmethod
    def decode(cls, r: Reader) -> Self:
        return cls(*OFFSET_INFO.unpack(r.take(OFFSET_INFO.size)))


@dataclass(slots=True)
class ConsumerGroup:
    """A group in GET/CREATE_CONSUMER_GROUP (with its members) and GET_CONSUMER_GROUPS
    (without: `members` then decodes empty)."""

    id: int
    name: str
    partitions_count: int
    members: dict[int, list[int]]  # member (client) id -> partition ids

    def encode(self, details: bool = True) -> bytes:
        out = [GROUP_INFO.pack(self.id, self.partitions_count, len(self.members)),
               c.encode_name(self.name)]
        if details:
            for member, partitions in self.members.items():
                out.append(struct.pack(f"<II{len(partitions)}I", member, len(partitions),
                                       *partitions))
        return b"".join(out)

    @classmethod
    def decode(cls, r: Reader, details: bool = True) -> Self:
        group_id, partitions, members_count = GROUP_INFO.unpack(r.take(GROUP_INFO.size))
        name = r.name("consumer group name")
        members = {}
        if details:
            for _ in range(members_count):
                member = r.u32()
                members[member] = [r.u32() for _ in range(r.u32())]
        return cls(group_id, name, partitions, members)


@dataclass(slots=True)
class ClientInfo:
    """A client in GET_ME and GET_CLIENT (with its groups) and GET_CLIENTS (without:
    `consumer_groups` then decodes None)."""

    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups_count: int
    consumer_groups: list[tuple[int, int, int]] | None = None  # stream, topic, group ids

    def encode(self) -> bytes:
        out = [CLIENT_INFO.pack(self.client_id, self.user_id, self.transport),
               c.encode_long_string(self.address), U32.pack(self.consumer_groups_count)]
        out += (CLIENT_GROUP.pack(*g) for g in self.consumer_groups or ())
        return b"".join(out)

    @classmethod
    def decode(cls, r: Reader, details: bool) -> Self:
        client_id, user_id, transport = CLIENT_INFO.unpack(r.take(CLIENT_INFO.size))
        info = cls(client_id, user_id, transport, r.long_string(), r.u32())
        if details:
            info.consumer_groups = [CLIENT_GROUP.unpack(r.take(CLIENT_GROUP.size))
                                    for _ in range(info.consumer_groups_count)]
        return info


def encode_stats(stats: dict[str, object]) -> bytes:
    """The GET_STATS reply: STATS_FIELDS then STATS_STRINGS, by name."""
    return STATS.pack(*(stats[name] for name in STATS_FIELDS)) + b"".join(
        c.encode_long_string(str(stats[name])) for name in STATS_STRINGS)


def decode_stats(r: Reader) -> dict[str, object]:
    stats: dict[str, object] = dict(zip(STATS_FIELDS, STATS.unpack(r.take(STATS.size)),
                                        strict=True))
    stats.update((name, r.long_string()) for name in STATS_STRINGS)
    return stats


def decode_all(r: Reader, decode: Callable[[Reader], T]) -> list[T]:
    """Items that follow one another to the end of a reply (GET_STREAMS, GET_CLIENTS...)."""
    out = []
    while r.remaining:
        out.append(decode(r))
    return out
