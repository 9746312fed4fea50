"""Waiting for a process a test started (a `mainstem serve`, an etcd) to reach a point, such
as its ``broker.started`` line. A fixed few seconds fail on a loaded machine, where a start
takes many times its usual time; so the wait goes on while the process makes progress (its
log grows or it uses CPU time) and ends once it has exited, has made none for STALL_S, or
has been waited on for CAP_S in all."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

STALL_S = 10.0  # neither log output nor CPU time for this long: stuck
CAP_S = 60.0  # the longest wait, progress or not
_POLL_S = 0.05


def wait_while_progressing(found: Callable[[], T | None], alive: Callable[[], bool], pid: int,
                           log_path: Path | None = None, *, stall_s: float = STALL_S,
                           cap_s: float = CAP_S) -> T | None:
    """The first answer of `found()` that is not None; None if the process exits, stalls
    or outlasts the cap first."""
    start = moved = time.monotonic()
    last = _progress(pid, log_path)
    while True:
        exited = not alive()  # before found(): what it wrote before exiting still counts
        result = found()
        if result is not None or exited:
            return result
        now = time.monotonic()
        mark = _progress(pid, log_path)
        if mark != last:
            last, moved = mark, now
        if now - moved > stall_s or now - start > cap_s:
            return None
        time.sleep(_POLL_S)


def _progress(pid: int, log_path: Path | None) -> tuple[int, int]:
    """The log's size and the CPU clock ticks the process (and its reaped children) used;
    0 for what cannot be read (no log yet, no /proc)."""
    try:
        size = log_path.stat().st_size if log_path is not None else 0
    except OSError:
        size = 0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return size, 0
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return size, sum(int(ticks) for ticks in fields[11:15])  # utime stime cutime cstime
