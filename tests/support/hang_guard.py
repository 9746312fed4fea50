"""A test that hangs fails instead of holding the whole run, and says where it waited.

A watchdog thread waits `HANG_AFTER` seconds for each phase of a test (setup, call,
teardown). When that passes it writes every thread's stack and every task of each running
event loop (with the loop's ready and scheduled callbacks: a task waiting with nothing due
is a future nobody will complete), then ends the phase: it cancels the tasks of the loop
that runs on the main thread (an async test), or interrupts the main thread (a blocking
test). The phase then fails with that report as its message, so a CI log shows the wait.
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import signal
import sys
import threading
import traceback
from types import TracebackType

# The slowest test takes about 90 s on a loaded 2-core machine; a phase this long is stuck.
HANG_AFTER = float(os.environ.get("MAINSTEM_TEST_HANG_AFTER", "360"))


class HangGuard:
    def __init__(self, what: str, after: float = HANG_AFTER) -> None:
        self.what = what
        self.after = after
        self.report: str | None = None
        self._done = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="hang-guard", daemon=True)

    def __enter__(self) -> HangGuard:
        self._watchdog.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._done.set()
        self._watchdog.join()

    def _watch(self) -> None:
        if self._done.wait(self.after):
            return
        self.report = f"{self.what} hung for {self.after:.0f} s\n" + _state()
        sys.__stderr__.write(self.report)
        sys.__stderr__.flush()
        main_loop = next((loop for loop in _running_loops()
                          if getattr(loop, "_thread_id", None)
                          == threading.main_thread().ident), None)
        if main_loop is None:
            # a real signal: a blocking call returns with EINTR and raises KeyboardInterrupt
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            return
        for task in asyncio.all_tasks(main_loop):
            main_loop.call_soon_threadsafe(task.cancel)


def _running_loops() -> list[asyncio.AbstractEventLoop]:
    return [thing for thing in gc.get_objects()
            if isinstance(thing, asyncio.AbstractEventLoop) and thing.is_running()]


def _state() -> str:
    out = io.StringIO()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"\n--- thread {names.get(ident, ident)}\n")
        traceback.print_stack(frame, file=out)
    for loop in _running_loops():
        ready = len(getattr(loop, "_ready", ()))
        scheduled = sorted(getattr(loop, "_scheduled", ()), key=lambda handle: handle.when())
        out.write(f"\n=== loop {loop!r}: {ready} ready, {len(scheduled)} scheduled\n")
        for handle in scheduled[:10]:
            out.write(f"  at {handle.when():.1f}: {handle}\n")
        for task in asyncio.all_tasks(loop):
            out.write(f"\n* {task!r}\n")
            _await_chain(task.get_coro(), out)
    return out.getvalue()


def _await_chain(awaitable: object, out: io.StringIO) -> None:
    """Where a coroutine waits, frame by frame down its awaits (a task's own stack shows
    only its outermost frame), ending at the future it waits on."""
    for _ in range(100):  # bounded: a chain is a few dozen deep at most
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            out.write(f"  waits on {awaitable!r}\n")
            return
        out.write(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n")
        awaitable = (getattr(awaitable, "cr_await", None)
                     or getattr(awaitable, "gi_yieldfrom", None))
