"""Failed-login budgets: guessing a password is slow, yet a right password is never refused.

Every login that needs its password checked takes a token from two token buckets, one of
its client address and one of the (address, user name) pair; a successful login gives
both back. Each refills at `per_minute` tokens a minute up to `per_minute`.

- Each address's password checks hold at most a few of the hash threads' turns at once
  (`password_checks.PasswordChecks`); the rest wait in the address's own backlog, users
  with no recent failure from the address first (`Attempt.fresh`: the pair's bucket is
  full), the newest first. So a flood of wrong logins from one address holds a small
  share of the hashing whatever its size, and a correct login from the flooding address
  waits for that share, not for the flood.
- An address out of tokens has its checks queued behind the other addresses'
  (`Attempt.within_budget`): such a flood delays no other address's login.
- A connection whose pair failed lately, or whose login fails, is suspect: it leaves its
  address's budget of connections not logged in (`handshakes.Handshakes`), so a storm of
  wrong logins is held until answered rather than closed and reopened at once.
- A pair out of tokens runs into debt, and each failure beyond the budget is answered
  later: twice the failed-login delay for the first, doubling up to `MAX_PENALTY_FACTOR`
  times. A password verified before is still accepted at once, without the hash
  (`BrokerCore.login`), so an attacker who hammers one user neither locks that user out
  nor slows anyone else's login from the same address.

What stays possible, honestly: an attacker at the victim's own address who guesses the
victim's own user name, while the victim's password has not been verified since the
broker started, puts the victim's first login among its guesses (nothing tells them
apart before the hash); newest first, so it waits for the guesses that arrive while it
waits, not for those before it. One who guesses ever new user names from the victim's
address makes every name look fresh; the address's share still bounds the hashing, and
the victim's first login waits among those guesses the same way. Either way only that
address is affected, and a password verified before is not.

The same holds for a user name that does not exist, so the answers tell nothing about
which users exist. IPv6 clients are counted per /64, the block one host usually holds.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

# Buckets kept per kind at most; beyond it, the one touched longest ago (so refilled the
# most) is forgotten.
MAX_TRACKED = 10_000
PENALTY_DOUBLINGS = 5
MAX_PENALTY_FACTOR = 2**PENALTY_DOUBLINGS  # the longest answer: this many failed-login delays


@dataclass(frozen=True, slots=True)
class Attempt:
    address: str  # the client it counts as (`address_key`)
    within_budget: bool  # the address had a failure to spare: not queued behind others
    fresh: bool  # the (address, user) pair had no recent failure
    penalty_factor: int  # a failure is answered after this many failed-login delays


class LoginThrottle:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        refill_per_s = per_minute / 60
        self._addresses = TokenBuckets(per_minute, refill_per_s, clock)
        # Debt up to one budget (enough to reach the longest answer): a pair's penalty
        # fades within two minutes of calm.
        self._pairs = TokenBuckets(per_minute, refill_per_s, clock,
                                   debt=max(per_minute, PENALTY_DOUBLINGS))

    def take(self, peer_host: str | None, username: str) -> Attempt:
        """Spend the tokens of a login about to be checked.

        Taken before the check, not after it fails, so that logins checked at the same
        time cannot together exceed a budget."""
        address = address_key(peer_host)
        within_budget = self._addresses.take(address) >= 0
        pair = _pair_key(address, username)
        fresh = self._pairs.full(pair)
        owed = -self._pairs.take(pair)
        factor = 1 if owed <= 0 else min(2 ** math.ceil(owed), MAX_PENALTY_FACTOR)
        return Attempt(address, within_budget, fresh, factor)

    def give_back(self, peer_host: str | None, username: str) -> None:
        """The login succeeded: its tokens return."""
        address = address_key(peer_host)
        self._addresses.give_back(address)
        self._pairs.give_back(_pair_key(address, username))


class TokenBuckets:
    """Token buckets by key, at most MAX_TRACKED of them; a missing one is full."""

    def __init__(self, capacity: float, refill_per_s: float,
                 clock: Callable[[], float] = time.monotonic, debt: int = 0) -> None:
        self._capacity = float(capacity)
        self._refill_per_s = refill_per_s
        self._floor = -float(debt)
        self._clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: Hashable) -> float:
        """The tokens left after taking one: below 0 when the bucket had none (in debt)."""
        left = self._tokens(key) - 1
        self._store(key, max(left, self._floor))
        return left

    def give_back(self, key: Hashable) -> None:
        self._store(key, self._tokens(key) + 1)

    def full(self, key: Hashable) -> bool:
        """No token taken lately (or long enough ago to have come back)."""
        return self._tokens(key) >= self._capacity

    def _tokens(self, key: Hashable) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return self._capacity
        tokens, at = bucket
        return min(self._capacity, tokens + (self._clock() - at) * self._refill_per_s)

    def _store(self, key: Hashable, tokens: float) -> None:
        self._buckets.pop(key, None)  # re-inserted last: the dict stays oldest-first
        if tokens >= self._capacity:
            return  # a full bucket is what an unknown key gets anyway
        self._buckets[key] = (tokens, self._clock())
        if len(self._buckets) > MAX_TRACKED:
            del self._buckets[next(iter(self._buckets))]


def _pair_key(address: str, username: str) -> tuple[str, bytes]:
    # A digest, not the name: a key's size stays bounded however long the name sent.
    name = hashlib.blake2b(username.encode("utf-8", "replace"), digest_size=16).digest()
    return address, name


def address_key(peer_host: str | None) -> str:
    """The client a peer address counts as: IPv4 (mapped ones too) or an IPv6 /64."""
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
