"""Frames only the server sends: responses carrying more than a code, and notifications.

Bodies only; `codec.encode` adds the size, key and version header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mainstem.protocols.rabbit_stream import wire
from mainstem.protocols.rabbit_stream.constants import (
    RESPONSE_FLAG,
    Key,
    OffsetType,
    ResponseCode,
)
from mainstem.protocols.rabbit_stream.frames import CommandVersion, Frame, encode_command_versions
from mainstem.protocols.rabbit_stream.wire import CORR_CODE, I64, U8, U16, U32, U64

_ID_AND_CODE = struct.Struct(">QH")
_OFFSET_TYPE_AND_OFFSET = struct.Struct(">HQ")


@dataclass(slots=True)
class PublishConfirm(Frame):
    KEY = Key.PUBLISH_CONFIRM
    publisher_id: int
    publishing_ids: list[int]

    def body(self) -> bytes:
        ids = self.publishing_ids
        return U8.pack(self.publisher_id) + struct.pack(f">I{len(ids)}Q", len(ids), *ids)


@dataclass(slots=True)
class PublishError(Frame):
    KEY = Key.PUBLISH_ERROR
    publisher_id: int
    errors: list[tuple[int, int]]  # (publishing id, response code)

    def body(self) -> bytes:
        return (
            U8.pack(self.publisher_id)
            + U32.pack(len(self.errors))
            + b"".join(_ID_AND_CODE.pack(pid, code) for pid, code in self.errors)
        )


@dataclass(slots=True)
class QueryPublisherSequenceResponse(Frame):
    KEY = Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    sequence: int

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + U64.pack(self.sequence)


@dataclass(slots=True)
class CreditResponse(Frame):
    """Sent only when a Credit fails (unknown subscription); it has no correlation id."""

    KEY = Key.CREDIT | RESPONSE_FLAG
    response_code: int
    subscription_id: int

    def body(self) -> bytes:
        return U16.pack(self.response_code) + U8.pack(self.subscription_id)


@dataclass(slots=True)
class QueryOffsetResponse(Frame):
    KEY = Key.QUERY_OFFSET | RESPONSE_FLAG
    correlation_id: int
    response_code: int  # NO_OFFSET when the reference has never been stored
    offset: int

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + U64.pack(self.offset)


@dataclass(frozen=True, slots=True)
class Broker:
    reference: int
    host: str
    port: int

    def encode(self) -> bytes:
        return U16.pack(self.reference) + wire.string(self.host) + U32.pack(self.port)


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    name: str
    response_code: int
    leader_reference: int | None  # None (written 0xFFFF) when the stream has no leader
    replica_references: list[int] = field(default_factory=list)

    def encode(self) -> bytes:
        leader = 0xFFFF if self.leader_reference is None else self.leader_reference
        replicas = self.replica_references
        return wire.string(self.name) + struct.pack(
            f">HHI{len(replicas)}H", self.response_code, leader, len(replicas), *replicas
        )


@dataclass(slots=True)
class MetadataResponse(Frame):
    """No top-level response code: each stream carries its own."""

    KEY = Key.METADATA | RESPONSE_FLAG
    correlation_id: int
    brokers: list[Broker]
    streams: list[StreamMetadata]

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
    KEY = Key.METADATA_UPDATE
    code: int  # clients only understand STREAM_NOT_AVAILABLE
    stream: str

    def body(self) -> bytes:
        return U16.pack(self.code) + wire.string(self.stream)


@dataclass(slots=True)
class PeerPropertiesResponse(Frame):
    KEY = Key.PEER_PROPERTIES | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    properties: dict[str, str]

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.string_map(
            self.properties
        )


@dataclass(slots=True)
class SaslHandshakeResponse(Frame):
    KEY = Key.SASL_HANDSHAKE | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    mechanisms: list[str]

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.strings(
            self.mechanisms
        )


@dataclass(slots=True)
class SaslAuthenticateResponse(Frame):
    """The challenge is written only with SASL_CHALLENGE: clients (rstream, Java) read
    nothing after the code otherwise, and rstream rejects trailing bytes."""

    KEY = Key.SASL_AUTHENTICATE | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    challenge: bytes = b""

    def body(self) -> bytes:
        head = CORR_CODE.pack(self.correlation_id, self.response_code)
        if self.response_code == ResponseCode.SASL_CHALLENGE:
            return head + wire.nullable_bytes(self.challenge)
        return head


@dataclass(slots=True)
class OpenResponse(Frame):
    """The properties array is always written (count 0 if empty): rstream expects it."""

    KEY = Key.OPEN | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    properties: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.string_map(
            self.properties
        )


@dataclass(slots=True)
class RouteResponse(Frame):
    """Today's layout is an array of streams (the seed shows a single string)."""

    KEY = Key.ROUTE | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    streams: list[str]

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.strings(self.streams)


@dataclass(slots=True)
class PartitionsResponse(Frame):
    KEY = Key.PARTITIONS | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    streams: list[str]

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + wire.strings(self.streams)


@dataclass(slots=True)
class ConsumerUpdate(Frame):
    """Server-initiated request (single active consumer): tells a subscription whether it is
    now the active one; the client answers with ConsumerUpdateReply."""

    KEY = Key.CONSUMER_UPDATE
    correlation_id: int
    subscription_id: int
    active: bool

    def body(self) -> bytes:
        return U32.pack(self.correlation_id) + U8.pack(self.subscription_id) + U8.pack(self.active)


@dataclass(slots=True)
class ExchangeCommandVersionsResponse(Frame):
    """Normally answered with SERVER_COMMAND_VERSIONS, whatever the client listed (mind the
    ordering rule noted there)."""

    KEY = Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    versions: list[CommandVersion]

    def body(self) -> bytes:
        return CORR_CODE.pack(self.correlation_id, self.response_code) + encode_command_versions(
            self.versions
        )


@dataclass(slots=True)
class StreamStatsResponse(Frame):
    """Stats: first_chunk_id, committed_chunk_id, last_chunk_id (string -> int64)."""

    KEY = Key.STREAM_STATS | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    stats: dict[str, int]

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
    KEY = Key.RESOLVE_OFFSET_SPEC | RESPONSE_FLAG
    correlation_id: int
    response_code: int
    offset_type: OffsetType
    offset: int

    def body(self) -> bytes:
        return CORR_CODE.pack(
            self.correlation_id, self.response_code
        ) + _OFFSET_TYPE_AND_OFFSET.pack(self.offset_type, self.offset)


# The versions this server speaks, every key in order from DeclarePublisher (0x01): rstream
# looks up the entry for key K at index K - 1 of the ExchangeCommandVersions reply.
SERVER_COMMAND_VERSIONS: list[CommandVersion] = [
    CommandVersion(key, 1, 2 if key in (Key.PUBLISH, Key.DELIVER) else 1) for key in Key
]
