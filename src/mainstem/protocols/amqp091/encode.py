"""Frame encoders for what the server sends."""

from __future__ import annotations

from struct import Struct

from mainstem.protocols.amqp091.codec import FRAME_OVERHEAD
from mainstem.protocols.amqp091.methods import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    BasicDeliver,
    BasicProperties,
)
from mainstem.protocols.amqp091.wire import Method, write_shortstr

_FRAME_HEAD = Struct(">BHI")
_CONTENT_HEADER_FRAME_HEAD = Struct(">BHIHHQ")  # frame head, class id, weight, body size
_END = bytes([FRAME_END])
HEARTBEAT_FRAME = _FRAME_HEAD.pack(FRAME_HEARTBEAT, 0, 0) + _END


def encode_heartbeat() -> bytes:
    return HEARTBEAT_FRAME


def encode_method(channel: int, method: Method) -> bytes:
    out = bytearray(_FRAME_HEAD.size)
    method.encode_into(out)
    _FRAME_HEAD.pack_into(out, 0, FRAME_METHOD, channel, len(out) - _FRAME_HEAD.size)
    out.append(FRAME_END)
    return bytes(out)


def encode_content(channel: int, method: Method, properties: BasicProperties | bytes,
                   body: bytes | bytearray | memoryview, frame_max: int) -> bytes:
    """A content-bearing method, its content header and body frames of at most ``frame_max``.

    ``properties`` is either a ``BasicProperties`` or already-encoded property bytes such as
    ``ContentMessage.properties_raw`` (forwarded untouched: no re-encoding).
    """
    raw = properties.encode() if isinstance(properties, BasicProperties) else properties
    parts: list[bytes | memoryview] = [
        encode_method(channel, method),
        _CONTENT_HEADER_FRAME_HEAD.pack(
            FRAME_HEADER, channel, 12 + len(raw), method.CLASS_ID, 0, len(body)
        ),
        raw,
        _END,
    ]
    _append_body_frames(parts, channel, body, frame_max)
    return b"".join(parts)


def _append_body_frames(parts: list[bytes | memoryview], channel: int,
                        body: bytes | bytearray | memoryview, frame_max: int) -> None:
    max_payload = frame_max - FRAME_OVERHEAD
    view = memoryview(body)
    for start in range(0, len(view), max_payload):
        chunk = view[start : start + max_payload]
        parts += (_FRAME_HEAD.pack(FRAME_BODY, channel, len(chunk)), chunk, _END)


class DeliverEncoder:
    """Basic.Deliver + content header + body for one consumer: the hot delivery path.

    The channel and consumer tag are encoded once; each delivery is a handful of precompiled
    struct packs and one join. Properties are passed encoded (``properties_raw``).
    """

    __slots__ = ("_channel", "_frame_max", "_method_prefix", "_method_size")

    # Deliver's fixed tail: delivery-tag, redelivered, then the exchange's length octet.
    _TAG_AND_FLAGS = Struct(">QBB")
    _U8 = Struct("B")
    # Method frame's end octet, then the content header frame's head.
    _HEADER_HEAD = Struct(">BBHIHHQ")

    def __init__(self, channel: int, consumer_tag: str, frame_max: int) -> None:
        prefix = bytearray(BasicDeliver.INDEX.to_bytes(4))
        write_shortstr(prefix, consumer_tag)
        self._method_prefix = bytes(prefix)
        # Everything in the method payload but the exchange and routing key bytes.
        self._method_size = len(prefix) + self._TAG_AND_FLAGS.size + 1
        self._channel = channel
        self._frame_max = frame_max

    def encode(self, delivery_tag: int, redelivered: bool, exchange: str, routing_key: str,
               properties_raw: bytes, body: bytes) -> bytes:
        channel = self._channel
        exchange_raw = exchange.encode()
        routing_key_raw = routing_key.encode()
        method_size = self._method_size + len(exchange_raw) + len(routing_key_raw)
        parts: list[bytes | memoryview] = [
            _FRAME_HEAD.pack(FRAME_METHOD, channel, method_size),
            self._method_prefix,
            self._TAG_AND_FLAGS.pack(delivery_tag, redelivered, len(exchange_raw)),
            exchange_raw,
            self._U8.pack(len(routing_key_raw)),
            routing_key_raw,
            self._HEADER_HEAD.pack(FRAME_END, FRAME_HEADER, channel, 12 + len(properties_raw),
                                   BasicDeliver.CLASS_ID, 0, len(body)),
            properties_raw,
            _END,
        ]
        if len(body) <= self._frame_max - FRAME_OVERHEAD:
            if body:
                parts += (_FRAME_HEAD.pack(FRAME_BODY, channel, len(body)), body, _END)
        else:
            _append_body_frames(parts, channel, body, self._frame_max)
        return b"".join(parts)
