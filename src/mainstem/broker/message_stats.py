"""Counts of message events per channel, queue and exchange, named as RabbitMQ's
``message_stats`` names them.

The hot path only adds to plain integers; the management API samples the counters on its
own clock to compute rates, so no rate work happens per message.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class MessageStats:
    publish: int = 0
    publish_confirm: int = 0  # of publish: those on a channel in confirm mode
    publish_in: int = 0  # exchanges: messages published into it
    publish_out: int = 0  # exchanges: messages it routed onwards
    confirm: int = 0
    return_unroutable: int = 0
    drop_unroutable: int = 0
    deliver: int = 0
    deliver_no_ack: int = 0
    get: int = 0
    get_no_ack: int = 0
    get_empty: int = 0
    ack: int = 0
    redeliver: int = 0

    def delivered(self, *, no_ack: bool, by_get: bool, redelivered: bool) -> None:
        """One message handed to a consumer (`by_get`: to basic.get)."""
        if by_get:
            if no_ack:
                self.get_no_ack += 1
            else:
                self.get += 1
        elif no_ack:
            self.deliver_no_ack += 1
        else:
            self.deliver += 1
        if redelivered:
            self.redeliver += 1

    def add(self, other: MessageStats) -> None:
        for name in COUNTER_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def counts(self) -> dict[str, int]:
        counts = {name: getattr(self, name) for name in COUNTER_NAMES}
        counts["deliver_get"] = (self.deliver + self.deliver_no_ack + self.get
                                 + self.get_no_ack)
        return counts


COUNTER_NAMES = tuple(f.name for f in fields(MessageStats))
