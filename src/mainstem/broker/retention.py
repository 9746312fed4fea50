"""Retention settings from RabbitMQ-style stream arguments and age strings, with the
tiering bounds (how much of a stream stays on local disk, the rest in its tier)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mainstem.broker.errors import InvalidArgument
from mainstem.log.policy import RetentionPolicy

MAX_LENGTH_BYTES = "x-max-length-bytes"
MAX_AGE = "x-max-age"
MAX_SEGMENT_SIZE_BYTES = "x-stream-max-segment-size-bytes"
TIER_LOCAL_MAX_BYTES = "x-tier-local-max-bytes"
TIER_LOCAL_MAX_AGE = "x-tier-local-max-age"
RETENTION_ARGUMENTS = (MAX_LENGTH_BYTES, MAX_AGE, MAX_SEGMENT_SIZE_BYTES,
                       TIER_LOCAL_MAX_BYTES, TIER_LOCAL_MAX_AGE)
_AGES = (MAX_AGE, TIER_LOCAL_MAX_AGE)

# RabbitMQ's x-max-age units: years, months, days, hours, minutes, seconds.
_AGE_UNITS_S = {"Y": 365 * 86_400, "M": 30 * 86_400, "D": 86_400, "h": 3_600, "m": 60, "s": 1}
_AGE = re.compile(r"(\d+)([YMDhms])")


def parse_age_ms(value: str | int | float) -> int:
    """An age such as "7D", "12h", "30m" or "10s" (or a number of seconds) in ms."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise InvalidArgument(f"age must not be negative: {value}")
        return int(value * 1000)
    text = str(value).strip()
    seconds = age_s(text)
    if seconds is None:
        if text.isdigit():
            return int(text) * 1000
        raise InvalidArgument(
            f"invalid age {value!r}: use a whole number and a unit of Y, M, D, h, m or s"
        )
    return seconds * 1000


def age_s(text: str) -> int | None:
    """The seconds of an age with its unit ("7D", "30m"); None for any other text."""
    match = _AGE.fullmatch(text)
    return None if match is None else int(match[1]) * _AGE_UNITS_S[match[2]]


def _positive_int(arguments: Mapping[str, Any], key: str) -> int:
    value = arguments[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{key} must be a positive integer, not {value!r}")
    return value


def with_policy(arguments: Mapping[str, Any], definition: Mapping[str, Any]
                ) -> dict[str, Any]:
    """A stream's arguments with a policy's retention keys: of an argument and the
    policy's value, the smaller limit holds, as in RabbitMQ."""
    merged = dict(arguments)
    for argument in RETENTION_ARGUMENTS:
        value = definition.get(argument.removeprefix("x-"))
        if value is None:
            continue
        current = merged.get(argument)
        if current is None or _limit(argument, value) < _limit(argument, current):
            merged[argument] = value
    return merged


def _limit(argument: str, value: Any) -> int:
    return parse_age_ms(value) if argument in _AGES else int(value)


def retention_from_arguments(
    arguments: Mapping[str, Any], defaults: RetentionPolicy
) -> RetentionPolicy:
    """The defaults overridden by whichever retention arguments a stream was declared with."""
    policy = defaults
    if MAX_LENGTH_BYTES in arguments:
        policy = replace(policy, max_bytes=_positive_int(arguments, MAX_LENGTH_BYTES))
    if MAX_AGE in arguments:
        policy = replace(policy, max_age_ms=parse_age_ms(arguments[MAX_AGE]))
    if MAX_SEGMENT_SIZE_BYTES in arguments:
        policy = replace(policy, max_segment_bytes=_positive_int(arguments, MAX_SEGMENT_SIZE_BYTES))
    if TIER_LOCAL_MAX_BYTES in arguments:
        policy = replace(policy, local_max_bytes=_positive_int(arguments, TIER_LOCAL_MAX_BYTES))
    if TIER_LOCAL_MAX_AGE in arguments:
        policy = replace(policy, local_max_age_ms=parse_age_ms(arguments[TIER_LOCAL_MAX_AGE]))
    return policy
