"""The password-check pool: logins within their address's budget are checked first."""

from __future__ import annotations

import asyncio
import threading

from mainstem.broker.password_checks import PasswordChecks


async def test_checks_within_budget_run_before_the_others() -> None:
    checks = PasswordChecks(threads=1)
    release = threading.Event()
    order: list[str] = []

    def check(name: str) -> str:
        if name == "busy":
            release.wait(10)
        order.append(name)
        return name

    try:
        busy = asyncio.ensure_future(checks.run(True, check, "busy"))
        await asyncio.sleep(0.05)  # the only thread is taken
        flood = [asyncio.ensure_future(checks.run(False, check, f"guess-{n}")) for n in range(3)]
        cancelled = asyncio.ensure_future(checks.run(True, check, "gone"))
        login = asyncio.ensure_future(checks.run(True, check, "login"))
        await asyncio.sleep(0.05)
        cancelled.cancel()  # a connection closed while waiting: its turn goes to the next
        release.set()
        assert await asyncio.gather(busy, login, *flood) == [
            "busy", "login", "guess-0", "guess-1", "guess-2"]
        assert order == ["busy", "login", "guess-0", "guess-1", "guess-2"]
        assert await checks.run(False, check, "idle again") == "idle again"
    finally:
        release.set()
        checks.shutdown()
