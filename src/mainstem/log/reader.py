"""A cursor over a partition's committed chunks, for subscribers and other readers.

A chunk of a tiered segment is made local (`TieredSegment.ensure`) before it is read: the
async readers wait for that as they wait for new data; the `_nowait` ones answer "none
yet" for a chunk not local, and the async call that follows fetches it. Every chunk is
checked before it is taken, one sent raw from its file too (unless known sound): a
damaged one raises `ChunkDamaged` and stays ahead of the reader.
"""

from __future__ import annotations

from mainstem.formats.chunk import Chunk
from mainstem.log.chunk_stream import ReadChunk, read_records
from mainstem.log.partition import Partition
from mainstem.log.segment_file import Segment
from mainstem.log.transfer import ChunkView, peek

Found = tuple[Segment, int]


class PartitionReader:
    """A cursor over committed chunks. A reader left behind by retention moves to
    the new first offset and counts the records it missed in `lost`."""

    def __init__(self, partition: Partition, offset: int) -> None:
        self.partition = partition
        self.position = offset
        self.lost = 0
        self._last: Found | None = None

    def _peek(self) -> Found | None:
        """The next committed chunk, not taken yet."""
        first = self.partition.first_offset
        if self.position < first:
            self.lost += first - self.position
            self.position = first
        return self.partition.find_committed(self.position, self._last)

    def _take(self, found: Found) -> Found:
        segment, i = found
        self._last = found
        self.position = segment.index.chunk_ids[i] + segment.index.record_counts[i]
        return found

    def _local(self) -> Found | None:
        """The next committed chunk if it is local now; None otherwise."""
        found = self._peek()
        if found is None or not found[0].ready(found[1]):
            return None
        return found

    async def _next(self, *, wait: bool) -> Found | None:
        """The next committed chunk, made local, not taken yet; waiting for new data at the
        end of the log when `wait`, None there otherwise."""
        while True:
            found = self._peek()
            if found is None:
                if not wait:
                    return None
                await self.partition.wait_for(self.position)
            elif not found[0].ready(found[1]):
                await found[0].ensure(found[1])
            else:
                return found

    # Each read below checks its chunk before taking it: a damaged chunk (ChunkDamaged)
    # stays ahead of the reader, which has taken only what came before it.

    async def next_view(self) -> ChunkView:
        """The next committed chunk's place on disk and header (to send it from the file),
        checked (see `transfer.peek`), advancing; waits for new data at the end of the log."""
        found = await self._next(wait=True)
        assert found is not None
        view = peek(self.partition.location(*found))
        self._take(found)
        return view

    def next_chunk_nowait(self) -> ReadChunk | None:
        """The next committed chunk: streamed if it is large (see `chunk_stream`)."""
        found = self._local()
        return None if found is None else self._read(found)

    async def next_chunk(self) -> ReadChunk:
        found = await self._next(wait=True)
        assert found is not None
        return self._read(found)

    async def next_whole_chunk(self) -> Chunk | None:
        """The next committed chunk read at once, for a reader that takes it in one step;
        None at the end of the log."""
        found = await self._next(wait=False)
        if found is None:
            return None
        chunk = found[0].read_chunk(found[1])
        self._take(found)
        return chunk

    def _read(self, found: Found) -> ReadChunk:
        """A large local chunk is streamed a window at a time; a tiered one is read whole,
        its cached blocks being free to go once this step is over."""
        segment, i = found
        chunk = segment.read_chunk(i) if segment.tiered else (
            read_records(segment, i) or segment.read_chunk(i))
        self._take(found)
        return chunk
