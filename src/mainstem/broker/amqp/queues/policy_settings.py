"""What a queue runs with once a policy applies: its arguments and the policy's keys,
combined as RabbitMQ 4.x combines them. For limits (lengths, TTLs, expiry, delivery limit)
the smaller of the argument and the policy wins; for the others (dead-lettering, overflow)
the argument wins, and the policy's value holds where the argument is absent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mainstem.broker.amqp.queues.arguments import QUORUM, QueueArguments

# policy key -> QueueArguments field
_SMALLER = {"max-length": "max_length", "max-length-bytes": "max_length_bytes",
            "message-ttl": "message_ttl_ms", "expires": "expires_ms"}
_ARGUMENT_FIRST = {"overflow": "overflow", "dead-letter-exchange": "dead_letter_exchange",
                   "dead-letter-routing-key": "dead_letter_routing_key"}


def with_policy(declared: QueueArguments, arguments: Mapping[str, Any],
                definition: Mapping[str, Any]) -> QueueArguments:
    """`declared` (parsed from `arguments`) with the policy's `definition` applied."""
    changes: dict[str, Any] = {}
    for key, attribute in _SMALLER.items():
        if key in definition:
            changes[attribute] = _smaller(getattr(declared, attribute), definition[key])
    for key, attribute in _ARGUMENT_FIRST.items():
        if key in definition and f"x-{key}" not in arguments:
            changes[attribute] = definition[key]
    limit = definition.get("delivery-limit")
    if declared.queue_type == QUORUM and limit is not None and limit >= 0:
        changes["delivery_limit"] = _smaller(declared.delivery_limit, limit)
    return replace(declared, **changes) if changes else declared


def _smaller(current: int | None, value: int) -> int:
    return value if current is None else min(current, value)
