"""Messages and bytes delivered to consumers, per stream or queue, for metrics.

Protocol handlers count once per delivered chunk or batch (never per message), so the
streaming delivery path stays free of per-message Python work.
"""

from __future__ import annotations


class DeliveryStats:
    def __init__(self) -> None:
        # (namespace, stream or queue) -> [messages, bytes]
        self._delivered: dict[tuple[str, str], list[int]] = {}

    def delivered(self, namespace: str, name: str, messages: int, size: int) -> None:
        counts = self._delivered.get((namespace, name))
        if counts is None:
            counts = self._delivered[(namespace, name)] = [0, 0]
        counts[0] += messages
        counts[1] += size

    def delivered_messages(self, namespace: str, name: str) -> int:
        counts = self._delivered.get((namespace, name))
        return 0 if counts is None else counts[0]

    def forget(self, namespace: str, name: str) -> None:
        """Drop the counters of a deleted stream or queue."""
        self._delivered.pop((namespace, name), None)

    def snapshot(self) -> dict[tuple[str, str], tuple[int, int]]:
        return {key: (counts[0], counts[1]) for key, counts in self._delivered.items()}
