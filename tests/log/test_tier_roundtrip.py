"""Sealed segments of a real partition uploaded to a tier and read back through a small
cache: every chunk as the local segment holds it, bytes and records, whatever the block
size and the cache's bound, and the cache never over its bound on disk."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import ObjectExists
from mainstem.log.partition import Partition
from mainstem.log.segment_file import LEGACY_VERSION
from mainstem.log.tier import UPLOAD_PART, Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import TieredRecord
from mainstem.log.tiered_segment import NotFetched, fetching
from tests.support.s3_servers import S3Server

from .tiering import Tiered, disk_bytes, tier_all, written_partition

FS_BLOCK = 4096
# Record sizes, not contents, decide where chunks and blocks fall: sizes are drawn (binary
# strategies shrink towards tiny records), contents made from the seed.
sizes_strategy = st.lists(st.lists(st.integers(0, 900), min_size=1, max_size=6),
                          min_size=10, max_size=60)


def make_batches(sizes: list[list[int]], seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    return [[rng.randbytes(size) for size in batch] for batch in sizes]


def largest_chunk_blocks(tiered: list[Tiered], block: int) -> int:
    """The most cache blocks one chunk spans."""
    most = 1
    for t in tiered:
        for i in range(t.local.num_chunks):
            start, size = t.local.chunk_span(i)
            most = max(most, (start + size - 1) // block - start // block + 1)
    return most


async def round_trip(tier: Tier, root: Path, batches: list[list[bytes]], segment_bytes: int,
                     block: int, read_ahead: int, spare_blocks: int, seed: int,
                     readers: int = 1) -> list[TieredRecord]:
    """Upload every sealed segment, then `readers` concurrent readers share its chunks in
    a shuffled order, each comparing what it reads with the local segment."""
    partition = written_partition(root / "p", batches, segment_bytes)
    descriptors = DescriptorCache(16)
    # The bound is set once the chunk sizes are known: tier_all loads no data yet.
    cache = TierCache(root / "cache", 1 << 40, descriptors, block_size=block,
                      read_ahead=read_ahead)
    tiered = await tier_all(tier, partition, cache)
    # Room for what each reader ensures at once (those blocks are not evicted under it).
    cache.max_bytes = (largest_chunk_blocks(tiered, block) * readers + spare_blocks) * block
    chunks = [(t, i) for t in tiered for i in range(t.local.num_chunks)]
    random.Random(seed).shuffle(chunks)  # any order: eviction then hits every pattern

    async def read(share: list[tuple[Tiered, int]]) -> None:
        for t, i in share:
            await t.segment.ensure(i)
            local, remote = t.local.read_chunk(i), t.segment.read_chunk(i)
            assert bytes(remote.data) == bytes(local.data)
            assert [(o, bytes(body)) for o, body in remote.records()] == [
                (o, bytes(body)) for o, body in local.records()]
            start, size = t.segment.chunk_span(i)  # what sendfile sends, from the descriptor
            assert (os.pread(t.segment.fileno(), size, start)
                    == os.pread(t.local.fileno(), size, start))
            assert cache.used <= cache.max_bytes
            assert disk_bytes(root / "cache") <= cache.max_bytes

    await asyncio.gather(*(read(chunks[k::readers]) for k in range(readers)))
    for t in tiered:
        t.segment.close()
    await partition.aclose()
    return [t.record for t in tiered]


async def lists_and_deletes(tier: Tier, records: list[TieredRecord]) -> None:
    """The prefix lists the segments' objects and no more; deleted, they are gone."""
    keys = sorted(key for r in records for key in (r.key, r.index_key))
    assert keys and sorted(await tier.list("stream/0")) == keys
    assert await tier.list("stream") == await tier.list("stream/0")
    for key in keys:
        await tier.delete(key)
    assert await tier.list("stream/0") == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_strategy, segment_bytes=st.integers(1_500, 9_000),
       block=st.sampled_from([FS_BLOCK, 2 * FS_BLOCK, 4 * FS_BLOCK]),
       read_ahead=st.integers(0, 3), spare_blocks=st.integers(0, 4),
       seed=st.integers(0, 1 << 16), readers=st.integers(1, 3))
def test_every_chunk_reads_as_the_local_one(sizes: list[list[int]], segment_bytes: int,
                                            block: int, read_ahead: int, spare_blocks: int,
                                            seed: int, readers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(round_trip(Tier.directory(root / "tier"), root, make_batches(sizes, seed),
                               segment_bytes, block, read_ahead, spare_blocks, seed,
                               readers))


async def test_the_same_round_trip_through_s3(tmp_path: Path, s3: S3Server) -> None:
    """Against each S3 server on loopback, blocks fetched by range GETs."""
    rng = random.Random(7)
    sizes = [[rng.randrange(900) for _ in range(rng.randrange(1, 7))] for _ in range(60)]
    tier = s3.tier()
    records = await round_trip(tier, tmp_path, make_batches(sizes, 7), 8_000, FS_BLOCK, 1,
                               1, 3, readers=3)
    await lists_and_deletes(tier, records)


async def test_a_directory_tier_lists_and_deletes_what_was_uploaded(tmp_path: Path) -> None:
    tier = Tier.directory(tmp_path / "tier")
    records = await round_trip(tier, tmp_path, [[os.urandom(800)] for _ in range(20)], 4_000,
                               FS_BLOCK, 0, 2, 1)
    # a put cut short leaves a hidden temporary file: never listed, never read
    (tmp_path / "tier" / "stream" / "0" / "00000000000000000999.segment#0").touch()
    await lists_and_deletes(tier, records)


async def test_a_pinned_segment_keeps_its_blocks_and_unread_chunks_are_refused(
        tmp_path: Path) -> None:
    batches = [[os.urandom(900)] for _ in range(30)]
    partition = written_partition(tmp_path / "p", batches, 6_000)
    cache = TierCache(tmp_path / "cache", 1 << 40, DescriptorCache(16), block_size=FS_BLOCK)
    first, *others = await tier_all(Tier.directory(tmp_path / "tier"), partition, cache)
    for read in (first.segment.read_chunk, first.segment.read_header,
                 first.segment.read_sequences, first.segment.current_layout):
        with pytest.raises(NotFetched):  # a hole reads as zeros: refused, not decoded
            read(0)
    await first.segment.ensure(0)
    assert first.segment.read_header(0) == first.local.read_header(0)
    assert first.segment.read_sequences(0) == first.local.read_sequences(0)
    cache.max_bytes = cache.used + 2 * FS_BLOCK  # room for the next chunk, no more
    fd = first.segment.pin()  # as a Transfer waiting for its socket holds it
    held = cache.used
    for t in others:
        for i in range(t.local.num_chunks):
            await t.segment.ensure(i)
            assert t.segment.read_chunk(i).data == t.local.read_chunk(i).data
    start, size = first.local.chunk_span(0)
    assert os.pread(fd, size, start) == os.pread(first.local.fileno(), size, start)
    assert first.segment.read_chunk(0).data == first.local.read_chunk(0).data
    assert cache.used <= cache.max_bytes and held <= cache.used
    first.segment.unpin()
    await others[0].segment.ensure(0)  # unpinned, the first one's blocks may go now
    with pytest.raises(NotFetched):
        first.segment.read_chunk(0)
    for t in (first, *others):
        t.segment.close()
    await partition.aclose()


async def test_a_segment_larger_than_a_part_goes_up_to_s3_in_parts(tmp_path: Path,
                                                                   s3: S3Server) -> None:
    """Over UPLOAD_PART, obstore uploads in parts (S3's multipart upload), whole or not
    at all; the object is verified and read back as any other."""
    partition = written_partition(tmp_path / "p", [[os.urandom(1 << 20)] for _ in range(11)],
                                  UPLOAD_PART + (2 << 20))
    cache = TierCache(tmp_path / "cache", 4 << 20, DescriptorCache(16), block_size=1 << 20)
    [t] = await tier_all(s3.tier(), partition, cache)
    assert t.record.segment_size > UPLOAD_PART
    last = t.segment.num_chunks - 1
    await t.segment.ensure(last)
    assert t.segment.read_chunk(last).data == t.local.read_chunk(last).data
    t.segment.close()
    await partition.aclose()


async def test_an_object_once_put_is_never_replaced(s3: S3Server) -> None:
    """A small put is S3's conditional PUT (If-None-Match): a second put of the key, or
    any but one of puts racing for it (as two nodes claiming a tier's owner mark), is
    refused as ObjectExists and the object keeps the first content."""
    tier = s3.tier()
    await tier.put("owner", b"first\n")
    with pytest.raises(ObjectExists):
        await tier.put("owner", b"second\n")
    assert await tier.get("owner") == b"first\n"
    claims = [f"node{i}\n".encode() for i in range(8)]
    outcomes = await asyncio.gather(*(tier.put("raced", claim) for claim in claims),
                                    return_exceptions=True)
    won = [claim for claim, outcome in zip(claims, outcomes, strict=True) if outcome is None]
    assert len(won) == 1, outcomes
    assert all(isinstance(outcome, ObjectExists) for outcome in outcomes if outcome is not None)
    assert await tier.get("raced") == won[0]


async def test_segments_of_the_older_layout_tier_and_read_back(tmp_path: Path) -> None:
    """Version-1 segments (no guards, their own trailers) keep their layout in the tier."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "partition-v1", tmp_path / "p")
    partition = Partition.open(tmp_path / "p", descriptors=DescriptorCache(16))
    cache = TierCache(tmp_path / "cache", 1 << 20, DescriptorCache(16), block_size=FS_BLOCK)
    tiered = await tier_all(Tier.directory(tmp_path / "tier"), partition, cache)
    assert tiered and all(t.record.version == LEGACY_VERSION for t in tiered)
    for t in tiered:
        for i in range(t.local.num_chunks):
            await t.segment.ensure(i)
            assert ([bytes(b) for _, b in t.segment.read_chunk(i).records()]
                    == [bytes(b) for _, b in t.local.read_chunk(i).records()])
            assert t.segment.read_sequences(i) == t.local.read_sequences(i)
            assert t.segment.current_layout(i) == t.local.current_layout(i)
        t.segment.close()
    await partition.aclose()


async def test_a_replica_cut_back_into_a_tiered_segment_opens_and_reads_it_locally(
        tmp_path: Path) -> None:
    """A replica whose tail was cut back (`truncate_from`) into a segment its leader had
    sealed and tiered starts with that segment active: its record is not attached (the
    start failed before with "tiered segments overlap the local ones"), the older records
    are, and every chunk still reads, from the tier or the local file."""
    batches = [[os.urandom(900)] for _ in range(30)]
    partition = written_partition(tmp_path / "p", batches, 6_000)
    cache = TierCache(tmp_path / "cache", 1 << 40, DescriptorCache(16), block_size=FS_BLOCK)
    tier = Tier.directory(tmp_path / "tier")
    uploaded = await tier_all(tier, partition, cache)
    last = uploaded[-1].record
    partition.truncate_from(last.first_chunk_id + 1)  # cut inside the last tiered segment
    partition.close()
    reopened = written_partition(tmp_path / "p", [], 6_000)
    members = [t.segment for t in uploaded]
    left = reopened.attach_tiered(members)
    assert [m.first_chunk_id for m in left] == [last.first_chunk_id]
    assert reopened.next_offset == last.first_chunk_id + 1
    bodies, offset = [], 0
    while offset < reopened.next_offset:
        chunk = await fetching(partial(reopened.read_written, offset))
        bodies += [bytes(body) for _, body in chunk.records()]
        offset = chunk.next_offset
    assert bodies == [batch[0] for batch in batches[:last.first_chunk_id + 1]]
