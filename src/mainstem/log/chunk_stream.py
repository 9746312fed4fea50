"""A large chunk's records read from its segment a window at a time.

A reader that waits between records (an AMQP consumer out of credit, a BSON subscriber
whose socket does not drain) holds the window its next record is in, not the whole chunk:
an AMQP publisher's chunks run to megabytes, and a few hundred stalled consumers each
holding one used to cost the broker gigabytes. The chunk is checked against its CRCs first,
in one pass that keeps nothing, so no record of a damaged chunk is ever handed out
(`ChunkDamaged`). `check_chunk` is that check alone, for a chunk sent raw from its file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from isal.isal_zlib import crc32

from mainstem.formats.chunk import Chunk, CorruptChunk, parse_header, signed_crc
from mainstem.formats.osiris import HEADER_SIZE, SIMPLE_ENTRY, SUB_BATCH_BIT, SUB_BATCH_ENTRY
from mainstem.log.guard import check_ends, check_size, legacy_open_trailer
from mainstem.log.segment_file import LEGACY_VERSION, Segment

WINDOW = 64 * 1024  # chunks with more data than this are streamed; one record may be larger
CHECK_READ = 256 * 1024  # the CRC pass reads this much at a time, keeping none of it


class StreamedChunk:
    """Chunk `i` of `segment`, checked, its records read as they are taken. Like `Chunk`
    to its readers: a `header` and `records()`."""

    def __init__(self, segment: Segment, i: int) -> None:
        self._segment = segment
        start, size = segment.chunk_span(i)
        fd = segment.fileno()
        try:
            head = os.pread(fd, HEADER_SIZE, start)
            self.header = header = parse_header(head)
            self._data_start = start + header.data_start
            if header.bloom_size:  # the guard covers the filter too
                head += _pread(fd, header.bloom_size, start + HEADER_SIZE)
            self._check(fd, memoryview(head), start, size)
        except CorruptChunk as error:
            raise segment.damaged(i, error) from error
        segment.mark_verified(i)

    def _check(self, fd: int, head: memoryview, start: int, size: int) -> None:
        """The data CRC and the guard (of `head`, header and filter, and the trailer)."""
        header = self.header
        legacy = self._segment.version == LEGACY_VERSION
        if legacy and size != header.size:
            raise CorruptChunk(f"chunk {header.chunk_id}: {size} bytes, header says "
                               f"{header.size}")
        if not legacy:
            check_size(size, header)
        crc = 0
        for pos in range(0, header.data_length, CHECK_READ):
            crc = crc32(_pread(fd, min(CHECK_READ, header.data_length - pos),
                               self._data_start + pos), crc)
        if signed_crc(crc) != header.crc:
            raise CorruptChunk(f"chunk {header.chunk_id}: CRC mismatch")
        tail_start = self._data_start + header.data_length
        tail = memoryview(_pread(fd, start + size - tail_start, tail_start))
        if legacy:
            legacy_open_trailer(head[:HEADER_SIZE], tail)
        else:
            check_ends(head, tail, header)

    def records(self) -> Iterator[tuple[int, memoryview]]:
        """(offset, body) of every simple record and sub-batch, as `Chunk.records`. Ends
        early if retention deletes the segment meanwhile: those records are gone for every
        reader."""
        header = self.header
        end = header.data_length
        window, base = memoryview(b""), 0  # window holds the data from `base` on
        offset, pos = header.chunk_id, 0
        for _ in range(header.num_entries):
            if pos + SIMPLE_ENTRY.size > end:
                raise CorruptChunk(f"chunk {header.chunk_id}: data ends inside an entry")
            if pos + SUB_BATCH_ENTRY.size > base + len(window) and base + len(window) < end:
                window, base = self._read(pos, SUB_BATCH_ENTRY.size, end)
                if not window:
                    return
            at = pos - base
            (length,) = SIMPLE_ENTRY.unpack_from(window, at)
            if length & SUB_BATCH_BIT:
                _, records, _, length = SUB_BATCH_ENTRY.unpack_from(window, at)
                body = pos + SUB_BATCH_ENTRY.size
            else:
                records, body = 1, pos + SIMPLE_ENTRY.size
            if body + length > end:
                raise CorruptChunk(f"chunk {header.chunk_id}: entry runs past its data")
            if body + length > base + len(window):
                window, base = self._read(pos, body + length - pos, end)
                if not window:
                    return
            yield offset, window[body - base:body - base + length]
            pos = body + length
            offset += records
        if pos != end:
            raise CorruptChunk(f"chunk {header.chunk_id}: entries do not fill its data")

    def _read(self, pos: int, least: int, end: int) -> tuple[memoryview, int]:
        """The data from `pos` on: a window, or all of one entry larger than a window."""
        if self._segment.deleted:
            return memoryview(b""), pos
        size = min(max(least, WINDOW), end - pos)
        return memoryview(_pread(self._segment.fileno(), size, self._data_start + pos)), pos


ReadChunk = Chunk | StreamedChunk  # what readers of records get: `header` and `records()`


def _pread(fd: int, size: int, position: int) -> bytes:
    raw = os.pread(fd, size, position)
    if len(raw) != size:
        raise CorruptChunk(f"chunk at {position} is short")
    return raw


def read_records(segment: Segment, i: int) -> StreamedChunk | None:
    """Chunk i streamed, if its data is larger than a window (else None: read it whole)."""
    _, size = segment.chunk_span(i)
    return StreamedChunk(segment, i) if size > WINDOW else None


def check_chunk(segment: Segment, i: int) -> None:
    """Check all of chunk i's CRCs unless it is known sound (`Segment.verified`), a large
    one a window at a time; ChunkDamaged when it fails. For a sender about to send it raw."""
    if not segment.verified(i) and read_records(segment, i) is None:
        segment.check(i)
