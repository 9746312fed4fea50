"""Plain integer counters behind RabbitMQ's message and object statistics.

Protocol handlers bump them where the event happens (one integer add, no lookup on the
hot path: a handler keeps its `MessageCounters` object); /metrics and the management API
read them when asked. The names follow RabbitMQ's global counters (3.10+), so the
exporter maps each field to `rabbitmq_global_messages_<field>_total`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# RabbitMQ's values of the `protocol` label
AMQP091 = "amqp091"
STREAM = "stream"


@dataclass(slots=True)
class MessageCounters:
    """What one channel (or a whole protocol) received, routed, confirmed and delivered."""

    received: int = 0
    received_confirm: int = 0  # received on a channel in confirm mode
    routed: int = 0
    unroutable_dropped: int = 0
    unroutable_returned: int = 0
    confirmed: int = 0
    delivered_consume_auto_ack: int = 0
    delivered_consume_manual_ack: int = 0
    delivered_get_auto_ack: int = 0
    delivered_get_manual_ack: int = 0
    get_empty: int = 0
    acknowledged: int = 0
    redelivered: int = 0

    def add(self, other: MessageCounters) -> None:
        for name in COUNTER_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def delivered(self) -> int:
        return (self.delivered_consume_auto_ack + self.delivered_consume_manual_ack
                + self.delivered_get_auto_ack + self.delivered_get_manual_ack)


COUNTER_NAMES = tuple(f.name for f in fields(MessageCounters))


@dataclass(slots=True)
class BrokerCounters:
    """Node-wide counts: objects opened and closed, and messages per protocol label.

    The messages of a live AMQP channel are in the channel's own counters until it
    closes (`retire`), so the totals are these plus those of the open channels."""

    connections_opened: int = 0
    connections_closed: int = 0
    channels_opened: int = 0
    channels_closed: int = 0
    queues_declared: int = 0
    queues_created: int = 0
    queues_deleted: int = 0
    messages: dict[str, MessageCounters] = field(default_factory=dict)

    def protocol(self, label: str) -> MessageCounters:
        """The counters of protocol `label` ("amqp091", "stream"), created on first use."""
        counters = self.messages.get(label)
        if counters is None:
            counters = self.messages[label] = MessageCounters()
        return counters

    def retire(self, label: str, counters: MessageCounters) -> None:
        """A channel closed: its counts stay in the protocol's totals."""
        self.protocol(label).add(counters)
