"""A short history of the overview's samples, as RabbitMQ's management keeps: the node's
message counters and each vhost's queue lengths, once a second for ten minutes. The
overview serves them when asked (RabbitMQ's `msg_rates_age`/`msg_rates_incr` and
`lengths_age`/`lengths_incr`), so a console's charts outlive a reload of the page."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

KEPT_S = 600  # RabbitMQ's default sample retention for the overview's charts
LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")


@dataclass(frozen=True)
class Sample:
    at: float  # wall clock, s
    counts: Mapping[str, int]  # the node's message counters
    lengths: Mapping[str, Mapping[str, int]]  # vhost -> queue lengths


class SampleHistory:
    def __init__(self, kept_s: float = KEPT_S) -> None:
        self._kept_s = kept_s
        self._samples: deque[Sample] = deque()

    def record(self, sample: Sample) -> None:
        self._samples.append(sample)
        while self._samples and sample.at - self._samples[0].at > self._kept_s:
            self._samples.popleft()

    def taken(self, age_s: float, incr_s: float) -> list[Sample]:
        """Newest first (as RabbitMQ lists them): those of the last `age_s`, at least
        `incr_s` apart."""
        if not self._samples:
            return []
        newest = self._samples[-1].at
        chosen: list[Sample] = []
        for sample in reversed(self._samples):
            if newest - sample.at > age_s:
                break
            if not chosen or chosen[-1].at - sample.at >= incr_s - 0.5:
                chosen.append(sample)
        return chosen

    def counter_samples(self, age_s: float, incr_s: float, name: str) -> list[dict[str, Any]]:
        return [{"sample": s.counts.get(name, 0), "timestamp": int(s.at * 1000)}
                for s in self.taken(age_s, incr_s)]

    def length_samples(self, age_s: float, incr_s: float, name: str,
                       visible: Callable[[str], bool]) -> list[dict[str, Any]]:
        """A queue length summed over the vhosts the asker sees."""
        return [{"sample": sum(lengths.get(name, 0) for vhost, lengths in s.lengths.items()
                               if visible(vhost)), "timestamp": int(s.at * 1000)}
                for s in self.taken(age_s, incr_s)]


def add_lengths(lengths: dict[str, dict[str, int]], vhost: str, ready: int,
                unacked: int) -> None:
    """Count queues' messages into their vhost's sums."""
    sums = lengths.setdefault(vhost, dict.fromkeys(LENGTHS, 0))
    sums["messages"] += ready + unacked
    sums["messages_ready"] += ready
    sums["messages_unacknowledged"] += unacked
