"""The run of segment files that holds one partition, oldest first; the last one, the
active segment, takes new chunks.

It finds the chunk holding an offset, and is what changes shape: a roll at the end,
deletion at the start (retention, a queue's settled messages), a cut at the end (a
follower's divergent tail). Each such change is made durable in the directory too.

The oldest members may be tiered (`TieredSegment`s, their files in an object store): they
come first, and a local segment becomes one only at the boundary (`swap_tiered`), so
the run is tiered members, then local files, the active one last.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar, overload

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.segment_file import FILE_HEADER_SIZE, INDEX_SUFFIX, SEGMENT_SUFFIX, Segment

AnySegment = TypeVar("AnySegment", bound=Segment)


class Segments(Sequence[Segment]):
    def __init__(self, directory: Path, files: list[Segment],
                 descriptors: DescriptorCache) -> None:
        self.directory = directory
        self._files = files
        self._starts = [segment.first_chunk_id for segment in files]
        self._descriptors = descriptors
        self.tiered_count = 0  # how many of the oldest members are tiered

    @classmethod
    def open(cls, directory: Path, descriptors: DescriptorCache) -> Segments:
        """Open the directory's segments, creating the first when there is none."""
        directory.mkdir(parents=True, exist_ok=True)
        files = _open_files(sorted(directory.glob("*" + SEGMENT_SUFFIX)), descriptors)
        try:
            if not files:
                files = [Segment.create(directory, 0, 0, descriptors)]
            fsync_directory(directory)
        except BaseException:
            for segment in files:
                segment.close()
            raise
        return cls(directory, files, descriptors)

    def close(self) -> None:
        for segment in self._files:
            segment.close()

    # -- the run as a sequence --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._files)

    @overload
    def __getitem__(self, k: int) -> Segment: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[Segment]: ...

    def __getitem__(self, k: int | slice) -> Segment | Sequence[Segment]:
        return self._files[k]

    def __iter__(self) -> Iterator[Segment]:
        return iter(self._files)

    @property
    def active(self) -> Segment:
        return self._files[-1]

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._files)

    @property
    def local(self) -> Sequence[Segment]:
        """The members on local disk, the active one last."""
        return self._files[self.tiered_count:]

    @property
    def tiered_size(self) -> int:
        return sum(segment.size for segment in self._files[:self.tiered_count])

    # -- finding ----------------------------------------------------------------------

    def holding(self, offset: int) -> int:
        """The position of the segment whose chunks start at or before `offset` (0 when
        `offset` lies before them all)."""
        return max(bisect_right(self._starts, offset) - 1, 0)

    def find(self, offset: int) -> tuple[Segment, int] | None:
        """(segment, chunk index) of the chunk holding `offset`, or of the first chunk
        after it when it falls into a gap; None past the last chunk."""
        k = bisect_right(self._starts, offset) - 1
        while k < len(self._files):
            segment = self._files[k]
            i = segment.index.find_offset(offset)
            if i >= 0 and offset < segment.index.chunk_ids[i] + segment.index.record_counts[i]:
                return segment, i
            if i + 1 < segment.num_chunks:  # offset lies in a gap before chunk i + 1
                return segment, i + 1
            k += 1
            if k < len(self._files):
                offset = max(offset, self._files[k].first_chunk_id)
        return None

    def last_chunk(self) -> tuple[int, int]:
        """(chunk id, timestamp) of the last chunk; (-1, 0) when there is none."""
        for segment in reversed(self._files):
            if segment.num_chunks:
                return segment.index.chunk_ids[-1], segment.index.timestamps[-1]
        return -1, 0

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset of the first chunk at or after `timestamp` (ms); None when every
        chunk is older."""
        for segment in self._files:
            last = segment.last_timestamp
            if last is not None and last >= timestamp:
                i = segment.index.find_timestamp(timestamp)
                return segment.index.chunk_ids[i]
        return None

    # -- changing shape ---------------------------------------------------------------

    def roll(self, next_offset: int, next_byte: int) -> Segment:
        """Start a new active segment at the end of the log."""
        self.active.index.close()
        segment = Segment.create(self.directory, next_offset, next_byte, self._descriptors)
        fsync_directory(self.directory)
        self._files.append(segment)
        self._starts.append(segment.first_chunk_id)
        return segment

    def drop_oldest(self) -> Segment:
        """Delete the oldest segment (the caller fsyncs the directory once it is done; a
        tiered one is only forgotten here: its objects are the caller's to delete)."""
        oldest = self._files.pop(0)
        del self._starts[0]
        if oldest.tiered:
            self.tiered_count -= 1
        oldest.delete()
        return oldest

    def attach_tiered(self, tiered: Sequence[AnySegment]) -> list[AnySegment]:
        """Put tiered members (oldest first, all older than the local files) first. A local
        file a tiered member stands for (a crash cut its delete short) is deleted now. A
        member reaching into what the local files still hold (a replica whose tail was cut
        back into it, or that is catching up with it) is not attached: it is returned for
        the caller to drop; the replica's own copy is swapped for it once sealed."""
        members = sorted(tiered, key=lambda member: member.first_chunk_id)
        firsts = {member.first_chunk_id for member in members}
        local = list(self.local)
        kept = [s for s in local[:-1] if s.first_chunk_id not in firsts] + local[-1:]
        bound = kept[0].first_chunk_id if kept else None
        attached = [m for m in members if bound is None or m.next_offset <= bound]
        attached_firsts = {member.first_chunk_id for member in attached}
        replaced = [s for s in local[:-1] if s.first_chunk_id in attached_firsts]
        for segment in replaced:
            self._files.remove(segment)
            segment.delete()
        k = self.tiered_count
        self._files[k:k] = attached
        self.tiered_count += len(attached)
        self._starts = [segment.first_chunk_id for segment in self._files]
        if any(a >= b for a, b in zip(self._starts, self._starts[1:], strict=False)):
            raise ValueError(f"{self.directory}: tiered segments overlap the local ones")
        if replaced:
            fsync_directory(self.directory)
        return [member for member in members if member.first_chunk_id not in attached_firsts]

    def swap_tiered(self, member: Segment) -> None:
        """Put `member`, the tiered copy of the oldest local segment (never the active
        one), in its place, and delete the local files, durably."""
        k = self.tiered_count
        local = self._files[k]
        if local.first_chunk_id != member.first_chunk_id or k == len(self._files) - 1:
            raise ValueError(f"{self.directory}: {member.first_chunk_id} is not the oldest "
                             "sealed local segment")
        self._files[k] = member
        self.tiered_count += 1
        local.delete()
        fsync_directory(self.directory)

    def cut_from(self, offset: int) -> Segment:
        """Drop every chunk at or after `offset` (a chunk boundary), durably; returns the
        active segment left."""
        while len(self._files) > self.tiered_count + 1 and self.active.first_chunk_id >= offset:
            self._files.pop().delete()
            self._starts.pop()
        segment = self.active
        segment.truncate_chunks(bisect_right(segment.index.chunk_ids, offset - 1)
                                if offset > segment.first_chunk_id else 0,
                                self._descriptors)
        segment.sync()
        fsync_directory(self.directory)
        return segment


def fsync_directory(directory: Path) -> None:
    """Make file creations and deletions in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_files(paths: list[Path], descriptors: DescriptorCache) -> list[Segment]:
    """Open every segment. A last file whose header is torn is a roll cut short by a
    crash before anything was written to it: it is removed, the one before it goes on."""
    if len(paths) > 1 and paths[-1].stat().st_size < FILE_HEADER_SIZE:
        paths[-1].with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        paths[-1].unlink()
        paths = paths[:-1]
    segments: list[Segment] = []
    try:
        for path in paths:
            segments.append(Segment.open(path, descriptors))
        if segments and not segments[-1].num_chunks:
            segments[-1].make_current()  # an empty one cannot be rolled past
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments
