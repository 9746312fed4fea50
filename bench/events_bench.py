"""BSON event protocol figures: pipelined PUBLISH of 1 KiB events, subscription delivery,
and query results/s from a large binder. Starts a real `mainstem serve` (data in a
temporary directory) and prints events/s and the broker's own CPU µs per event.

    .venv/bin/python -m bench.events_bench [--events 100000] [--documents 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.events import EventsClient

WINDOW = 500  # PUBLISH frames in flight per round


async def timed(name: str, pid: int, count: int, work: Callable[[], Awaitable[None]]
                ) -> None:
    started_wall, started_cpu = time.perf_counter(), cpu_seconds(pid)
    await work()
    wall, cpu = time.perf_counter() - started_wall, cpu_seconds(pid) - started_cpu
    print(f"{name:30} {count:>9,} in {wall:6.2f} s = {count / wall:>10,.0f}/s  "
          f"broker CPU {cpu / count * 1e6:6.1f} µs each", flush=True)


async def main(events: int, documents: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, ports = start_server(Path(tmp) / "data", Path(tmp) / "server.log")
        pid = server.pid
        try:
            port = ports["bson"]
            client = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
            await client.create_channel("bench")
            event = {"id": 1, "payload": "x" * 1000}

            async def publish() -> None:
                for _ in range(events // WINDOW):
                    await client.publish_many("bench", [event] * WINDOW)

            await timed("publish 1 KiB (pipelined)", pid, events, publish)

            async def deliver() -> None:
                subscription = await client.subscribe("bench", start_pos=0)
                for i in range(events):
                    await subscription.next()
                    if i % 500 == 499:
                        await subscription.ack()

            await timed("subscription delivery", pid, events, deliver)
            await client.create_projection("docs", "feed", "big", "id", fold="replace")
            await client.create_channel("feed")
            batch = 1000
            for start in range(0, documents, batch):
                await client.publish_many("feed", [{"id": i, "v": i % 97}
                                                   for i in range(start, start + batch)])
            while (await client.find_by_id("big", documents - 1)) is None:
                await asyncio.sleep(0.2)

            async def query() -> None:
                seen = 0
                async for _ in client.query("big", {"v": {"$gte": 0}}):
                    seen += 1
                assert seen == documents

            await timed(f"query results ({documents:,} docs)", pid, documents, query)
            await client.close()
        finally:
            stop_server(server)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--documents", type=int, default=1_000_000)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.documents))
