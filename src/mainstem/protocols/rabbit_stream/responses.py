"""Frames only the server sends: responses carrying more than a code, and notifications.

Each has `body()` (what the server writes; `codec.encode` adds the size, key and version
header) and `parse(reader)` (what a client reads, see REPLY_PARSERS).
"""

from __future__ import annotations

import struct
from builtins import memoryview  # compiled dataclasses look their field types up here
from dataclasses import dataclass, field
from typing import Self

from mainstem.protocols.rabbit_stream import wire
from mainstem.protocols.rabbit_stream.constants import (
    RESPONSE_FLAG,
    Key,
    MainstemKey,
    OffsetType,
    ResponseCode,
)
from mainstem.protocols.rabbit_stream.frames import (
    Close,
    CommandVersion,
    Frame,
    Heartbeat,
    Parser,
    Response,
    Tune,
    decode_command_versions,
    encode_command_versions,
    optional_properties,
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

_ID_AND_CODE = struct.Struct(">QH")
_OFFSET_TYPE_AND_OFFSET = struct.Struct(">HQ")
# A tiered segment after its key: chunk id, next offset, first and next byte, first and last
# timestamp, segment size and CRC, index size and CRC, layout version.
_TIERED_SEGMENT = struct.Struct(">QQQQqqQIQII")


@dataclass(slots=True)
class PublishConfirm(Frame):
    publisher_id: int
    publishing_ids: list[int] | bytes  # or packed as on the wire: big-endian u64 each

    def wire_key(self) -> int:
        return Key.PUBLISH_CONFIRM

    @classmethod
    def parse(cls, r: Reader) -> PublishConfirm:
        publisher_id, count = r.u8(), r.count(8)
        return cls(publisher_id, list(struct.unpack(f">{count}Q", r.take(8 * count))))

    def body(self) -> bytes:
        ids = self.publishing_ids
        if isinstance(ids, bytes):
            return U8.pack(self.publisher_id) + U32.pack(len(ids) // 8) + ids
        return U8.pack(self.publisher_id) + struct.pack(f">I{len(ids)}Q", len(ids), *ids)


@dataclass(slots=True)
class PublishError(Frame):
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, response code)

    def wire_key(self) -> int:
        return Key.PUBLISH_ERROR

    @classmethod
    def parse(cls, r: Reader) -> PublishError:
        publisher_id, count = r.u8(), r.count(_ID_AND_CODE.size)
        return cls(publisher_id, list(_ID_AND_CODE.iter_unpack(r.take(count * _ID_AND_CODE.size))))

    def body(self) -> bytes:
        return (
            U8.pack(self.publisher_id)
            + U32.pack(len(self.errors))
            + b"".join(_ID_AND_CODE.pack(pid, code) for pid, code in self.errors)
        )


@dataclass(slots=True)
class QueryPublisherSequenceResponse(Frame):
    correlation_id: int
    response_code: int
    sequence: int

    def wire_key(self) -> int:
        return Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> QueryPublisherSequenceResponse:
        return cls(r.u32(), r.u16(), r.u64())

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + U64.pack(self.sequence)


@dataclass(slots=True)
class CreditResponse(Frame):
    """Sent only when a Credit fails (unknown subscription); it has no correlation id."""

    response_code: int
    subscription_id: int

    def wire_key(self) -> int:
        return Key.CREDIT | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> CreditResponse:
        return cls(r.u16(), r.u8())

    def body(self) -> bytes:
        return U16.pack(self.response_code) + U8.pack(self.subscription_id)


@dataclass(slots=True)
class QueryOffsetResponse(Frame):
    correlation_id: int
    response_code: int  # NO_OFFSET when the reference has never been stored
    offset: int

    def wire_key(self) -> int:
        return Key.QUERY_OFFSET | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> QueryOffsetResponse:
        return cls(r.u32(), r.u16(), r.u64())

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + U64.pack(self.offset)


@dataclass(frozen=True, slots=True)
class Broker:
    reference: int
    host: str
    port: int

    @classmethod
    def parse(cls, r: Reader) -> Broker:
        return cls(r.u16(), r.string(), r.u32())

    def encode(self) -> bytes:
        return U16.pack(self.reference) + wire.string(self.host) + U32.pack(self.port)


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    name: str
    response_code: int
    leader_reference: int | None  # None (written 0xFFFF) when the stream has no leader
    replica_references: list[int] = field(default_factory=list)

    @classmethod
    def parse(cls, r: Reader) -> StreamMetadata:
        name, code, leader = r.string(), r.u16(), r.u16()
        replicas = [r.u16() for _ in range(r.count(2))]
        return cls(name, code, None if leader == 0xFFFF else leader, replicas)

    def encode(self) -> bytes:
        leader = 0xFFFF if self.leader_reference is None else self.leader_reference
        replicas = self.replica_references
        return wire.string(self.name) + struct.pack(
            f">HHI{len(replicas)}H", self.response_code, leader, len(replicas), *replicas
        )


@dataclass(slots=True)
class MetadataResponse(Frame):
    """No top-level response code: each stream carries its own."""

    correlation_id: int
    brokers: list[Broker]
    streams: list[StreamMetadata]

    def wire_key(self) -> int:
        return Key.METADATA | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> MetadataResponse:
        correlation_id = r.u32()
        brokers = [Broker.parse(r) for _ in range(r.count(8))]
        return cls(correlation_id, brokers, [StreamMetadata.parse(r) for _ in range(r.count(10))])

    def body(self) -> bytes:
        return b"".join(
            [
                U32.pack(self.correlation_id),
                U32.pack(len(self.brokers)),
                *(b.encode() for b in self.brokers),
                U32.pack(len(self.streams)),
                *(s.encode() for s in self.streams),
            ]
        )


@dataclass(slots=True)
class MetadataUpdate(Frame):
    code: int  # clients only understand STREAM_NOT_AVAILABLE
    stream: str

    def wire_key(self) -> int:
        return Key.METADATA_UPDATE

    @classmethod
    def parse(cls, r: Reader) -> MetadataUpdate:
        return cls(r.u16(), r.string())

    def body(self) -> bytes:
        return U16.pack(self.code) + wire.string(self.stream)


@dataclass(slots=True)
class PeerPropertiesResponse(Frame):
    correlation_id: int
    response_code: int
    properties: dict[str, str]

    def wire_key(self) -> int:
        return Key.PEER_PROPERTIES | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> PeerPropertiesResponse:
        return cls(r.u32(), r.u16(), r.string_map())

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.string_map(
            self.properties
        )


@dataclass(slots=True)
class SaslHandshakeResponse(Frame):
    correlation_id: int
    response_code: int
    mechanisms: list[str]

    def wire_key(self) -> int:
        return Key.SASL_HANDSHAKE | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> SaslHandshakeResponse:
        return cls(r.u32(), r.u16(), r.strings())

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.strings(
            self.mechanisms
        )


@dataclass(slots=True)
class SaslAuthenticateResponse(Frame):
    """The challenge is written only with SASL_CHALLENGE: clients (rstream, Java) read
    nothing after the code otherwise, and rstream rejects trailing bytes."""

    correlation_id: int
    response_code: int
    challenge: bytes = b""

    def wire_key(self) -> int:
        return Key.SASL_AUTHENTICATE | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> SaslAuthenticateResponse:
        correlation_id, code = r.u32(), r.u16()
        if code == ResponseCode.SASL_CHALLENGE:
            return cls(correlation_id, code, r.nullable_bytes() or b"")
        return cls(correlation_id, code)

    def body(self) -> bytes:
        head = CORR_CODE.pack(self.correlation_id, self.response_code)
        if self.response_code == ResponseCode.SASL_CHALLENGE:
            return head + wire.nullable_bytes(self.challenge)
        return head


@dataclass(slots=True)
class OpenResponse(Frame):
    """The properties array is always written (count 0 if empty): rstream expects it."""

    correlation_id: int
    response_code: int
    properties: dict[str, str] = field(default_factory=dict)

    def wire_key(self) -> int:
        return Key.OPEN | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> OpenResponse:
        # RabbitMQ omits the properties of a failed Open.
        return cls(r.u32(), r.u16(), optional_properties(r))

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.string_map(
            self.properties
        )


@dataclass(slots=True)
class _SuperStreamReply(Frame):
    """A super stream's streams: the layout of the replies to Route and to Partitions."""

    correlation_id: int
    response_code: int
    streams: list[str]

    @classmethod
    def parse(cls, r: Reader) -> Self:
        return cls(r.u32(), r.u16(), r.strings())

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.strings(self.streams)


@dataclass(slots=True)
class RouteResponse(_SuperStreamReply):
    """Today's layout is an array of streams (the seed shows a single string)."""

    def wire_key(self) -> int:
        return Key.ROUTE | RESPONSE_FLAG


@dataclass(slots=True)
class PartitionsResponse(_SuperStreamReply):
    def wire_key(self) -> int:
        return Key.PARTITIONS | RESPONSE_FLAG


@dataclass(slots=True)
class ConsumerUpdate(Frame):
    """Server-initiated request (single active consumer): tells a subscription whether it is
    now the active one; the client answers with ConsumerUpdateReply."""

    correlation_id: int
    subscription_id: int
    active: bool

    def wire_key(self) -> int:
        return Key.CONSUMER_UPDATE

    @classmethod
    def parse(cls, r: Reader) -> ConsumerUpdate:
        return cls(r.u32(), r.u8(), bool(r.u8()))

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + U8.pack(self.subscription_id) + U8.pack(self.active)


@dataclass(slots=True)
class ExchangeCommandVersionsResponse(Frame):
    """Normally answered with SERVER_COMMAND_VERSIONS, whatever the client listed (mind the
    ordering rule noted there)."""

    correlation_id: int
    response_code: int
    versions: list[CommandVersion]

    def wire_key(self) -> int:
        return Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> ExchangeCommandVersionsResponse:
        return cls(r.u32(), r.u16(), decode_command_versions(r))

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + encode_command_versions(
            self.versions
        )


@dataclass(slots=True)
class StreamStatsResponse(Frame):
    """Stats: first_chunk_id, committed_chunk_id, last_chunk_id (string -> int64)."""

    correlation_id: int
    response_code: int
    stats: dict[str, int]

    def wire_key(self) -> int:
        return Key.STREAM_STATS | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> StreamStatsResponse:
        correlation_id, code = r.u32(), r.u16()
        return cls(correlation_id, code, {r.string(): r.i64() for _ in range(r.count(10))})

    def body(self) -> bytes:
        parts = [
            CORR_CODE.pack(self.correlation_id, self.response_code),
            U32.pack(len(self.stats)),
        ]
        for name, value in self.stats.items():
            parts.append(wire.string(name))
            parts.append(I64.pack(value))
        return b"".join(parts)


@dataclass(slots=True)
class ResolveOffsetSpecResponse(Frame):
    correlation_id: int
    response_code: int
    offset_type: OffsetType
    offset: int

    def wire_key(self) -> int:
        return Key.RESOLVE_OFFSET_SPEC | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> ResolveOffsetSpecResponse:
        correlation_id, code, raw_type, offset = r.u32(), r.u16(), r.u16(), r.u64()
        try:
            return cls(correlation_id, code, OffsetType(raw_type), offset)
        except ValueError:
            raise MalformedFrame(f"unknown offset type {raw_type}") from None

    def body(self) -> bytes:
        return CORR_CODE.pack(
            self.correlation_id, self.response_code
        ) + _OFFSET_TYPE_AND_OFFSET.pack(self.offset_type, self.offset)


@dataclass(frozen=True, slots=True)
class TieredSegment:
    """A segment that lives only in the tier, as the broker recorded it once its upload was
    verified (the log's `TieredRecord`, field for field). `key` is relative to the tier's
    root; the segment's index is the same key ending in `.index`."""

    key: str
    first_chunk_id: int
    next_offset: int
    first_byte: int
    next_byte: int
    first_timestamp: int
    last_timestamp: int
    segment_size: int
    segment_crc: int
    index_size: int
    index_crc: int
    version: int

    @classmethod
    def parse(cls, r: Reader) -> TieredSegment:
        return cls(r.string(), *_TIERED_SEGMENT.unpack(r.take(_TIERED_SEGMENT.size)))

    def encode(self) -> bytes:
        return wire.string(self.key) + _TIERED_SEGMENT.pack(
            self.first_chunk_id, self.next_offset, self.first_byte, self.next_byte,
            self.first_timestamp, self.last_timestamp, self.segment_size, self.segment_crc,
            self.index_size, self.index_crc, self.version)


@dataclass(slots=True)
class TieredSegmentsResponse(Frame):
    """The tier (`s3://bucket/prefix` at `endpoint` in `region`, or an absolute directory;
    an empty url when the broker has none) and the stream's tiered segments, oldest first.
    Credentials are never sent. A code-only body (an error, or UNKNOWN_FRAME from a server
    without the command) reads as no tier."""

    correlation_id: int
    response_code: int
    url: str = ""
    endpoint: str | None = None
    region: str = ""
    segments: list[TieredSegment] = field(default_factory=list)

    def wire_key(self) -> int:
        return MainstemKey.TIERED_SEGMENTS | RESPONSE_FLAG

    @classmethod
    def parse(cls, r: Reader) -> TieredSegmentsResponse:
        correlation_id, code = r.u32(), r.u16()
        if not r.remaining():
            return cls(correlation_id, code)
        url, endpoint, region = r.string(), r.nullable_string(), r.string()
        count = r.count(2 + _TIERED_SEGMENT.size)
        return cls(correlation_id, code, url, endpoint, region,
                   [TieredSegment.parse(r) for _ in range(count)])

    def body(self) -> bytes:
        return b"".join((CORR_CODE.pack(self.correlation_id, self.response_code),
                         wire.string(self.url), wire.string(self.endpoint),
                         wire.string(self.region), U32.pack(len(self.segments)),
                         *(segment.encode() for segment in self.segments)))


@dataclass(slots=True)
class Deliver(Frame):
    """One chunk for a subscription: the 48-byte chunk header and the data entries, as the
    log stores them. Version 2 adds the committed chunk id. The server writes this frame
    with `codec.encode_deliver_prefix` and the chunk straight from the log; a client reads
    it here, the chunk left undecoded (a memoryview into the received bytes)."""

    subscription_id: int
    chunk: memoryview
    committed_chunk_id: int | None = None  # None: version 1

    def wire_key(self) -> int:
        return Key.DELIVER

    def wire_version(self) -> int:
        return 1 if self.committed_chunk_id is None else 2

    @classmethod
    def parse_v1(cls, r: Reader) -> Deliver:
        subscription_id = r.u8()
        return cls(subscription_id, r.take(r.remaining()))

    @classmethod
    def parse_v2(cls, r: Reader) -> Deliver:
        subscription_id, committed = r.u8(), r.u64()
        return cls(subscription_id, r.take(r.remaining()), committed)

    def body(self) -> bytes:
        committed = b"" if self.committed_chunk_id is None else U64.pack(self.committed_chunk_id)
        return U8.pack(self.subscription_id) + committed + bytes(self.chunk)


# The versions this server speaks, every key in order from DeclarePublisher (0x01): rstream
# looks up the entry for key K at index K - 1 of the ExchangeCommandVersions reply.
SERVER_COMMAND_VERSIONS: list[CommandVersion] = [
    CommandVersion(key, 1, 2 if key in (Key.PUBLISH, Key.DELIVER) else 1) for key in Key
]

# Requests whose reply is a correlation id and a code only (frames.Response).
CODE_ONLY_REPLIES = (
    Key.DECLARE_PUBLISHER,
    Key.DELETE_PUBLISHER,
    Key.SUBSCRIBE,
    Key.UNSUBSCRIBE,
    Key.CREATE_STREAM,
    Key.DELETE_STREAM,
    Key.CLOSE,
    Key.CREATE_SUPER_STREAM,
    Key.DELETE_SUPER_STREAM,
)

# (wire key, version) -> parser for every frame the server may send: what a client reads.
REPLY_PARSERS: dict[tuple[int, int], Parser] = {
    (Key.PUBLISH_CONFIRM, 1): PublishConfirm.parse,
    (Key.PUBLISH_ERROR, 1): PublishError.parse,
    (Key.DELIVER, 1): Deliver.parse_v1,
    (Key.DELIVER, 2): Deliver.parse_v2,
    (Key.METADATA_UPDATE, 1): MetadataUpdate.parse,
    (Key.TUNE, 1): Tune.parse,
    (Key.CLOSE, 1): Close.parse,
    (Key.HEARTBEAT, 1): Heartbeat.parse,
    (Key.CONSUMER_UPDATE, 1): ConsumerUpdate.parse,
    (Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE_FLAG, 1): QueryPublisherSequenceResponse.parse,
    (Key.CREDIT | RESPONSE_FLAG, 1): CreditResponse.parse,
    (Key.QUERY_OFFSET | RESPONSE_FLAG, 1): QueryOffsetResponse.parse,
    (Key.METADATA | RESPONSE_FLAG, 1): MetadataResponse.parse,
    (Key.PEER_PROPERTIES | RESPONSE_FLAG, 1): PeerPropertiesResponse.parse,
    (Key.SASL_HANDSHAKE | RESPONSE_FLAG, 1): SaslHandshakeResponse.parse,
    (Key.SASL_AUTHENTICATE | RESPONSE_FLAG, 1): SaslAuthenticateResponse.parse,
    (Key.OPEN | RESPONSE_FLAG, 1): OpenResponse.parse,
    (Key.ROUTE | RESPONSE_FLAG, 1): RouteResponse.parse,
    (Key.PARTITIONS | RESPONSE_FLAG, 1): PartitionsResponse.parse,
    (Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE_FLAG, 1): ExchangeCommandVersionsResponse.parse,
    (Key.STREAM_STATS | RESPONSE_FLAG, 1): StreamStatsResponse.parse,
    (Key.RESOLVE_OFFSET_SPEC | RESPONSE_FLAG, 1): ResolveOffsetSpecResponse.parse,
    (MainstemKey.TIERED_SEGMENTS | RESPONSE_FLAG, 1): TieredSegmentsResponse.parse,
    **{(key | RESPONSE_FLAG, 1): Response.parser(key) for key in CODE_ONLY_REPLIES},
}
