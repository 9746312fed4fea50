"""A sealed segment copied to a tier, and checked there, before anything may rely on it.

The segment goes up as two objects, `{prefix}/{first chunk id:020}-{epoch}-{upload id}.segment`
(the file as it is, header included, so every position in the index holds in the tier too)
and `.index` (the index as memory holds it: the local file is only a cache). The epoch and
a random upload id make the key one no other upload produces (Kafka's KIP-405 gives each
remote segment a unique id for the same reason): a former leader uploading its own copy of
a segment, or a second broker on the same tier, can never overwrite an object another
upload made, and a put of a key that exists fails. Each is then
checked as the store holds it: its size (a HEAD) and a CRC-32 of all of it read back
against the local bytes'. Only a verified upload yields a `TieredRecord`, what the catalog
stores to find the segment again. Nothing here deletes anything, local or tiered.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from isal.isal_zlib import crc32

from mainstem.log.segment_file import INDEX_SUFFIX, SEGMENT_SUFFIX, Segment
from mainstem.log.tier import Tier, file_crc32


class UploadMismatch(Exception):
    """An uploaded object is not what was sent: it must never be used."""


@dataclass(frozen=True, slots=True)
class TieredRecord:
    """A verified tiered segment, as the catalog records it."""

    key: str  # the segment's object; its index is the same key with `.index`
    first_chunk_id: int
    next_offset: int
    first_byte: int  # the partition's byte position of its first payload byte
    next_byte: int
    first_timestamp: int
    last_timestamp: int
    segment_size: int
    segment_crc: int
    index_size: int
    index_crc: int
    version: int  # the segment file's layout
    # (first chunk id, epoch) where each leader epoch of its chunks begins, oldest first:
    # a replica compares epochs in the tier without reading it. Empty in older records.
    epochs: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:  # as read back from JSON: lists
        object.__setattr__(self, "epochs", tuple((int(c), int(e)) for c, e in self.epochs))

    @property
    def index_key(self) -> str:
        return index_key(self.key)

    def epoch_of(self, chunk_id: int) -> int | None:
        """The epoch of the chunk starting at `chunk_id` in this segment; None when the
        record predates epochs."""
        found = None
        for first, epoch in self.epochs:
            if first > chunk_id:
                break
            found = epoch
        return found


def segment_key(prefix: str, first_chunk_id: int, epoch: int) -> str:
    """A new, unique key for an upload of the segment starting at `first_chunk_id`, made
    in leader epoch `epoch`."""
    return f"{prefix}/{first_chunk_id:020d}-{epoch}-{uuid.uuid4().hex}{SEGMENT_SUFFIX}"


def index_key(key: str) -> str:
    return key.removesuffix(SEGMENT_SUFFIX) + INDEX_SUFFIX


def upload_objects(key: str) -> tuple[str, ...]:
    """The objects an upload to `key` makes: a segment's names its index too; any other
    upload (a table's data file) is the one object."""
    return (key, index_key(key)) if key.endswith(SEGMENT_SUFFIX) else (key,)


def segment_key_of(key: str) -> str:
    """The segment's key of `key`, a segment's or its index's."""
    return key.removesuffix(INDEX_SUFFIX) + SEGMENT_SUFFIX if key.endswith(INDEX_SUFFIX) else key


async def upload_segment(tier: Tier, segment: Segment, key: str) -> TieredRecord:
    """Upload a sealed, durable segment (never the active one: it still grows) and its
    index under `key` (from `segment_key`), verify both, and return their record."""
    if not segment.num_chunks:
        raise ValueError(f"{segment.path} holds no chunk: nothing to tier")
    index = segment.index
    content = index.encode()
    size = segment.size
    local_crc, epochs = await asyncio.to_thread(local_facts, segment, size)
    await tier.put(key, segment.path)
    await tier.put(index_key(key), content)
    await verify(tier, key, size, local_crc)
    index_crc = crc32(content)
    await verify(tier, index_key(key), len(content), index_crc)
    return TieredRecord(key, segment.first_chunk_id, segment.next_offset, segment.first_byte,
                        segment.next_byte, index.timestamps[0], index.timestamps[-1], size,
                        local_crc, len(content), index_crc, segment.version, epochs)


def local_facts(segment: Segment, size: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    """For a worker thread: the CRC-32 of the segment's first `size` bytes and where its
    epochs begin. Both read the whole file's worth (a header per chunk: thousands of reads
    for a segment of small chunks), which would hold the event loop."""
    return file_crc32(segment.path, size), epoch_starts(segment)


def epoch_starts(segment: Segment) -> tuple[tuple[int, int], ...]:
    """(first chunk id, epoch) where each epoch of the segment's chunks begins; safe from a
    worker thread (the descriptor is borrowed: the loop's cache may not close it)."""
    starts: list[tuple[int, int]] = []
    with segment.borrow() as fd:
        for i, chunk_id in enumerate(segment.index.chunk_ids):
            epoch = segment.read_header(i, fd).epoch
            if not starts or starts[-1][1] != epoch:
                starts.append((chunk_id, epoch))
    return tuple(starts)


async def verify(tier: Tier, key: str, size: int, crc: int) -> None:
    """Check that the object under `key` has `size` bytes with CRC-32 `crc`."""
    stored = await tier.size(key)
    if stored != size:
        raise UploadMismatch(f"tier {tier.name}: {key} holds {stored} bytes, not {size}")
    stored_crc = await tier.crc32(key)
    if stored_crc != crc:
        raise UploadMismatch(f"tier {tier.name}: {key} has CRC {stored_crc:#010x}, "
                             f"the local file {crc:#010x}")

