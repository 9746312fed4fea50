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
import queue
import threading
import time
from collections.abc import Callable

from mainstem.log.policy import DurabilityPolicy, FsyncMode


class _FsyncThreads:
    """The process's fsync threads, fed by every partition's group commit.

    Long-lived threads waiting on one queue cost the loop one put per round and one
    wake-up when the round is done, where a thread pool's submit also builds and chains
    futures. They run outside asyncio's default pool, so other blocking work (password
    hashing was one) never queues ahead of a publish confirm. A partition has at most one
    round queued or running, so its rounds stay in order; different partitions fsync in
    parallel (each fsync mostly waits for the disk, and a file system commits concurrent
    fsyncs together), so one slow file does not hold every other partition back. Each
    round still covers everything its partition wrote before it started (group commit).
    """

    def __init__(self, count: int) -> None:
        self._count = count
        self._forget()
        # A forked child has none of its parent's threads: it starts its own when needed.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._rounds: queue.SimpleQueue[GroupCommit] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    def submit(self, commit: GroupCommit) -> None:
        """Run one fsync round of `commit` as soon as a thread is free."""
        if not self._started:
            self._start()
        self._rounds.put(commit)

    def _start(self) -> None:
        with self._lock:  # brokers in threads of one process (tests) may race here
            if not self._started:
                for index in range(self._count):
                    threading.Thread(target=self._run, name=f"mainstem-fsync-{index}",
                                     daemon=True).start()
                self._started = True

    def idle(self) -> bool:
        """No round waits for a thread (a round may go straight on with the next)."""
        return self._rounds.empty()

    def _run(self) -> None:
        while True:
            self._rounds.get().run_rounds()


# As many as partitions commonly fsync at once on a node (streams, queue journals,
# replicas); more would only queue at the disk.
FSYNC_THREADS = 4
_FSYNC_THREADS = _FsyncThreads(FSYNC_THREADS)


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
        self._sync = sync  # blocking: runs in an fsync thread
        self.timings = timings
        self._on_durable = on_durable
        self._written = durable
        self._durable = durable
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # The loop to answer while a round is due or running; None when idle.
        self._round_loop: asyncio.AbstractEventLoop | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []
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
        """Have a round run unless one is due or running (it starts the next itself)."""
        if self._round_loop is not None:
            return
        loop = self._round_loop = asyncio.get_running_loop()
        if self.policy.mode is FsyncMode.INTERVAL:
            loop.call_later(self.policy.interval_ms / 1000, _FSYNC_THREADS.submit, self)
        else:
            _FSYNC_THREADS.submit(self)

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
        """Wait until no fsync round is due or running."""
        while self._round_loop is not None:
            idle = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(idle)
            await idle

    def run_rounds(self) -> None:
        """Fsync rounds, in an fsync thread: in each, everything written before it
        starts becomes durable (a write updates `_written` only once its data and dirty
        segment are recorded), then the loop hears of it. Under `batch`, a round goes
        straight on with the next when more was written meanwhile and no other partition
        waits for a thread; it says so (`goes_on`), and the loop starts none itself."""
        loop = self._round_loop
        assert loop is not None
        goes_on = True
        while goes_on:
            target = self._written
            error: BaseException | None = None
            try:
                _timed(self._sync, self.timings)
            except BaseException as failure:  # a failed fsync must fail every waiter
                error = failure
            goes_on = (error is None and self._written > target and _FSYNC_THREADS.idle()
                       and self.policy.mode is FsyncMode.BATCH)
            try:
                loop.call_soon_threadsafe(self._round_done, target, error, goes_on)
            except RuntimeError:  # a closed loop: nobody is left to tell
                return

    def _round_done(self, target: int, error: BaseException | None, goes_on: bool) -> None:
        if error is not None:
            self._round_loop = None
            self._fail(error)
        else:
            self._advance(target)
            if goes_on:
                return
            self._round_loop = None
            if self._durable < self._written:
                self._start()
                return
        idle, self._idle_waiters = self._idle_waiters, []
        for future in idle:
            if not future.done():
                future.set_result(None)

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
