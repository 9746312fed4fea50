"""Child process of the crash tests: appends batches with fsync per batch from
several concurrent writers and prints each batch once its append returned.

    python tests/log/crash_writer.py DIRECTORY

Each printed line is `batch chunk_id count`; batch b holds records
`b{b}-r{i}-` padded with `x` to a length that depends on b and i.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy

WRITERS = 4
MAX_BATCHES = 100_000  # bounded: the parent kills the child long before


def batch_records(batch: int) -> list[bytes]:
    count = 1 + batch % 17
    return [f"b{batch}-r{i}-".encode().ljust(10 + (batch * 7 + i) % 300, b"x")
            for i in range(count)]


async def writer(partition: Partition, first: int) -> None:
    for batch in range(first, MAX_BATCHES, WRITERS):
        records = batch_records(batch)
        appended = await partition.append(records, sequences={f"w{first}": batch})
        print(batch, appended.chunk_id, len(records), flush=True)


async def main(directory: Path) -> None:
    partition = Partition.open(directory, durability=DurabilityPolicy(FsyncMode.BATCH),
                               retention=RetentionPolicy(max_segment_bytes=64_000))
    print("ready", flush=True)
    await asyncio.gather(*(writer(partition, first) for first in range(WRITERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
