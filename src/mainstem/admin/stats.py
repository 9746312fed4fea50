"""Rates for RabbitMQ-style ``message_stats``: the broker's plain counters, sampled by the
management API once a second, give rates over RabbitMQ's 5 s sample window.

Objects are sampled by key (("queue", vhost, name), ("channel", connection id, number),
...); an object missing from a sample is gone, and so is its history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any

RATE_WINDOW_S = 5.0
Counts = Mapping[str, int]


class RateSampler:
    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self._window_s = window_s
        self._history: dict[Hashable, deque[tuple[float, Counts]]] = {}

    def record(self, now: float, samples: Mapping[Hashable, Counts]) -> None:
        """One sample of every live object's counters, taken at `now` (monotonic s)."""
        for key, counts in samples.items():
            history = self._history.setdefault(key, deque())
            history.append((now, counts))
            while len(history) > 2 and now - history[1][0] >= self._window_s:
                history.popleft()
        for key in self._history.keys() - samples.keys():
            del self._history[key]

    def rates(self, key: Hashable) -> dict[str, float]:
        """Per second, over the window ending at the last sample; empty before two."""
        history = self._history.get(key)
        if not history or len(history) < 2:
            return {}
        (t0, first), (t1, last) = history[0], history[-1]
        elapsed = max(t1 - t0, 1e-3)
        return {name: max(value - first.get(name, 0), 0) / elapsed
                for name, value in last.items()}

    def detailed(self, key: Hashable, counts: Counts) -> dict[str, Any]:
        """Counters with RabbitMQ's `<name>_details: {"rate": ...}` beside each."""
        rates = self.rates(key)
        result: dict[str, Any] = {}
        for name, value in counts.items():
            result[name] = value
            result[f"{name}_details"] = {"rate": round(rates.get(name, 0.0), 1)}
        return result
