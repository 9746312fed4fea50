"""Failed logins per client address: a token bucket each, so guessing is slow and cheap.

Every failed login takes a token from its address's bucket, which refills at
`per_minute` tokens a minute up to `per_minute`. An address with an empty bucket is
refused before its password is checked, so a flood of wrong logins cannot keep the
password hash (a deliberately slow KDF) busy. IPv6 clients are counted per /64, the
block one host usually holds.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

# Buckets kept at most; beyond it, the full ones (worth forgetting) go first.
MAX_TRACKED_ADDRESSES = 10_000


class LoginThrottle:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = float(per_minute)
        self._refill_per_s = per_minute / 60
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def allows(self, peer_host: str | None) -> bool:
        """True if this address may try a login now (it has failures to spare)."""
        return self._tokens(_address_key(peer_host)) >= 1

    def failed(self, peer_host: str | None) -> None:
        """Count a failed login against this address."""
        key = _address_key(peer_host)
        tokens = max(self._tokens(key) - 1, 0.0)
        self._buckets.pop(key, None)  # re-inserted last: the dict stays oldest-first
        self._buckets[key] = (tokens, self._clock())
        if len(self._buckets) > MAX_TRACKED_ADDRESSES:
            self._forget_some()

    def _tokens(self, key: str) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return self._capacity
        tokens, at = bucket
        return min(self._capacity, tokens + (self._clock() - at) * self._refill_per_s)

    def _forget_some(self) -> None:
        full = [key for key in self._buckets if self._tokens(key) >= self._capacity]
        for key in full:
            del self._buckets[key]
        while len(self._buckets) > MAX_TRACKED_ADDRESSES:
            del self._buckets[next(iter(self._buckets))]  # the longest since a failure


def _address_key(peer_host: str | None) -> str:
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
