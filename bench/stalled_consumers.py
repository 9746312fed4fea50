"""Broker memory held by stream consumers that stop reading, and a reading consumer's
throughput, against a real `mainstem serve`.

    .venv/bin/python -m bench.stalled_consumers [--connections 400] [--megabytes 24]
        [--messages 1000000] [--mainstem PATH] [--tls]

Publishes `--megabytes` of 4 KiB messages to a stream (half in 40 KiB chunks, which are
read whole, half in 400 KiB chunks, sent by sendfile), then opens `--connections` raw
stream connections with a 4 KiB receive buffer that subscribe at `first` with credit and
never read. Prints the broker's anonymous RSS before, with them stalled, 5 s after they
closed, and with as many stalled again (what the allocator kept is reused). Then
publishes `--messages` 100-byte messages (100 per chunk) to another stream and reads them
all with one consumer that keeps 16 chunks of credit out (the blocking client in
mainstem.client.stream), three times: messages/s and the broker's CPU µs per message,
best of three (`--tls`: over the stream listener's TLS twin). `--mainstem` runs another
installation (e.g. a script that starts an older checkout) for an A/B. One JSON line;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.server_process import MAINSTEM, kill, start_server, started_ports
from tests.support.stream_stall import publish, stalled_consumer
from tests.support.tls_certs import make_certificates

from bench.broker_process import cpu_seconds
from mainstem.client.stream import Endpoint, StreamClient, Tls

SETTLE_S = 0.5  # RSS is taken once it moves by less than 1 MiB in this long


def anon_rss(pid: int) -> int:
    """The process's anonymous resident memory (heap, buffers), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon")


def settled(pid: int, timeout: float = 60.0) -> int:
    deadline, last = time.monotonic() + timeout, anon_rss(pid)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S)
        now = anon_rss(pid)
        if abs(now - last) < 1 << 20:
            return now
        last = now
    return last


def stalled(pid: int, port: int, connections: int, megabytes: int) -> dict[str, Any]:
    half = megabytes * 1024 // 2  # KiB
    publish(port, "stalled", half // 40, 10, 4096)
    publish(port, "stalled", half // 400, 100, 4096)
    sockets = [stalled_consumer(port, "stalled")]  # warm-up: first-use costs
    try:
        before = settled(pid)
        sockets += [stalled_consumer(port, "stalled") for _ in range(connections)]
        held = settled(pid)
    finally:
        for sock in sockets:
            sock.close()
    time.sleep(5)
    after = anon_rss(pid)
    again = [stalled_consumer(port, "stalled") for _ in range(connections)]  # memory reused?
    try:
        second = settled(pid)
    finally:
        for sock in again:
            sock.close()
    return {"connections": connections, "rss_before_mb": round(before / 2**20, 1),
            "rss_stalled_mb": round(held / 2**20, 1),
            "rss_5s_after_close_mb": round(after / 2**20, 1),
            "kib_per_stalled_connection": round((held - before) / connections / 1024, 1),
            "kib_per_connection_kept_after_close": round((after - before) / connections / 1024,
                                                         1),
            "rss_stalled_again_mb": round(second / 2**20, 1)}


def throughput(pid: int, port: int, messages: int, tls: tuple[int, Path] | None
               ) -> dict[str, Any]:
    """`tls`: read through the TLS twin (its port, the CA file) instead."""
    publish(port, "fast", messages // 100, 100, 100)
    runs = []
    endpoint = Endpoint.parse(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/")
    if tls is not None:
        endpoint = replace(endpoint, host="localhost", port=tls[0], tls=Tls(str(tls[1])))
    with StreamClient(endpoint) as client:
        end = client.offsets("fast").end
        for _ in range(3):
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            got = sum(chunk.header.num_records for chunk in client.chunks("fast", 0, end))
            elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
            assert got == end, (got, end)
            runs.append((got / elapsed, cpu / got * 1e6))
    best = max(runs)
    return {"messages": messages, "msgs_per_s": round(best[0]),
            "broker_cpu_us_per_msg": round(min(cpu for _, cpu in runs), 3),
            "runs_msgs_per_s": [round(rate) for rate, _ in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--megabytes", type=int, default=24)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--mainstem", type=Path, default=MAINSTEM)
    parser.add_argument("--tls", action="store_true", help="the consumer reads over TLS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stalled-") as tmp:
        log, flags = Path(tmp) / "server.log", ["--workers", "0"]
        if args.tls:
            certs = make_certificates(Path(tmp) / "certs")
            flags += ["--tls-certfile", str(certs.server_cert), "--tls-keyfile",
                      str(certs.server_key), "--tls-listener", "stream=0"]
        server = start_server(Path(tmp) / "data", log, *flags, mainstem=args.mainstem)
        try:
            ports = started_ports(server, log)
            port = ports["stream"]
            tls = (ports["stream/tls"], certs.ca) if args.tls else None
            result = {"mainstem": str(args.mainstem), "tls": args.tls,
                      "stalled": stalled(server.pid, port, args.connections, args.megabytes),
                      "throughput": throughput(server.pid, port, args.messages, tls)}
        finally:
            kill(server)
    print(json.dumps(result))


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    main()
