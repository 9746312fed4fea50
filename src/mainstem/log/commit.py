"""Group commit: move a partition's durability point forward by its fsync policy.

Marks are monotonically increasing integers (the partition uses its next
offset). `written(mark)` says data up to `mark` is in the page cache;
`wait(mark)` returns once the policy's durability point has reached it. Under
the batch policy every write made while an fsync runs shares the next one, so
concurrent appenders pay for one fsync per round, not one each.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from mainstem.log.policy import DurabilityPolicy, FsyncMode

# fsync runs in threads of its own: in asyncio's default pool, any other blocking work
# (password hashing was one) would queue ahead of it and delay every publish confirm.
# As many threads as that pool had: an fsync mostly waits for the disk, not the CPU.
_FSYNC_POOL = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4),
                                 thread_name_prefix="mainstem-fsync")


class FsyncTimings:
    """Where one broker's fsync rounds report their durations in seconds: its metrics
    histogram observes them. One per broker, so that brokers sharing a process (tests,
    embedding) do not see each other's fsyncs."""

    def __init__(self) -> None:
        self._observers: set[Callable[[float], None]] = set()

    def observe(self, observer: Callable[[float], None]) -> Callable[[], None]:
        """Call `observer` with every fsync round's duration; returns the undo."""
        self._observers.add(observer)
        return lambda: self._observers.discard(observer)

    def record(self, seconds: float) -> None:
        # A copy: this runs in a worker thread while the loop may add or drop an observer
        # (tuple() of a set is one step under the GIL).
        for observe in tuple(self._observers):
            observe(seconds)


def _timed(sync: Callable[[], None], timings: FsyncTimings | None) -> None:
    started = time.perf_counter()
    sync()
    if timings is not None:
        timings.record(time.perf_counter() - started)


class GroupCommit:
    def __init__(self, policy: DurabilityPolicy, sync: Callable[[], None],
                 on_durable: Callable[[int], None], durable: int = 0, *,
                 on_demand: bool = False, timings: FsyncTimings | None = None) -> None:
        self.policy = policy
        # on_demand: fsync only when someone waits (a queue journal: an unconfirmed publish
        # needs the page cache, not the disk; its readers do not wait for durability).
        self.on_demand = on_demand
        self._sync = sync  # blocking: runs in a worker thread
        self.timings = timings
        self._on_durable = on_durable
        self._written = durable
        self._durable = durable
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    @property
    def durable(self) -> int:
        return self._durable

    def written(self, mark: int) -> None:
        self._written = mark
        if self.policy.mode is FsyncMode.NEVER:
            self._advance(mark)
        elif not self.on_demand:
            self._start()

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_loop())

    async def wait(self, mark: int) -> None:
        if self._error is not None:
            raise self._error
        if mark <= self._durable:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((mark, future))
        if self.on_demand:
            self._start()
        await future

    def sync_now(self) -> None:
        """Blocking flush of everything written, for close and synchronous callers."""
        if self.policy.mode is not FsyncMode.NEVER:
            self._sync()
        self._advance(self._written)

    async def drain(self) -> None:
        """Wait for the running flush round, if any, to finish."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._durable < self._written:
                if self.policy.mode is FsyncMode.INTERVAL:
                    await asyncio.sleep(self.policy.interval_ms / 1000)
                target = self._written
                await loop.run_in_executor(_FSYNC_POOL, _timed, self._sync, self.timings)
                self._advance(target)
        except BaseException as error:  # a failed fsync must fail every waiter, not hang it
            self._fail(error)
            raise
        finally:
            self._task = None

    def _advance(self, mark: int) -> None:
        if mark <= self._durable:
            return
        self._durable = mark
        self._on_durable(mark)
        if not self._waiters:
            return
        still_waiting = []
        for waiter_mark, future in self._waiters:
            if waiter_mark <= mark:
                if not future.done():
                    future.set_result(None)
            else:
                still_waiting.append((waiter_mark, future))
        self._waiters = still_waiting

    def _fail(self, error: BaseException) -> None:
        self._error = error if isinstance(error, Exception) else RuntimeError("flush cancelled")
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(self._error)
        self._waiters = []
