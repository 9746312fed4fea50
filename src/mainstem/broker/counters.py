"""Node-wide counts behind RabbitMQ's object churn metrics, and the stream protocol's
message counts.

Plain integers bumped where the event happens; /metrics reads them at scrape time. AMQP
0-9-1 counts messages per channel (`Channel.stats`, folded into
`BrokerCore.closed_channel_stats` when a channel ends); the stream protocol has no
channels, so its connections add to `stream` here. Both are `MessageStats`.
"""

from __future__ import annotations

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
