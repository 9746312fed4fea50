"""What ``AmqpCodec.next_frames()`` returns."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mainstem.protocols.amqp091.errors import AmqpCodecError
from mainstem.protocols.amqp091.methods import BasicProperties, ReplyCode
from mainstem.protocols.amqp091.wire import MalformedData, Method


@dataclass(frozen=True, slots=True)
class ProtocolHeaderReceived:
    """The client sent AMQP 0-9-1's protocol header: time to send Connection.Start."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclass(slots=True)
class MethodFrame:
    """A method without content."""

    channel: int
    method: Method


@dataclass(slots=True)
class ContentMessage:
    """A content-bearing method (Basic.Publish, ...) with its header and whole body.

    The properties stay encoded in ``properties_raw`` (flags + property list, exactly as the
    client sent them) until ``properties`` is first read: a broker that only stores and
    forwards the message never decodes them, and a delivery can reuse the raw bytes. Like
    RabbitMQ, malformed properties are therefore noticed on first access.
    """

    channel: int
    method: Method
    properties_raw: bytes
    body: bytes
    _properties: BasicProperties | None = field(default=None, repr=False, compare=False)

    @property
    def properties(self) -> BasicProperties:
        if self._properties is None:
            self._properties = decode_properties(self.properties_raw)
        return self._properties


def decode_properties(raw: bytes) -> BasicProperties:
    """Decode content header properties; malformed input raises a 502 AmqpCodecError."""
    try:
        return BasicProperties.decode(memoryview(raw))
    except (MalformedData, struct.error, IndexError) as exc:
        text = f"malformed content properties: {exc}"
        raise AmqpCodecError(ReplyCode.SYNTAX_ERROR, text) from exc


HEARTBEAT = Heartbeat()
PROTOCOL_HEADER_RECEIVED = ProtocolHeaderReceived()

Event = ProtocolHeaderReceived | Heartbeat | MethodFrame | ContentMessage
