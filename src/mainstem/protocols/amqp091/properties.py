"""Basic content properties as the broker needs them: a few facts read straight from the
encoded bytes at publish (no full decode on the hot path), header rewriting for
dead-lettering, and the conversions to and from a stream's AMQP 1.0 records."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from struct import Struct
from typing import Any

from mainstem.broker.amqp.queues import QueueMessage, register_properties_codec
from mainstem.formats.amqp091_mapping import from_amqp091, to_amqp091
from mainstem.formats.amqp10 import Amqp10DecodeError, decode_message
from mainstem.protocols.amqp091.events import decode_properties
from mainstem.protocols.amqp091.methods import BasicProperties
from mainstem.protocols.amqp091.wire import read_table

_U16 = Struct(">H")
_U32 = Struct(">I")
HEADERS_FLAG, EXPIRATION_FLAG = 0x2000, 0x0100
EMPTY_PROPERTIES = b"\x00\x00"


@dataclasses.dataclass(frozen=True, slots=True)
class Essentials:
    persistent: bool = False
    priority: int = 0
    expiration: str | None = None
    has_headers: bool = False


# Essentials by encoded properties: a publisher mostly repeats the same few (small) ones.
_ESSENTIALS: dict[bytes, Essentials] = {}
_ESSENTIALS_CACHED = 1024
_ESSENTIALS_CACHED_SIZE = 256  # bytes: larger properties are read each time


def essentials(raw: bytes) -> Essentials:
    """Delivery mode, priority and expiration from encoded properties (flags in order:
    content-type, content-encoding, headers, delivery-mode, priority, correlation-id,
    reply-to, expiration, ...). Malformed bytes raise (IndexError, struct.error)."""
    found = _ESSENTIALS.get(raw)
    if found is None:
        found = _read_essentials(raw)
        if len(raw) <= _ESSENTIALS_CACHED_SIZE:
            if len(_ESSENTIALS) >= _ESSENTIALS_CACHED:
                _ESSENTIALS.clear()
            _ESSENTIALS[raw] = found
    return found


def _read_essentials(raw: bytes) -> Essentials:
    (flags,) = _U16.unpack_from(raw, 0)
    pos = 2
    if flags & 0x8000:
        pos += 1 + raw[pos]
    if flags & 0x4000:
        pos += 1 + raw[pos]
    if flags & HEADERS_FLAG:
        pos += 4 + _U32.unpack_from(raw, pos)[0]
    persistent, priority, expiration = False, 0, None
    if flags & 0x1000:
        persistent = raw[pos] == 2
        pos += 1
    if flags & 0x0800:
        priority = raw[pos]
        pos += 1
    if flags & EXPIRATION_FLAG:
        if flags & 0x0400:
            pos += 1 + raw[pos]
        if flags & 0x0200:
            pos += 1 + raw[pos]
        length = raw[pos]
        if pos + 1 + length > len(raw):
            raise IndexError("expiration beyond the properties")
        expiration = raw[pos + 1:pos + 1 + length].decode("utf-8", "surrogateescape")
    return Essentials(persistent, priority, expiration, bool(flags & HEADERS_FLAG))


def headers_of(raw: bytes) -> dict[str, Any]:
    (flags,) = _U16.unpack_from(raw, 0)
    if not flags & HEADERS_FLAG:
        return {}
    pos = 2
    if flags & 0x8000:
        pos += 1 + raw[pos]
    if flags & 0x4000:
        pos += 1 + raw[pos]
    headers, _ = read_table(memoryview(raw), pos)
    return headers


class Amqp091Properties:
    """The ``PropertiesCodec`` classic queues use for dead-lettering."""

    def headers(self, properties: bytes) -> Mapping[str, Any]:
        return headers_of(properties)

    def expiration(self, properties: bytes) -> str | None:
        return essentials(properties).expiration

    def with_headers(self, properties: bytes, headers: dict[str, Any], *,
                     drop_expiration: bool) -> bytes:
        decoded = decode_properties(properties)
        decoded.headers = headers
        if drop_expiration:
            decoded.expiration = None
        return decoded.encode()


register_properties_codec(Amqp091Properties())


def to_stream_record(message: QueueMessage) -> bytes:
    """An AMQP 0-9-1 publish as the AMQP 1.0 message a stream stores (RabbitMQ's mapping)."""
    properties = decode_properties(message.properties)
    return from_amqp091(properties, message.body, exchange=message.exchange,
                        routing_key=message.routing_key)


def from_stream_record(record: bytes | memoryview, offset: int) -> tuple[bytes, bytes, str, str]:
    """(encoded properties, body, exchange, routing key) of a stream record for a 0-9-1
    consumer; the ``x-stream-offset`` header tells the consumer where it is. A record that
    is not an AMQP 1.0 message (rstream's RawMessage, a BSON event) is an opaque body, as
    RabbitMQ delivers it."""
    offset_header = {"x-stream-offset": offset}
    try:
        fields, body = to_amqp091(record)
    except Amqp10DecodeError:
        return BasicProperties(headers=offset_header).encode(), bytes(record), "", ""
    fields["headers"] = {**(fields.get("headers") or {}), **offset_header}
    annotations = decode_message(record).message_annotations or {}
    exchange, routing_key = annotations.get("x-exchange"), annotations.get("x-routing-key")
    return (BasicProperties(**fields).encode(), bytes(body),
            exchange if isinstance(exchange, str) else "",
            routing_key if isinstance(routing_key, str) else "")
