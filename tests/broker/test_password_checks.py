"""The password-check pool: logins within their address's budget are checked first, and
each address holds at most its share of the turns, fresh users first, newest first."""

from __future__ import annotations

import asyncio
import threading

from mainstem.broker.login_throttle import Attempt
from mainstem.broker.password_checks import PasswordChecks


def attempt(address: str = "10.0.0.1", within_budget: bool = True, fresh: bool = True
            ) -> Attempt:
    return Attempt(address, within_budget, fresh, penalty_factor=1)


async def test_checks_within_budget_run_before_the_others() -> None:
    checks = PasswordChecks(threads=1, per_address=10)
    release = threading.Event()
    order: list[str] = []

    def check(name: str) -> str:
        if name == "busy":
            release.wait(10)
        order.append(name)
        return name

    try:
        busy = asyncio.ensure_future(checks.run(attempt(), check, "busy"))
        await asyncio.sleep(0.05)  # the only thread is taken
        flood = [asyncio.ensure_future(checks.run(attempt(within_budget=False), check,
                                                  f"guess-{n}")) for n in range(3)]
        cancelled = asyncio.ensure_future(checks.run(attempt(), check, "gone"))
        login = asyncio.ensure_future(checks.run(attempt(), check, "login"))
        await asyncio.sleep(0.05)
        cancelled.cancel()  # a connection closed while waiting: its turn goes to the next
        release.set()
        assert await asyncio.gather(busy, login, *flood) == [
            "busy", "login", "guess-0", "guess-1", "guess-2"]
        assert order == ["busy", "login", "guess-0", "guess-1", "guess-2"]
        assert await checks.run(attempt(), check, "idle again") == "idle again"
    finally:
        release.set()
        checks.shutdown()


async def test_an_address_holds_its_share_and_its_fresh_newest_login_goes_next() -> None:
    """Two places per address: a flood's other guesses wait in its backlog, so another
    address's login (even out of budget) and the flooding address's own fresh login
    overtake them; the guesses then run newest first."""
    checks = PasswordChecks(threads=1, per_address=2)
    release = threading.Event()
    order: list[str] = []

    def check(name: str) -> str:
        if name == "guess-0":
            release.wait(10)
        order.append(name)
        return name

    flooding = "10.0.0.1"
    try:
        guesses = []
        for n in range(5):
            guesses.append(asyncio.ensure_future(checks.run(
                attempt(flooding, within_budget=False, fresh=False), check, f"guess-{n}")))
            await asyncio.sleep(0.01)  # in this order
        gone = asyncio.ensure_future(checks.run(
            attempt(flooding, within_budget=False), check, "gone"))
        mine = asyncio.ensure_future(checks.run(
            attempt(flooding, within_budget=False), check, "fresh"))
        other = asyncio.ensure_future(checks.run(
            attempt("10.0.0.2", within_budget=False, fresh=False), check, "other"))
        await asyncio.sleep(0.05)
        gone.cancel()  # evicted while waiting in the backlog: it leaves it at once
        release.set()
        await asyncio.gather(mine, other, *guesses)
        # guess-0 ran, guess-1 had the other place; then the fresh login, newest first.
        assert order == ["guess-0", "guess-1", "other", "fresh", "guess-4", "guess-3",
                         "guess-2"], order
        assert await checks.run(attempt(flooding), check, "idle again") == "idle again"
    finally:
        release.set()
        checks.shutdown()
