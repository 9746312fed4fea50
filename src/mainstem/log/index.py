"""Per-segment index: one record per chunk, kept in memory as arrays for bisection.

The file is a cache of what the segment holds: it is not fsynced, and recovery
rebuilds it from the segment whenever it is missing, short, ahead of the data, or its
records disagree with one another (`consistent_prefix`: cheap, no reads of the segment).

    header: b"MSIX" | version u32
    record: chunk id u64 | timestamp i64 | file position u64 | byte position u64 |
            records u32 | bytes after the data entries u32 (trailer, and guard from
            segment version 2)
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

from mainstem.log.descriptors import DescriptorCache, LazyFile

FILE_HEADER = b"MSIX" + struct.pack(">I", 1)
RECORD = struct.Struct(">QqQQII")


@dataclass(frozen=True, slots=True)
class IndexEntry:
    chunk_id: int
    timestamp: int
    file_pos: int
    byte_pos: int  # partition byte position of the chunk's first payload byte
    num_records: int
    tail_length: int  # bytes after the data entries: the trailer, and its guard (version 2)

    @property
    def next_offset(self) -> int:
        return self.chunk_id + self.num_records


class SegmentIndex:
    """Chunk positions of one segment, searchable by offset, timestamp and byte position."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.chunk_ids = array("Q")
        self.timestamps = array("q")
        self.file_positions = array("Q")
        self.byte_positions = array("Q")
        self.record_counts = array("I")
        self.tail_lengths = array("I")
        self._file: LazyFile | None = None  # for appends, once open_for_append ran
        self._on_disk = b""  # the file as loaded: left alone when recovery kept it whole

    def __len__(self) -> int:
        return len(self.chunk_ids)

    @classmethod
    def load(cls, path: Path) -> SegmentIndex:
        """Read what the file holds; a bad header or partial last record is dropped."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        return cls.decode(path, raw)

    @classmethod
    def decode(cls, path: Path, raw: bytes) -> SegmentIndex:
        """The entries `raw` (an index file's bytes) holds, as `load` reads them (a tiered
        segment's index fetched into memory, too)."""
        index = cls(path)
        index._on_disk = raw
        if not raw.startswith(FILE_HEADER):
            return index
        body = memoryview(raw)[len(FILE_HEADER):]
        whole = len(body) - len(body) % RECORD.size
        for record in RECORD.iter_unpack(body[:whole]):
            index._add(IndexEntry(*record))
        return index

    def open_for_append(self, descriptors: DescriptorCache) -> None:
        """Rewrite the file from memory unless it holds that already (a restart with many
        segments then writes nothing), then append to it (opened when first needed)."""
        content = self.encode()
        if content != self._on_disk:
            tmp = self.path.with_suffix(".index.tmp")
            with open(tmp, "wb") as out:
                out.write(content)
            os.replace(tmp, self.path)
        self._on_disk = b""
        self._file = descriptors.file(self.path, os.O_WRONLY | os.O_APPEND)

    def encode(self) -> bytes:
        """The index file as it holds the entries in memory."""
        return FILE_HEADER + b"".join(RECORD.pack(*self._fields(i)) for i in range(len(self)))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def append(self, entry: IndexEntry) -> None:
        self._add(entry)
        if self._file is not None:
            os.write(self._file.fileno(), RECORD.pack(*self._fields(len(self) - 1)))

    def truncate(self, count: int) -> None:
        """Keep the first `count` entries (the file is rewritten on open_for_append)."""
        for column in self._columns():
            del column[count:]

    def entry(self, i: int) -> IndexEntry:
        return IndexEntry(*self._fields(i))

    def last(self) -> IndexEntry | None:
        return self.entry(len(self) - 1) if len(self) else None

    def span(self, i: int, file_size: int) -> tuple[int, int]:
        """(file position, size) of chunk i in a segment file of `file_size` bytes."""
        start = self.file_positions[i]
        end = self.file_positions[i + 1] if i + 1 < len(self) else file_size
        return start, end - start

    def consistent_prefix(self, first: IndexEntry, min_chunk_size: int, file_size: int) -> int:
        """How many leading entries hold together: the first where `first` (the segment's
        first chunk id, file and byte positions) says, each next chunk id continuing the
        records before it, and file positions, byte positions and timestamps never going
        back, each chunk's header and tail (at least `min_chunk_size` bytes) inside the file
        and before the next chunk. Damage a check here misses is the scrub's to find."""
        ids, counts, files = self.chunk_ids, self.record_counts, self.file_positions
        bytes_at, times, tails = self.byte_positions, self.timestamps, self.tail_lengths
        for i in range(len(self)):
            end = files[i] + min_chunk_size + tails[i]
            if counts[i] < 1 or end > file_size or (i + 1 < len(self) and end > files[i + 1]):
                return i
            if i == 0:
                if (ids[0], files[0], bytes_at[0]) != (first.chunk_id, first.file_pos,
                                                       first.byte_pos):
                    return 0
            elif (ids[i] != ids[i - 1] + counts[i - 1] or times[i] < times[i - 1]
                  or not 0 <= bytes_at[i] - bytes_at[i - 1] <= files[i] - files[i - 1]):
                return i
        return len(self)

    def find_offset(self, offset: int) -> int:
        """Index of the chunk holding `offset` (-1 when it precedes the segment)."""
        return bisect_right(self.chunk_ids, offset) - 1

    def find_timestamp(self, timestamp: int) -> int:
        """Index of the first chunk at or after `timestamp` (len when none)."""
        return bisect_left(self.timestamps, timestamp)

    def _fields(self, i: int) -> tuple[int, int, int, int, int, int]:
        return (self.chunk_ids[i], self.timestamps[i], self.file_positions[i],
                self.byte_positions[i], self.record_counts[i], self.tail_lengths[i])

    def _columns(self) -> tuple[array[int], ...]:
        return (self.chunk_ids, self.timestamps, self.file_positions, self.byte_positions,
                self.record_counts, self.tail_lengths)

    def _add(self, entry: IndexEntry) -> None:
        for column, value in zip(self._columns(), entry_fields(entry), strict=True):
            column.append(value)


def entry_fields(entry: IndexEntry) -> tuple[int, int, int, int, int, int]:
    return (entry.chunk_id, entry.timestamp, entry.file_pos, entry.byte_pos,
            entry.num_records, entry.tail_length)
