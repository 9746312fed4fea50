"""Finding damage in a local segment's chunks before anyone reads them, and checking a
copy that is to replace a damaged one.

A chunk is intact when every CRC it carries holds (its data's; its guard's, or a
version-1 trailer's), its tracking entries parse, and its header says what its index entry
says (chunk id, timestamp, records, the bytes after its data): a chunk that checks out
but is not the one the index points at is damage too. `ChunkRun` reads consecutive chunks
in one pread and checks each, from any thread (the broker's scrub runs it in a worker);
`replace_chunk` writes another replica's copy over a damaged chunk only once the copy
proves to be that very chunk, intact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mainstem.formats.chunk import CorruptChunk
from mainstem.log.index import IndexEntry
from mainstem.log.segment_file import Segment, chunk_from


@dataclass(frozen=True, slots=True)
class ChunkCheck:
    """One chunk checked: where it lies and what is wrong with it (None: intact)."""

    chunk_id: int  # as its index entry says: the header may be what is damaged
    next_offset: int
    segment: str  # its segment file's name
    file_pos: int
    size: int  # bytes on disk, trailer and guard included
    damage: str | None


@dataclass(frozen=True, slots=True)
class ChunkRun:
    """Consecutive chunks of one local segment, read in one go and checked. Their index
    entries are taken when the run is made (on the loop that appends), so checking it
    from another thread reads nothing that moves."""

    segment: Segment
    entries: tuple[IndexEntry, ...]
    end: int  # the file position after the last chunk

    @classmethod
    def of(cls, segment: Segment, i: int, below: int, max_bytes: int) -> ChunkRun:
        """Chunk i and those after it in its segment that end at or below offset `below`,
        as many as fit in `max_bytes` (chunk i always)."""
        entries = [segment.index.entry(i)]
        start, size = segment.chunk_span(i)
        end = start + size
        for j in range(i + 1, segment.num_chunks):
            entry = segment.index.entry(j)
            _, size = segment.chunk_span(j)
            if entry.next_offset > below or entry.file_pos + size - start > max_bytes:
                break
            entries.append(entry)
            end = entry.file_pos + size
        return cls(segment, tuple(entries), end)

    def check(self) -> list[ChunkCheck]:
        """Read the run and check each chunk (OSError when the segment went meanwhile)."""
        first = self.entries[0].file_pos
        with self.segment.borrow() as fd:
            raw = memoryview(os.pread(fd, self.end - first, first))
        checks = []
        for k, entry in enumerate(self.entries):
            stop = self.entries[k + 1].file_pos if k + 1 < len(self.entries) else self.end
            piece = raw[entry.file_pos - first:stop - first]
            checks.append(ChunkCheck(entry.chunk_id, entry.next_offset,
                                     self.segment.path.name, entry.file_pos,
                                     stop - entry.file_pos,
                                     damage_of(piece, entry, self.segment, stop - entry.file_pos)))
        return checks


def damage_of(raw: memoryview, entry: IndexEntry, segment: Segment, size: int) -> str | None:
    """What is wrong with `raw` as the chunk `entry` describes, `size` bytes in `segment`;
    None when it is that chunk, intact."""
    if len(raw) != size:
        return f"chunk {entry.chunk_id}: {len(raw)} bytes of {size}"
    try:
        chunk = chunk_from(raw, segment.version)
        chunk.sequences()  # the tracking entries must parse, not only match their CRC
    except CorruptChunk as error:
        return str(error)
    header = chunk.header
    said = (header.chunk_id, header.timestamp, header.num_records,
            header.trailer_length + segment.guard_size)
    indexed = (entry.chunk_id, entry.timestamp, entry.num_records, entry.tail_length)
    if said != indexed:
        return f"chunk {entry.chunk_id}: its header {said} disagrees with its index {indexed}"
    return None


def replace_chunk(segment: Segment, i: int, raw: bytes) -> ChunkCheck:
    """Write `raw`, another replica's copy, over chunk i, durably, once it proves to be the
    chunk i's index entry describes, intact and of its size (CorruptChunk otherwise); then
    read the chunk back and check it. Returns that check: where the bytes went."""
    entry = segment.index.entry(i)
    start, size = segment.chunk_span(i)
    damage = damage_of(memoryview(raw), entry, segment, size)
    if damage is not None:
        raise CorruptChunk(f"the copy cannot replace chunk {entry.chunk_id}: {damage}")
    segment.overwrite(start, raw)
    (check,) = ChunkRun(segment, (entry,), start + size).check()
    if check.damage is not None:
        raise CorruptChunk(f"chunk {entry.chunk_id} still damaged once replaced: {check.damage}")
    return check
