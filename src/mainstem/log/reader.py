"""A cursor over a partition's committed chunks, for subscribers and other readers."""

from __future__ import annotations

from mainstem.formats.chunk import Chunk
from mainstem.log.chunk_stream import ReadChunk, read_records
from mainstem.log.partition import ChunkLocation, Partition
from mainstem.log.segment_file import Segment


class PartitionReader:
    """A cursor over committed chunks. A reader left behind by retention moves to
    the new first offset and counts the records it missed in `lost`."""

    def __init__(self, partition: Partition, offset: int) -> None:
        self.partition = partition
        self.position = offset
        self.lost = 0
        self._last: tuple[Segment, int] | None = None

    def _next(self) -> tuple[Segment, int] | None:
        first = self.partition.first_offset
        if self.position < first:
            self.lost += first - self.position
            self.position = first
        found = self.partition.find_committed(self.position, self._last)
        if found is not None:
            segment, i = found
            self._last = found
            self.position = segment.index.chunk_ids[i] + segment.index.record_counts[i]
        return found

    def next_location(self) -> ChunkLocation | None:
        """The next committed chunk's place on disk (for sendfile), advancing."""
        found = self._next()
        return None if found is None else self.partition.location(*found)

    def next_chunk_nowait(self) -> ReadChunk | None:
        """The next committed chunk: streamed if it is large (see `chunk_stream`)."""
        found = self._next()
        return None if found is None else read_records(*found) or found[0].read_chunk(found[1])

    def next_whole_chunk_nowait(self) -> Chunk | None:
        """The next committed chunk read at once, for a reader that takes it in one step."""
        found = self._next()
        return None if found is None else found[0].read_chunk(found[1])

    async def next_chunk(self) -> ReadChunk:
        while True:
            chunk = self.next_chunk_nowait()
            if chunk is not None:
                return chunk
            await self.partition.wait_for(self.position)
