"""What protects a chunk on disk beyond its data CRC, which covers only the data.

Version-2 segments follow every chunk with a guard: a CRC-32 of its header, bloom filter
and trailer, so a damaged timestamp or record count is caught too. Version-1 segments
(older mainstem) end the trailer itself with a CRC-32 of the header and tracking entries.
Neither is sent to clients: they see the chunk as Osiris writes it (`formats/chunk.py`).
"""

from __future__ import annotations

import struct

from isal.isal_zlib import crc32

from mainstem.formats.chunk import ChunkHeader, CorruptChunk
from mainstem.formats.osiris import HEADER_SIZE

GUARD = struct.Struct(">I")
LEGACY_TRAILER_CRC = struct.Struct(">I")


def guard(head: bytes | memoryview, trailer: bytes | memoryview) -> bytes:
    """What follows a chunk on disk: a CRC-32 of its header and filter (`head`) and its
    trailer, the bytes the data CRC leaves out."""
    return GUARD.pack(crc32(trailer, crc32(head)))


def check_guard(raw: memoryview, header: ChunkHeader) -> memoryview:
    """Check a chunk followed by its guard; return its trailer."""
    check_size(len(raw), header)
    return check_ends(raw[:header.data_start], raw[header.size - header.trailer_length:],
                      header)


def check_size(size: int, header: ChunkHeader) -> None:
    """Check that a chunk with its guard takes `size` bytes, as its header says."""
    if size != header.size + GUARD.size:
        raise CorruptChunk(f"chunk {header.chunk_id}: {size} bytes with its guard, "
                           f"header says {header.size + GUARD.size}")


def check_ends(head: memoryview, tail: memoryview, header: ChunkHeader) -> memoryview:
    """Check a chunk's guard from its two ends, read apart from its data: `head` (header
    and filter) and `tail` (trailer and guard). Return its trailer."""
    trailer = tail[:-GUARD.size]
    if guard(head, trailer) != tail[-GUARD.size:]:
        raise CorruptChunk(f"chunk {header.chunk_id}: header, filter or trailer CRC mismatch")
    return trailer


def legacy_open_trailer(header: bytes | memoryview, trailer: bytes | memoryview) -> memoryview:
    """Check a version-1 trailer against its chunk's header; return its tracking entries."""
    whole = memoryview(trailer)
    if len(whole) < LEGACY_TRAILER_CRC.size:
        raise CorruptChunk("trailer too short for its CRC")
    tracking = whole[:-LEGACY_TRAILER_CRC.size]
    (expected,) = LEGACY_TRAILER_CRC.unpack_from(whole, len(tracking))
    if crc32(tracking, crc32(header[:HEADER_SIZE])) != expected:
        raise CorruptChunk("header or trailer CRC mismatch")
    return tracking
