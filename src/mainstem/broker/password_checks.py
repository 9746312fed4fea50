"""Password checks (a deliberately slow KDF) in a small thread pool of their own, never
the fsync pool's.

Each address has at most `per_address` checks waiting for a thread or running; its others
wait in the address's own backlog, checks of users with no recent failure from it first
(`Attempt.fresh`) and, within each, the newest first. Checks waiting for a thread go in
two queues: those of addresses with failures to spare first, the others only when none
of those waits. So a flood of wrong logins from one address holds a small share of the
hashing whatever its size and never delays another address's login, and a correct login
from the flooding address waits for that share, not for the flood: under a flood the
oldest waiters are the guesses, or clients that gave up, and the newest the likeliest
person.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from mainstem.broker.login_throttle import Attempt

T = TypeVar("T")


class PasswordChecks:
    def __init__(self, threads: int, per_address: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mainstem-kdf")
        self._idle = threads
        # Futures of the checks waiting for a thread: first those within budget.
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())
        self._per_address = per_address
        self._backlogs: dict[str, _Backlog] = {}  # only addresses with checks admitted

    async def run(self, attempt: Attempt, check: Callable[..., T], *args: object) -> T:
        """`check(*args)` in a thread of the pool once its turn comes."""
        await self._admit(attempt)
        try:
            return await self._run(0 if attempt.within_budget else 1, check, args)
        finally:
            self._release(attempt.address)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, queue: int, check: Callable[..., T], args: tuple[object, ...]) -> T:
        await self._turn(queue)
        running = self._pool.submit(check, *args)
        loop = asyncio.get_running_loop()
        # The thread is free when the check ends, even if its login was cancelled meanwhile.
        running.add_done_callback(lambda _: loop.call_soon_threadsafe(self._next))
        return await asyncio.wrap_future(running)

    async def _admit(self, attempt: Attempt) -> None:
        """Wait for one of the address's `per_address` places."""
        backlog = self._backlogs.setdefault(attempt.address, _Backlog())
        if backlog.admitted < self._per_address:
            backlog.admitted += 1
            return
        turn = backlog.wait(attempt.fresh)
        try:
            await _wait_for(turn, lambda: self._release(attempt.address))
        finally:
            backlog.forget(turn)

    def _release(self, address: str) -> None:
        """A place of the address is free: its next waiter gets it, else it is given up."""
        backlog = self._backlogs[address]
        if not backlog.hand_on():
            backlog.admitted -= 1
            if not backlog.admitted:
                del self._backlogs[address]

    async def _turn(self, queue: int) -> None:
        if self._idle and not any(self._waiting):
            self._idle -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting[queue].append(turn)
        await _wait_for(turn, self._next)

    def _next(self) -> None:
        """A thread is free: the first waiting check gets it, else it is idle."""
        for queue in self._waiting:
            while queue:
                turn = queue.popleft()
                if not turn.done():  # a cancelled login left its turn behind
                    turn.set_result(None)
                    return
        self._idle += 1


class _Backlog:
    """An address's checks beyond its places: fresh ones first, the newest first."""

    def __init__(self) -> None:
        self.admitted = 0  # checks holding one of the address's places
        # Insertion-ordered sets: popitem() takes the newest, a cancelled one leaves at once.
        self._waiting: tuple[dict[asyncio.Future[None], None], ...] = ({}, {})

    def wait(self, fresh: bool) -> asyncio.Future[None]:
        turn = asyncio.get_running_loop().create_future()
        self._waiting[0 if fresh else 1][turn] = None
        return turn

    def forget(self, turn: asyncio.Future[None]) -> None:
        for waiting in self._waiting:
            waiting.pop(turn, None)

    def hand_on(self) -> bool:
        """Give a freed place to the next waiter; False when none waits."""
        for waiting in self._waiting:
            if waiting:
                turn, _ = waiting.popitem()
                turn.set_result(None)
                return True
        return False


async def _wait_for(turn: asyncio.Future[None], pass_on: Callable[[], None]) -> None:
    """Await a turn; cancelled just as it was given, `pass_on` hands it to the next."""
    try:
        await turn
    except asyncio.CancelledError:
        if turn.done() and not turn.cancelled():
            pass_on()
        raise
