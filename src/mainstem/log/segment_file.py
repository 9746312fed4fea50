"""A segment file: a header, then chunks back to back, plus its index.

    header: b"MSSG" | version u32 | partition byte position of the first payload byte u64

Version 2 follows each chunk with its guard (see `guard.py`) and writes trailers as
Osiris does; version 1, written by older mainstem, has its own trailer layout and no
guard. Both are read; new chunks go to version-2 segments only, so a data directory of
an older version opens and continues in a new segment.

Files are named by the first chunk id they hold, zero-padded to 20 digits as
Osiris does, so a directory listing sorts in offset order.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from mainstem.formats.chunk import (
    BLOOM_SIZE_AT,
    MAX_BLOOM_SIZE,
    Chunk,
    ChunkHeader,
    CorruptChunk,
    check_data,
    decode_sequences,
    encode_header,
    encode_sequences,
    parse_header,
    payload_size,
)
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.descriptors import DescriptorCache, LazyFile
from mainstem.log.errors import ChunkDamaged
from mainstem.log.guard import GUARD, LEGACY_TRAILER_CRC, check_guard, guard, legacy_open_trailer
from mainstem.log.index import IndexEntry, SegmentIndex

FILE_HEADER = struct.Struct(">4sIQ")
FILE_MAGIC = b"MSSG"
FILE_HEADER_SIZE = FILE_HEADER.size  # 16
SEGMENT_SUFFIX = ".segment"
INDEX_SUFFIX = ".index"
SEGMENT_VERSION = 2
LEGACY_VERSION = 1  # no guards, mainstem's own trailer layout

log = logging.getLogger("mainstem.log")


class CorruptSegment(Exception):
    """A segment's file header is unreadable: nothing in it can be trusted."""


def segment_name(chunk_id: int) -> str:
    return f"{chunk_id:020d}{SEGMENT_SUFFIX}"


def first_chunk_id_of(name: str) -> int:
    """The first chunk id a segment's file name (or a tiered object's: the id, then `-`
    and what makes the key unique) starts with."""
    return int(name.removesuffix(SEGMENT_SUFFIX).split("-", 1)[0])


class Segment:
    """One segment file. Appends go to its end; reads use pread at indexed positions.
    Its descriptor comes from a DescriptorCache: open only while recently used."""

    tiered = False  # a TieredSegment's chunks must be made local (`ensure`) before reads

    def __init__(self, path: Path, file: LazyFile, first_byte: int, size: int,
                 index: SegmentIndex, version: int = SEGMENT_VERSION) -> None:
        self.path = path
        self.version = version
        self.guard_size = 0 if version == LEGACY_VERSION else GUARD.size
        self.first_chunk_id = first_chunk_id_of(path.name)
        self.first_byte = first_byte
        self.size = size
        self.index = index
        self.next_byte = first_byte  # partition byte position after the last chunk
        self._file = file
        self.deleted = False
        # One bit per chunk known sound since open (written here, or checked whole): a
        # sender need not check it again before it goes out raw.
        self._verified = bytearray()

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, chunk_id: int, byte_pos: int,
               descriptors: DescriptorCache) -> Segment:
        path = directory / segment_name(chunk_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, FILE_HEADER.pack(FILE_MAGIC, SEGMENT_VERSION, byte_pos))
        except BaseException:
            os.close(fd)
            raise
        index = SegmentIndex(path.with_suffix(INDEX_SUFFIX))
        index.open_for_append(descriptors)
        return cls(path, descriptors.file(path, os.O_RDWR, fd), byte_pos, FILE_HEADER_SIZE,
                   index)

    @classmethod
    def open(cls, path: Path, descriptors: DescriptorCache) -> Segment:
        """Open and recover: rebuild the index where it is missing or stale, and
        truncate the file at the first chunk that is torn or fails its CRC."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, FILE_HEADER_SIZE, 0)
            if len(raw) < FILE_HEADER_SIZE:
                raise CorruptSegment(f"{path}: torn segment header")
            magic, version, first_byte = FILE_HEADER.unpack(raw)
            if magic != FILE_MAGIC:
                raise CorruptSegment(f"{path}: not a mainstem segment")
            if version not in (LEGACY_VERSION, SEGMENT_VERSION):
                raise CorruptSegment(f"{path}: segment version {version} is unknown")
            size = os.fstat(fd).st_size
            index = SegmentIndex.load(path.with_suffix(INDEX_SUFFIX))
        except BaseException:
            os.close(fd)
            raise
        segment = cls(path, descriptors.file(path, os.O_RDWR, fd), first_byte, size, index,
                      version)
        try:
            segment._recover()
            segment.index.open_for_append(descriptors)
        except BaseException:
            segment.close()
            raise
        return segment

    def make_current(self) -> None:
        """Make an empty segment of an older version a current one (appends go to current
        segments only), rewriting its header in place: 16 bytes within one sector, so after
        a crash the file holds one header or the other."""
        if self.version == SEGMENT_VERSION or self.num_chunks:
            return
        fd = self._file.fileno()
        os.pwrite(fd, FILE_HEADER.pack(FILE_MAGIC, SEGMENT_VERSION, self.first_byte), 0)
        os.fsync(fd)
        self.version, self.guard_size = SEGMENT_VERSION, GUARD.size

    def close(self) -> None:
        self.index.close()
        self._file.close()

    def delete(self) -> None:
        """Close and unlink both files now. Readers use a descriptor only within one
        synchronous step (a sendfile included) and look a deleted segment up again."""
        self.deleted = True
        self.close()
        self.path.unlink(missing_ok=True)
        self.index.path.unlink(missing_ok=True)

    def ready(self, i: int) -> bool:
        """Whether chunk i can be read now: a tiered segment's must be fetched first."""
        return True

    async def ensure(self, i: int) -> None:
        """Make chunk i readable now (see `ready`): a local one is."""

    def fileno(self) -> int:
        """A descriptor to use at once: valid until this thread opens another log file."""
        return self._file.fileno()

    def pin(self) -> int:
        """A descriptor valid across steps until `unpin`, even once the segment is deleted
        (its blocks stay allocated until then)."""
        return self._file.pin()

    def unpin(self) -> None:
        self._file.unpin()

    def borrow(self) -> AbstractContextManager[int]:
        """A descriptor for another thread (a scrub's read), valid for the `with` block."""
        return self._file.borrow()

    def sync(self) -> None:
        """fsync; safe from a worker thread."""
        with self._file.borrow() as fd:
            os.fsync(fd)

    # -- state -------------------------------------------------------------

    @property
    def num_chunks(self) -> int:
        return len(self.index)

    @property
    def next_offset(self) -> int:
        last = self.index.last()
        return last.next_offset if last else self.first_chunk_id

    @property
    def last_timestamp(self) -> int | None:
        return self.index.timestamps[-1] if self.index else None

    # -- appending ---------------------------------------------------------

    def append(self, parts: Sequence[bytes | memoryview], entry: IndexEntry, payload: int) -> None:
        """Write one encoded chunk at the end of the file and index it. On failure
        the file is cut back so no partial chunk is left behind."""
        total = sum(len(part) for part in parts)
        fd = self._file.fileno()
        try:
            written = os.pwritev(fd, parts, self.size)
            if written != total:  # regular files only write short on ENOSPC-like trouble
                raise OSError(f"short write to {self.path}: {written} of {total} bytes")
        except BaseException:
            os.ftruncate(fd, self.size)
            raise
        self.size += total
        self.next_byte += payload
        self.index.append(entry)
        self.mark_verified(self.num_chunks - 1)  # its bytes are the ones just written

    def overwrite(self, position: int, raw: bytes) -> None:
        """Write `raw` over bytes already in the file, durably: a damaged chunk's intact
        copy (see `verify.replace_chunk`, which checks it first)."""
        if position < FILE_HEADER_SIZE or position + len(raw) > self.size:
            raise ValueError(f"{self.path}: {len(raw)} bytes at {position} are not inside it")
        fd = self._file.fileno()
        if os.pwrite(fd, raw, position) != len(raw):
            raise OSError(f"short write to {self.path} at {position}")
        os.fsync(fd)

    def truncate_chunks(self, count: int, descriptors: DescriptorCache) -> None:
        """Keep only the first `count` chunks: a follower cutting a divergent tail."""
        if count >= self.num_chunks:
            return
        entry = self.index.entry(count)
        os.ftruncate(self._file.fileno(), entry.file_pos)
        self.size, self.next_byte = entry.file_pos, entry.byte_pos
        self._forget_verified(count)
        self.index.close()
        self.index.truncate(count)
        self.index.open_for_append(descriptors)  # rewrites the file from memory

    # -- reading -----------------------------------------------------------

    def chunk_span(self, i: int) -> tuple[int, int]:
        """(file position, size) of chunk i."""
        return self.index.span(i, self.size)

    def read_chunk(self, i: int) -> Chunk:
        """Chunk i, CRC-checked: a chunk damaged after recovery is never served
        (ChunkDamaged)."""
        start, size = self.chunk_span(i)
        try:
            raw = memoryview(os.pread(self._file.fileno(), size, start))
            if len(raw) != size:
                raise CorruptChunk(f"{self.path}: chunk at {start} is short")
            chunk = chunk_from(raw, self.version)
        except CorruptChunk as error:
            raise self.damaged(i, error) from error
        self.mark_verified(i)
        return chunk

    def check(self, i: int, raw: bytes | memoryview | None = None) -> None:
        """Check chunk i against all of its CRCs without decoding its entries (`raw`: its
        bytes as stored, header to guard, when read already); ChunkDamaged when they fail.
        It is known sound after."""
        start, size = self.chunk_span(i)
        try:
            stored = memoryview(os.pread(self._file.fileno(), size, start) if raw is None
                                else raw)
            if len(stored) != size:
                raise CorruptChunk(f"{self.path}: chunk at {start} is short")
            header = parse_header(stored)
            data_end = header.data_start + header.data_length
            check_data(header, stored[header.data_start:data_end])
            if self.version == LEGACY_VERSION:
                legacy_open_trailer(stored, stored[data_end:data_end + header.trailer_length])
            else:
                check_guard(stored, header)
        except CorruptChunk as error:
            raise self.damaged(i, error) from error
        self.mark_verified(i)

    def damaged(self, i: int, error: CorruptChunk) -> ChunkDamaged:
        """`error`, found reading chunk i, as the ChunkDamaged its readers are told of."""
        if isinstance(error, ChunkDamaged):
            return error
        return ChunkDamaged(self.index.chunk_ids[i], self.tiered, f"{self.path}: {error}")

    # -- chunks known sound --------------------------------------------------

    def verified(self, i: int) -> bool:
        """Whether chunk i is known sound since open: written by this process, or checked
        whole since (a read, a check before sending, a scrub)."""
        byte = i >> 3
        return byte < len(self._verified) and bool(self._verified[byte] >> (i & 7) & 1)

    def mark_verified(self, i: int) -> None:
        """Chunk i was found sound (all of its CRCs checked)."""
        byte = i >> 3
        if byte >= len(self._verified):
            self._verified.extend(bytes(byte + 1 - len(self._verified)))
        self._verified[byte] |= 1 << (i & 7)

    def _forget_verified(self, count: int) -> None:
        """Chunks from `count` on are cut: their marks go (new ones may take their place)."""
        del self._verified[(count + 7) >> 3:]
        if count & 7 and self._verified:
            self._verified[-1] &= (1 << (count & 7)) - 1

    def current_layout(self, i: int) -> bytes:
        """Chunk i as a version-2 segment holds it, its guard included: a version-1 chunk
        with its trailer rewritten (for a follower, which stores only that layout)."""
        start, size = self.chunk_span(i)
        raw = memoryview(os.pread(self._file.fileno(), size, start))
        chunk = chunk_from(raw, self.version)
        if not chunk.legacy:
            return bytes(raw)
        h = chunk.header
        tracking = encode_sequences(chunk.sequences())
        header = encode_header(chunk_id=h.chunk_id, data=chunk.data, num_entries=h.num_entries,
                               num_records=h.num_records, timestamp=h.timestamp,
                               epoch=h.epoch, chunk_type=h.chunk_type,
                               trailer_length=len(tracking), bloom_size=h.bloom_size)
        head = header + bytes(raw[HEADER_SIZE:h.data_start])
        return b"".join((head, chunk.data, tracking, guard(head, tracking)))

    def read_header(self, i: int, fd: int | None = None) -> ChunkHeader:
        """Chunk i's header (unchecked beyond its magic: recovery checked the chunk); `fd`:
        a descriptor `borrow`ed, for a worker thread."""
        position = self.index.file_positions[i]
        return parse_header(os.pread(self._file.fileno() if fd is None else fd, HEADER_SIZE,
                                     position))

    def read_sequences(self, i: int) -> dict[str, int]:
        """Publisher sequences stored in chunk i's trailer, CRC-checked."""
        tail = self.index.tail_lengths[i]
        legacy = self.version == LEGACY_VERSION
        if tail <= (LEGACY_TRAILER_CRC.size if legacy else GUARD.size):  # no tracking entries
            return {}
        start, size = self.chunk_span(i)
        fd = self._file.fileno()
        head = os.pread(fd, HEADER_SIZE + MAX_BLOOM_SIZE, start)  # header and filter, or more
        trailer = os.pread(fd, tail, start + size - tail)
        if legacy:
            return decode_sequences(legacy_open_trailer(head, trailer), legacy=True)
        tracking = trailer[:-GUARD.size]
        if guard(head[:HEADER_SIZE + head[BLOOM_SIZE_AT]], tracking) != trailer[-GUARD.size:]:
            raise CorruptChunk(f"{self.path}: chunk at {start}: header or trailer CRC mismatch")
        return decode_sequences(tracking)

    # -- recovery ----------------------------------------------------------

    def _recover(self) -> None:
        index = self.index
        kept = self._consistent_prefix()
        # Re-validate from the last kept chunk on: the index may have got ahead
        # of the data, or the chunk it points at may be torn.
        if kept:
            restart = index.entry(kept - 1)
            pos, expected_offset, byte_pos = restart.file_pos, restart.chunk_id, restart.byte_pos
            index.truncate(kept - 1)
        else:
            pos, expected_offset, byte_pos = FILE_HEADER_SIZE, self.first_chunk_id, self.first_byte
            index.truncate(0)
        while pos < self.size:
            scanned = self._scan_chunk(pos, expected_offset, byte_pos)
            if scanned is None:
                os.ftruncate(self._file.fileno(), pos)
                self.size = pos
                break
            entry, chunk_size, payload = scanned
            index.append(entry)
            pos += chunk_size
            expected_offset = entry.next_offset
            byte_pos += payload
        self.next_byte = byte_pos

    def _consistent_prefix(self) -> int:
        """How many leading index entries hold together and fit the file (see
        `SegmentIndex.consistent_prefix`); a damaged one is logged."""
        index = self.index
        first = IndexEntry(self.first_chunk_id, 0, FILE_HEADER_SIZE, self.first_byte, 0, 0)
        kept = index.consistent_prefix(first, HEADER_SIZE, self.size)
        if kept < len(index) - 1:  # beyond a last record cut short by a crash
            log.warning("index.rebuilt", extra={"segment": str(self.path), "kept": kept,
                                                "entries": len(index)})
        return kept

    def _scan_chunk(
        self, pos: int, expected_offset: int, byte_pos: int
    ) -> tuple[IndexEntry, int, int] | None:
        """Validate the chunk at `pos` and return its index entry, size and payload
        bytes; None when it is torn, corrupt or out of sequence."""
        fd = self._file.fileno()
        head = os.pread(fd, HEADER_SIZE, pos)
        try:
            header = parse_header(head)
            size = header.size + self.guard_size
            if header.chunk_id != expected_offset or pos + size > self.size:
                return None
            raw = memoryview(os.pread(fd, size, pos))
            chunk = chunk_from(raw, self.version)
            payload = payload_size(chunk.data, header.num_entries)
            chunk.sequences()  # the tracking entries must parse, not only match their CRC
        except CorruptChunk:
            return None
        entry = IndexEntry(header.chunk_id, header.timestamp, pos, byte_pos,
                           header.num_records, header.trailer_length + self.guard_size)
        return entry, size, payload


def chunk_from(raw: memoryview, version: int = SEGMENT_VERSION) -> Chunk:
    """Decode a whole chunk as a segment of `version` holds it (header, bloom filter,
    data, trailer, and the guard from version 2), checking all of its CRCs."""
    header = parse_header(raw)
    data_end = header.data_start + header.data_length
    data = raw[header.data_start:data_end]
    check_data(header, data)
    if version == LEGACY_VERSION:
        trailer = raw[data_end:data_end + header.trailer_length]
        return Chunk(header, data, legacy_open_trailer(raw, trailer), legacy=True)
    return Chunk(header, data, check_guard(raw, header))
