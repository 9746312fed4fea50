"""Connections that have not logged in yet, within a budget per client address and one in
all, and new connections within a rate per client address.

- Beyond its address's budget, the oldest of that address's connections not logged in is
  closed to make room for the new one; beyond the budget in all, a suspect one first
  (its login looked like guessing, `BrokerCore.login`), else the oldest. Silent sockets
  thus hold at most their budget, never the whole connection limit, and a client that
  logs in promptly gets in even from the address that floods (it is newer than the
  flood's sockets). A connection leaves the budgets once logged in.
- A suspect connection has sent its credentials and is answered within the handshake
  timeout: it leaves its address's budget (staying in the one in all), so a storm of
  wrong logins is held, not closed and reopened as fast as the broker can accept, and
  the password checks it waits for are bounded apart (`password_checks`). An address
  holds at most its accept burst plus its rate times the handshake timeout of them.
- `AcceptRate`: each address's new connections take a token from its bucket (`rate` a
  second, in bursts of `burst`) before any handshake work; without one the socket is
  closed at once. Reopening sockets as fast as they are closed then costs the broker
  an accept and a close each, not a handshake, and no other address's login slows (on a
  TLS listener the gate comes after the TLS handshake, which asyncio runs first).
  Nothing tells a client from an attacker at the same address before its handshake, so
  while such a flood lasts that address's new connections are mostly refused too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

from mainstem.broker.login_throttle import TokenBuckets, address_key

log = logging.getLogger("mainstem.server")

REFUSALS_LOG_INTERVAL_S = 5.0  # refusals of one address are logged once per interval
MAX_LOGGED_ADDRESSES = 1000  # addresses whose refusals are counted between log lines


class Handshakes:
    def __init__(self, per_address: int, total: int) -> None:
        """Budgets of connections not logged in; 0 leaves one unlimited."""
        self._per_address = per_address
        self._total = total
        # A connection's key (its id; an HTTP connection's transport) -> its address key,
        # oldest first; how to close each; per address key, its connections not suspect.
        self._all: dict[Hashable, str] = {}
        self._closes: dict[Hashable, Callable[[], None]] = {}
        self._by_address: dict[str, dict[Hashable, None]] = {}
        self._suspects: dict[Hashable, None] = {}  # by when they became suspect

    def begin(self, conn_id: Hashable, peer_host: str | None, close: Callable[[], None]) -> None:
        """Count a new connection; `close` ends it if it is evicted before logging in."""
        key = address_key(peer_host)
        pending = self._by_address.setdefault(key, {})
        pending[conn_id] = None
        self._all[conn_id] = key
        self._closes[conn_id] = close
        if self._per_address and len(pending) > self._per_address:
            self._evict(next(iter(pending)))
        if self._total and len(self._all) > self._total:
            self._evict(next(iter(self._suspects or self._all)))

    def suspect(self, conn_id: Hashable) -> None:
        """The connection's login looked like guessing: it leaves its address's budget
        and is evicted first from the one in all."""
        key = self._all.get(conn_id)
        if key is not None and conn_id not in self._suspects:
            self._leave_address(key, conn_id)
            self._suspects[conn_id] = None

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
        if conn_id in self._suspects:
            del self._suspects[conn_id]
        else:
            self._leave_address(key, conn_id)
        return self._closes.pop(conn_id)

    def _leave_address(self, key: str, conn_id: Hashable) -> None:
        pending = self._by_address[key]
        del pending[conn_id]
        if not pending:
            del self._by_address[key]


class AcceptRate:
    """New connections per client address within a token bucket; 0 leaves it unlimited."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._buckets = TokenBuckets(burst, rate, clock) if rate else None
        self._clock = clock
        self.refused = 0  # in all, since the start
        self._unlogged: dict[str, tuple[int, float]] = {}  # address -> (refusals, since)

    def admits(self, peer_host: str | None, listener: str) -> bool:
        """Take a token of the peer's address; False (counted, logged now and then)
        when it has none."""
        if self._buckets is None:
            return True
        key = address_key(peer_host)
        if self._buckets.take(key) >= 0:
            return True
        self.refused += 1
        self._log_refusal(key, listener)
        return False

    def _log_refusal(self, key: str, listener: str) -> None:
        now = self._clock()
        count, since = self._unlogged.get(key, (0, now - REFUSALS_LOG_INTERVAL_S))
        if now - since < REFUSALS_LOG_INTERVAL_S:
            self._unlogged[key] = (count + 1, since)
            return
        self._unlogged.pop(key, None)  # re-inserted last: the oldest are dropped first
        self._unlogged[key] = (0, now)
        if len(self._unlogged) > MAX_LOGGED_ADDRESSES:
            del self._unlogged[next(iter(self._unlogged))]
        log.warning("connection.rate_limited", extra={
            "peer": key, "listener": listener, "refused": count + 1,
            "refused_total": self.refused})
