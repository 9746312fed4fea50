"""Queue declaration arguments (``x-...``): parsed and checked once, as RabbitMQ 4.x does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.broker.amqp.routing.model import amqp_type_name, canonical_value
from mainstem.broker.errors import PreconditionFailed

# The queue types and overflow modes, one list with the policies that name them too
from mainstem.broker.policies import CLASSIC as CLASSIC
from mainstem.broker.policies import OVERFLOW_MODES
from mainstem.broker.policies import QUORUM as QUORUM
from mainstem.broker.policies import STREAM as STREAM

# Compared on redeclaration; RabbitMQ ignores the others (x-queue-mode, x-queue-version, ...).
_EQUIVALENCE_KEYS = (
    "x-queue-type", "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
    "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
    "x-single-active-consumer",
)


@dataclass(frozen=True, slots=True)
class QueueArguments:
    queue_type: str = CLASSIC
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int = 0
    single_active_consumer: bool = False
    # Returns of a message (a quorum queue's) before it is dead-lettered (None: no limit).
    delivery_limit: int | None = None
    # Ready messages kept in memory, the rest paged to disk (None: the broker's bound).
    max_in_memory_length: int | None = None
    max_in_memory_bytes: int | None = None

    def memory_bound(self, default: MemoryBound) -> MemoryBound:
        """The broker's bound, or the queue's own."""
        return MemoryBound(
            default.messages if self.max_in_memory_length is None
            else self.max_in_memory_length,
            default.bytes if self.max_in_memory_bytes is None else self.max_in_memory_bytes)


def parse_queue_arguments(queue: str, vhost: str, args: Mapping[str, Any]) -> QueueArguments:
    """Check the known arguments; a bad one is 406 PRECONDITION_FAILED as in RabbitMQ."""

    def fail(key: str, detail: str) -> PreconditionFailed:
        return PreconditionFailed(
            f"invalid arg '{key}' for queue '{queue}' in vhost '{vhost}': {detail}")

    def integer(key: str, minimum: int) -> int | None:
        value = args.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(key, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        if value < minimum:
            reason = "value_zero" if value == 0 else "value_negative"
            raise fail(key, f"{{{reason},{value}}}")
        return value

    def text(key: str) -> str | None:
        value = args.get(key)
        if value is None:
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "surrogateescape")
        if not isinstance(value, str):
            raise fail(key, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        return value

    queue_type = text("x-queue-type") or CLASSIC
    if queue_type not in (CLASSIC, QUORUM, STREAM):
        raise fail("x-queue-type", f"{{unsupported_type,{queue_type}}}")
    overflow = text("x-overflow") or "drop-head"
    if overflow not in OVERFLOW_MODES:
        raise fail("x-overflow", f"{{unacceptable_value,{overflow}}}")
    priority = integer("x-max-priority", 0) or 0
    if priority > 255:
        raise fail("x-max-priority", f"{{value_too_large,{priority},255}}")
    routing_key = text("x-dead-letter-routing-key")
    exchange = text("x-dead-letter-exchange")
    if routing_key is not None and exchange is None:
        raise PreconditionFailed(
            f"invalid arg 'x-dead-letter-routing-key' for queue '{queue}' in vhost '{vhost}':"
            " routing_key_but_no_dlx_defined")
    delivery_limit = integer("x-delivery-limit", -1) if queue_type == QUORUM else None
    sac = args.get("x-single-active-consumer", False)
    if not isinstance(sac, bool):
        raise fail("x-single-active-consumer", f"{{unacceptable_type,{amqp_type_name(sac)}}}")
    return QueueArguments(
        queue_type=queue_type,
        message_ttl_ms=integer("x-message-ttl", 0),
        expires_ms=integer("x-expires", 1),
        max_length=integer("x-max-length", 0),
        max_length_bytes=integer("x-max-length-bytes", 0),
        overflow=overflow,
        dead_letter_exchange=exchange,
        dead_letter_routing_key=routing_key,
        max_priority=priority,
        single_active_consumer=sac,
        delivery_limit=None if delivery_limit is None or delivery_limit < 0 else delivery_limit,
        max_in_memory_length=integer("x-max-in-memory-length", 0),
        max_in_memory_bytes=integer("x-max-in-memory-bytes", 0),
    )


def assert_equivalent_arguments(queue: str, vhost: str, current: Mapping[str, Any],
                                requested: Mapping[str, Any]) -> None:
    for key in _EQUIVALENCE_KEYS:
        old, new = current.get(key), requested.get(key)
        if key == "x-queue-type" and new is None:
            continue  # RabbitMQ 4: a redeclare without a type matches any type
        if canonical_value(old) != canonical_value(new):
            raise PreconditionFailed(
                f"inequivalent arg '{key}' for queue '{queue}' in vhost '{vhost}': "
                f"received {_shown(new)} but current is {_shown(old)}")


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{value}' of type '{amqp_type_name(value)}'"
