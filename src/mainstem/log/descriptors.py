"""Open file descriptors of log files, at most a fixed number at once.

A data directory may hold thousands of partitions, each with segment and index files; one
descriptor per file would exhaust RLIMIT_NOFILE and stop the broker from starting. Every
log file is a `LazyFile` instead: opened on first use, kept in a least-recently-used set of
`capacity` descriptors, closed when evicted and reopened when used again.

Threads: the event loop's thread opens, uses and evicts; it uses a descriptor only within
one synchronous step, so an eviction (which happens only on that thread, when it opens
another file) never closes one in use. Worker threads (fsync) only `borrow`: a descriptor
that is open is pinned against eviction for the call, one that is not is opened privately
and closed afterwards (fsync flushes the file, whichever descriptor wrote it). A send that
waits for its socket across steps `pin`s the descriptor until it is done: neither evicted
nor closed meanwhile, so a segment deleted by retention stays readable until `unpin`.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

# Descriptors kept for the process itself (listeners, event loop, SQLite, logs, lock file);
# of the rest of RLIMIT_NOFILE, a quarter goes to log files and three quarters to sockets
# (the server's default connection limit), so neither can starve the other.
PROCESS_DESCRIPTORS = 128
_MIN_CAPACITY = 16


def shared_descriptors() -> int:
    """The soft RLIMIT_NOFILE less what the process keeps for itself."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft - PROCESS_DESCRIPTORS)


def default_capacity() -> int:
    """A quarter of the shared descriptors: three quarters stay for connections."""
    return max(_MIN_CAPACITY, shared_descriptors() // 4)


class DescriptorCache:
    """A least-recently-used set of open log-file descriptors."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity or default_capacity()
        self._open: OrderedDict[LazyFile, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def file(self, path: Path, flags: int, fd: int = -1) -> LazyFile:
        """A lazily opened file; `fd`, when given, is an already open descriptor of it."""
        file = LazyFile(self, str(path), flags)
        if fd >= 0:
            with self._lock:
                self._make_room()
                file.fd = fd
                self._open[file] = None
        return file

    def _use(self, file: LazyFile) -> int:
        with self._lock:
            if file.fd >= 0:
                self._open.move_to_end(file)
                return file.fd
            if file.closed:
                raise ValueError(f"{file.path} is closed")
            self._make_room()
            file.fd = os.open(file.path, file.flags)
            self._open[file] = None
            return file.fd

    def _make_room(self) -> None:
        # Pinned files (an fsync running in a worker) are skipped: the capacity may be
        # overshot by as many files as fsyncs are running, never by more.
        for victim in list(self._open):
            if len(self._open) < self.capacity:
                return
            if not victim.pins:
                self._drop(victim)

    def _drop(self, file: LazyFile) -> None:
        del self._open[file]
        fd, file.fd = file.fd, -1
        os.close(fd)

    @contextmanager
    def _borrow(self, file: LazyFile) -> Iterator[int]:
        with self._lock:
            fd = file.fd
            if fd >= 0:
                file.pins += 1
        if fd < 0:
            fd = os.open(file.path, file.flags)
            try:
                yield fd
            finally:
                os.close(fd)
            return
        try:
            yield fd
        finally:
            self._unpin(file)

    def _pin(self, file: LazyFile) -> int:
        with self._lock:
            if file.fd < 0:
                if file.closed:
                    raise ValueError(f"{file.path} is closed")
                self._make_room()
                file.fd = os.open(file.path, file.flags)
                self._open[file] = None
            file.pins += 1
            return file.fd

    def _unpin(self, file: LazyFile) -> None:
        with self._lock:
            file.pins -= 1
            if file.closed and not file.pins and file.fd >= 0:
                self._drop(file)

    def _close(self, file: LazyFile) -> None:
        with self._lock:
            file.closed = True
            if file.fd >= 0 and not file.pins:
                self._drop(file)


class LazyFile:
    """One log file, open only while it is among the cache's recently used files."""

    __slots__ = ("_cache", "closed", "fd", "flags", "path", "pins")

    def __init__(self, cache: DescriptorCache, path: str, flags: int) -> None:
        self._cache = cache
        self.path = path
        self.flags = flags
        self.fd = -1
        self.pins = 0
        self.closed = False

    def fileno(self) -> int:
        """A descriptor valid until this thread next opens a log file or yields."""
        return self._cache._use(self)

    def borrow(self) -> AbstractContextManager[int]:
        """A descriptor for another thread, valid for the `with` block."""
        return self._cache._borrow(self)

    def pin(self) -> int:
        """A descriptor that stays open (not evicted, not closed) until `unpin`."""
        return self._cache._pin(self)

    def unpin(self) -> None:
        self._cache._unpin(self)

    def close(self) -> None:
        """Close for good (a pinned descriptor closes when its borrower is done)."""
        self._cache._close(self)



_shared: DescriptorCache | None = None


def shared_cache() -> DescriptorCache:
    """The process's cache, for partitions opened without one of their own."""
    global _shared
    if _shared is None:
        _shared = DescriptorCache()
    return _shared
