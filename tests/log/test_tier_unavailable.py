"""A tier that is gone fails reads with `TierUnavailable`, naming the tier and the object,
within its timeout (never a hang), and reads work again once it is back."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pytest

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import TierUnavailable
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tiered_segment import TieredSegment

from .tiering import moto_s3, s3_tier, tier_all, written_partition

TIMEOUT = 2.0


def batches() -> list[list[bytes]]:
    return [[os.urandom(900)] for _ in range(16)]


async def test_a_directory_tier_removed_then_back(tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", batches(), 6_000)
    tier = Tier.directory(tmp_path / "tier", timeout=TIMEOUT)
    cache = TierCache(tmp_path / "cache", 1 << 20, DescriptorCache(16), block_size=4096,
                      read_ahead=0)
    first = (await tier_all(tier, partition, cache))[0]
    (tmp_path / "tier").rename(tmp_path / "unmounted")
    started = time.monotonic()
    with pytest.raises(TierUnavailable) as error:
        await first.segment.ensure(0)
    assert time.monotonic() - started < TIMEOUT + 1
    assert str(tmp_path / "tier") in str(error.value) and first.record.key in str(error.value)
    with pytest.raises(TierUnavailable):  # an upload does not make the directory again:
        await tier.put("stream/0/x.segment", b"x")  # on an unmounted mount it would be local
    assert not (tmp_path / "tier").exists()
    first.segment.close()
    reopened = await TieredSegment.load(tier, first.record, cache)  # its index is local
    assert reopened.num_chunks == first.local.num_chunks
    with pytest.raises(TierUnavailable):
        await reopened.ensure(0)
    (tmp_path / "unmounted").rename(tmp_path / "tier")
    await reopened.ensure(0)
    assert reopened.read_chunk(0).data == first.local.read_chunk(0).data
    reopened.close()
    await partition.aclose()


async def test_s3_stopped_then_back(tmp_path: Path) -> None:
    """moto's S3 emulator stopped and started again on its port (it keeps its objects)."""
    partition = written_partition(tmp_path / "p", batches(), 6_000)
    cache = TierCache(tmp_path / "cache", 1 << 20, DescriptorCache(16), block_size=4096,
                      read_ahead=0)
    with moto_s3() as (server, endpoint):
        tier = s3_tier(endpoint, timeout=TIMEOUT)
        first = (await tier_all(tier, partition, cache))[0]
        server.stop()
        started = time.monotonic()
        with pytest.raises(TierUnavailable, match=re.escape(first.record.key)):
            await first.segment.ensure(0)
        assert time.monotonic() - started < TIMEOUT + 1
        server.start()
        await first.segment.ensure(0)
        assert first.segment.read_chunk(0).data == first.local.read_chunk(0).data
        first.segment.close()
    await partition.aclose()


async def test_a_store_that_never_answers_times_out() -> None:
    """A listener that takes connections and never replies: the call gives up in time."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        tier = s3_tier(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=TIMEOUT)
        started = time.monotonic()
        with pytest.raises(TierUnavailable, match=r"k\.segment"):
            await tier.size("k.segment")
        assert time.monotonic() - started < TIMEOUT + 1
