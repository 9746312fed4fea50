"""Frames a stream-protocol client sends, one dataclass per command, plus the shared
structures (offset specification, command versions) and the plain code-only Response.

Each frame has a `parse(reader)` classmethod (see PARSERS: what the server reads) and
`body()` (what a client writes). Frames only the server sends live in `responses`. The frame
header (size, key, version) is handled by `codec`.
"""

from __future__ import annotations

import operator
import struct
from builtins import memoryview  # compiled dataclasses look their field types up here
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_BIT, SUB_BATCH_ENTRY
from mainstem.protocols.rabbit_stream import wire
from mainstem.protocols.rabbit_stream.constants import (
    RESPONSE_FLAG,
    Key,
    MainstemKey,
    OffsetType,
)
from mainstem.protocols.rabbit_stream.wire import (
    CORR_CODE,
    I64,
    U8,
    U16,
    U32,
    U64,
    MalformedFrame,
    Reader,
)

_COMMAND_VERSION = struct.Struct(">HHH")

PACKED_ID = U64  # a publishing id as Publish and PublishConfirm frames carry it


def _sub_batch_size(data: bytes, pos: int) -> int:
    """A sub-batch entry's size past its first four bytes, as a simple entry's length."""
    length: int = SUB_BATCH_ENTRY.unpack_from(data, pos)[3]
    return SUB_BATCH_ENTRY.size - SIMPLE_ENTRY.size + length


def _nullable_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A nullable string at `pos` (i16 length, -1 for null, then UTF-8) and where it ends."""
    length = data[pos] << 8 | data[pos + 1]
    pos += 2
    if length == 0xFFFF:
        return None, pos
    if length & 0x8000 or pos + length > len(data):
        raise MalformedFrame("string runs past the end of the frame")
    return data[pos:pos + length].decode(), pos + length


def packed(ids: Sequence[int]) -> bytes:
    """Publishing ids packed as on the wire, one after another."""
    return struct.pack(f">{len(ids)}Q", *ids)


def unpacked(ids: bytes) -> list[int]:
    """Publishing ids packed as on the wire, as integers."""
    return list(struct.unpack(f">{len(ids) // PACKED_ID.size}Q", ids))


class Frame:
    """Base of all frames: the command key and version written in the header. Each frame
    says its key in `wire_key`, not in a class constant: compiled (mypyc), a dataclass takes
    every name in its body for a field."""

    __slots__ = ()

    def wire_key(self) -> int:
        raise NotImplementedError

    def wire_version(self) -> int:
        return 1

    def body(self) -> bytes:
        raise NotImplementedError


# ---------------------------------------------------------------- shared structures


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a subscription starts: type 4 carries an offset, type 5 a timestamp (ms)."""

    type: OffsetType
    value: int = 0

    @classmethod
    def parse(cls, r: Reader, *, allow_none: bool = False) -> OffsetSpec:
        raw = r.u16()
        if raw == OffsetType.OFFSET:
            return cls(OffsetType.OFFSET, r.u64())
        if raw == OffsetType.TIMESTAMP:
            return cls(OffsetType.TIMESTAMP, r.i64())
        if OffsetType.FIRST <= raw <= OffsetType.NEXT or (allow_none and raw == OffsetType.NONE):
            return cls(OffsetType(raw))
        raise MalformedFrame(f"unknown offset type {raw}")

    def encode(self) -> bytes:
        head = U16.pack(self.type)
        if self.type == OffsetType.OFFSET:
            return head + U64.pack(self.value)
        if self.type == OffsetType.TIMESTAMP:
            return head + I64.pack(self.value)
        return head


@dataclass(frozen=True, slots=True)
class CommandVersion:
    key: int
    min_version: int
    max_version: int


def decode_command_versions(r: Reader) -> list[CommandVersion]:
    return [CommandVersion(r.u16(), r.u16(), r.u16()) for _ in range(r.count(6))]


def encode_command_versions(versions: list[CommandVersion]) -> bytes:
    return U32.pack(len(versions)) + b"".join(
        _COMMAND_VERSION.pack(v.key, v.min_version, v.max_version) for v in versions
    )


def optional_properties(r: Reader) -> dict[str, str]:
    # RabbitMQ's own client omits the properties array entirely when it is empty.
    return r.string_map() if r.remaining() else {}


# ---------------------------------------------------------------- client -> server


@dataclass(slots=True)
class DeclarePublisher(Frame):
    correlation_id: int
    publisher_id: int
    reference: str  # "" when the publisher does not deduplicate
    stream: str

    def wire_key(self) -> int:
        return Key.DECLARE_PUBLISHER

    @classmethod
    def parse(cls, r: Reader) -> DeclarePublisher:
        return cls(r.u32(), r.u8(), r.nullable_string() or "", r.string())

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + U8.pack(self.publisher_id)
            + wire.string(self.reference)
            + wire.string(self.stream)
        )


@dataclass(slots=True)
class Publish(Frame):
    """A batch of messages, one entry each: what a client writes, and what the server makes
    of a `PublishBlock` that must be handled message by message. Each entry is already an
    Osiris data entry: a simple entry is a u32 length (top bit 0) and the body; a sub-batch
    entry (top bit 1) is kept opaque.
    `filter_values` is None for version 1 frames, one value (or None) per entry for version 2.
    """

    publisher_id: int
    publishing_ids: list[int]
    entries: list[memoryview] | list[bytes]
    num_records: int
    payload_bytes: int  # sum of record body lengths (sub-batches: uncompressed, minus headers)
    filter_values: list[str | None] | None = None

    def wire_key(self) -> int:
        return Key.PUBLISH

    def wire_version(self) -> int:
        return 1 if self.filter_values is None else 2

    @classmethod
    def of_bodies(cls, publisher_id: int, messages: Sequence[tuple[int, bytes]]) -> Publish:
        """A version 1 Publish of (publishing id, message body) pairs, one simple entry each."""
        entries = [memoryview(SIMPLE_ENTRY.pack(len(body)) + body) for _, body in messages]
        return cls(publisher_id, [i for i, _ in messages], entries, len(entries),
                   sum(len(body) for _, body in messages))

    def body(self) -> bytes:
        parts = [U8.pack(self.publisher_id), U32.pack(len(self.entries))]
        for i, (publishing_id, entry) in enumerate(
            zip(self.publishing_ids, self.entries, strict=True)
        ):
            parts.append(U64.pack(publishing_id))
            if self.filter_values is not None:
                parts.append(wire.string(self.filter_values[i]))
            parts.append(bytes(entry))
        return b"".join(parts)


@dataclass(slots=True)
class PublishBlock(Frame):
    """A Publish frame as the server reads it (in its loop, or in a worker process: see
    `offload`): two blocks instead of an object per message, its publishing ids packed as
    on the wire (big-endian u64 each, as a PublishConfirm carries them back) and its Osiris
    entries joined (as a chunk stores them). Staging, handing over and confirming a batch
    this way costs the same whatever the number of messages in it."""

    publisher_id: int
    packed_ids: bytes
    entries: bytes
    count: int  # messages (entries)
    num_records: int
    payload_bytes: int
    filter_values: list[str | None] | None
    rising: bool  # at least one id, each above the one before: dedup looks at the ends

    def wire_key(self) -> int:
        return Key.PUBLISH

    @classmethod
    def parse_v1(cls, r: Reader) -> PublishBlock:
        return cls._parse(r, with_filter=False)

    @classmethod
    def parse_v2(cls, r: Reader) -> PublishBlock:
        return cls._parse(r, with_filter=True)

    @classmethod
    def _parse(cls, r: Reader, *, with_filter: bool) -> PublishBlock:
        """The hot loop of a stream publish: per message only what finds where its entry
        ends, on `bytes` (indexed and sliced natively when compiled). Records and payload
        bytes are counted from the totals; the few sub-batch entries are looked at again
        afterwards."""
        publisher_id = r.u8()
        count = r.count(14 if with_filter else 12)
        data = bytes(r.view[r.pos:])  # the rest of the frame: its messages
        ids: list[bytes] = []  # packed as on the wire, as a PublishConfirm carries them
        entries: list[bytes] = []
        batched: list[int] = []  # where sub-batch entries start
        filters: list[str | None] | None = [] if with_filter else None
        pos, sub_batch, length_size = 0, SUB_BATCH_BIT, SIMPLE_ENTRY.size  # locals: no
        for _ in range(count):  # lookup in the module's dict per message
            ids.append(data[pos:pos + 8])
            pos += 8
            if filters is not None:  # v2: a filter value sits between the id and the entry
                value, pos = _nullable_string(data, pos)
                filters.append(value)
            head = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
            if head & sub_batch:
                batched.append(pos)
                head = _sub_batch_size(data, pos)
            end = pos + length_size + head
            entries.append(data[pos:end])
            pos = end
        if pos > len(data):  # a slice past the end is short, not an error
            raise MalformedFrame("published message runs past the end of the frame")
        r.pos += pos
        joined = b"".join(entries)
        # Simple entries: one record, their bytes less the length. Sub-batches: theirs.
        records, payload = count, len(joined) - SIMPLE_ENTRY.size * count
        for start in batched:
            _, n_records, uncompressed, size = SUB_BATCH_ENTRY.unpack_from(data, start)
            records += n_records - 1
            payload += (max(uncompressed - SIMPLE_ENTRY.size * n_records, 0)
                        - (SUB_BATCH_ENTRY.size + size - SIMPLE_ENTRY.size))
        # Big-endian ids of one width compare as bytes as they do as numbers.
        rising = bool(ids) and all(map(operator.lt, ids, ids[1:]))
        return cls(publisher_id, b"".join(ids), joined, count, records, payload, filters,
                   rising)

    @property
    def first_id(self) -> int:
        first: int = PACKED_ID.unpack_from(self.packed_ids, 0)[0]
        return first

    @property
    def last_id(self) -> int:
        last: int = PACKED_ID.unpack_from(self.packed_ids, len(self.packed_ids) - PACKED_ID.size)[0]
        return last

    def publish(self) -> Publish:
        """The same frame, one entry per message (for what cannot take the block whole)."""
        data, pos = self.entries, 0
        entries: list[bytes] = []
        for _ in range(self.count):
            head = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
            if head & SUB_BATCH_BIT:
                head = _sub_batch_size(data, pos)
            entries.append(data[pos:pos + SIMPLE_ENTRY.size + head])
            pos += SIMPLE_ENTRY.size + head
        return Publish(self.publisher_id, unpacked(self.packed_ids), entries,
                       self.num_records, self.payload_bytes, self.filter_values)


@dataclass(slots=True)
class _ReferenceQuery(Frame):
    """What a publisher's or a consumer's reference has stored on a stream: the layout of
    QueryPublisherSequence and QueryOffset."""

    correlation_id: int
    reference: str
    stream: str

    @classmethod
    def parse(cls, r: Reader) -> Self:
        return cls(r.u32(), r.string(), r.string())

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id) + wire.string(self.reference) + wire.string(self.stream)
        )


@dataclass(slots=True)
class QueryPublisherSequence(_ReferenceQuery):
    def wire_key(self) -> int:
        return Key.QUERY_PUBLISHER_SEQUENCE


@dataclass(slots=True)
class DeletePublisher(Frame):
    correlation_id: int
    publisher_id: int

    def wire_key(self) -> int:
        return Key.DELETE_PUBLISHER

    @classmethod
    def parse(cls, r: Reader) -> DeletePublisher:
        return cls(r.u32(), r.u8())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + U8.pack(self.publisher_id)


@dataclass(slots=True)
class Subscribe(Frame):
    """Properties used by clients: single-active-consumer ("true"), name, super-stream,
    filter.N, match-unfiltered."""

    correlation_id: int
    subscription_id: int
    stream: str
    offset_spec: OffsetSpec
    credit: int
    properties: dict[str, str] = field(default_factory=dict)

    def wire_key(self) -> int:
        return Key.SUBSCRIBE

    @classmethod
    def parse(cls, r: Reader) -> Subscribe:
        return cls(
            r.u32(), r.u8(), r.string(), OffsetSpec.parse(r), r.u16(), optional_properties(r)
        )

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + U8.pack(self.subscription_id)
            + wire.string(self.stream)
            + self.offset_spec.encode()
            + U16.pack(self.credit)
            + wire.string_map(self.properties)
        )


@dataclass(slots=True)
class Credit(Frame):
    subscription_id: int
    credit: int  # in chunks

    def wire_key(self) -> int:
        return Key.CREDIT

    @classmethod
    def parse(cls, r: Reader) -> Credit:
        return cls(r.u8(), r.u16())

    def body(self) -> bytes:
        return U8.pack(self.subscription_id) + U16.pack(self.credit)


@dataclass(slots=True)
class StoreOffset(Frame):
    reference: str
    stream: str
    offset: int

    def wire_key(self) -> int:
        return Key.STORE_OFFSET

    @classmethod
    def parse(cls, r: Reader) -> StoreOffset:
        return cls(r.string(), r.string(), r.u64())

    def body(self) -> bytes:
        return wire.string(self.reference) + wire.string(self.stream) + U64.pack(self.offset)


@dataclass(slots=True)
class QueryOffset(_ReferenceQuery):
    def wire_key(self) -> int:
        return Key.QUERY_OFFSET


@dataclass(slots=True)
class Unsubscribe(Frame):
    correlation_id: int
    subscription_id: int

    def wire_key(self) -> int:
        return Key.UNSUBSCRIBE

    @classmethod
    def parse(cls, r: Reader) -> Unsubscribe:
        return cls(r.u32(), r.u8())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + U8.pack(self.subscription_id)


@dataclass(slots=True)
class CreateStream(Frame):
    correlation_id: int
    stream: str
    arguments: dict[str, str] = field(default_factory=dict)

    def wire_key(self) -> int:
        return Key.CREATE_STREAM

    @classmethod
    def parse(cls, r: Reader) -> CreateStream:
        return cls(r.u32(), r.string(), r.string_map())

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + wire.string(self.stream)
            + wire.string_map(self.arguments)
        )


@dataclass(slots=True)
class DeleteStream(Frame):
    correlation_id: int
    stream: str

    def wire_key(self) -> int:
        return Key.DELETE_STREAM

    @classmethod
    def parse(cls, r: Reader) -> DeleteStream:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.stream)


@dataclass(slots=True)
class Metadata(Frame):
    correlation_id: int
    streams: list[str]

    def wire_key(self) -> int:
        return Key.METADATA

    @classmethod
    def parse(cls, r: Reader) -> Metadata:
        return cls(r.u32(), r.strings())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.strings(self.streams)


@dataclass(slots=True)
class PeerProperties(Frame):
    correlation_id: int
    properties: dict[str, str]

    def wire_key(self) -> int:
        return Key.PEER_PROPERTIES

    @classmethod
    def parse(cls, r: Reader) -> PeerProperties:
        return cls(r.u32(), r.string_map())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string_map(self.properties)


@dataclass(slots=True)
class SaslHandshake(Frame):
    correlation_id: int

    def wire_key(self) -> int:
        return Key.SASL_HANDSHAKE

    @classmethod
    def parse(cls, r: Reader) -> SaslHandshake:
        return cls(r.u32())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id)


@dataclass(slots=True)
class SaslAuthenticate(Frame):
    correlation_id: int
    mechanism: str
    data: bytes  # a null SASL payload (length -1) reads as b""

    def wire_key(self) -> int:
        return Key.SASL_AUTHENTICATE

    @classmethod
    def parse(cls, r: Reader) -> SaslAuthenticate:
        return cls(r.u32(), r.string(), r.nullable_bytes() or b"")

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + wire.string(self.mechanism)
            + wire.nullable_bytes(self.data)
        )


@dataclass(slots=True)
class Tune(Frame):
    """Sent by the server first; the client answers with its own Tune, keyed 0x0014 by some
    clients (rstream) and 0x8014 by others (the Java client). Both parse to this frame."""

    frame_max: int  # 0 = no limit
    heartbeat: int  # seconds, 0 = none

    def wire_key(self) -> int:
        return Key.TUNE

    @classmethod
    def parse(cls, r: Reader) -> Tune:
        return cls(r.u32(), r.u32())

    def body(self) -> bytes:
        return U32.pack(self.frame_max) + U32.pack(self.heartbeat)


@dataclass(slots=True)
class Open(Frame):
    correlation_id: int
    virtual_host: str

    def wire_key(self) -> int:
        return Key.OPEN

    @classmethod
    def parse(cls, r: Reader) -> Open:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.virtual_host)


@dataclass(slots=True)
class Close(Frame):
    """Either side may close; the other answers with Response(Key.CLOSE, ...). A Close always
    has a reason string (at least its 2-byte length), so a body that ends after the code is
    a reply."""

    correlation_id: int
    code: int
    reason: str

    def wire_key(self) -> int:
        return Key.CLOSE

    @classmethod
    def parse(cls, r: Reader) -> Close | Response:
        correlation_id, code = r.u32(), r.u16()
        if not r.remaining():
            # rstream never sets the response bit: its reply to our Close is key 0x0016
            # with a code and no reason.
            return Response(Key.CLOSE, correlation_id, code)
        return cls(correlation_id, code, r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + U16.pack(self.code) + wire.string(self.reason)


@dataclass(slots=True)
class Heartbeat(Frame):
    def wire_key(self) -> int:
        return Key.HEARTBEAT

    @classmethod
    def parse(cls, r: Reader) -> Heartbeat:
        return cls()

    def body(self) -> bytes:
        return b""


@dataclass(slots=True)
class Route(Frame):
    correlation_id: int
    routing_key: str
    super_stream: str

    def wire_key(self) -> int:
        return Key.ROUTE

    @classmethod
    def parse(cls, r: Reader) -> Route:
        return cls(r.u32(), r.string(), r.string())

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + wire.string(self.routing_key)
            + wire.string(self.super_stream)
        )


@dataclass(slots=True)
class Partitions(Frame):
    correlation_id: int
    super_stream: str

    def wire_key(self) -> int:
        return Key.PARTITIONS

    @classmethod
    def parse(cls, r: Reader) -> Partitions:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.super_stream)


@dataclass(slots=True)
class ConsumerUpdateReply(Frame):
    """The client's answer (key 0x801a) to the server's ConsumerUpdate: where the newly active
    consumer starts; OffsetType.NONE keeps the subscription's own offset."""

    correlation_id: int
    response_code: int
    offset_spec: OffsetSpec

    def wire_key(self) -> int:
        return Key.CONSUMER_UPDATE | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> ConsumerUpdateReply:
        correlation_id, code = r.u32(), r.u16()
        spec = OffsetSpec.parse(r, allow_none=True)
        if r.remaining() == 8 and spec.type not in (OffsetType.OFFSET, OffsetType.TIMESTAMP):
            # rstream always appends a u64 offset, even for types that carry none.
            r.u64()
        return cls(correlation_id, code, spec)

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + self.offset_spec.encode()


@dataclass(slots=True)
class ExchangeCommandVersions(Frame):
    correlation_id: int
    versions: list[CommandVersion]

    def wire_key(self) -> int:
        return Key.EXCHANGE_COMMAND_VERSIONS

    @classmethod
    def parse(cls, r: Reader) -> ExchangeCommandVersions:
        return cls(r.u32(), decode_command_versions(r))

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + encode_command_versions(self.versions)


@dataclass(slots=True)
class StreamStats(Frame):
    correlation_id: int
    stream: str

    def wire_key(self) -> int:
        return Key.STREAM_STATS

    @classmethod
    def parse(cls, r: Reader) -> StreamStats:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.stream)


@dataclass(slots=True)
class CreateSuperStream(Frame):
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str] = field(default_factory=dict)

    def wire_key(self) -> int:
        return Key.CREATE_SUPER_STREAM

    @classmethod
    def parse(cls, r: Reader) -> CreateSuperStream:
        return cls(r.u32(), r.string(), r.strings(), r.strings(), r.string_map())

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + wire.string(self.name)
            + wire.strings(self.partitions)
            + wire.strings(self.binding_keys)
            + wire.string_map(self.arguments)
        )


@dataclass(slots=True)
class DeleteSuperStream(Frame):
    correlation_id: int
    name: str

    def wire_key(self) -> int:
        return Key.DELETE_SUPER_STREAM

    @classmethod
    def parse(cls, r: Reader) -> DeleteSuperStream:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.name)


@dataclass(slots=True)
class ResolveOffsetSpec(Frame):
    """Added in 2026 (RabbitMQ 4.3); layout taken from client implementations."""

    correlation_id: int
    stream: str
    offset_spec: OffsetSpec
    properties: dict[str, str] = field(default_factory=dict)

    def wire_key(self) -> int:
        return Key.RESOLVE_OFFSET_SPEC

    @classmethod
    def parse(cls, r: Reader) -> ResolveOffsetSpec:
        return cls(r.u32(), r.string(), OffsetSpec.parse(r), optional_properties(r))

    def body(self) -> bytes:
        return (
            U32.pack(self.correlation_id)
            + wire.string(self.stream)
            + self.offset_spec.encode()
            + wire.string_map(self.properties)
        )


@dataclass(slots=True)
class TieredSegments(Frame):
    """mainstem's own command (see `MainstemKey`): where the broker's tier is and which of a
    stream's segments live only there, so that Spark's executors read them straight from the
    object store. Checked as a Subscribe: the user's read permission on the stream."""

    correlation_id: int
    stream: str

    def wire_key(self) -> int:
        return MainstemKey.TIERED_SEGMENTS

    @classmethod
    def parse(cls, r: Reader) -> TieredSegments:
        return cls(r.u32(), r.string())

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + wire.string(self.stream)


@dataclass(slots=True)
class UnknownCommand(Frame):
    """A well-framed command this codec does not know (key or version). The connection can
    answer Response(key, correlation_id, UNKNOWN_FRAME) when a correlation id was readable."""

    key: int
    version: int
    correlation_id: int | None


# ---------------------------------------------------------------- server -> client


@dataclass(slots=True)
class Response(Frame):
    """A response made of a correlation id and a code only: DeclarePublisher, DeletePublisher,
    Subscribe, Unsubscribe, Create, Delete, Close, CreateSuperStream, DeleteSuperStream, and
    the reply to an unknown command. `key` is the request's key (the flag is added here)."""

    key: int
    correlation_id: int
    response_code: int

    @classmethod
    def parse_close(cls, r: Reader) -> Response:
        return cls(Key.CLOSE, r.u32(), r.u16())

    @classmethod
    def parser(cls, key: int) -> Parser:
        """The parser of the code-only reply to request `key` (what a client reads)."""
        return lambda r: cls(key, r.u32(), r.u16())

    def wire_key(self) -> int:
        return self.key | RESPONSE_FLAG

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code)


# ---------------------------------------------------------------- parser table

Parser = Callable[[Reader], Frame]

# (wire key, version) -> parser for every frame a client may send. Anything else is an
# UnknownCommand; RabbitMQ likewise only matches the versions it implements.
PARSERS: dict[tuple[int, int], Parser] = {
    (Key.DECLARE_PUBLISHER, 1): DeclarePublisher.parse,
    (Key.PUBLISH, 1): PublishBlock.parse_v1,
    (Key.PUBLISH, 2): PublishBlock.parse_v2,
    (Key.QUERY_PUBLISHER_SEQUENCE, 1): QueryPublisherSequence.parse,
    (Key.DELETE_PUBLISHER, 1): DeletePublisher.parse,
    (Key.SUBSCRIBE, 1): Subscribe.parse,
    (Key.CREDIT, 1): Credit.parse,
    (Key.STORE_OFFSET, 1): StoreOffset.parse,
    (Key.QUERY_OFFSET, 1): QueryOffset.parse,
    (Key.UNSUBSCRIBE, 1): Unsubscribe.parse,
    (Key.CREATE_STREAM, 1): CreateStream.parse,
    (Key.DELETE_STREAM, 1): DeleteStream.parse,
    (Key.METADATA, 1): Metadata.parse,
    (Key.PEER_PROPERTIES, 1): PeerProperties.parse,
    (Key.SASL_HANDSHAKE, 1): SaslHandshake.parse,
    (Key.SASL_AUTHENTICATE, 1): SaslAuthenticate.parse,
    (Key.TUNE, 1): Tune.parse,
    (Key.TUNE | RESPONSE_FLAG, 1): Tune.parse,
    (Key.OPEN, 1): Open.parse,
    (Key.CLOSE, 1): Close.parse,
    (Key.CLOSE | RESPONSE_FLAG, 1): Response.parse_close,
    (Key.HEARTBEAT, 1): Heartbeat.parse,
    (Key.ROUTE, 1): Route.parse,
    (Key.PARTITIONS, 1): Partitions.parse,
    (Key.CONSUMER_UPDATE | RESPONSE_FLAG, 1): ConsumerUpdateReply.parse,
    (Key.EXCHANGE_COMMAND_VERSIONS, 1): ExchangeCommandVersions.parse,
    (Key.STREAM_STATS, 1): StreamStats.parse,
    (Key.CREATE_SUPER_STREAM, 1): CreateSuperStream.parse,
    (Key.DELETE_SUPER_STREAM, 1): DeleteSuperStream.parse,
    (Key.RESOLVE_OFFSET_SPEC, 1): ResolveOffsetSpec.parse,
    (MainstemKey.TIERED_SEGMENTS, 1): TieredSegments.parse,
}
