"""A message held by a classic queue, and the one protocol-specific step queues need.

Queues treat properties as opaque bytes (the publishing protocol's own encoding, stored and
forwarded untouched); the few facts routing and queue semantics need (persistence, priority,
expiration) are taken once, at publish, by the protocol adapter. Dead-lettering is the only
time a queue must rewrite properties (the ``x-death`` header), which it asks of the
registered ``PropertiesCodec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class QueueMessage:
    """One message in one queue. A message routed to several queues is one object per queue
    (they share the body bytes), since delivery state is per queue."""

    __slots__ = ("body", "delivery_count", "exchange", "expires_at", "log_offset",
                 "persistent", "priority", "properties", "routing_key", "seq", "settled")

    def __init__(self, exchange: str, routing_key: str, properties: bytes, body: bytes, *,
                 persistent: bool = False, priority: int = 0,
                 expires_at: float | None = None) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expires_at = expires_at  # time.monotonic() seconds; None: never
        self.delivery_count = 0
        self.seq = 0  # position in its queue: requeued messages go back in order
        self.log_offset: int | None = None  # offset in a durable queue's journal
        self.settled = False

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1

    def copy(self) -> QueueMessage:
        return QueueMessage(self.exchange, self.routing_key, self.properties, self.body,
                            persistent=self.persistent, priority=self.priority,
                            expires_at=self.expires_at)


class PropertiesCodec(Protocol):
    """Reads and rewrites the headers of encoded properties (AMQP 0-9-1 registers one)."""

    def headers(self, properties: bytes) -> Mapping[str, Any]: ...

    def expiration(self, properties: bytes) -> str | None: ...

    def with_headers(self, properties: bytes, headers: dict[str, Any], *,
                     drop_expiration: bool) -> bytes: ...


class _NoCodec:
    def headers(self, properties: bytes) -> Mapping[str, Any]:
        return {}

    def expiration(self, properties: bytes) -> str | None:
        return None

    def with_headers(self, properties: bytes, headers: dict[str, Any], *,
                     drop_expiration: bool) -> bytes:
        return properties


_codec: list[PropertiesCodec] = [_NoCodec()]


def register_properties_codec(codec: PropertiesCodec) -> None:
    _codec[0] = codec


def properties_codec() -> PropertiesCodec:
    return _codec[0]
