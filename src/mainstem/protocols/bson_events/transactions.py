"""A connection's open transactions (STARTTX, PUBLISH with a sessID, COMMITTX, ABORTTX) and
the checks of a PUBLISH's fields, as pure objects: frames' bodies in, events to store or a
failed request out.

A transaction's events are stored at COMMITTX, each channel's in one chunk, so after a
crash all of a channel's are there or none; a transaction holds one chunk's worth at most.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import bson

from mainstem.formats.osiris import MAX_CHUNK_ENTRIES
from mainstem.protocols.bson_events.state import FrameFailed

MAX_TX_EVENTS = MAX_CHUNK_ENTRIES  # a transaction is one chunk
C = TypeVar("C")  # a channel, as the connection holds it


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


class Transactions(Generic[C]):
    def __init__(self) -> None:
        self._open: dict[int, list[tuple[C, bytes]]] = {}

    def start(self, session: int) -> None:
        if session in self._open:
            raise FrameFailed("TX_IN_PROGRESS",
                              f"a transaction is already open on session {session}")
        self._open[session] = []

    def add(self, session: int, channel: C, raw: bytes) -> None:
        """An event published in the transaction."""
        events = self._open.get(session)
        if events is None:
            raise FrameFailed("NO_TX", f"no transaction on session {session}")
        if len(events) >= MAX_TX_EVENTS:
            raise FrameFailed("TX_TOO_LARGE", f"over {MAX_TX_EVENTS} events")
        events.append((channel, raw))

    def check_open(self, session: int) -> None:
        if session not in self._open:
            raise FrameFailed("NO_TX", f"no transaction open on session {session}")

    def commit(self, session: int) -> list[tuple[C, list[bytes]]]:
        """The transaction's events by channel, in the order they were published; it is
        closed."""
        self.check_open(session)
        by_channel: dict[int, tuple[C, list[bytes]]] = {}
        for channel, raw in self._open.pop(session):
            by_channel.setdefault(id(channel), (channel, []))[1].append(raw)
        return list(by_channel.values())

    def abort(self, session: int) -> None:
        self.check_open(session)
        del self._open[session]

    def clear(self) -> None:
        """The connection ends: its open transactions are aborted."""
        self._open.clear()
