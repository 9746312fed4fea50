"""Does one `mainstem serve` use more than one core? Stream publish, 1 publisher to 1
stream vs 4 publishers to 4 streams, on a broker started with each `--workers` value.

    .venv/bin/python -m bench.multicore_bench [--workers 0,2] [--seconds 8] [--repeat 3]

Publishers are lean on purpose (each its own process): after the handshake, made with
mainstem's blocking stream client, they send ready-made Publish frames (100-byte bodies,
100 per frame, one publisher without a reference, so the same publishing ids serve every
frame) and only count the ids in PublishConfirm frames, keeping at most 20,000
messages unconfirmed. So the broker, not the client, sets the pace as far as the
machine's cores allow. For each case: confirmed msgs/s and the broker's CPU (user +
system, summed over the server process and every process it started), one JSON line
each, then a summary row per configuration (medians; ratios to the single process's one
publisher; the capacity the measured CPU costs allow on this machine's cores). `run()`
does all of it and returns the rows (for bench/run_all). Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.server_process import kill, start_server, started_ports

from bench.broker_process import cpu_seconds, stop_server
from mainstem.client.stream import Endpoint, StreamClient
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.protocols.rabbit_stream.constants import Key

BODY = b"x" * 100
BATCH = 100
FRAME_HEAD = struct.Struct(">IHH")  # size, key, version
CONFIRM_COUNT = struct.Struct(">BI")  # publisher id, number of ids
CASES = ((1, 1), (4, 4))  # (publishers, streams)


def _publish_frames(frames_per_write: int) -> bytes:
    """`frames_per_write` Publish frames of publisher 0, BATCH messages each."""
    frame = encode(f.Publish.of_bodies(0, [(i, BODY) for i in range(BATCH)]))
    return frame * frames_per_write


def _confirmed_in(buffer: bytearray) -> int:
    """Ids confirmed by the complete frames at the head of `buffer` (which it consumes)."""
    confirmed, pos = 0, 0
    while len(buffer) - pos >= FRAME_HEAD.size:
        size, key, _version = FRAME_HEAD.unpack_from(buffer, pos)
        if len(buffer) - pos - 4 < size:
            break
        if key == Key.PUBLISH_CONFIRM:
            confirmed += CONFIRM_COUNT.unpack_from(buffer, pos + 8)[1]
        elif key == Key.PUBLISH_ERROR:
            raise RuntimeError("the broker refused a publish")
        pos += 4 + size
    del buffer[:pos]
    return confirmed


def publisher(url: str, stream: str, seconds: float, window: int, start: Any,
              results: Any) -> None:
    """One publisher process: handshake, wait for `start`, publish for `seconds`."""
    client = StreamClient(Endpoint.parse(url))
    client.create_stream(stream)
    target = _publisher_address(client, stream)
    if target != (client.endpoint.host, client.endpoint.port):
        client.close()  # publish where Metadata says the stream's leader is, as rstream does
        client = StreamClient(dataclasses.replace(Endpoint.parse(url), port=target[1]))
    client._call(lambda corr: f.DeclarePublisher(corr, 0, "", stream), f.Response, stream)
    sock: socket.socket = client._sock
    sock.settimeout(30)
    per_write = 10
    data = _publish_frames(per_write)
    start.wait()
    sent = confirmed = 0
    buffer = bytearray()
    t0, cpu0 = time.monotonic(), time.process_time()
    deadline = t0 + seconds
    while time.monotonic() < deadline:
        if sent - confirmed + per_write * BATCH <= window:
            sock.sendall(data)
            sent += per_write * BATCH
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the broker closed the connection")
        buffer += chunk
        confirmed += _confirmed_in(buffer)
    elapsed = time.monotonic() - t0
    results.put((confirmed, elapsed, time.process_time() - cpu0))
    client.close()


def _publisher_address(client: StreamClient, stream: str) -> tuple[str, int]:
    _, answer = client._exchange(lambda corr: f.Metadata(corr, [stream]), r.MetadataResponse)
    nodes = {b.reference: (b.host, b.port) for b in answer.brokers}
    return nodes[answer.streams[0].leader_reference]


def broker_pids(pid: int) -> list[int]:
    """The server and every process it started (its workers)."""
    pids, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for child in _children(parent):
            pids.append(child)
            frontier.append(child)
    return pids


def _children(pid: int) -> Iterator[int]:
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        yield from (int(child) for child in text.split())


def broker_cpu(pid: int) -> float:
    total = 0.0
    for each in broker_pids(pid):
        with contextlib.suppress(FileNotFoundError):  # a worker that just exited
            total += cpu_seconds(each)
    return total


def run_case(url: str, server_pid: int, publishers: int, streams: int, seconds: float,
             window: int, tag: str) -> dict[str, Any]:
    """`publishers` processes spread over `streams` streams; msgs/s and broker CPU."""
    context = mp.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [context.Process(target=publisher, args=(
        url, f"mc-{tag}-{i % streams}", seconds, window, start, results))
        for i in range(publishers)]
    for process in processes:
        process.start()
    try:
        time.sleep(2.0)  # the handshakes (spawned interpreters import mainstem first)
        cpu0, main0, t0 = broker_cpu(server_pid), cpu_seconds(server_pid), time.monotonic()
        start.set()
        done = [results.get(timeout=seconds + 60) for _ in processes]
        elapsed, cpu = time.monotonic() - t0, broker_cpu(server_pid) - cpu0
        main_cpu = cpu_seconds(server_pid) - main0
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    msgs = sum(count for count, _, _ in done)
    window_s = max(seconds for _, seconds, _ in done)
    return {"publishers": publishers, "streams": streams, "msgs": msgs,
            "msgs_per_s": round(msgs / window_s), "broker_cpu_s": round(cpu, 2),
            "broker_cores": round(cpu / elapsed, 2),
            "broker_us_per_msg": round(cpu * 1e6 / max(msgs, 1), 3),
            # The main process is the serial part: its CPU per message bounds throughput.
            "main_us_per_msg": round(main_cpu * 1e6 / max(msgs, 1), 3),
            "client_cpu_s": round(sum(cpu for _, _, cpu in done), 2)}


def measure(workers: int, seconds: float = 8.0, window: int = 20_000,
            rounds: range = range(1)) -> list[dict[str, Any]]:
    """Start a broker with `--workers workers`, run each case once per round; the rows."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="mainstem-multicore-") as tmp:
        log_path = Path(tmp) / "server.log"
        server = start_server(Path(tmp) / "data", log_path, "--workers", str(workers))
        try:
            port = started_ports(server, log_path)["stream"]
            url = f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/%2F"
            for round_ in rounds:
                for publishers, streams in CASES:
                    row = run_case(url, server.pid, publishers, streams, seconds, window,
                                   f"{round_}-{publishers}")
                    row.update(workers=workers, round=round_,
                               load=round(os.getloadavg()[0], 2))
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            stop_server(server)
            kill(server)
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (workers, publishers), and ratios to the single process's one
    publisher (one core's worth): of the msgs/s measured, and of the broker's capacity,
    the msgs/s its CPU costs allow when the machine's cores are the broker's alone: the
    main process (one event loop) cannot exceed one core, the whole not the machine."""
    keyed: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in rows:
        keyed.setdefault((row["workers"], row["publishers"]), []).append(row)
    medians = {key: statistics.median(r["msgs_per_s"] for r in group)
               for key, group in keyed.items()}
    capacities = {key: statistics.median(map(_capacity, group)) for key, group in keyed.items()}
    base, base_capacity = medians.get((0, 1)), capacities.get((0, 1))
    out = []
    for (workers, publishers), value in sorted(medians.items()):
        group = keyed[(workers, publishers)]
        capacity = capacities[(workers, publishers)]
        out.append({"summary": True, "workers": workers, "publishers": publishers,
                    "median_msgs_per_s": round(value),
                    "min_msgs_per_s": min(r["msgs_per_s"] for r in group),
                    "max_msgs_per_s": max(r["msgs_per_s"] for r in group),
                    "median_broker_cores": statistics.median(r["broker_cores"] for r in group),
                    "median_broker_us_per_msg": statistics.median(
                        r["broker_us_per_msg"] for r in group),
                    "median_main_us_per_msg": statistics.median(
                        r["main_us_per_msg"] for r in group),
                    "ratio_to_single_process_1x1": round(value / base, 2) if base else None,
                    "capacity_msgs_per_s": round(capacity),
                    "capacity_ratio": round(capacity / base_capacity, 2) if base_capacity
                    else None})
    return out


def _capacity(row: dict[str, Any]) -> float:
    cores = os.cpu_count() or 1
    return min(1e6 / row["main_us_per_msg"], cores * 1e6 / row["broker_us_per_msg"])


def run(workers: tuple[int, ...] = (0, 2), seconds: float = 8.0, repeat: int = 3
        ) -> list[dict[str, Any]]:
    """For bench/run_all: every configuration, rounds alternating, then the summary rows."""
    rows = []
    for round_ in range(repeat):
        for count in workers:
            rows += measure(count, seconds, rounds=range(round_, round_ + 1))
    result = summary(rows)
    for row in result:
        print(json.dumps(row), flush=True)
    return rows + result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,2",
                        help="comma list of --workers values to compare (0: one process)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    # A SIGTERM unwinds through the `finally` blocks that stop the broker and publishers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    run(tuple(int(w) for w in args.workers.split(",")), args.seconds, args.repeat)


if __name__ == "__main__":
    main()
