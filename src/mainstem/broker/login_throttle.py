"""Failed logins per client address: a token bucket each, so guessing is slow and cheap.

Every login that needs its password checked takes a token from its address's bucket
(a successful one gives it back), which refills at `per_minute` tokens a minute up to
`per_minute`. An address with an empty bucket is refused before its password is
checked, so a flood of wrong logins cannot keep the password hash (a deliberately slow
KDF) busy. IPv6 clients are counted per /64, the block one host usually holds.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

# Buckets kept at most; beyond it, the address whose bucket was touched longest ago (so
# has refilled the most) is forgotten.
MAX_TRACKED_ADDRESSES = 10_000


class LoginThrottle:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = float(per_minute)
        self._refill_per_s = per_minute / 60
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def take(self, peer_host: str | None) -> bool:
        """Spend a token on a login about to be checked; False if the address has none.

        Taken before the check, not after it fails, so that logins checked at the same
        time cannot together exceed the address's budget."""
        key = address_key(peer_host)
        tokens = self._tokens(key)
        if tokens < 1:
            return False
        self._store(key, tokens - 1)
        return True

    def give_back(self, peer_host: str | None) -> None:
        """The login succeeded: its token returns."""
        key = address_key(peer_host)
        self._store(key, self._tokens(key) + 1)

    def _tokens(self, key: str) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return self._capacity
        tokens, at = bucket
        return min(self._capacity, tokens + (self._clock() - at) * self._refill_per_s)

    def _store(self, key: str, tokens: float) -> None:
        self._buckets.pop(key, None)  # re-inserted last: the dict stays oldest-first
        if tokens >= self._capacity:
            return  # a full bucket is what an unknown address gets anyway
        self._buckets[key] = (tokens, self._clock())
        if len(self._buckets) > MAX_TRACKED_ADDRESSES:
            del self._buckets[next(iter(self._buckets))]


def address_key(peer_host: str | None) -> str:
    if peer_host is None:
        return ""  # in-process clients
    try:
        address = ipaddress.ip_address(peer_host)
    except ValueError:
        return peer_host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
