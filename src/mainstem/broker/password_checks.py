"""Password checks (a deliberately slow KDF) in a small thread pool of their own, with
two queues: checks of logins whose address has failures to spare run first, the others
only when none of those waits. So a flood of wrong logins from one address can delay the
logins of that address, never anyone else's, and the fsync pool is never involved.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class PasswordChecks:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mainstem-kdf")
        self._idle = threads
        # Futures of the checks waiting for a thread: first those within budget.
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())

    async def run(self, within_budget: bool, check: Callable[..., T], *args: object) -> T:
        """`check(*args)` in a thread of the pool once its turn comes."""
        await self._turn(within_budget)
        running = self._pool.submit(check, *args)
        loop = asyncio.get_running_loop()
        # The thread is free when the check ends, even if its login was cancelled meanwhile.
        running.add_done_callback(lambda _: loop.call_soon_threadsafe(self._next))
        return await asyncio.wrap_future(running)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _turn(self, within_budget: bool) -> None:
        if self._idle and not any(self._waiting):
            self._idle -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting[0 if within_budget else 1].append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._next()  # given the thread just as it was cancelled: pass it on
            raise

    def _next(self) -> None:
        """A thread is free: the first waiting check gets it, else it is idle."""
        for queue in self._waiting:
            while queue:
                turn = queue.popleft()
                if not turn.done():  # a cancelled login left its turn behind
                    turn.set_result(None)
                    return
        self._idle += 1
