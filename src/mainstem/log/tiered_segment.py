"""A segment whose file lives in a tier, read through the local cache.

It is a `Segment` to its readers (`Segments.find`, `Partition.location`,
`ChunkLocation.read`, `chunk_stream`, `transfer`): the same index, positions and CRC
checks, its descriptor that of its sparse cache file. One thing more: before reading chunk
i, `await ensure(i)`, which makes the chunk's bytes local and checks them; a chunk that
fails its CRCs is dropped from the cache and raises `ChunkDamaged`, as a damaged local
chunk does. It is sealed: nothing is appended to it or cut from it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from isal.isal_zlib import crc32

from mainstem.formats.chunk import Chunk, ChunkHeader, CorruptChunk
from mainstem.log.index import IndexEntry, SegmentIndex
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import CachedFile, TierCache
from mainstem.log.tier_upload import TieredRecord, UploadMismatch

T = TypeVar("T")


class NotFetched(Exception):
    """A chunk of a tiered segment was read before `ensure` made it local: `fetch()` makes
    it so, for a reader that reads synchronously and tries again."""

    def __init__(self, segment: TieredSegment, index: int) -> None:
        super().__init__(f"{segment.record.key}: chunk {index} read before ensure({index})")
        self.segment = segment
        self.index = index

    async def fetch(self) -> None:
        await self.segment.ensure(self.index)


async def fetching(read: Callable[[], T]) -> T:
    """Run a synchronous read of the log, first fetching each tiered chunk it finds not
    local, and trying again (chunks fetched stay cached, so each try gets further)."""
    while True:
        try:
            return read()
        except NotFetched as missing:
            await missing.fetch()


class TieredSegment(Segment):
    tiered = True

    def __init__(self, tier: Tier, record: TieredRecord, cache: TierCache, cached: CachedFile,
                 index: SegmentIndex) -> None:
        super().__init__(cached.path, cached.file, record.first_byte, record.segment_size,
                         index, record.version)
        self.next_byte = record.next_byte
        self.record = record
        self.tier = tier
        self._cache = cache
        self._cached = cached
        self._checked: dict[int, int] = {}  # chunk -> the cache stamp its bytes had, checked

    @classmethod
    async def load(cls, tier: Tier, record: TieredRecord, cache: TierCache) -> TieredSegment:
        """The tiered segment `record` names: its index local (fetched once, checked
        against the record), none of its data yet."""
        index_path = cache.directory / record.index_key
        raw = index_path.read_bytes() if index_path.exists() else b""
        if crc32(raw) != record.index_crc or len(raw) != record.index_size:
            raw = await tier.get(record.index_key)
            if crc32(raw) != record.index_crc or len(raw) != record.index_size:
                raise UploadMismatch(f"tier {tier.name}: {record.index_key} is not the "
                                     "index that was uploaded")
            index_path.parent.mkdir(parents=True, exist_ok=True)
            temporary = index_path.with_suffix(".index.tmp")
            temporary.write_bytes(raw)
            os.replace(temporary, index_path)
        index = SegmentIndex.load(index_path)
        return cls(tier, record, cache, cache.file(record.key, record.segment_size), index)

    # -- fetching ------------------------------------------------------------------

    async def ensure(self, i: int) -> None:
        """Make chunk i local and checked, for the synchronous reads that follow."""
        start, size = self.chunk_span(i)
        stamp = self._cache.stamp(self._cached, start, start + size)
        if stamp is None:
            try:
                await self.ensure_range(start, start + size)
            except CorruptChunk as error:  # the tier answered with the wrong bytes
                raise self.damaged(i, error) from error
            stamp = self._cache.stamp(self._cached, start, start + size)
            assert stamp is not None, "ensure_range made it local"
        if stamp != self._checked.get(i):  # bytes fetched since the last check
            self.read_chunk(i)  # checks its CRCs; drops the blocks if they fail
            self._checked[i] = stamp

    def ready(self, i: int) -> bool:
        """Whether chunk i is local and checked since its bytes came (`ensure` done)."""
        start, size = self.chunk_span(i)
        stamp = self._cache.stamp(self._cached, start, start + size)
        return stamp is not None and stamp == self._checked.get(i)

    def verified(self, i: int) -> bool:
        """A tiered chunk is checked each time its bytes come from the tier."""
        return self.ready(i)

    async def ensure_range(self, start: int, end: int) -> None:
        """Make file bytes [start, end) local (a reader by byte range)."""
        await self._cache.ensure(self._cached, start, end, self._fetch)

    async def _fetch(self, starts: Sequence[int], ends: Sequence[int]) -> Sequence[memoryview]:
        return await self.tier.get_ranges(self.record.key, starts, ends)

    # -- reading -------------------------------------------------------------------

    def read_chunk(self, i: int) -> Chunk:
        start, size = self._local(i)
        try:
            return super().read_chunk(i)
        except CorruptChunk:
            self._cache.drop(self._cached, start, start + size)
            raise

    def read_header(self, i: int, fd: int | None = None) -> ChunkHeader:
        self._local(i)
        return super().read_header(i, fd)

    def read_sequences(self, i: int) -> dict[str, int]:
        self._local(i)
        return super().read_sequences(i)

    def current_layout(self, i: int) -> bytes:
        self._local(i)
        return super().current_layout(i)

    def _local(self, i: int) -> tuple[int, int]:
        """Chunk i's span, once `ensure` made it local: a hole would read as zeros."""
        start, size = self.chunk_span(i)
        if self._cache.stamp(self._cached, start, start + size) is None:
            raise NotFetched(self, i)
        return start, size

    def pin(self) -> int:
        """A descriptor valid until `unpin`; its blocks stay cached meanwhile."""
        fd = super().pin()
        self._cache.pin(self._cached)
        return fd

    def unpin(self) -> None:
        self._cache.unpin(self._cached)
        super().unpin()

    # -- a sealed segment --------------------------------------------------------------

    def append(self, parts: Sequence[bytes | memoryview], entry: IndexEntry,
               payload: int) -> None:
        raise TypeError(f"{self.record.key} is tiered: sealed")

    def close(self) -> None:
        """Drop the cache file (the local index stays: it is small, and read again)."""
        self._cache.forget(self._cached)

    def delete(self) -> None:
        """Forget it locally, its cached index too; its objects in the tier are the
        caller's to delete."""
        self.deleted = True
        self.close()
        self.index.path.unlink(missing_ok=True)
