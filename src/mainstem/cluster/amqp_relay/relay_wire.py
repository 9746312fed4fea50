"""The frames of the AMQP relay between a node and a queue's home node, sans-IO.

They use the replication listener's framing (`wire.frame`). A node opens with
RELAY_HELLO (JSON: the cluster secret, its name), then sends:

- RELAY_PUBLISH: one message for one queue; with `confirm`, the home answers
  RELAY_CONFIRM (id, accepted) once the message is its queue's as its own publish would
  be confirmed;
- RELAY_CALL (JSON: id, op, vhost, queue and the op's arguments) for consume, cancel,
  get, purge and counts, answered by RELAY_REPLY (JSON: id, result, or error and its
  kind) — a get that found a message by RELAY_GOT — and not at all when id is 0;
- RELAY_SETTLE: ack, reject or requeue, and the home's ids of the deliveries.

The home sends RELAY_DELIVER (a message for a subscription) and RELAY_CANCELLED (it
ended a subscription). Messages travel as they are held, AMQP-encoded properties and
body bytes: no JSON per message.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass
from typing import Any

from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.remote import RelayedMessage, Settlement
from mainstem.cluster.replication.wire import FrameType, WireError, frame

# A message as large as a client may publish (128 MiB body, properties within one
# frame), with its names: no relayed message is refused for its size.
MAX_RELAY_FRAME = 129 * 1024 * 1024

_PUBLISH = struct.Struct(">QBBq")  # id, flags, priority, ms to live (-1: no expiry)
_DELIVER = struct.Struct(">QQIIBB")  # to, delivery id, delivery count, ready, flags, priority
_CONFIRM = struct.Struct(">QB")  # id, accepted
_SETTLE = struct.Struct(">B")  # how; the ids follow, u64 each
_CANCELLED = struct.Struct(">Q")  # subscription
_NAME = struct.Struct(">H")
_BYTES = struct.Struct(">I")
_PERSISTENT, _CONFIRMING = 1, 2


@dataclass(frozen=True, slots=True)
class Publish:
    request: int
    confirm: bool
    vhost: str
    queue: str
    message: QueueMessage


# -- encoding -------------------------------------------------------------------------


def _names(*names: str) -> bytes:
    parts = []
    for name in names:
        encoded = name.encode()
        parts += [_NAME.pack(len(encoded)), encoded]
    return b"".join(parts)


def encode_publish(request: int, vhost: str, queue: str, message: QueueMessage,
                   confirm: bool) -> bytes:
    flags = (_PERSISTENT if message.persistent else 0) | (_CONFIRMING if confirm else 0)
    expires = message.expires_at
    ttl = -1 if expires is None else max(0, int((expires - time.monotonic()) * 1000))
    return frame(FrameType.RELAY_PUBLISH, b"".join((
        _PUBLISH.pack(request, flags, message.priority, ttl),
        _names(vhost, queue, message.exchange, message.routing_key),
        _BYTES.pack(len(message.properties)), message.properties, message.body)))


def encode_delivery(kind: FrameType, to: int, delivery: int, ready: int,
                    message: QueueMessage) -> bytes:
    """RELAY_DELIVER (`to` a subscription) or RELAY_GOT (`to` the get's call id)."""
    return frame(kind, b"".join((
        _DELIVER.pack(to, delivery, message.delivery_count, ready,
                      _PERSISTENT if message.persistent else 0, message.priority),
        _names(message.exchange, message.routing_key),
        _BYTES.pack(len(message.properties)), message.properties, message.body)))


def encode_confirm(request: int, accepted: bool) -> bytes:
    return frame(FrameType.RELAY_CONFIRM, _CONFIRM.pack(request, accepted))


def encode_settle(how: Settlement, deliveries: list[int] | tuple[int, ...]) -> bytes:
    return frame(FrameType.RELAY_SETTLE,
                 _SETTLE.pack(how) + struct.pack(f">{len(deliveries)}Q", *deliveries))


def encode_cancelled(subscription: int) -> bytes:
    return frame(FrameType.RELAY_CANCELLED, _CANCELLED.pack(subscription))


def encode_json(kind: FrameType, fields: dict[str, Any]) -> bytes:
    return frame(kind, json.dumps(fields).encode())


# -- decoding -------------------------------------------------------------------------


class _Reader:
    """Reads a frame's body field by field."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.position = 0

    def fixed(self, layout: struct.Struct) -> tuple[Any, ...]:
        values = layout.unpack_from(self.body, self.position)
        self.position += layout.size
        return values

    def name(self) -> str:
        (length,) = self.fixed(_NAME)
        return self._take(length).decode()

    def sized(self) -> bytes:
        (length,) = self.fixed(_BYTES)
        return self._take(length)

    def rest(self) -> bytes:
        return self._take(len(self.body) - self.position)

    def _take(self, length: int) -> bytes:
        end = self.position + length
        if end > len(self.body):
            raise WireError("a field runs past the frame")
        value = self.body[self.position:end]
        self.position = end
        return value


def decode_publish(body: bytes) -> Publish:
    try:
        reader = _Reader(body)
        request, flags, priority, ttl = reader.fixed(_PUBLISH)
        vhost, queue, exchange, routing_key = (reader.name() for _ in range(4))
        properties = reader.sized()
        message = QueueMessage(exchange, routing_key, properties, reader.rest(),
                               persistent=bool(flags & _PERSISTENT), priority=priority,
                               expires_at=None if ttl < 0 else time.monotonic() + ttl / 1000)
        return Publish(request, bool(flags & _CONFIRMING), vhost, queue, message)
    except (struct.error, UnicodeDecodeError) as error:
        raise WireError(f"bad RELAY_PUBLISH: {error}") from error


def decode_delivery(body: bytes, route: object) -> tuple[int, int, RelayedMessage]:
    """(to, ready count, the message) of a RELAY_DELIVER or RELAY_GOT."""
    try:
        reader = _Reader(body)
        to, delivery, count, ready, flags, priority = reader.fixed(_DELIVER)
        exchange, routing_key = reader.name(), reader.name()
        properties = reader.sized()
        message = RelayedMessage(exchange, routing_key, properties, reader.rest(),
                                 delivery=delivery, route=route, delivery_count=count)
        message.persistent, message.priority = bool(flags & _PERSISTENT), priority
        return to, ready, message
    except (struct.error, UnicodeDecodeError) as error:
        raise WireError(f"bad relayed delivery: {error}") from error


def decode_confirm(body: bytes) -> tuple[int, bool]:
    try:
        request, accepted = _CONFIRM.unpack(body)
    except struct.error as error:
        raise WireError(f"bad RELAY_CONFIRM: {error}") from error
    return request, bool(accepted)


def decode_settle(body: bytes) -> tuple[Settlement, tuple[int, ...]]:
    try:
        how = Settlement(body[0])
        count = (len(body) - 1) // 8
        return how, struct.unpack_from(f">{count}Q", body, 1)
    except (IndexError, ValueError, struct.error) as error:
        raise WireError(f"bad RELAY_SETTLE: {error}") from error


def decode_cancelled(body: bytes) -> int:
    try:
        subscription: int = _CANCELLED.unpack(body)[0]
    except struct.error as error:
        raise WireError(f"bad RELAY_CANCELLED: {error}") from error
    return subscription


def decode_json(body: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(body)
    except ValueError as error:
        raise WireError(f"bad relay JSON: {error}") from error
    if not isinstance(fields, dict):
        raise WireError("a relay call or reply is a JSON object")
    return fields
