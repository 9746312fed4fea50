"""The Osiris chunk: a batch of records behind one 48-byte header.

The layout is the one the RabbitMQ Stream protocol's Deliver frame carries, so
a chunk can go from the segment file to a stream consumer's socket unchanged:

    magic/version u8 (0x50) | chunk type u8 | entries u16 | records u32 |
    timestamp i64 (ms) | epoch u64 | chunk id u64 (= first offset) |
    CRC-32 of the data i32 | data length u32 | trailer length u32 |
    bloom filter size u8 | 3 reserved bytes
    then: bloom filter, data entries, trailer entries.

Data entries are either simple (top bit 0, 31-bit length, body) or sub-batches
(top bit 1, 3-bit compression, 4 reserved bits, records u16, uncompressed
length u32, length u32, body) holding several records, stored opaquely.
The trailer carries tracking entries as Osiris writes them (type u8 0 | id size u8 | id |
sequence u64); mainstem keeps publisher sequences there so that deduplication state is
written atomically with the data it covers.
A chunk whose messages carry filter values (stream Publish v2) has a bloom filter
between header and data, as Osiris writes it: BLOOM_SIZE bytes, two bits per distinct
value, bit 0 set when the chunk also holds messages without a value; a chunk in which
no message has a value has none. Readers that filter skip chunks it rules out.
The header's CRC covers only the data; the log protects the rest on disk
(`log/guard.py`). A subscriber gets the header and data entries, the header declaring
the trailer Osiris would write; the trailer stays on disk. Segments of version 1 (older
mainstem) hold trailer entries of chunk id u64 + sequence u64 (`legacy` below).

The layout is shared by the log, the protocols and the clients, so it lives here.
"""

from __future__ import annotations

import enum
import struct
from builtins import memoryview  # compiled dataclasses look their field types up here
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from isal.isal_zlib import crc32

from mainstem.formats.osiris import (
    HEADER,
    HEADER_SIZE,
    MAGIC_VERSION,
    SIMPLE_ENTRY,
    SUB_BATCH_BIT,
    SUB_BATCH_ENTRY,
    SUB_BATCH_FLAG,
)

FIRST_EPOCH = 1  # a stream's first leader term, as Osiris numbers them
assert HEADER_SIZE == 48

TRACKING_ENTRY = struct.Struct(">BB")  # type, id size
TRACKING_SEQUENCE = 0
SEQUENCE_VALUE = struct.Struct(">Q")  # the writer's sequence
LEGACY_SEQUENCE_VALUE = struct.Struct(">QQ")  # version-1 segments: chunk id, sequence

BLOOM_SIZE = 16  # bytes: Osiris's default filter size (it reads any of 16..255)
BLOOM_SIZE_AT = 44  # the header byte holding the filter size
MAX_BLOOM_SIZE = 255
UNFILTERED = ""  # the filter value of a message published without one
_SECOND_HASH_SEED = 0x9E37_79B9


class ChunkType(enum.IntEnum):
    USER = 0
    TRACKING_DELTA = 1
    TRACKING_SNAPSHOT = 2


class CorruptChunk(Exception):
    """A chunk failed validation: bad magic, impossible sizes or a CRC mismatch."""


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    bloom_size: int

    @property
    def size(self) -> int:
        """Bytes the whole chunk occupies on disk."""
        return HEADER_SIZE + self.bloom_size + self.data_length + self.trailer_length

    @property
    def next_offset(self) -> int:
        return self.chunk_id + self.num_records

    @property
    def data_start(self) -> int:
        """Position of the data entries relative to the start of the chunk."""
        return HEADER_SIZE + self.bloom_size


def parse_header(buf: bytes | memoryview) -> ChunkHeader:
    """Decode and sanity-check a 48-byte header (the CRC is checked with the data)."""
    if len(buf) < HEADER_SIZE:
        raise CorruptChunk(f"short chunk header: {len(buf)} bytes")
    fields = HEADER.unpack_from(buf)
    if fields[0] != MAGIC_VERSION:
        raise CorruptChunk(f"bad chunk magic 0x{fields[0]:02x}")
    header = ChunkHeader(*fields[1:])
    if header.chunk_type not in ChunkType.__members__.values():
        raise CorruptChunk(f"unknown chunk type {header.chunk_type}")
    if header.num_records < header.num_entries:
        raise CorruptChunk("chunk has fewer records than entries")
    return header


# A chunk's data section: its bytes, or a list of parts that make them up when put end
# to end (written with one pwritev, never joined).
ChunkData = bytes | memoryview | list[bytes | memoryview]


def data_crc(data: ChunkData) -> int:
    """CRC-32 of the data section as the signed 32-bit integer the header stores."""
    if isinstance(data, list):
        crc = 0
        for part in data:
            crc = crc32(part, crc)
    else:
        crc = crc32(data)
    return signed_crc(crc)


def signed_crc(crc: int) -> int:
    """A CRC-32 as the signed 32-bit integer the header stores."""
    return crc - 0x1_0000_0000 if crc & 0x8000_0000 else crc


def data_length(data: ChunkData) -> int:
    return sum(map(len, data)) if isinstance(data, list) else len(data)


def check_data(header: ChunkHeader, data: bytes | memoryview) -> None:
    if len(data) != header.data_length:
        raise CorruptChunk(f"chunk {header.chunk_id}: data is {len(data)} bytes, "
                           f"header says {header.data_length}")
    if data_crc(data) != header.crc:
        raise CorruptChunk(f"chunk {header.chunk_id}: CRC mismatch")


def encode_simple_entries(records: Sequence[bytes | memoryview]) -> bytes:
    """Data section of simple entries, one per record."""
    pack = SIMPLE_ENTRY.pack
    parts: list[bytes | memoryview] = []
    append = parts.append
    for record in records:
        append(pack(len(record)))
        append(record)
    return b"".join(parts)


def encode_header(
    *,
    chunk_id: int,
    data: ChunkData,
    num_entries: int,
    num_records: int,
    timestamp: int,
    epoch: int = FIRST_EPOCH,
    chunk_type: int = ChunkType.USER,
    trailer_length: int = 0,
    bloom_size: int = 0,
) -> bytes:
    return HEADER.pack(
        MAGIC_VERSION, chunk_type, num_entries, num_records, timestamp, epoch, chunk_id,
        data_crc(data), data_length(data), trailer_length, bloom_size,
    )


def bloom_filter(values: Collection[str]) -> bytes:
    """The filter of a chunk holding messages with these filter values (UNFILTERED for
    those without one); b"" when no message has a value, as Osiris writes none then."""
    if not values or (len(values) == 1 and UNFILTERED in values):
        return b""
    bits = bytearray(BLOOM_SIZE)
    for value in values:
        for bit in _bloom_bits(value, BLOOM_SIZE * 8):
            bits[bit >> 3] |= 0x80 >> (bit & 7)
    return bytes(bits)


def _bloom_bits(value: str, bit_size: int) -> tuple[int, int]:
    """Two bits in 1..bit_size-1 for a value; bit 0 alone stands for UNFILTERED."""
    if value == UNFILTERED:
        return 0, 0
    raw = value.encode()
    return (crc32(raw) % (bit_size - 1) + 1,
            crc32(raw, _SECOND_HASH_SEED) % (bit_size - 1) + 1)


class BloomMatcher:
    """A filtered reader's test of a chunk's filter: may the chunk hold a message with
    one of `values` (or, with `match_unfiltered`, one without a value)? False positives
    are possible, so the reader still filters messages exactly; misses are not."""

    def __init__(self, values: Sequence[str], match_unfiltered: bool) -> None:
        self.values = [*values, UNFILTERED] if match_unfiltered else list(values)
        self.match_unfiltered = match_unfiltered
        self._bits: dict[int, list[tuple[int, int]]] = {}  # filter size -> bits per value

    def matches(self, bloom: bytes | memoryview) -> bool:
        if not bloom:
            return self.match_unfiltered  # only messages without a value in this chunk
        size = len(bloom) * 8
        pairs = self._bits.get(size)
        if pairs is None:
            pairs = self._bits[size] = [_bloom_bits(value, size) for value in self.values]
        return any(_bit_set(bloom, first) and _bit_set(bloom, second) for first, second in pairs)


def _bit_set(bloom: bytes | memoryview, bit: int) -> bool:
    return bool(bloom[bit >> 3] & (0x80 >> (bit & 7)))


@dataclass(frozen=True, slots=True)
class Entry:
    """One data entry: a record, or a sub-batch of `num_records` records."""

    body: memoryview
    num_records: int = 1
    compression: int = 0
    uncompressed_length: int = 0


def iter_entries(data: bytes | memoryview, num_entries: int) -> Iterator[Entry]:
    """Walk the data section; raise CorruptChunk if it does not hold `num_entries`."""
    view = memoryview(data)
    pos = 0
    end = len(view)
    for _ in range(num_entries):
        if pos + 4 > end:
            raise CorruptChunk("data section ends inside an entry header")
        first = view[pos]
        if first & SUB_BATCH_FLAG:
            if pos + SUB_BATCH_ENTRY.size > end:
                raise CorruptChunk("data section ends inside a sub-batch header")
            flags, records, uncompressed, length = SUB_BATCH_ENTRY.unpack_from(view, pos)
            pos += SUB_BATCH_ENTRY.size
            entry_body = view[pos:pos + length]
            pos += length
            entry = Entry(entry_body, records, (flags >> 4) & 0x7, uncompressed)
        else:
            (length,) = SIMPLE_ENTRY.unpack_from(view, pos)
            pos += 4
            entry = Entry(view[pos:pos + length])
            pos += length
        if pos > end:
            raise CorruptChunk("entry runs past the data section")
        yield entry
    if pos != end:
        raise CorruptChunk("data section has bytes after its last entry")


def payload_size(data: bytes | memoryview, num_entries: int) -> int:
    """Sum of entry body lengths: how far the chunk advances the partition's byte position."""
    if num_entries == 0:
        return 0
    # Fast path: all-simple data carries exactly one 4-byte header per entry.
    simple_total = len(data) - 4 * num_entries
    if not _has_sub_batch(data, num_entries):
        return simple_total
    return sum(len(entry.body) for entry in iter_entries(data, num_entries))


def _has_sub_batch(data: bytes | memoryview, num_entries: int) -> bool:
    view = memoryview(data)
    pos = 0
    for _ in range(num_entries):
        if view[pos] & SUB_BATCH_FLAG:
            return True
        pos += 4 + SIMPLE_ENTRY.unpack_from(view, pos)[0]
    return False


def encode_sequences(sequences: Mapping[str, int]) -> bytes:
    """Tracking entries holding publisher sequences (writer -> last publishing id), as
    Osiris's writer trailer holds them."""
    parts = []
    for writer, sequence in sequences.items():
        name = writer.encode()
        parts.append(TRACKING_ENTRY.pack(TRACKING_SEQUENCE, len(name)))
        parts.append(name)
        parts.append(SEQUENCE_VALUE.pack(sequence))
    return b"".join(parts)


def decode_sequences(tracking: bytes | memoryview, legacy: bool = False) -> dict[str, int]:
    """The sequences of a trailer's tracking entries (`legacy`: a version-1 segment's)."""
    value = LEGACY_SEQUENCE_VALUE if legacy else SEQUENCE_VALUE
    view = memoryview(tracking)
    sequences: dict[str, int] = {}
    pos = 0
    while pos < len(view):
        if pos + TRACKING_ENTRY.size > len(view):
            raise CorruptChunk("trailer ends inside a tracking entry")
        kind, id_size = TRACKING_ENTRY.unpack_from(view, pos)
        pos += TRACKING_ENTRY.size
        if kind != TRACKING_SEQUENCE or pos + id_size + value.size > len(view):
            raise CorruptChunk(f"bad tracking entry of type {kind}")
        writer = bytes(view[pos:pos + id_size]).decode()
        pos += id_size
        sequences[writer] = value.unpack_from(view, pos)[-1]
        pos += value.size
    return sequences


@dataclass(frozen=True, slots=True)
class Chunk:
    """A chunk read back from a segment, validated."""

    header: ChunkHeader
    data: memoryview
    tracking: memoryview  # the trailer's tracking entries, CRC-checked
    legacy: bool = False  # read from a version-1 segment: its tracking entries' layout

    @property
    def chunk_id(self) -> int:
        return self.header.chunk_id

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    def entries(self) -> Iterator[Entry]:
        return iter_entries(self.data, self.header.num_entries)

    def records(self) -> Iterator[tuple[int, memoryview]]:
        """(offset, body) of every simple record; a sub-batch yields its raw body
        at its first offset (its records are opaque to the log)."""
        view = self.data
        unpack = SIMPLE_ENTRY.unpack_from
        offset = self.header.chunk_id
        pos = 0
        for _ in range(self.header.num_entries):  # the hot loop of every non-stream reader
            (length,) = unpack(view, pos)
            if length & SUB_BATCH_BIT:
                _, records, _, length = SUB_BATCH_ENTRY.unpack_from(view, pos)
                pos += SUB_BATCH_ENTRY.size
            else:
                records = 1
                pos += 4
            yield offset, view[pos:pos + length]
            pos += length
            offset += records
        if pos != len(view):
            raise CorruptChunk(f"chunk {self.header.chunk_id}: entries do not fill its data")

    def sequences(self) -> dict[str, int]:
        return decode_sequences(self.tracking, self.legacy) if self.tracking else {}
