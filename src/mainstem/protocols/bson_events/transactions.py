"""A connection's open transactions (STARTTX, PUBLISH with a sessID, COMMITTX, ABORTTX) as
a pure object: sessions and events in, events to store or a failed request out.

A transaction's events are stored at COMMITTX, each channel's in one chunk, so after a
crash all of a channel's are there or none; a transaction holds one chunk's worth at most.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from mainstem.formats.osiris import MAX_CHUNK_ENTRIES
from mainstem.protocols.bson_events.state import FrameFailed

MAX_TX_EVENTS = MAX_CHUNK_ENTRIES  # a transaction is one chunk
C = TypeVar("C")  # a channel, as the connection holds it


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
