"""Value types of AMQP 0-9-1 routing: exchange types, exchanges, bindings."""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from mainstem.broker.errors import InvalidArgument

DestinationKind = Literal["queue", "exchange"]
# What a matcher returns: the kind and name of a binding's destination.
Destination = tuple[DestinationKind, str]

ALTERNATE_EXCHANGE = "alternate-exchange"


class ExchangeType(StrEnum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"

    @classmethod
    def parse(cls, name: str | ExchangeType) -> ExchangeType:
        """The type called `name`; RabbitMQ 3.12+ refuse unknown ones
        (406 PRECONDITION_FAILED, closing the channel)."""
        try:
            return cls(name)
        except ValueError:
            raise InvalidArgument(f"unknown exchange type '{name}'") from None


@dataclass(frozen=True)
class Exchange:
    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", dict(self.arguments))

    @property
    def alternate_exchange(self) -> str | None:
        value = self.arguments.get(ALTERNATE_EXCHANGE)
        return value if isinstance(value, str) else None


@dataclass(frozen=True, eq=False)
class Binding:
    """A route from an exchange to a queue or to another exchange.

    Two bindings are the same binding when source, destination, routing key and
    arguments are all equal, as in RabbitMQ: a queue may be bound twice with the
    same key if the arguments differ.
    """

    source: str
    destination: str
    destination_kind: DestinationKind = "queue"
    routing_key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.destination_kind not in ("queue", "exchange"):
            raise InvalidArgument(f"invalid destination kind '{self.destination_kind}'")
        # A private copy: a binding is a value, the caller's dict may change later.
        object.__setattr__(self, "arguments", dict(self.arguments))

    @property
    def target(self) -> Destination:
        return (self.destination_kind, self.destination)

    @cached_property
    def identity(self) -> Hashable:
        return (
            self.source,
            self.destination_kind,
            self.destination,
            self.routing_key,
            canonical_value(self.arguments),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Binding) and self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)


def canonical_value(value: Any) -> Hashable:
    """A hashable form of a decoded AMQP field value for exact comparison.

    RabbitMQ 4.x compares header values with Erlang's exact equality (=:=), so
    integers of any width are equal, but 1, 1.0 and true are three different
    values; str and bytes are both AMQP strings (Erlang binaries) and compare by
    their UTF-8 bytes; decimals compare by digits and scale (1.0 != 1.00).
    """
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, str):
        return ("binary", value.encode())
    if isinstance(value, bytes | bytearray | memoryview):
        return ("binary", bytes(value))
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.as_tuple())
    if isinstance(value, list | tuple):
        return ("array", tuple(canonical_value(item) for item in value))
    if isinstance(value, Mapping):
        return ("table", frozenset((k, canonical_value(v)) for k, v in value.items()))
    if value is None:
        return ("void",)
    if isinstance(value, datetime.datetime):
        return ("timestamp", value)
    return (type(value).__name__, value)


def amqp_type_name(value: Any) -> str:
    """The AMQP field type RabbitMQ would name in an error about `value`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, bytes | bytearray | memoryview):
        return "binary"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "table"
    if value is None:
        return "void"
    return type(value).__name__
