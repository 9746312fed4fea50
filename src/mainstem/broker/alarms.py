"""Resource alarms: memory above its high watermark, free disk below its limit.

While any alarm is set, protocol handlers hold publishers back (AMQP connection.blocked,
the stream protocol stops reading publish frames, the others answer with their error)
and consumers keep draining; an alarm clears by itself once the resource recovers.
Writers are held at one place, the stream service's `WriteGate`, which handlers ask how
to surface it on their wire; AMQP also subscribes here to be told of every change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mainstem.alarms")

MEMORY = "memory"
DISK = "disk"
ChangeListener = Callable[[frozenset[str]], None]


class ResourceAlarms:
    """The set of active alarms, with an event for "no alarm" and change listeners."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        self._clear = asyncio.Event()
        self._clear.set()
        self._listeners: set[ChangeListener] = set()

    @property
    def active(self) -> frozenset[str]:
        return frozenset(self._active)

    @property
    def blocked(self) -> bool:
        """True while publishers must be held back."""
        return bool(self._active)

    def describe(self) -> str:
        """For a protocol's error text: which alarm holds publishers back."""
        return (f"a {' and '.join(sorted(self._active))} resource alarm holds publishers "
                "back; publish again once it clears")

    async def wait_clear(self) -> None:
        """Return at once without an alarm, else once every alarm has cleared."""
        await self._clear.wait()

    def subscribe(self, listener: ChangeListener) -> Callable[[], None]:
        """Call `listener(active alarms)` on every change; returns the unsubscribe function."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def set(self, resource: str, on: bool) -> None:
        if on == (resource in self._active):
            return
        if on:
            self._active.add(resource)
            self._clear.clear()
            log.warning("alarm.set", extra={"resource": resource})
        else:
            self._active.discard(resource)
            log.info("alarm.cleared", extra={"resource": resource})
            if not self._active:
                self._clear.set()
        for listener in list(self._listeners):
            try:
                listener(self.active)
            except Exception:  # one broken listener must not stop the others being told
                log.exception("alarm.listener_failed")


@dataclass(slots=True)
class Watermarks:
    memory_high_watermark: float  # fraction of physical memory
    disk_free_limit: int  # bytes


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    memory_used: int
    memory_total: int
    disk_free: int


def measure(data_dir: Path) -> ResourceUsage:
    """Resident memory of this process, physical memory, free bytes under data_dir."""
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm", "rb") as statm:
        resident_pages = int(statm.read().split()[1])
    total = os.sysconf("SC_PHYS_PAGES") * page
    return ResourceUsage(resident_pages * page, total, shutil.disk_usage(data_dir).free)


class AlarmMonitor:
    """Samples memory and disk periodically and sets or clears the alarms."""

    def __init__(self, alarms: ResourceAlarms, data_dir: Path, watermarks: Watermarks,
                 interval_s: float = 1.0) -> None:
        self.alarms = alarms
        self.watermarks = watermarks  # mutable: operators and tests may move them live
        self.usage: ResourceUsage | None = None
        self._data_dir = data_dir
        self._interval_s = interval_s

    def check(self) -> ResourceUsage:
        usage = measure(self._data_dir)
        self.usage = usage
        limit = self.watermarks.memory_high_watermark * usage.memory_total
        self.alarms.set(MEMORY, usage.memory_used > limit)
        self.alarms.set(DISK, usage.disk_free < self.watermarks.disk_free_limit)
        return usage

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.check)
            except OSError:
                log.exception("alarm.check_failed")
            await asyncio.sleep(self._interval_s)
