"""What the tier holds is checked: an upload that is cut short or altered is refused, and
a chunk fetched damaged fails its read as a damaged local chunk does, leaving nothing
of it in the cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mainstem.formats.chunk import CorruptChunk
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import UploadMismatch, segment_key, upload_segment, verify

from .tiering import disk_bytes, tier_all, written_partition

BLOCK = 4096


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def data_position(segment: Segment, i: int) -> int:
    """A byte inside chunk i's data entries."""
    start, _ = segment.chunk_span(i)
    return start + segment.read_header(i).data_start + 10


async def test_verification_refuses_a_truncated_or_altered_object(tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", [[os.urandom(700)] for _ in range(12)], 4_000)
    tier = Tier.directory(tmp_path / "tier")
    local = partition.find_committed(0)
    assert local is not None
    record = await upload_segment(tier, local[0], segment_key("s/0", local[0].first_chunk_id, 1))
    stored = tmp_path / "tier" / record.key
    pristine = stored.read_bytes()
    assert pristine == local[0].path.read_bytes()
    await verify(tier, record.key, record.segment_size, record.segment_crc)

    stored.write_bytes(pristine[:-1])  # cut short
    with pytest.raises(UploadMismatch, match="bytes"):
        await verify(tier, record.key, record.segment_size, record.segment_crc)
    stored.write_bytes(pristine)
    flip(stored, len(pristine) // 2)  # same size, one byte changed
    with pytest.raises(UploadMismatch, match="CRC"):
        await verify(tier, record.key, record.segment_size, record.segment_crc)
    await partition.aclose()


async def test_a_corrupt_fetched_range_fails_like_local_corruption_and_is_not_kept(
        tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", [[os.urandom(900)] for _ in range(16)], 6_000)
    tier = Tier.directory(tmp_path / "tier")
    cache = TierCache(tmp_path / "cache", 1 << 20, DescriptorCache(16), block_size=BLOCK,
                      read_ahead=0)
    first = (await tier_all(tier, partition, cache))[0]
    stored = tmp_path / "tier" / first.record.key
    flip(stored, data_position(first.local, 2))

    with pytest.raises(CorruptChunk) as tiered_error:
        await first.segment.ensure(2)
    assert cache.used == 0 and disk_bytes(tmp_path / "cache") == 0

    # The same damage to a local segment after it was opened (recovered): the same error.
    copy = tmp_path / "copy" / first.local.path.name
    copy.parent.mkdir()
    shutil.copy(first.local.path, copy)
    local_copy = Segment.open(copy, DescriptorCache(4))
    flip(copy, data_position(local_copy, 2))
    with pytest.raises(CorruptChunk) as local_error:
        local_copy.read_chunk(2)
    assert type(tiered_error.value) is type(local_error.value)
    local_copy.close()

    flip(stored, data_position(first.local, 2))  # repaired in the tier: read again
    await first.segment.ensure(2)
    assert first.segment.read_chunk(2).data == first.local.read_chunk(2).data
    assert cache.used > 0
    first.segment.close()
    await partition.aclose()


async def test_an_object_cut_short_in_the_tier_fails_its_last_chunk(tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", [[os.urandom(900)] for _ in range(16)], 6_000)
    cache = TierCache(tmp_path / "cache", 1 << 20, DescriptorCache(16), block_size=BLOCK,
                      read_ahead=0)
    first = (await tier_all(Tier.directory(tmp_path / "tier"), partition, cache))[0]
    stored = tmp_path / "tier" / first.record.key
    stored.write_bytes(stored.read_bytes()[:-100])
    last = first.segment.num_chunks - 1
    with pytest.raises(CorruptChunk):
        await first.segment.ensure(last)
    assert cache.used == 0 and disk_bytes(tmp_path / "cache") == 0
    first.segment.close()
    await partition.aclose()
