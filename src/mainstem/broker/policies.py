"""Policies and operator policies, as RabbitMQ 4.x has them.

A policy names the queues, streams or exchanges of one vhost it applies to (a regular
expression on the name, and `apply-to`) and a definition of keys. Of the policies that
match an object, one applies: the highest priority; between equal priorities the first by
name (RabbitMQ sorts the matches with a stable sort of its name-ordered table). An
operator policy is chosen the same way, and its keys combine with the policy's: for a key
both set, the smaller value (`merged_definition`). Patterns are RE2's (`broker/patterns.py`):
one a backtracking engine alone can match is refused when given; one stored before that
rule matches nothing, and says so in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mainstem.broker.errors import InvalidArgument
from mainstem.broker.patterns import NamePattern, name_pattern
from mainstem.broker.retention import parse_age_ms
from mainstem.broker.table_mode import TABLE_POLICY_KEY, is_table_format
from mainstem.formats.table_schema import SCHEMA_POLICY_KEY, is_body_schema

POLICY, OPERATOR_POLICY = "policy", "operator_policy"
KINDS = (POLICY, OPERATOR_POLICY)
# What an object is, for `apply-to`: a queue of its type, or an exchange.
CLASSIC, QUORUM, STREAM, EXCHANGE = "classic", "quorum", "stream", "exchange"
APPLY_TO: Mapping[str, frozenset[str]] = {
    "queues": frozenset({CLASSIC, QUORUM, STREAM}),
    "classic_queues": frozenset({CLASSIC}),
    "quorum_queues": frozenset({QUORUM}),
    "streams": frozenset({STREAM}),
    "exchanges": frozenset({EXCHANGE}),
    "all": frozenset({CLASSIC, QUORUM, STREAM, EXCHANGE}),
}
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")
log = logging.getLogger("mainstem.broker")


Check = Callable[[Any], bool]


def _integer(minimum: int) -> Check:
    def check(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    return check


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _age(value: Any) -> bool:
    try:
        parse_age_ms(value)
    except InvalidArgument:
        return False
    return isinstance(value, str)


# key -> (check, what RabbitMQ calls a bad value)
_KEYS: Mapping[str, tuple[Check, str]] = {
    "max-length": (_integer(0), "a valid maximum length"),
    "max-length-bytes": (_integer(0), "a valid maximum length in bytes"),
    "overflow": (lambda v: v in OVERFLOW_MODES, "a valid overflow value"),
    "message-ttl": (_integer(0), "a valid message TTL"),
    "expires": (_integer(1), "a valid queue expiry"),
    "dead-letter-exchange": (_text, "a valid dead letter exchange name"),
    "dead-letter-routing-key": (_text, "a valid dead letter routing key"),
    "delivery-limit": (_integer(-1), "a valid delivery limit"),
    "max-age": (_age, "a valid max age"),
    "stream-max-segment-size-bytes": (_integer(1), "a valid segment size"),
    "tier-local-max-bytes": (_integer(1), "a valid local size bound"),
    "tier-local-max-age": (_age, "a valid local age bound"),
    TABLE_POLICY_KEY: (is_table_format, "a valid table format (\"parquet\")"),
    SCHEMA_POLICY_KEY: (is_body_schema, "a valid table schema (a JSON object of field name "
                                        "to type)"),
    "queue-leader-locator": (lambda v: v in LEADER_LOCATORS,
                             "a valid queue leader locator value"),
    "alternate-exchange": (_text, "a valid alternate exchange name"),
}
# The keys an operator policy may set; each combines with the policy's by the smaller value.
OPERATOR_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit")


@dataclass(frozen=True, slots=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: Mapping[str, Any]
    priority: int = 0
    apply_to: str = "all"
    kind: str = POLICY
    _compiled: NamePattern | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", _stored_pattern(self))

    def matches(self, name: str, what: str) -> bool:
        return (what in APPLY_TO[self.apply_to] and self._compiled is not None
                and self._compiled.search(name))

    def row(self) -> dict[str, Any]:
        """The catalog's and the API's shape (without vhost and name)."""
        return {"pattern": self.pattern, "apply-to": self.apply_to,
                "priority": self.priority, "definition": dict(self.definition)}


def parse_policy(kind: str, vhost: str, name: str, body: Mapping[str, Any]) -> Policy:
    """A policy from the API's JSON (or a definitions file), checked as RabbitMQ checks it:
    a bad one is refused with its reason (400)."""
    pattern = body.get("pattern")
    if not isinstance(pattern, str):
        raise InvalidArgument("Validation failed\n\npattern is mandatory and must be a string")
    try:
        name_pattern(pattern, "pattern")
    except InvalidArgument as error:
        raise InvalidArgument(f"Validation failed\n\n{error}") from None
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        raise InvalidArgument(f"Validation failed\n\n\"{apply_to}\" is not a valid apply-to"
                              f" value; use one of {', '.join(APPLY_TO)}")
    priority = body.get("priority", 0)
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)  # rabbitmqadmin sends what the command line said
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"Validation failed\n\npriority should be a number, actually"
                              f" was {priority!r}")
    definition = body.get("definition")
    if not isinstance(definition, dict) or not definition:
        raise InvalidArgument("Validation failed\n\ndefinition must be a non-empty JSON object")
    _check_definition(kind, definition)
    return Policy(vhost, name, pattern, dict(definition), priority, apply_to, kind)


def _stored_pattern(policy: Policy) -> NamePattern | None:
    """The policy's pattern compiled; None (it matches nothing) for one stored before RE2
    refused what it cannot match (parse_policy checks every pattern given now)."""
    try:
        return name_pattern(policy.pattern, "pattern")
    except InvalidArgument as error:
        log.warning("policy.pattern_refused", extra={
            "kind": policy.kind, "vhost": policy.vhost, "policy": policy.name,
            "reason": error.message})
        return None


def _check_definition(kind: str, definition: Mapping[str, Any]) -> None:
    allowed = OPERATOR_KEYS if kind == OPERATOR_POLICY else _KEYS
    unknown = sorted(key for key in definition if key not in allowed)
    if unknown:
        raise InvalidArgument(f"Validation failed\n\n[{', '.join(unknown)}] are not"
                              " recognised policy settings")
    for key, value in definition.items():
        check, what = _KEYS[key]
        if not check(value):
            raise InvalidArgument(f"Validation failed\n\n{value!r} is not {what}")


def merged_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """The effective policy definition: the policy's keys, and the operator policy's,
    the smaller value where both set one."""
    merged = dict(policy.definition) if policy is not None else {}
    for key, value in (operator.definition if operator is not None else {}).items():
        merged[key] = min(merged[key], value) if key in merged else value
    return merged


@dataclass(frozen=True, slots=True)
class Applied:
    """What applies to one object: the two policies' names and the merged definition."""

    policy: str | None = None
    operator_policy: str | None = None
    definition: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """As /api/queues and /api/exchanges show them."""
        return {"policy": self.policy or "", "operator_policy": self.operator_policy or "",
                "effective_policy_definition": dict(self.definition)}


NONE_APPLIED = Applied()
# Resolutions kept between changes (a message with no route asks for its exchange's
# alternate each time); cleared when full, as temporary queues' names come and go.
_REMEMBERED = 10_000


class PolicyBook:
    """Every vhost's policies in memory, for matching on each declaration and change."""

    def __init__(self, policies: Iterable[Policy] = ()) -> None:
        self._by_vhost: dict[tuple[str, str], dict[str, Policy]] = {}
        self._applied: dict[tuple[str, str, str], Applied] = {}
        for policy in policies:
            self.put(policy)

    def put(self, policy: Policy) -> None:
        self._by_vhost.setdefault((policy.kind, policy.vhost), {})[policy.name] = policy
        self._applied.clear()

    def remove(self, kind: str, vhost: str, name: str) -> None:
        self._by_vhost.get((kind, vhost), {}).pop(name, None)
        self._applied.clear()

    def drop_vhost(self, vhost: str) -> None:
        for kind in KINDS:
            self._by_vhost.pop((kind, vhost), None)
        self._applied.clear()

    def list(self, kind: str, vhost: str | None = None) -> list[Policy]:
        return sorted((p for (k, v), policies in self._by_vhost.items()
                       if k == kind and vhost in (None, v) for p in policies.values()),
                      key=lambda p: (p.vhost, p.name))

    def _match(self, kind: str, vhost: str, name: str, what: str) -> Policy | None:
        matching = [p for p in self._by_vhost.get((kind, vhost), {}).values()
                    if p.matches(name, what)]
        return min(matching, key=lambda p: (-p.priority, p.name), default=None)

    def applied(self, vhost: str, name: str, what: str) -> Applied:
        """What applies to the object `name` of kind `what` (see APPLY_TO) in `vhost`."""
        key = (vhost, name, what)
        found = self._applied.get(key)
        if found is None:
            if len(self._applied) >= _REMEMBERED:
                self._applied.clear()
            found = self._applied[key] = self._resolve(vhost, name, what)
        return found

    def _resolve(self, vhost: str, name: str, what: str) -> Applied:
        policy = self._match(POLICY, vhost, name, what)
        operator = self._match(OPERATOR_POLICY, vhost, name, what)
        if policy is None and operator is None:
            return NONE_APPLIED
        return Applied(None if policy is None else policy.name,
                       None if operator is None else operator.name,
                       merged_definition(policy, operator))
