"""AMQP 0-9-1 (server side): a sans-IO codec derived from the XML spec.

- ``methods``: generated constants, ``ReplyCode``, one dataclass per method, ``BasicProperties``
- ``codec.AmqpCodec``: bytes in, events (``events``) out; ``classify_protocol_header``
- ``encode``: ``encode_method``, ``encode_content``, ``encode_heartbeat``, ``DeliverEncoder``
- ``wire``: primitive types and field tables (``encode_table``)
- ``state``: the connection's rules as pure objects (handshake and closes, channels,
  heartbeats, credit), driven by ``connection`` and ``channel``
"""

from mainstem.protocols.amqp091.codec import (
    DEFAULT_FRAME_MAX,
    PROTOCOL_HEADER,
    AmqpCodec,
    HeaderCheck,
    classify_protocol_header,
    decode_method,
)
from mainstem.protocols.amqp091.encode import (
    HEARTBEAT_FRAME,
    DeliverEncoder,
    encode_content,
    encode_heartbeat,
    encode_method,
)
from mainstem.protocols.amqp091.errors import AmqpCodecError, ProtocolHeaderMismatch
from mainstem.protocols.amqp091.events import (
    ContentMessage,
    Event,
    Heartbeat,
    MethodFrame,
    ProtocolHeaderReceived,
    decode_properties,
)
from mainstem.protocols.amqp091.methods import BasicProperties, ReplyCode
from mainstem.protocols.amqp091.wire import Method, encode_table

__all__ = [
    "DEFAULT_FRAME_MAX",
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "AmqpCodec",
    "AmqpCodecError",
    "BasicProperties",
    "ContentMessage",
    "DeliverEncoder",
    "Event",
    "HeaderCheck",
    "Heartbeat",
    "Method",
    "MethodFrame",
    "ProtocolHeaderMismatch",
    "ProtocolHeaderReceived",
    "ReplyCode",
    "classify_protocol_header",
    "decode_method",
    "decode_properties",
    "encode_content",
    "encode_heartbeat",
    "encode_method",
    "encode_table",
]
