"""The cache's promise to concurrent readers: the blocks a reader is ensuring are not
evicted under it by another reader; the other is refused (`CacheTooSmall`) instead."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import CacheTooSmall, TierCache

BLOCK = 4096


async def test_blocks_being_ensured_are_not_evicted_by_another_reader(tmp_path: Path) -> None:
    tier = Tier.directory(tmp_path / "tier")
    contents = {name: os.urandom(3 * BLOCK) for name in ("x", "y")}
    for name, content in contents.items():
        await tier.put(name, content)
    cache = TierCache(tmp_path / "cache", 3 * BLOCK, DescriptorCache(8), block_size=BLOCK,
                      read_ahead=0)
    x, y = cache.file("x.segment", 3 * BLOCK), cache.file("y.segment", 3 * BLOCK)
    with pytest.raises(ValueError, match="open already"):  # it would truncate x's
        cache.file("x.segment", 3 * BLOCK)
    released = asyncio.Event()

    async def fetch_x(starts: Sequence[int], ends: Sequence[int]) -> Sequence[memoryview]:
        await released.wait()  # the store is slow: another reader runs meanwhile
        return await tier.get_ranges("x", starts, ends)

    async def fetch_y(starts: Sequence[int], ends: Sequence[int]) -> Sequence[memoryview]:
        return await tier.get_ranges("y", starts, ends)

    released.set()
    await cache.ensure(x, 0, BLOCK, fetch_x)  # x's block 0 is cached
    released.clear()
    slow = asyncio.create_task(cache.ensure(x, 0, 2 * BLOCK, fetch_x))  # block 0 held
    await asyncio.sleep(0)
    with pytest.raises(CacheTooSmall):  # it would have to evict x's block 0
        await cache.ensure(y, 0, 3 * BLOCK, fetch_y)
    released.set()
    await slow
    assert cache.stamp(x, 0, 2 * BLOCK) is not None
    assert os.pread(x.file.fileno(), 2 * BLOCK, 0) == contents["x"][:2 * BLOCK]
    await cache.ensure(y, 0, 3 * BLOCK, fetch_y)  # x no longer being read: it may go
    assert os.pread(y.file.fileno(), 3 * BLOCK, 0) == contents["y"]
    assert cache.stamp(x, 0, 2 * BLOCK) is None and cache.used == 3 * BLOCK
    cache.forget(x)
    cache.forget(y)
