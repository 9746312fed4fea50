"""The local copy of tiered segments' bytes: sparse files, filled a block at a time.

Each tiered segment read here has one cache file, as long as the segment and holding its
bytes at their own positions, so the index's positions, `pread` and `sendfile` from a
descriptor work as for a local segment. Only the blocks read lately are there: a block is
fetched (with the next `read_ahead` ones, in one request) when a reader first needs it,
and the cache stays within `max_bytes` over all its files by punching out the least
recently used blocks (never those of a file being sent: a pinned one). Bytes are counted
as the disk holds them: each block rounded up to the file system's block.

The log reads synchronously and fetching is async, so the contract is: `await ensure`
makes a range local, then the synchronous reads that follow in the same step (or under a
pin) find it there.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from mainstem.formats.chunk import CorruptChunk
from mainstem.log.descriptors import DescriptorCache, LazyFile

DEFAULT_BLOCK = 1024 * 1024
CACHE_SUFFIX = ".segment"

Fetch = Callable[[Sequence[int], Sequence[int]], Awaitable[Sequence[memoryview]]]

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: free, keep the size


class CacheTooSmall(Exception):
    """A read needs more blocks at once than the cache may hold beside pinned files."""


class CachedFile:
    """One tiered segment's sparse copy: which blocks it holds (each with the number of
    the fetch that brought it), whether it is pinned."""

    __slots__ = ("file", "lock", "path", "pins", "present", "size")

    def __init__(self, path: Path, file: LazyFile, size: int) -> None:
        self.path = path
        self.file = file
        self.size = size
        self.present: dict[int, int] = {}  # block -> fetch number
        self.pins = 0
        self.lock = asyncio.Lock()


class TierCache:
    def __init__(self, directory: Path, max_bytes: int, descriptors: DescriptorCache, *,
                 block_size: int = DEFAULT_BLOCK, read_ahead: int = 1) -> None:
        """A cache in `directory`, which it owns: cache files left by an earlier run are
        removed (which blocks they held was kept in memory only)."""
        self.directory = directory
        self.max_bytes = max_bytes
        self.block_size = block_size
        self.read_ahead = read_ahead
        self.used = 0
        self._descriptors = descriptors
        self._lru: OrderedDict[tuple[CachedFile, int], int] = OrderedDict()  # -> bytes
        self._fetches = 0
        self._files: set[Path] = set()  # open cache files
        self._ensuring: dict[tuple[CachedFile, int], int] = {}  # block -> readers ensuring
        directory.mkdir(parents=True, exist_ok=True)
        self._fs_block = os.statvfs(directory).f_bsize
        if block_size % self._fs_block:
            raise ValueError(f"block size {block_size} is not a multiple of the file "
                             f"system's {self._fs_block}")
        for stale in directory.rglob("*" + CACHE_SUFFIX):
            stale.unlink()

    def file(self, name: str, size: int) -> CachedFile:
        """A new, empty cache file of `size` bytes (`name` may hold slashes): one per
        tiered segment, which shares it among its readers."""
        path = self.directory / name
        if path in self._files:
            raise ValueError(f"{path} is open already: a segment has one cache file")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._files.add(path)
        return CachedFile(path, self._descriptors.file(path, os.O_RDWR, fd), size)

    async def ensure(self, cached: CachedFile, start: int, end: int, fetch: Fetch) -> None:
        """Make bytes [start, end) of `cached` local, fetching the blocks it lacks and
        the `read_ahead` blocks after them through `fetch(starts, ends)`. The blocks of
        [start, end) are not evicted while this runs, by this reader or another."""
        needed = [(cached, block)
                  for block in range(start // self.block_size, (end - 1) // self.block_size + 1)]
        for key in needed:
            self._ensuring[key] = self._ensuring.get(key, 0) + 1
        try:
            async with cached.lock:  # one fetch at a time per file: none fetched twice
                for key in needed:
                    if key[1] in cached.present:
                        self._lru.move_to_end(key)
                missing = [block for _, block in needed if block not in cached.present]
                if missing:
                    await self._fetch(cached, missing, needed[-1][1], fetch)
        finally:
            for key in needed:
                self._ensuring[key] -= 1
                if not self._ensuring[key]:
                    del self._ensuring[key]

    async def _fetch(self, cached: CachedFile, missing: list[int], last: int,
                     fetch: Fetch) -> None:
        """Fetch the `missing` blocks and the `read_ahead` ones after block `last`, in one
        call, and store them (read-ahead only as far as there is room)."""
        blocks = len(range(0, cached.size, self.block_size))
        ahead = [block for block in range(last + 1, min(last + 1 + self.read_ahead, blocks))
                 if block not in cached.present]
        wanted = missing + ahead
        spans = [self._span(cached, block) for block in wanted]
        parts = await fetch([s for s, _ in spans], [e for _, e in spans])
        self._fetches += 1
        for (s, e), part in zip(spans, parts, strict=True):
            if len(part) != e - s:  # the object is shorter than the segment was
                raise CorruptChunk(f"{cached.path}: the tier returned {len(part)} bytes "
                                   f"for [{s}, {e})")
        for block, (s, e), part in zip(wanted, spans, parts, strict=True):
            if not self._make_room(self._cost(e - s)):
                if block in ahead:
                    break
                raise CacheTooSmall(f"{self.max_bytes} bytes of cache cannot hold block "
                                    f"{block} of {cached.path} beside the pinned and "
                                    "the ones being read")
            self._store(cached, block, s, part)

    def stamp(self, cached: CachedFile, start: int, end: int) -> int | None:
        """None unless all of [start, end) is local; then the number of the latest fetch
        that brought part of it (a reader that checked those bytes knows if they changed)."""
        blocks = range(start // self.block_size, (end - 1) // self.block_size + 1)
        if any(block not in cached.present for block in blocks):
            return None
        return max(cached.present[block] for block in blocks)

    def drop(self, cached: CachedFile, start: int, end: int) -> None:
        """Free the blocks holding [start, end): what they hold cannot be trusted."""
        for block in range(start // self.block_size, (end - 1) // self.block_size + 1):
            if block in cached.present:
                self._evict(cached, block)

    def pin(self, cached: CachedFile) -> None:
        cached.pins += 1

    def unpin(self, cached: CachedFile) -> None:
        cached.pins -= 1

    def forget(self, cached: CachedFile) -> None:
        """Close and remove the file (a pinned descriptor keeps reading it until unpinned)."""
        for block in list(cached.present):
            self.used -= self._lru.pop((cached, block))
        cached.present.clear()
        cached.file.close()
        cached.path.unlink(missing_ok=True)
        self._files.discard(cached.path)

    def _span(self, cached: CachedFile, block: int) -> tuple[int, int]:
        start = block * self.block_size
        return start, min(start + self.block_size, cached.size)

    def _cost(self, length: int) -> int:
        """Bytes on disk for a block of `length` bytes."""
        return -(-length // self._fs_block) * self._fs_block

    def _make_room(self, cost: int) -> bool:
        """Evict least recently used blocks until `cost` more bytes fit, sparing pinned
        files and blocks being ensured; False if they cannot be made to fit."""
        if self.used + cost <= self.max_bytes:
            return True
        for victim, block in list(self._lru):
            if self.used + cost <= self.max_bytes:
                break
            if victim.pins or (victim, block) in self._ensuring:
                continue
            self._evict(victim, block)
        return self.used + cost <= self.max_bytes

    def _store(self, cached: CachedFile, block: int, start: int, part: memoryview) -> None:
        written = os.pwrite(cached.file.fileno(), part, start)
        if written != len(part):
            raise OSError(f"short write to {cached.path}: {written} of {len(part)} bytes")
        cached.present[block] = self._fetches
        cost = self._cost(len(part))
        self._lru[(cached, block)] = cost
        self.used += cost

    def _evict(self, cached: CachedFile, block: int) -> None:
        start, end = self._span(cached, block)
        # Whole file system blocks: a partial last one would be zeroed, not freed.
        _punch(cached.file.fileno(), start, self._cost(end - start))
        del cached.present[block]
        self.used -= self._lru.pop((cached, block))


def _punch(fd: int, start: int, length: int) -> None:
    """Free a range of a file's blocks (it reads as zeros after), keeping its size."""
    if _fallocate(fd, _PUNCH_HOLE, start, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"fallocate(PUNCH_HOLE): {os.strerror(code)}")

