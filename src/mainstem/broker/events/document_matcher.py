"""Document matchers as MongoDB defines them, for BSON event subscriptions and binder
queries: equality on (dot-path) fields and ``$eq $ne $gt $gte $lt $lte $in $nin $exists
$and $or $not``. A field holding an array matches when the array or any element does.
Order comparisons only hold between values of one kind (numbers, strings, dates, ...), as in
MongoDB's type brackets."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from mainstem.broker.errors import InvalidArgument

Predicate = Callable[[Mapping[str, Any]], bool]
_MISSING = object()
_ORDER = {
    "$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b,
}


def compile_matcher(matcher: Mapping[str, Any] | None) -> Predicate:
    """A predicate for documents; InvalidArgument for an unknown or malformed operator."""
    if not matcher:
        return lambda document: True
    if not isinstance(matcher, Mapping):
        raise InvalidArgument("a matcher is a document")
    tests = [_compile_entry(key, value) for key, value in matcher.items()]
    return lambda document: all(test(document) for test in tests)


def _compile_entry(key: str, value: Any) -> Predicate:
    if key in ("$and", "$or"):
        if not isinstance(value, list) or not value:
            raise InvalidArgument(f"{key} needs a non-empty array of matchers")
        parts = [compile_matcher(part) for part in value]
        if key == "$and":
            return lambda document: all(p(document) for p in parts)
        return lambda document: any(p(document) for p in parts)
    if key.startswith("$"):
        raise InvalidArgument(f"unknown top-level operator {key}")
    path = key.split(".")
    condition = _compile_condition(value)
    return lambda document: condition(_lookup(document, path))


def _compile_condition(spec: Any) -> Callable[[Any], bool]:
    """What one field must satisfy: an operator document, or a value to equal."""
    if isinstance(spec, Mapping) and spec and all(k.startswith("$") for k in spec):
        tests = [_operator(op, argument) for op, argument in spec.items()]
        return lambda found: all(test(found) for test in tests)
    return lambda found: _equals(found, spec)


def _operator(op: str, argument: Any) -> Callable[[Any], bool]:
    if op == "$eq":
        return lambda found: _equals(found, argument)
    if op == "$ne":
        return lambda found: not _equals(found, argument)
    if op in _ORDER:
        compare = _ORDER[op]
        return lambda found: _any_value(found, lambda v: _ordered(compare, v, argument))
    if op in ("$in", "$nin"):
        if not isinstance(argument, list):
            raise InvalidArgument(f"{op} needs an array")
        def inside(found: Any) -> bool:
            return any(_equals(found, item) for item in argument)
        return inside if op == "$in" else lambda found: not inside(found)
    if op == "$exists":
        wanted = bool(argument)
        return lambda found: (found is not _MISSING) == wanted
    if op == "$not":
        if not isinstance(argument, Mapping):
            raise InvalidArgument("$not needs an operator document")
        inner = _compile_condition(argument)
        return lambda found: not inner(found)
    raise InvalidArgument(f"unknown operator {op}")


def _lookup(document: Any, path: list[str]) -> Any:
    """The value at a dot path; through arrays, the list of the elements' values."""
    current = document
    for i, part in enumerate(path):
        if isinstance(current, Mapping):
            current = current.get(part, _MISSING)
        elif isinstance(current, list):
            if part.isdigit():
                index = int(part)
                current = current[index] if index < len(current) else _MISSING
            else:
                rest = path[i:]
                found = [_lookup(item, rest) for item in current if isinstance(item, Mapping)]
                found = [f for f in found if f is not _MISSING]
                return found if found else _MISSING
        else:
            return _MISSING
        if current is _MISSING:
            return _MISSING
    return current


def _any_value(found: Any, test: Callable[[Any], bool]) -> bool:
    if found is _MISSING:
        return False
    if isinstance(found, list):
        return test(found) or any(test(item) for item in found)
    return test(found)


def _equals(found: Any, expected: Any) -> bool:
    if found is _MISSING:
        return expected is None  # {field: null} matches a missing field, as in MongoDB
    if isinstance(found, list) and not isinstance(expected, list):
        return any(_same(item, expected) for item in found)
    return _same(found, expected)


def _same(a: Any, b: Any) -> bool:
    if _bracket(a) != _bracket(b):
        return False
    equal: bool = a == b
    return equal


def _bracket(value: Any) -> str:
    """MongoDB compares values of one type bracket only (all numbers are one bracket)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime.datetime):
        return "date"
    if isinstance(value, bytes):
        return "binary"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _ordered(compare: Callable[[Any, Any], bool], found: Any, argument: Any) -> bool:
    if _bracket(found) != _bracket(argument) or _bracket(found) in ("null", "object"):
        return False
    try:
        return compare(found, argument)
    except TypeError:
        return False
