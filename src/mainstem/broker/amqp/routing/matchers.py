"""Per-exchange matchers: which destinations a message reaches from one exchange.

Every matcher has the same three methods. `add_binding` is called once per
distinct binding (the exchange graph removes duplicates) and may refuse an
invalid binding before changing anything; `remove_binding` is only called for
a binding that was added. Several bindings can lead to the same destination,
so matchers count them and forget a destination with its last binding.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from typing import Any

from mainstem.broker.amqp.routing.model import Binding, Destination


class Matcher(ABC):
    @abstractmethod
    def add_binding(self, binding: Binding) -> None: ...

    @abstractmethod
    def remove_binding(self, binding: Binding) -> None: ...

    @abstractmethod
    def route(
        self, routing_key: str, headers: Mapping[str, Any] | None = None
    ) -> set[Destination]: ...


def forget_one(counts: Counter[Destination], destination: Destination) -> None:
    """Drop one binding's claim on `destination`, and the key with the last one."""
    counts[destination] -= 1
    if counts[destination] <= 0:
        del counts[destination]


class DirectMatcher(Matcher):
    """Routes to the bindings whose key equals the routing key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Counter[Destination]] = {}

    def add_binding(self, binding: Binding) -> None:
        self._by_key.setdefault(binding.routing_key, Counter())[binding.target] += 1

    def remove_binding(self, binding: Binding) -> None:
        counts = self._by_key[binding.routing_key]
        forget_one(counts, binding.target)
        if not counts:
            del self._by_key[binding.routing_key]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Destination]:
        counts = self._by_key.get(routing_key)
        return set(counts) if counts else set()


class FanoutMatcher(Matcher):
    """Routes to every destination, whatever the key and headers."""

    def __init__(self) -> None:
        self._counts: Counter[Destination] = Counter()

    def add_binding(self, binding: Binding) -> None:
        self._counts[binding.target] += 1

    def remove_binding(self, binding: Binding) -> None:
        forget_one(self._counts, binding.target)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Destination]:
        return set(self._counts)
