"""The exchanges, queues and bindings of one namespace, and routing through them.

`ExchangeGraph.route` follows a message from the exchange it is published to,
through exchange-to-exchange bindings and alternate exchanges, to the queues
it lands in. Every exchange is visited at most once per publish, so cycles of
bindings or of alternate exchanges end. The graph knows queues only by name:
the queue owner registers them with `add_queue` and `remove_queue`.

Declaration rules and error messages mirror RabbitMQ 4.x (the names say
"vhost" as RabbitMQ does; a namespace is a vhost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from mainstem.broker.amqp.routing.headers import HeadersMatcher
from mainstem.broker.amqp.routing.matchers import DirectMatcher, FanoutMatcher, Matcher
from mainstem.broker.amqp.routing.model import (
    ALTERNATE_EXCHANGE,
    Binding,
    Destination,
    Exchange,
    ExchangeType,
    amqp_type_name,
    canonical_value,
)
from mainstem.broker.amqp.routing.topic import TopicMatcher
from mainstem.broker.errors import AccessRefused, NotFound, PreconditionFailed
from mainstem.broker.message_stats import MessageStats

DEFAULT_EXCHANGE = ""
PREDECLARED: Mapping[str, ExchangeType] = {
    DEFAULT_EXCHANGE: ExchangeType.DIRECT,
    "amq.direct": ExchangeType.DIRECT,
    "amq.fanout": ExchangeType.FANOUT,
    "amq.topic": ExchangeType.TOPIC,
    "amq.headers": ExchangeType.HEADERS,
    "amq.match": ExchangeType.HEADERS,
}
RESERVED_PREFIX = "amq."
_MATCHERS: Mapping[ExchangeType, type[Matcher]] = {
    ExchangeType.DIRECT: DirectMatcher,
    ExchangeType.FANOUT: FanoutMatcher,
    ExchangeType.TOPIC: TopicMatcher,
    ExchangeType.HEADERS: HeadersMatcher,
}
# Exchange properties compared on redeclaration, in RabbitMQ's order.
_EQUIVALENT_FIELDS = ("type", "durable", "auto_delete", "internal")
_ABSENT = object()

Records = dict[str, list[dict[str, Any]]]


@dataclass
class _Entry:
    exchange: Exchange
    matcher: Matcher
    outgoing: set[Binding] = field(default_factory=set)


class ExchangeGraph:
    def __init__(self, namespace: str = "/") -> None:
        self.namespace = namespace
        self._exchanges: dict[str, _Entry] = {}
        self._queues: dict[str, bool] = {}  # name -> durable
        # Bindings by destination, to drop them when a queue or exchange goes.
        self._incoming: dict[Destination, set[Binding]] = {}
        # exchange name -> its message counters, kept by the publisher (VirtualHost)
        self.stats: dict[str, MessageStats] = {}
        # exchange name -> the alternate exchange a policy gives it (asked only when a
        # message finds no route, so a policy set or cleared holds at once)
        self.policy_alternate: Callable[[str], str | None] = lambda _exchange: None
        for name, exchange_type in PREDECLARED.items():
            self._create(Exchange(name, exchange_type))

    # -- exchanges -------------------------------------------------------------

    def declare_exchange(self, name: str, exchange_type: ExchangeType | str, *,
                         durable: bool = True, auto_delete: bool = False, internal: bool = False,
                         arguments: Mapping[str, Any] | None = None,
                         by_client: bool = True) -> Exchange:
        """Create the exchange, or check that the existing one is equivalent.

        A client may redeclare an "amq." exchange but not create one; the
        server itself declares with `by_client=False`.
        """
        requested = Exchange(name, ExchangeType.parse(exchange_type), durable, auto_delete,
                             internal, arguments or {})
        self._refuse_default_exchange(name)
        entry = self._exchanges.get(name)
        if entry is None:
            if by_client and name.startswith(RESERVED_PREFIX):
                raise AccessRefused(
                    f"exchange name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'"
                )
            self._check_alternate_exchange_type(requested)
            return self._create(requested).exchange
        self._assert_equivalent(entry.exchange, requested)
        return entry.exchange

    def passive_declare_exchange(self, name: str) -> Exchange:
        self._refuse_default_exchange(name)
        return self.get_exchange(name)

    def get_exchange(self, name: str) -> Exchange:
        return self._entry(name).exchange

    def has_exchange(self, name: str) -> bool:
        return name in self._exchanges

    def exchanges(self) -> list[Exchange]:
        return [entry.exchange for entry in self._exchanges.values()]

    def delete_exchange(
        self, name: str, *, if_unused: bool = False, by_client: bool = True
    ) -> None:
        """Delete an exchange and every binding from or to it; a missing one is fine."""
        self._refuse_default_exchange(name)
        if by_client and name.startswith(RESERVED_PREFIX):
            system_exchange = self._describe("exchange", name)
            raise AccessRefused(f"deletion of system {system_exchange} not allowed")
        entry = self._exchanges.get(name)
        if entry is None:
            return
        if if_unused and entry.outgoing:
            raise PreconditionFailed(f"{self._describe('exchange', name)} in use")
        self._delete(name)

    # -- queues ----------------------------------------------------------------

    def add_queue(self, name: str, *, durable: bool = True) -> None:
        self._queues[name] = durable

    def remove_queue(self, name: str) -> None:
        """Forget a deleted queue and its bindings (which may auto-delete exchanges)."""
        self._queues.pop(name, None)
        self._remove_bindings_to(("queue", name))

    def has_queue(self, name: str) -> bool:
        return name in self._queues

    # -- bindings --------------------------------------------------------------

    def bind(self, binding: Binding) -> None:
        """Add a binding; adding an existing one again changes nothing."""
        entry = self._check_binding_ends(binding)
        if binding not in entry.outgoing:
            self._link(entry, binding)

    def unbind(self, binding: Binding) -> None:
        """Remove a binding; removing a missing one is fine if both ends exist."""
        entry = self._check_binding_ends(binding)
        if binding in entry.outgoing:
            self._unlink(binding)
            self._maybe_auto_delete(binding.source)

    def bindings(self, source: str | None = None) -> list[Binding]:
        entries = self._exchanges.values() if source is None else [self._entry(source)]
        return [binding for entry in entries for binding in entry.outgoing]

    # -- routing ---------------------------------------------------------------

    def route(self, exchange: str, routing_key: str, headers: Mapping[str, Any] | None = None, *,
              cc: Iterable[str] = ()) -> set[str]:
        """The queues a message published to `exchange` lands in.

        `cc` holds the extra routing keys of the CC and BCC headers. An
        exchange that routes to nothing, not even to another exchange, hands
        the message to its alternate exchange if that exists.
        """
        start = self._entry(exchange)
        if start.exchange.internal:
            internal = self._describe("exchange", exchange)
            raise AccessRefused(f"cannot publish to internal {internal}")
        keys = (routing_key, *cc)
        queues: set[str] = set()
        visited = {exchange}
        pending = [start]
        while pending:
            for kind, name in self._destinations(pending.pop(), keys, headers):
                if kind == "queue":
                    queues.add(name)
                elif name not in visited and name in self._exchanges:
                    visited.add(name)
                    pending.append(self._exchanges[name])
        return queues

    def _destinations(
        self, entry: _Entry, keys: tuple[str, ...], headers: Mapping[str, Any] | None
    ) -> set[Destination]:
        if entry.exchange.name == DEFAULT_EXCHANGE:
            return {("queue", key) for key in keys if key in self._queues}
        found: set[Destination] = set()
        for key in keys:
            found |= entry.matcher.route(key, headers)
        if found:
            return found
        alternate = entry.exchange.alternate_exchange or self.policy_alternate(
            entry.exchange.name)
        return set() if alternate is None else {("exchange", alternate)}

    # -- persistence -----------------------------------------------------------

    def to_records(self) -> Records:
        """Durable exchanges (but the predeclared ones) and bindings between durable
        ends, as plain dicts: JSON-serialisable when the arguments are."""
        exchanges = [
            exchange_record(entry.exchange)
            for entry in self._exchanges.values()
            if entry.exchange.durable and entry.exchange.name not in PREDECLARED
        ]
        bindings = sorted(
            (binding_record(b) for b in self.bindings() if self._is_durable(b)),
            key=lambda r: (r["source"], r["destination_kind"], r["destination"], r["routing_key"]),
        )
        return {"exchanges": exchanges, "bindings": bindings}

    @classmethod
    def from_records(
        cls, records: Records, *, namespace: str = "/", durable_queues: Iterable[str] = ()
    ) -> ExchangeGraph:
        """Rebuild a graph from `to_records`, with the queues that were recovered.

        Bindings to a queue that did not come back are dropped, as RabbitMQ does.
        """
        graph = cls(namespace)
        for queue in durable_queues:
            graph.add_queue(queue)
        for record in records["exchanges"]:
            graph.declare_exchange(
                record["name"], record["type"], durable=record["durable"],
                auto_delete=record["auto_delete"], internal=record["internal"],
                arguments=record["arguments"], by_client=False)
        for record in records["bindings"]:
            binding = Binding(**record)
            if binding.source in graph._exchanges and graph._has(binding.target):
                graph.bind(binding)
        return graph

    # -- internals -------------------------------------------------------------

    def _create(self, exchange: Exchange) -> _Entry:
        entry = _Entry(exchange, _MATCHERS[exchange.type]())
        self._exchanges[exchange.name] = entry
        return entry

    def _entry(self, name: str) -> _Entry:
        entry = self._exchanges.get(name)
        if entry is None:
            raise NotFound(f"no {self._describe('exchange', name)}")
        return entry

    def _has(self, destination: Destination) -> bool:
        kind, name = destination
        return name in (self._queues if kind == "queue" else self._exchanges)

    def _is_durable(self, binding: Binding) -> bool:
        kind, name = binding.target
        destination_durable = (
            self._queues[name] if kind == "queue" else self._exchanges[name].exchange.durable
        )
        return destination_durable and self._exchanges[binding.source].exchange.durable

    def _check_binding_ends(self, binding: Binding) -> _Entry:
        self._refuse_default_exchange(binding.source)
        if binding.destination_kind == "exchange":
            self._refuse_default_exchange(binding.destination)
        entry = self._entry(binding.source)
        if not self._has(binding.target):
            raise NotFound(f"no {self._describe(binding.destination_kind, binding.destination)}")
        return entry

    def _link(self, entry: _Entry, binding: Binding) -> None:
        entry.matcher.add_binding(binding)  # first: it refuses invalid headers bindings
        entry.outgoing.add(binding)
        self._incoming.setdefault(binding.target, set()).add(binding)

    def _unlink(self, binding: Binding) -> None:
        entry = self._exchanges[binding.source]
        entry.matcher.remove_binding(binding)
        entry.outgoing.remove(binding)
        incoming = self._incoming.get(binding.target)
        if incoming is not None:
            incoming.discard(binding)
            if not incoming:
                del self._incoming[binding.target]

    def _remove_bindings_to(self, destination: Destination) -> None:
        bindings = self._incoming.pop(destination, set())
        for binding in bindings:
            self._unlink(binding)
        for source in {binding.source for binding in bindings}:
            self._maybe_auto_delete(source)

    def _delete(self, name: str) -> None:
        for binding in list(self._exchanges[name].outgoing):
            self._unlink(binding)
        del self._exchanges[name]
        self.stats.pop(name, None)
        self._remove_bindings_to(("exchange", name))

    def _maybe_auto_delete(self, name: str) -> None:
        """An auto-delete exchange goes with the last binding it is the source of."""
        entry = self._exchanges.get(name)
        if entry is not None and entry.exchange.auto_delete and not entry.outgoing:
            self._delete(name)

    def _refuse_default_exchange(self, name: str) -> None:
        if name == DEFAULT_EXCHANGE:
            raise AccessRefused("operation not permitted on the default exchange")

    def _check_alternate_exchange_type(self, exchange: Exchange) -> None:
        value = exchange.arguments.get(ALTERNATE_EXCHANGE)
        if value is not None and not isinstance(value, str):
            raise PreconditionFailed(
                f"invalid type '{amqp_type_name(value)}' for arg '{ALTERNATE_EXCHANGE}' "
                f"in {self._describe('exchange', exchange.name)}"
            )

    def _assert_equivalent(self, current: Exchange, requested: Exchange) -> None:
        for name in _EQUIVALENT_FIELDS:
            have, want = getattr(current, name), getattr(requested, name)
            if have != want:
                self._inequivalent(current.name, name, _quoted(want), _quoted(have))
        # RabbitMQ compares no other argument of an exchange.
        have = current.arguments.get(ALTERNATE_EXCHANGE, _ABSENT)
        want = requested.arguments.get(ALTERNATE_EXCHANGE, _ABSENT)
        if have is _ABSENT and want is _ABSENT:
            return
        if have is _ABSENT or want is _ABSENT:
            self._inequivalent(
                current.name, ALTERNATE_EXCHANGE, _typed_or_none(want), _typed_or_none(have)
            )
        elif canonical_value(have) != canonical_value(want):
            self._inequivalent(current.name, ALTERNATE_EXCHANGE, _quoted(want), _quoted(have))

    def _inequivalent(self, exchange: str, argument: str, received: str, current: str) -> NoReturn:
        raise PreconditionFailed(
            f"inequivalent arg '{argument}' for {self._describe('exchange', exchange)}: "
            f"received {received} but current is {current}"
        )

    def _describe(self, kind: str, name: str) -> str:
        return f"{kind} '{name}' in vhost '{self.namespace}'"


def _erlang_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _quoted(value: Any) -> str:
    return f"'{_erlang_text(value)}'"


def _typed_or_none(value: Any) -> str:
    if value is _ABSENT:
        return "none"
    return f"the value '{_erlang_text(value)}' of type '{amqp_type_name(value)}'"


def exchange_record(exchange: Exchange) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "type": exchange.type.value,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": dict(exchange.arguments),
    }


def binding_record(binding: Binding) -> dict[str, Any]:
    return {
        "source": binding.source,
        "destination": binding.destination,
        "destination_kind": binding.destination_kind,
        "routing_key": binding.routing_key,
        "arguments": dict(binding.arguments),
    }
