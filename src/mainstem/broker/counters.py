"""Node-wide counts behind RabbitMQ's object churn metrics, and the stream protocol's
message counts.

Plain integers bumped where the event happens; /metrics reads them at scrape time. AMQP
0-9-1 counts messages per channel (`Channel.stats`, folded into
`BrokerCore.closed_channel_stats` when a channel ends); the stream protocol has no
channels, so its connections add to `stream` here. Both are `MessageStats`. Beside them:
the stream protocol's error codes sent, dead-lettered messages and login attempts, each
by what RabbitMQ's global counters label them with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mainstem.broker.message_stats import MessageStats


@dataclass(slots=True)
class BrokerCounters:
    connections_opened: int = 0
    connections_closed: int = 0
    channels_opened: int = 0
    channels_closed: int = 0
    queues_declared: int = 0
    queues_created: int = 0
    queues_deleted: int = 0
    # Confirming publishes to a durable queue whose journal write was made but failed to
    # become durable or committed (its leader stepped down, an fsync failed): nacked with
    # their outcome unknown. Refusals before the write are not counted.
    nacks_outcome_unknown: int = 0
    # Damaged chunks replaced by an in-sync replica's intact copy (broker/scrub.py; those
    # found damaged are counted by `broker.damage`).
    chunks_repaired: int = 0
    stream: MessageStats = field(default_factory=MessageStats)  # the stream protocol's
    # Response codes other than OK the stream protocol sent (in responses, publish errors
    # and the server's Close, unless it follows the response it closes for), by code.
    stream_errors: Counter[int] = field(default_factory=Counter)
    # Messages that died in a queue: (queue type, reason, "at_most_once" when the queue's
    # dead-letter exchange exists, else "disabled": dropped).
    dead_lettered: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # Logins: (listener protocol, succeeded).
    logins: Counter[tuple[str, bool]] = field(default_factory=Counter)
