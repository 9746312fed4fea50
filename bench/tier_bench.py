"""Tiered segments: upload against a plain copy, tiered reads against local reads.

    .venv/bin/python -m bench.tier_bench [--dir DIR] [--mib 128] [--s3 [moto|rgw]]

One run, same bytes, each figure the best of three: a partition of --mib MiB in 64 MiB
segments (1 KiB records in chunks of 256), then for its sealed segments
- upload: `upload_segment` (put, then size and CRC read back) and the put alone, against
  `shutil.copyfile` of the same files to a directory on the same disk (what `cp` does);
- reads: every chunk through `TieredSegment` (cold cache: `ensure` then `read_chunk`, 1 MiB
  blocks, 2 read ahead), again warm, and `read_chunk` of the local segment.
With --s3 the tier is moto's S3 emulator on loopback (its figures measure moto, not S3);
with --s3 rgw, Ceph's RADOS Gateway (a real S3 server, `tests/support/radosgw.py`: one
monitor and one OSD keeping objects in memory, all on this machine).
Prints MB/s and the ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import TieredRecord, segment_key, upload_segment
from mainstem.log.tiered_segment import TieredSegment

MIB = 1 << 20


def write_partition(directory: Path, mib: int) -> tuple[Partition, list[Segment]]:
    partition = Partition.open(directory, durability=DurabilityPolicy(FsyncMode.NEVER),
                               retention=RetentionPolicy(max_segment_bytes=64 * MIB))
    record = os.urandom(1024)
    for _ in range(mib * 4):
        partition.write_records([record] * 256)
    partition.flush()
    segments, offset = [], 0
    while (found := partition.find_committed(offset)) is not None:
        segments.append(found[0])
        offset = found[0].next_offset
    return partition, segments[:-1]


REPEAT = 3


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    """Seconds of the fastest of REPEAT runs, each after os.sync() (no run pays for the
    dirty pages of the one before)."""
    times = []
    for _ in range(REPEAT):
        os.sync()
        start = time.perf_counter()
        await work()
        times.append(time.perf_counter() - start)
    return min(times)


async def run(root: Path, mib: int, tier: Tier) -> None:
    partition, sealed = write_partition(root / "p", mib)
    total = sum(segment.size for segment in sealed) / MIB
    copies = root / "copies"
    copies.mkdir()

    async def copy() -> None:
        for segment in sealed:
            shutil.copyfile(segment.path, copies / segment.path.name)

    async def put() -> None:
        for segment in sealed:
            await tier.put(f"put/{segment.path.name}", segment.path)

    records: list[TieredRecord] = []

    async def upload() -> None:
        records[:] = [await upload_segment(tier, segment,
                                           segment_key("s/0", segment.first_chunk_id, 1))
                      for segment in sealed]

    t_copy, t_put, t_upload = await timed(copy), await timed(put), await timed(upload)
    print(f"{total:.0f} MiB in {len(sealed)} segments")
    print(f"copy {total / t_copy:8.0f} MB/s | put {total / t_put:8.0f} MB/s "
          f"({t_copy / t_put:.2f}x copy) | upload+verify {total / t_upload:8.0f} MB/s "
          f"({t_copy / t_upload:.2f}x copy)")

    tiered: list[TieredSegment] = []

    async def read_cold() -> None:
        """From a new, empty cache: each index fetched, each block fetched once."""
        for segment in tiered:
            segment.close()
        cache = TierCache(root / "cache", 256 * MIB, DescriptorCache(64), read_ahead=2)
        tiered[:] = [await TieredSegment.load(tier, record, cache) for record in records]
        await read_tiered()

    async def read_tiered() -> None:
        for segment in tiered:
            for i in range(segment.num_chunks):
                await segment.ensure(i)
                segment.read_chunk(i)

    async def read_local() -> None:
        for segment in sealed:
            for i in range(segment.num_chunks):
                segment.read_chunk(i)

    t_cold, t_warm, t_local = (await timed(read_cold), await timed(read_tiered),
                               await timed(read_local))
    print(f"local read {total / t_local:8.0f} MB/s | tiered cold {total / t_cold:8.0f} MB/s "
          f"({t_local / t_cold:.2f}x local) | tiered warm {total / t_warm:8.0f} MB/s "
          f"({t_local / t_warm:.2f}x local)")
    for segment in tiered:
        segment.close()
    await partition.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--s3", nargs="?", const="moto", choices=("moto", "rgw"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        if args.s3 is None:
            asyncio.run(run(root, args.mib, Tier.directory(root / "tier")))
        elif args.s3 == "moto":
            from tests.log.tiering import moto_s3, s3_tier
            with moto_s3() as (_, endpoint):
                asyncio.run(run(root, args.mib, s3_tier(endpoint, timeout=120)))
        else:
            from tests.support.radosgw import RadosGateway
            from tests.support.s3_servers import S3Server
            gateway = RadosGateway(root / "radosgw")
            gateway.start()
            try:
                s3 = S3Server("rgw", gateway.endpoint, gateway.new_bucket(), **gateway.keys)
                asyncio.run(run(root, args.mib, s3.tier(timeout=120)))
            finally:
                gateway.stop()


if __name__ == "__main__":
    main()
