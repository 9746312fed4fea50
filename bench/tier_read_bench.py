"""Reading a stream's tiered history through the broker against reading local data.

    .venv/bin/python -m bench.tier_read_bench [--messages 2000000] [--runs 3]

Starts `mainstem serve` with a directory tier (a temporary directory on the same disk),
fills two streams with the same 100-byte messages: `local`, and `tiered`, whose segments
(16 MB) move to the tier beyond 16 MB per partition. Each round restarts the broker (its
tier cache starts empty), then reads every record with mainstem's stream client: `tiered`
cold (chunks fetched from the tier), `tiered` again warm (from the cache), and `local`.
Prints each path's best rows/s and broker CPU per row, and their ratios to `local`, in
one run. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rstream import AMQPMessage, Producer

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.stream import StreamClient

BODY = b"x" * 100
SEGMENT = 16_000_000
ARGUMENTS = {"stream-max-segment-size-bytes": SEGMENT, "tier-local-max-bytes": SEGMENT}


async def fill(port: int, stream: str, messages: int, arguments: dict[str, int]) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream(stream, arguments=arguments)
        batch = [AMQPMessage(body=BODY)] * 1000
        for _ in range(messages // 1000):
            await producer.send_batch(stream, batch)
        await producer.send_wait(stream, AMQPMessage(body=BODY))


def read_all(port: int, stream: str) -> int:
    rows = 0
    with StreamClient.connect(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}") as client:
        end = client.offsets(stream).end
        for chunk in client.chunks(stream, 0, end):
            for _, record in chunk.records():
                bytes(record[5:])
                rows += 1
    return rows


def tiered_bytes(tier: Path) -> int:
    return sum(path.stat().st_size for path in tier.rglob("*.segment"))


def wait_tiered(tier: Path, at_least: int) -> None:
    """Until the tier holds `at_least` bytes of segments and stops growing."""
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 3 or tiered_bytes(tier) < at_least:
        now = tiered_bytes(tier)
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as scratch:
        root = Path(scratch)
        data, tier, log = root / "data", root / "tier", root / "server.log"
        flags = ("--tier-url", str(tier), "--tier-check-interval-ms", "200",
                 "--tier-cache-bytes", "512MiB")
        server, ports = start_server(data, log, *flags)
        try:
            asyncio.run(fill(ports["stream"], "local", args.messages, {}))
            asyncio.run(fill(ports["stream"], "tiered", args.messages, ARGUMENTS))
            wait_tiered(tier, args.messages * 100 // 2)
        finally:
            stop_server(server)
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.runs):
            server, ports = start_server(data, log, *flags)
            try:
                for path, stream in (("tiered cold", "tiered"), ("tiered warm", "tiered"),
                                     ("local", "local")):
                    cpu, started = cpu_seconds(server.pid), time.perf_counter()
                    rows = read_all(ports["stream"], stream)
                    elapsed = time.perf_counter() - started
                    rate, cpu_per_row = rows / elapsed, (cpu_seconds(server.pid) - cpu) / rows
                    if path not in best or rate > best[path][0]:
                        best[path] = (rate, cpu_per_row)
            finally:
                stop_server(server)
        print(f"{args.messages} rows, {tiered_bytes(tier) / 1e6:.0f} MB tiered, "
              f"best of {args.runs}")
        local_rate, local_cpu = best["local"]
        for path, (rate, cpu_per_row) in best.items():
            print(f"{path:12} {rate:12,.0f} rows/s ({rate / local_rate:.2f}x local), "
                  f"broker CPU/row {cpu_per_row / local_cpu:.2f}x local")


if __name__ == "__main__":
    main()
