"""Headers exchange matching, as RabbitMQ 4.x does it.

A binding's arguments are the pattern; "x-match" says how to combine them:
"all" (the default) or "any", which ignore pattern keys starting with "x-",
and "all-with-x" or "any-with-x" (RabbitMQ 3.10+), which match them too. The
"x-match" key itself is never matched. A pattern value of None (AMQP void)
only asks for the header to be present; any other value must be equal to the
header's value by `canonical_value` (exact: 1, 1.0 and True differ, a str
equals the bytes of its UTF-8). With no keys left to match, "all" matches
every message and "any" none.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from mainstem.broker.amqp.routing.matchers import Matcher
from mainstem.broker.amqp.routing.model import Binding, Destination, amqp_type_name, canonical_value
from mainstem.broker.errors import PreconditionFailed

X_MATCH = "x-match"
_MODES = ("all", "any", "all-with-x", "any-with-x")
# Stands for a void pattern value: the header only has to be present.
_PRESENT = object()


@dataclass(frozen=True, slots=True)
class HeadersPattern:
    any: bool
    # (header name, canonical value or _PRESENT), x-match and ignored keys left out.
    requirements: tuple[tuple[str, Any], ...]

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> HeadersPattern:
        mode = _x_match_mode(arguments)
        with_x = mode.endswith("-with-x")
        requirements = tuple(
            (key, _PRESENT if value is None else canonical_value(value))
            for key, value in arguments.items()
            if key != X_MATCH and (with_x or not key.startswith("x-"))
        )
        return cls(any=mode.startswith("any"), requirements=requirements)

    def matches(self, headers: Mapping[str, Hashable]) -> bool:
        """`headers` holds canonical values (see `canonical_headers`)."""
        satisfied = (
            key in headers and (wanted is _PRESENT or headers[key] == wanted)
            for key, wanted in self.requirements
        )
        return any(satisfied) if self.any else all(satisfied)


def _x_match_mode(arguments: Mapping[str, Any]) -> str:
    mode = arguments.get(X_MATCH, "all")
    if not isinstance(mode, str):
        raise PreconditionFailed(
            f"Invalid x-match field type {amqp_type_name(mode)} (value {mode!r}); expected longstr"
        )
    if mode not in _MODES:
        raise PreconditionFailed(
            f'Invalid x-match field value <<"{mode}">>; '
            "expected all, any, all-with-x, or any-with-x"
        )
    return mode


def canonical_headers(headers: Mapping[str, Any] | None) -> dict[str, Hashable]:
    return {key: canonical_value(value) for key, value in (headers or {}).items()}


class HeadersMatcher(Matcher):
    """Tries every binding's pattern, as RabbitMQ does: cost grows with bindings."""

    def __init__(self) -> None:
        self._patterns: dict[Binding, HeadersPattern] = {}

    def add_binding(self, binding: Binding) -> None:
        self._patterns[binding] = HeadersPattern.from_arguments(binding.arguments)

    def remove_binding(self, binding: Binding) -> None:
        del self._patterns[binding]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Destination]:
        if not self._patterns:
            return set()
        canonical = canonical_headers(headers)
        return {
            binding.target
            for binding, pattern in self._patterns.items()
            if pattern.matches(canonical)
        }
