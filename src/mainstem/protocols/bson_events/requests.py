"""The checks of a request's fields, sans-IO: a frame's body in, the field typed or a
failed request (`FrameFailed`, ``INVALID_FRAME`` unless said) out.

The connection calls them in the order it serves a request, between its look-ups and
permission checks, so a request with several faults fails with the first as before.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

import bson

from mainstem.protocols.bson_events.state import FrameFailed


@dataclass(frozen=True, slots=True)
class Start:
    """Where a subscription without a stored position starts: an offset, the first event
    at or after a time (ms), or neither (from now on)."""

    position: int | None = None
    timestamp: int | None = None


def event_bytes(body: dict[str, Any], max_event_size: int) -> bytes:
    """A PUBLISH's event, encoded as stored, once its fields are checked."""
    if not isinstance(body.get("rID"), int):
        raise FrameFailed("INVALID_FRAME", "'rID' must be an integer")
    event = body.get("event")
    if not isinstance(event, dict):
        raise FrameFailed("INVALID_FRAME", "'event' must be a document")
    session = body.get("sessID")
    if session is not None and not isinstance(session, int):
        raise FrameFailed("INVALID_FRAME", "'sessID' must be an int32")
    raw = bson.encode(event)
    if len(raw) > max_event_size:
        raise FrameFailed("EVENT_TOO_LARGE", f"an event of {len(raw)} bytes is over the "
                          f"limit of {max_event_size}")
    return raw


def session_of(body: dict[str, Any]) -> int:
    session = body.get("sessID")
    if not isinstance(session, int) or isinstance(session, bool):
        raise FrameFailed("INVALID_FRAME", "'sessID' must be an int32")
    return session


def name(body: dict[str, Any], key: str) -> str:
    """A binder's, channel's, projection's or load's name: a non-empty string."""
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise FrameFailed("INVALID_FRAME", f"{key!r} must be a non-empty string")
    return value


def channel_name(body: dict[str, Any]) -> str:
    value = body.get("channel")
    if not isinstance(value, str):
        raise FrameFailed("INVALID_FRAME", "'channel' must be a string")
    return value


def matcher(body: dict[str, Any]) -> dict[str, Any] | None:
    """A subscription's, query's or projection's filter document, None when not given."""
    value = body.get("matcher")
    if value is not None and not isinstance(value, dict):
        raise FrameFailed("INVALID_FRAME", "'matcher' must be a document")
    return value


def durable_id(body: dict[str, Any]) -> str | None:
    value = body.get("durableID")
    if value is not None and not isinstance(value, str):
        raise FrameFailed("INVALID_FRAME", "'durableID' must be a string")
    return value


def start(body: dict[str, Any]) -> Start:
    """A SUBSCRIBE's startPos, else its startTimestamp (the one used is checked)."""
    position, timestamp = body.get("startPos"), body.get("startTimestamp")
    if position is not None:
        if not isinstance(position, int) or position < 0:
            raise FrameFailed("INVALID_FRAME", "'startPos' must be a non-negative int64")
        return Start(position=position)
    if timestamp is not None:
        if not isinstance(timestamp, int):
            raise FrameFailed("INVALID_FRAME", "'startTimestamp' must be an int64")
        return Start(timestamp=timestamp)
    return Start()


def new_query_id(body: dict[str, Any], open_queries: Container[int]) -> int:
    """A QUERY's queryID: an integer none of the connection's open queries has."""
    query_id = body.get("queryID")
    if not isinstance(query_id, int) or query_id in open_queries:
        raise FrameFailed("INVALID_FRAME", "'queryID' must be a new integer")
    return query_id


def docs(body: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """A LOADDOCS's documents, ``docs: [{id, doc}]``, as (id, document) pairs."""
    value = body.get("docs")
    if not isinstance(value, list) or not all(
            isinstance(d, dict) and "id" in d and isinstance(d.get("doc"), dict) for d in value):
        raise FrameFailed("INVALID_FRAME", "'docs' must be a list of {id, doc} documents")
    return [(d["id"], d["doc"]) for d in value]


def position(body: dict[str, Any]) -> int:
    """A HANDOVER's position, where the live projection goes on from."""
    value = body.get("position")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FrameFailed("INVALID_FRAME", "'position' must be a non-negative int64")
    return value
