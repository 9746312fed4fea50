"""Segment store protocol benchmark: append and read throughput against the raw disk.

    .venv/bin/python -m bench.segment_bench [--mib 256] [--dir DIR] [--event-sizes 1024,65536]

Starts a real `mainstem serve` subprocess and, for each event size, appends --mib MiB
as 1 MiB blocks through mainstem's segment client (waiting for the last ack), then
reads the segment back in reads of just under 1 MiB (a reply in one frame), four
requests ahead; the broker's CPU seconds come from /proc. The client runs on uvloop.

The raw figures are measured in the same run, directory and file system:
- raw write: the same bytes in writes of what the broker writes per socket read
  (256 KiB), with fsync as the broker's default `batch` policy does it: a second
  thread fsyncs again and again while writes are outstanding (group commit), and
  the figure counts up to the fsync that covers the last byte;
- reads cold: the page cache is dropped for the raw file and for the broker's files
  (posix_fadvise DONTNEED, which needs no root: the pages are clean after fsync),
  then both are read sequentially in 1 MiB requests: disk bandwidth;
- reads warm: the same again straight after, from the page cache.
Prints one JSON line per phase; asserts nothing. `run()` returns the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import uvloop

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.segment import SegmentClient
from mainstem.protocols.segment import codec as c

MIB = 1 << 20
BROKER_WRITE = 256 * 1024  # what the broker reads per socket read, and writes per chunk
EVENT_HEADER = 8  # an Event frame's type and length
READ_BYTES = MIB - 1024  # per read request: the reply fits the broker's 1 MiB frame limit
READS_AHEAD = 4


def raw_write_s(path: Path, total: int) -> float:
    """Seconds to write `total` bytes and make them durable the way `batch` does."""
    buffer = os.urandom(BROKER_WRITE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    written = 0
    done = threading.Event()

    def group_commit() -> None:
        synced = 0
        while synced < total:
            target = written
            if target == synced:
                time.sleep(0.0001)
                continue
            os.fsync(fd)
            synced = target
        done.set()

    syncer = threading.Thread(target=group_commit)
    started = time.perf_counter()
    syncer.start()
    try:
        while written < total:
            written += os.write(fd, buffer[:total - written])
        done.wait()
        return time.perf_counter() - started
    finally:
        syncer.join()
        os.close(fd)


def raw_read_s(path: Path) -> float:
    fd = os.open(path, os.O_RDONLY)
    started = time.perf_counter()
    try:
        while os.read(fd, MIB):
            pass
        return time.perf_counter() - started
    finally:
        os.close(fd)


def drop_cache(*roots: Path) -> None:
    """Evict the files under `roots` from the page cache (clean pages only)."""
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


async def _append(client: SegmentClient, segment: str, total: int, event_size: int) -> None:
    """Append 1 MiB blocks of Event frames of `event_size` bytes, the block's frames encoded
    once (the broker's work is measured, not the client's encoding)."""
    await client.create(segment)
    appender = await client.appender(segment)
    event = b"x" * (event_size - EVENT_HEADER)
    body = b"".join(c.Event(event).encode() for _ in range(max(1, MIB // event_size)))
    cid = appender.connection_id
    while appender.offset < total:
        start, appender.offset = appender.offset, appender.offset + len(body)
        client.writer.writelines([c.BeginAppendBlock(cid, start, len(body)).encode(), body,
                                  c.EndAppendBlock(cid, appender.offset, len(body)).encode()])
        await client.writer.drain()
    await appender.flush(timeout=600)


async def _read(client: SegmentClient, segment: str, total: int) -> None:
    """Read everything with READS_AHEAD requests outstanding, as a streaming reader
    prefetches."""
    asked = received = 0
    while received < total:
        while asked < total and asked - received < READS_AHEAD * READ_BYTES:
            client.send(c.ReadSegment(segment, asked, READ_BYTES))
            asked += READ_BYTES
        got = await client.expect(c.SegmentRead, timeout=60)
        if got.offset != received:  # type: ignore[attr-defined]
            raise RuntimeError(f"read at {got.offset}, expected {received}")  # type: ignore[attr-defined]
        received += len(got.data)  # type: ignore[attr-defined]


def _row(phase: str, event_size: int, total: int, seconds: float,
         cpu: float | None = None, raw_s: float | None = None) -> dict[str, object]:
    row: dict[str, object] = {"phase": phase, "event_bytes": event_size, "MiB": total // MIB,
                              "MiB_per_s": round(total / MIB / seconds, 1)}
    if raw_s is not None:
        row["ratio_vs_raw"] = round(raw_s / seconds, 2)
    if cpu is not None:
        row["broker_cpu_s"] = round(cpu, 3)
        row["broker_cpu_s_per_GiB"] = round(cpu / (total / (1 << 30)), 3)
    return row


async def _event_size_rows(port: int, pid: int, work: Path, mib: int, event_size: int
                           ) -> list[dict[str, object]]:
    total = mib * MIB // event_size * event_size
    segment = f"/bench-{event_size}/0"
    raw = work / f"raw-{event_size}.bin"
    rows = []
    raw_write = raw_write_s(raw, total)
    rows.append(_row("raw write", event_size, total, raw_write))
    client = await SegmentClient.connect("127.0.0.1", port)
    try:
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await _append(client, segment, total, event_size)
        rows.append(_row("segment append", event_size, total, time.perf_counter() - t0,
                         cpu_seconds(pid) - cpu0, raw_write))
        for temperature in ("cold", "warm"):
            if temperature == "cold":
                drop_cache(raw, work / "data")
            raw_read = raw_read_s(raw)
            rows.append(_row(f"raw read {temperature}", event_size, total, raw_read))
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            await _read(client, segment, total)
            rows.append(_row(f"segment read {temperature}", event_size, total,
                             time.perf_counter() - t0, cpu_seconds(pid) - cpu0, raw_read))
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
                rows += uvloop.run(_event_size_rows(ports["segment"], server.pid, work, mib,
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
