"""Iggy protocol benchmark, compared in the same run with the stream protocol.

    .venv/bin/python -m bench.iggy_bench [--messages 1000000] [--size 100] [--batch 1000]

Starts a real `mainstem serve` on loopback ports with a fresh data directory,
then, on the same data shape: Iggy SEND_MESSAGES in batches (each batch waits
for its reply, i.e. stored per the fsync policy) and POLL_MESSAGES back by
offset; then the stream protocol (rstream send_batch with confirms, and a
consumer from the first offset). Prints msgs/s, MB/s and the broker's CPU
seconds per million messages (= µs per message) for each phase as JSON lines.
Asserts nothing. `run()` returns the rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.iggy import IggyClient, Message, Polling


async def measure(name: str, pid: int, n: int, size: int, run: Callable[[], Awaitable[int]]
                  ) -> dict[str, object]:
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    done = await run()
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    row = {"phase": name, "messages": done, "seconds": round(elapsed, 3),
           "msgs_per_s": round(done / elapsed), "MB_per_s": round(done * size / elapsed / 1e6, 1),
           "broker_cpu_s_per_million": round(cpu / max(done, 1) * 1e6, 2)}
    if done != n:
        row["note"] = f"expected {n}"
    return row


async def iggy_phases(port: int, pid: int, n: int, size: int, batch: int
                      ) -> list[dict[str, object]]:
    client = await IggyClient.connect("127.0.0.1", port)
    await client.login("guest", "guest")
    await client.create_stream("bench", 0)
    await client.create_topic("bench", "t", partitions=1)
    messages = [Message(b"x" * size) for _ in range(batch)]

    async def send() -> int:
        for _ in range(n // batch):
            await client.send("bench", "t", messages, partition=1)
        return n // batch * batch

    async def poll() -> int:
        got = 0
        while got < n:
            polled = await client.poll("bench", "t", 1, Polling.OFFSET, got, count=batch)
            if not polled.messages:
                break
            got += len(polled.messages)
        return got

    rows = [await measure("iggy send", pid, n, size, send),
            await measure("iggy poll", pid, n, size, poll)]
    await client.close()
    return rows


async def stream_phases(port: int, pid: int, n: int, size: int, batch: int
                        ) -> list[dict[str, object]]:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

    body = b"x" * size
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream("bench-stream")
        confirmed = 0
        everything = asyncio.Event()

        def on_confirm(status: object) -> None:
            nonlocal confirmed
            confirmed += 1
            if confirmed >= n // batch * batch:
                everything.set()

        async def send() -> int:
            for _ in range(n // batch):
                await producer.send_batch("bench-stream", [body] * batch,
                                          on_publish_confirm=on_confirm)
            await asyncio.wait_for(everything.wait(), 120)
            return confirmed

        rows = [await measure("stream send", pid, n, size, send)]

    received = 0
    done = asyncio.Event()

    def on_message(message: object, context: object) -> None:
        nonlocal received
        received += 1
        if received >= n:
            done.set()

    async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
        async def consume() -> int:
            await consumer.subscribe("bench-stream", on_message, initial_credit=50,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST))
            await asyncio.wait_for(done.wait(), 300)
            return received

        rows.append(await measure("stream consume", pid, n, size, consume))
    return rows


async def phases(messages: int = 1_000_000, size: int = 100, batch: int = 1000
                 ) -> list[dict[str, object]]:
    """Every phase's row against one fresh broker."""
    with tempfile.TemporaryDirectory(prefix="iggy-bench-") as tmp:
        server, ports = start_server(Path(tmp) / "data", Path(tmp) / "server.log")
        try:
            return [*await iggy_phases(ports["iggy"], server.pid, messages, size, batch),
                    *await stream_phases(ports["stream"], server.pid, messages, size, batch)]
        finally:
            stop_server(server)


def run(messages: int = 1_000_000, size: int = 100, batch: int = 1000
        ) -> list[dict[str, object]]:
    return asyncio.run(phases(messages, size, batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    for row in run(args.messages, args.size, args.batch):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
