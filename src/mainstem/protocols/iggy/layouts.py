"""The bodies of the two generations of the Iggy protocol, sans-IO.

SEED: the early-2024 requests of iggy-py 0.4 with the replies of the Rust `iggy`
crate 0.6; partitions count from 1. VSR: the bodies apache-iggy 0.9 (Rust SDK 0.11)
sends behind the replicated framing: partitions count from 0, new streams, topics and
groups carry no wanted id, topics take their limits as typed option pairs, stream and
topic replies end in option blocks, a topic list is counted, a partition is optional
behind a flag, messages travel in batches (batch.py). Most commands read and answer
the same in both; a layout holds only what differs. Inside mainstem partitions are
indexes from 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from isal.isal_zlib import crc32

from mainstem.protocols.iggy import batch, commands, records
from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy.codec import Code, ErrorCode, IggyError
from mainstem.protocols.iggy.commands import StreamInfo, TopicInfo
from mainstem.protocols.iggy.records import Stored

VSR_TOPIC_INFO = struct.Struct("<IQIQBQQQ")  # the same without replicas
PARTITION_INFO = struct.Struct("<IQIQQQ")  # id, created, segments, current offset, size, msgs
NO_OPTIONS = c.U32.pack(0)  # an empty option block
SEND_CONFIRMATION = struct.Struct("<IIIIQ")  # count 1, stream, topic, partition, base offset
OPTION_EXPIRY = "message_expiry"
OPTION_MAX_SIZE = "max_topic_size"


@dataclass(frozen=True, slots=True)
class NewTopic:
    wanted: int  # a requested id, 0 for the next free one
    partitions: int
    expiry_us: int
    max_size: int
    name: str
    # Read and kept, not acted on: stored uncompressed, on one node.
    compression: int = 1
    replication_factor: int = 1


class SeedLayout:
    name: ClassVar[str] = "2024"
    partition_base: ClassVar[int] = 1
    default_partition: ClassVar[int | None] = None  # a consumer polling without a partition
    unsupported: ClassVar[frozenset[int]] = frozenset()

    def new_stream(self, r: c.Reader) -> tuple[int, str]:
        return r.u32(), r.name("stream name")

    def new_topic(self, r: c.Reader) -> NewTopic:
        """What follows the stream of CREATE_TOPIC (NEW_TOPIC and a name); the seed sends
        the two ids and the name only."""
        wanted, partitions = r.u32(), r.u32()
        if r.remaining > 0 and r.remaining == 1 + r.buf[r.pos]:  # only a name
            return NewTopic(wanted, partitions, 0, 0, r.name("topic name"))
        compression, expiry_us, max_size, replication_factor = r.u8(), r.u64(), r.u64(), r.u8()
        return NewTopic(wanted, partitions, expiry_us, max_size, r.name("topic name"),
                        compression, replication_factor)

    def new_group(self, r: c.Reader) -> tuple[int, str]:
        wanted = r.u32()
        return wanted, r.name("consumer group name") if r.remaining else str(wanted)

    def group(self, r: c.Reader) -> int | str:
        """The group a request names: the seed sends a u32 id, the 0.6 client an identifier."""
        return r.u32() if r.remaining == 4 else r.identifier()

    def send_prefix(self, r: c.Reader) -> None:
        """What comes before the stream and topic identifiers."""

    def entries(self, r: c.Reader) -> list[bytes]:
        """The messages that end a SEND_MESSAGES body, after the partitioning, as the
        Osiris entries of their records."""
        return c.read_each(r, records.entry)

    def consumer(self, r: c.Reader, tail: int) -> c.Consumer:
        """A poll's or an offset request's consumer; `tail` bytes follow the identifiers."""
        return c.read_consumer(r, tail)

    def partition(self, r: c.Reader) -> int | None:
        """A partition index, None when the request leaves it to the server (id 0)."""
        partition_id = r.u32()
        return partition_id - 1 if partition_id else None

    def stored_offset(self, r: c.Reader) -> int:
        return r.u64()

    def stream_info(self, stream_id: int, created_us: int, topics: int, size: int,
                    messages: int, name: str) -> bytes:
        return StreamInfo(stream_id, created_us, topics, size, messages, name).encode()

    def topic_info(self, topic_id: int, created_us: int, partitions: int, expiry_us: int,
                   max_size: int, size: int, messages: int, name: str) -> bytes:
        return TopicInfo(topic_id, created_us, partitions, expiry_us, max_size, size, messages,
                         name).encode()

    def topic_list(self, topics: list[bytes]) -> bytes:
        return b"".join(topics)

    def partition_info(self, index: int, created_us: int, segments: int, current: int,
                       size: int, messages: int) -> bytes:
        return PARTITION_INFO.pack(index + self.partition_base, created_us, segments, current,
                                   size, messages)

    def sent(self, stream_id: int, topic_id: int, index: int, base_offset: int) -> bytes:
        return b""

    def polled(self, index: int, current: int, count: int,
               chunks: list[tuple[int, list[Stored]]]) -> bytes:
        """The reply to a poll of `count` messages, read as (store time in µs, messages)."""
        out: list[bytes | memoryview] = [
            c.POLL_REPLY_HEADER.pack(index + self.partition_base, current, count)]
        for timestamp_us, messages in chunks:
            for offset, raw_id, headers, payload in messages:
                commands.add_polled_message(out, offset, timestamp_us, raw_id, crc32(payload),
                                            headers, payload)
        return b"".join(out)


class VsrLayout(SeedLayout):
    name: ClassVar[str] = "replicated"
    partition_base: ClassVar[int] = 0
    default_partition: ClassVar[int | None] = 0
    # Their replies changed shape in this generation and mainstem does not serve them.
    unsupported: ClassVar[frozenset[int]] = frozenset((
        Code.GET_STATS, Code.GET_ME, Code.GET_CLIENT, Code.GET_CLIENTS, Code.LOGIN_USER,
        Code.LOGOUT_USER))

    def new_stream(self, r: c.Reader) -> tuple[int, str]:
        return 0, r.name("stream name")

    def new_topic(self, r: c.Reader) -> NewTopic:
        partitions, name = r.u32(), r.name("topic name")
        options = read_options(r)
        return NewTopic(0, partitions, options.get(OPTION_EXPIRY, 0),
                        options.get(OPTION_MAX_SIZE, 0), name)

    def new_group(self, r: c.Reader) -> tuple[int, str]:
        return 0, r.name("consumer group name")

    def group(self, r: c.Reader) -> int | str:
        return r.identifier()

    def send_prefix(self, r: c.Reader) -> None:
        r.u32()  # the length of the routing part (identifiers, partitioning, count)

    def entries(self, r: c.Reader) -> list[bytes]:
        r.u32()  # the message count, checked against the batch's own
        return batch.read_batch(r, records.entry)

    def consumer(self, r: c.Reader, tail: int) -> c.Consumer:
        kind = r.u8()
        if kind not in (c.CONSUMER, c.CONSUMER_GROUP):
            raise IggyError(ErrorCode.INVALID_FORMAT, f"bad consumer kind {kind}")
        return c.Consumer(kind, r.identifier())

    def partition(self, r: c.Reader) -> int | None:
        """A flag u8 (1 when given), then the index u32 (0 when not)."""
        given, index = r.u8(), r.u32()
        return index if given else None

    def stored_offset(self, r: c.Reader) -> int:
        offset = r.u64()
        if r.remaining == 1:
            r.u8()  # the acknowledgement level: one node stores before it answers
        return offset

    def stream_info(self, stream_id: int, created_us: int, topics: int, size: int,
                    messages: int, name: str) -> bytes:
        return super().stream_info(stream_id, created_us, topics, size, messages, name) + \
            NO_OPTIONS

    def topic_info(self, topic_id: int, created_us: int, partitions: int, expiry_us: int,
                   max_size: int, size: int, messages: int, name: str) -> bytes:
        return VSR_TOPIC_INFO.pack(topic_id, created_us, partitions, expiry_us, 1, max_size, size,
                                   messages) + c.encode_name(name) + NO_OPTIONS + NO_OPTIONS

    def topic_list(self, topics: list[bytes]) -> bytes:
        return c.U32.pack(len(topics)) + b"".join(topics)

    def sent(self, stream_id: int, topic_id: int, index: int, base_offset: int) -> bytes:
        return SEND_CONFIRMATION.pack(1, stream_id, topic_id, index, base_offset)

    def polled(self, index: int, current: int, count: int,
               chunks: list[tuple[int, list[Stored]]]) -> bytes:
        return c.POLL_REPLY_HEADER.pack(index, current, count) + b"".join(
            batch.encode_batch(index, timestamp_us, group)
            for timestamp_us, group in batch.group_by_timestamp(chunks))


def read_options(r: c.Reader) -> dict[str, int]:
    """The option pairs that end a topic request: a typed string key, then a typed value
    (kind u8, length u32, bytes). The u64 limits mainstem honours are returned; the other
    keys (durability, segment and flush tuning) mean nothing to one node's log."""
    options: dict[str, int] = {}
    while r.remaining:
        key = _typed(r)
        value = _typed(r)
        if key in (OPTION_EXPIRY, OPTION_MAX_SIZE):
            if not isinstance(value, bytes) or len(value) != 8:
                raise IggyError(ErrorCode.INVALID_FORMAT, f"option {key} is no u64")
            options[key] = c.U64.unpack(value)[0]
    return options


def _typed(r: c.Reader) -> bytes | str:
    kind = r.u8()
    raw = bytes(r.take(r.u32()))
    if kind == batch.STRING_KEY:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise IggyError(ErrorCode.INVALID_FORMAT, "option is not UTF-8") from None
    return raw


SEED = SeedLayout()
VSR = VsrLayout()
