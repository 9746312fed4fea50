"""Log engine benchmark: append and read throughput against the disk's raw bandwidth.

    .venv/bin/python -m bench.log_bench [--dir DIR] [--mib 256]

Every figure is measured in one run on the same disk with the same bytes
(best of --repeat runs, each started after os.sync() so that no phase pays
for the dirty pages of the one before):
appends of 100-byte and 1 KiB records in batches of 1,000 (no fsync, and
fsync per batch), a sequential read of the log, and plain os.write/os.pread
of an identical byte count in identically sized buffers. Prints figures and
the log/raw ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode
from mainstem.log.reader import PartitionReader

BATCH = 1000
MIB = 1 << 20


REPEAT = 3


def best(run: Callable[[], float]) -> float:
    """Fastest of REPEAT runs of a phase that returns its own elapsed seconds."""
    times = []
    for _ in range(REPEAT):
        os.sync()
        times.append(run())
    return min(times)


def raw_write(path: Path, buffer: bytes, batches: int, fsync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(batches):
        os.write(fd, buffer)
        if fsync:
            os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def raw_read(path: Path, buffer_size: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    pos = 0
    while chunk := os.pread(fd, buffer_size, pos):
        pos += len(chunk)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def log_append(directory: Path, batch: list[bytes], batches: int, fsync: bool) -> float:
    shutil.rmtree(directory, ignore_errors=True)
    mode = FsyncMode.BATCH if fsync else FsyncMode.NEVER
    partition = Partition.open(directory, durability=DurabilityPolicy(mode))

    async def append_all() -> None:
        for _ in range(batches):
            await partition.append(batch)

    start = time.perf_counter()
    if fsync:
        asyncio.run(append_all())
    else:
        for _ in range(batches):
            partition.write_records(batch)
    elapsed = time.perf_counter() - start
    partition.close()
    return elapsed


def log_read(directory: Path, expected_records: int, decode: bool) -> float:
    """Read every chunk and, with `decode`, walk every record."""
    partition = Partition.open(directory)
    reader = PartitionReader(partition, 0)
    records = 0
    start = time.perf_counter()
    while (chunk := reader.next_chunk_nowait()) is not None:
        if decode:
            for _offset, _body in chunk.records():
                records += 1
        else:
            records += chunk.header.num_records
    elapsed = time.perf_counter() - start
    partition.close()
    assert records == expected_records, (records, expected_records)
    return elapsed


def run_size(root: Path, record_size: int, total_mib: int, fsync_mib: int) -> None:
    batch = [os.urandom(record_size) for _ in range(BATCH)]
    batch_bytes = record_size * BATCH
    batches = max(1, total_mib * MIB // batch_bytes)
    fsync_batches = max(1, fsync_mib * MIB // batch_bytes)
    records = batches * BATCH
    print(f"\n== {record_size}-byte records, batches of {BATCH}: "
          f"{records:,} records, {batches * batch_bytes / MIB:.0f} MiB ==")

    raw_path, log_dir, fsync_dir = root / "raw.bin", root / "log", root / "log-fsync"
    joined = b"".join(batch)
    raw_w = best(lambda: raw_write(raw_path, joined, batches, fsync=False))
    log_w = best(lambda: log_append(log_dir, batch, batches, fsync=False))
    raw_wf = best(lambda: raw_write(root / "raw-fsync.bin", joined, fsync_batches, fsync=True))
    log_wf = best(lambda: log_append(fsync_dir, batch, fsync_batches, fsync=True))
    raw_r = best(lambda: raw_read(raw_path, batch_bytes + 48 + 4 * BATCH))
    log_r = best(lambda: log_read(log_dir, records, decode=False))
    log_rd = best(lambda: log_read(log_dir, records, decode=True))

    payload = records * record_size
    fsync_payload = fsync_batches * batch_bytes
    report("append, no fsync", records / log_w, payload / log_w, payload / raw_w, "raw write")
    report("append, fsync per batch", fsync_batches * BATCH / log_wf, fsync_payload / log_wf,
           fsync_payload / raw_wf, "raw write+fsync")
    report("read chunks", records / log_r, payload / log_r, payload / raw_r, "raw read")
    report("read + walk records", records / log_rd, payload / log_rd, payload / raw_r,
           "raw read")
    for path in (log_dir, fsync_dir):
        shutil.rmtree(path)


def report(what: str, records_s: float, bytes_s: float, raw_bytes_s: float, raw: str) -> None:
    print(f"  {what:<24} {records_s:>13,.0f} rec/s {bytes_s / MIB:>9,.1f} MiB/s"
          f"   {raw}: {raw_bytes_s / MIB:>9,.1f} MiB/s   ratio {bytes_s / raw_bytes_s:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory on the disk to measure (default: a temp dir under .)")
    parser.add_argument("--mib", type=int, default=256, help="payload MiB per no-fsync run")
    parser.add_argument("--fsync-mib", type=int, default=32, help="payload MiB per fsync run")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir or Path.cwd()))
    try:
        for record_size in (100, 1024):
            run_size(root, record_size, args.mib, args.fsync_mib)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
