"""Segment store protocol benchmark: append and read throughput against the raw disk.

    .venv/bin/python -m bench.segment_bench [--mib 256] [--dir DIR] [--event-sizes 1024,65536]

Starts a real `mainstem serve` subprocess and, for each event size, appends --mib MiB
as 1 MiB blocks of Event frames through mainstem's segment client (waiting for the
last ack, i.e. durable under the default `batch` fsync policy), then reads the segment
back in 1 MiB reads; the broker's CPU seconds for each phase come from /proc. The raw
figures are measured in the same run and directory: os.write of the same byte count
in 1 MiB buffers with an fsync at the end (what the last ack stands for), and os.read
of that file in 1 MiB reads. Prints one JSON line per phase; asserts nothing. `run()`
returns the rows (for `bench/run_all`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.segment import SegmentClient

MIB = 1 << 20
EVENT_HEADER = 8  # an Event frame's type and length


def raw_write_s(path: Path, total: int) -> float:
    """Seconds to write `total` bytes in 1 MiB buffers and fsync them."""
    buffer = os.urandom(MIB)
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        written = 0
        while written < total:
            written += os.write(fd, buffer[:total - written])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - started


def raw_read_s(path: Path) -> float:
    started = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, MIB):
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - started


async def _append(client: SegmentClient, segment: str, total: int, event_size: int) -> None:
    await client.create(segment)
    appender = await client.appender(segment)
    block = [b"x" * (event_size - EVENT_HEADER)] * max(1, MIB // event_size)
    for _ in range(total // (len(block) * event_size)):
        appender.append_block(block)
        appender.unacked.clear()  # the benchmark never resends
        await client.writer.drain()
    await appender.flush(timeout=600)


async def _read(client: SegmentClient, segment: str, total: int) -> None:
    offset = 0
    while offset < total:
        got = await client.read(segment, offset, MIB)
        offset += len(got.data)


def _row(phase: str, event_size: int, total: int, seconds: float,
         cpu: float | None = None, raw_s: float | None = None) -> dict[str, object]:
    row: dict[str, object] = {"phase": phase, "event_bytes": event_size, "MiB": total // MIB,
                              "MiB_per_s": round(total / MIB / seconds, 1)}
    if raw_s is not None:
        row["ratio_vs_raw"] = round(raw_s / seconds, 2)
    if cpu is not None:
        row["broker_cpu_s"] = round(cpu, 3)
    return row


async def _event_size_rows(port: int, pid: int, work: Path, mib: int, event_size: int
                           ) -> list[dict[str, object]]:
    per_block = max(1, MIB // event_size) * event_size
    total = max(1, mib * MIB // per_block) * per_block
    segment, raw = f"/bench-{event_size}/0", work / f"raw-{event_size}.bin"
    client = await SegmentClient.connect("127.0.0.1", port)
    try:
        raw_write = raw_write_s(raw, total)
        cpu0, started = cpu_seconds(pid), time.perf_counter()
        await _append(client, segment, total, event_size)
        rows = [_row("raw write", event_size, total, raw_write),
                _row("segment append", event_size, total, time.perf_counter() - started,
                     cpu_seconds(pid) - cpu0, raw_write)]
        raw_read = raw_read_s(raw)
        cpu0, started = cpu_seconds(pid), time.perf_counter()
        await _read(client, segment, total)
        rows += [_row("raw read", event_size, total, raw_read),
                 _row("segment read", event_size, total, time.perf_counter() - started,
                      cpu_seconds(pid) - cpu0, raw_read)]
    finally:
        await client.close()
        raw.unlink(missing_ok=True)
    return rows


def run(mib: int = 256, event_sizes: tuple[int, ...] = (1024, 65536),
        directory: Path | None = None) -> list[dict[str, object]]:
    """Every phase's row, for each event size, against one fresh broker."""
    work = Path(tempfile.mkdtemp(prefix="segment-bench-", dir=directory))
    rows: list[dict[str, object]] = []
    try:
        server, ports = start_server(work / "data", work / "server.log")
        try:
            for size in event_sizes:
                rows += asyncio.run(_event_size_rows(ports["segment"], server.pid, work, mib,
                                                     size))
        finally:
            stop_server(server)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--event-sizes", default="1024,65536",
                        help="comma-separated Event frame sizes in bytes")
    args = parser.parse_args()
    sizes = tuple(int(size) for size in args.event_sizes.split(","))
    for row in run(args.mib, sizes, args.dir):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
