"""Segment store protocol benchmark: append and read throughput against raw disk bandwidth.

    .venv/bin/python -m bench.segment_bench [--mib 256] [--dir DIR]

Starts a real `mainstem serve` subprocess, appends --mib MiB as 1 MiB blocks of
1 KiB events through mainstem's segment client (waiting for the last ack), reads
the segment back in 1 MiB reads, and measures the broker's CPU seconds for each
phase from /proc. The raw disk figure is os.write of the same bytes in 1 MiB
buffers with one fsync at the end, in the same directory. Prints figures and
the ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.segment import SegmentClient

MIB = 1 << 20
EVENT = b"x" * (1024 - 8)  # a 1 KiB Event frame
EVENTS_PER_BLOCK = MIB // 1024
SEGMENT = "/bench/0"


def raw_disk_mib_s(directory: Path, mib: int) -> float:
    path = directory / "raw.bin"
    buffer = os.urandom(MIB)
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(mib):
            os.write(fd, buffer)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    path.unlink()
    return mib / elapsed


async def run_client(port: int, mib: int, pid: int) -> dict[str, float]:
    client = await SegmentClient.connect("127.0.0.1", port)
    await client.create(SEGMENT)
    appender = await client.appender(SEGMENT)
    block = [EVENT] * EVENTS_PER_BLOCK
    cpu0, started = cpu_seconds(pid), time.perf_counter()
    for _ in range(mib):
        appender.append_block(block)
        appender.unacked.clear()  # the benchmark never resends
        await client.writer.drain()
    await appender.flush(timeout=600)
    append_s, append_cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu0
    cpu0, started = cpu_seconds(pid), time.perf_counter()
    offset = 0
    while offset < mib * MIB:
        got = await client.read(SEGMENT, offset, MIB)
        offset += len(got.data)
    read_s, read_cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu0
    await client.close()
    return {"append_mib_s": mib / append_s, "append_cpu_s": append_cpu,
            "read_mib_s": mib / read_s, "read_cpu_s": read_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir))
    server: subprocess.Popen | None = None
    try:
        raw = raw_disk_mib_s(work, args.mib)
        server, ports = start_server(work / "data", work / "server.log")
        figures = asyncio.run(run_client(ports["segment"], args.mib, server.pid))
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(work, ignore_errors=True)
    print(f"raw disk write        {raw:9.1f} MiB/s")
    print(f"segment append        {figures['append_mib_s']:9.1f} MiB/s  "
          f"ratio {figures['append_mib_s'] / raw:.2f}  broker CPU {figures['append_cpu_s']:.2f}s")
    print(f"segment read          {figures['read_mib_s']:9.1f} MiB/s  "
          f"ratio {figures['read_mib_s'] / raw:.2f}  broker CPU {figures['read_cpu_s']:.2f}s")


if __name__ == "__main__":
    main()
