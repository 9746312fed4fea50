"""RabbitMQ's `idle_since` and consumer capacity of each queue, from the management
sampler's look at every queue once a second, so nothing is timed on the hot path.

A queue is idle once a look finds its message counters as the previous look left them; it
has been idle since the look that last saw them move (or first saw the queue). Consumer
capacity is the share of looks, over the rate window, at which a message arriving would
have gone to a consumer at once: 0 without consumers, 1 with a consumer and nothing
waiting, else whether any consumer is below its prefetch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from mainstem.admin.stats import RATE_WINDOW_S

Counts = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class QueueLook:
    counts: Counts  # the queue's message counters, a snapshot no one changes
    deliverable: bool  # a message arriving now would go to a consumer at once


class QueueActivity:
    def __init__(self, window: int = int(RATE_WINDOW_S)) -> None:
        self._window = window  # looks the capacity is averaged over
        self._moved: dict[Hashable, tuple[Counts, float]] = {}  # counts, when they moved
        self._deliverable: dict[Hashable, deque[bool]] = {}
        self._now = 0.0

    def record(self, now: float, looks: Mapping[Hashable, QueueLook]) -> None:
        """One look at every live queue, taken at `now` (seconds since the epoch)."""
        self._now = now
        for key, look in looks.items():
            moved = self._moved.get(key)
            if moved is None or moved[0] != look.counts:
                self._moved[key] = (look.counts, now)
            self._deliverable.setdefault(key, deque(maxlen=self._window)).append(
                look.deliverable)
        for key in self._moved.keys() - looks.keys():
            del self._moved[key], self._deliverable[key]

    def idle_since(self, key: Hashable) -> float | None:
        """When the queue went idle (seconds since the epoch); None while it is active."""
        moved = self._moved.get(key)
        return None if moved is None or moved[1] == self._now else moved[1]

    def consumer_capacity(self, key: Hashable) -> float | None:
        """0.0 to 1.0; None for a queue not looked at yet."""
        looks = self._deliverable.get(key)
        return None if not looks else sum(looks) / len(looks)
