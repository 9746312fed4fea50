"""Connections that have not logged in yet, within a budget per client address and one in
all: beyond either, the oldest such connection is closed to make room for the new one.

Silent sockets thus hold at most their budget, never the whole connection limit, and a
client that logs in promptly gets in even from the address that floods (it is newer than
the flood's sockets). A connection leaves the budgets once logged in.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from mainstem.broker.login_throttle import address_key


class Handshakes:
    def __init__(self, per_address: int, total: int) -> None:
        """Budgets of connections not logged in; 0 leaves one unlimited."""
        self._per_address = per_address
        self._total = total
        # A connection's key (its id; an HTTP connection's transport) -> its address key,
        # oldest first; per address key: connection key -> how to close it.
        self._all: dict[Hashable, str] = {}
        self._by_address: dict[str, dict[Hashable, Callable[[], None]]] = {}

    def begin(self, conn_id: Hashable, peer_host: str | None, close: Callable[[], None]) -> None:
        """Count a new connection; `close` ends it if it is evicted before logging in."""
        key = address_key(peer_host)
        pending = self._by_address.setdefault(key, {})
        pending[conn_id] = close
        self._all[conn_id] = key
        if self._per_address and len(pending) > self._per_address:
            self._evict(next(iter(pending)))
        if self._total and len(self._all) > self._total:
            self._evict(next(iter(self._all)))

    def end(self, conn_id: Hashable) -> None:
        """The connection logged in or closed: it leaves the budgets (again: no-op)."""
        self._remove(conn_id)

    def _evict(self, conn_id: Hashable) -> None:
        close = self._remove(conn_id)
        if close is not None:
            close()

    def _remove(self, conn_id: Hashable) -> Callable[[], None] | None:
        key = self._all.pop(conn_id, None)
        if key is None:
            return None
        pending = self._by_address[key]
        close = pending.pop(conn_id)
        if not pending:
            del self._by_address[key]
        return close
