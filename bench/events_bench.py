"""BSON event protocol figures, as a user's client works: PUBLISH of 1 KiB events pipelined
(windows of 500 frames in flight, each answered once durable) and one at a time, a
subscription delivering them (ACKEV every 500), and query results/s from a large binder.
Starts a real `mainstem serve` (data in a temporary directory) and measures events/s and
the broker's own CPU µs per event; prints one JSON line per phase.

    .venv/bin/python -m bench.events_bench [--events 100000] [--documents 1000000]

`run(events, documents)` returns the same rows for `bench/run_all`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.events import EventsClient

WINDOW = 500  # PUBLISH frames in flight per round, events delivered per ACKEV
UNPIPELINED_SHARE = 10  # one-at-a-time publishes: this fraction of the pipelined count


async def timed(phase: str, pid: int, count: int, work: Callable[[], Awaitable[None]]
                ) -> dict[str, Any]:
    """Run `work` and measure it: one row."""
    started_wall, started_cpu = time.perf_counter(), cpu_seconds(pid)
    await work()
    wall, cpu = time.perf_counter() - started_wall, cpu_seconds(pid) - started_cpu
    return {"bench": "events", "phase": phase, "count": count,
            "msgs_per_s": round(count / wall), "broker_us_per_msg": round(cpu / count * 1e6, 2)}


async def _phases(port: int, pid: int, events: int, documents: int) -> list[dict[str, Any]]:
    rows = []
    client = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
    try:
        await client.create_channel("bench")
        await client.create_channel("single")
        event = {"id": 1, "payload": "x" * 1000}
        rounds = max(events // WINDOW, 1)
        published = rounds * WINDOW

        async def publish_pipelined() -> None:
            for _ in range(rounds):
                await client.publish_many("bench", [event] * WINDOW)

        rows.append(await timed("publish 1 KiB pipelined", pid, published, publish_pipelined))
        one_by_one = max(published // UNPIPELINED_SHARE, 1)

        async def publish_one_by_one() -> None:
            for _ in range(one_by_one):
                await client.publish("single", event)

        rows.append(await timed("publish 1 KiB unpipelined", pid, one_by_one,
                                publish_one_by_one))

        async def deliver() -> None:
            subscription = await client.subscribe("bench", start_pos=0)
            for i in range(published):
                await subscription.next()
                if i % WINDOW == WINDOW - 1:
                    await subscription.ack()
            await subscription.close()

        rows.append(await timed("subscription delivery", pid, published, deliver))
        rows.append(await _query_phase(client, pid, documents))
    finally:
        await client.close()
    return rows


async def _query_phase(client: EventsClient, pid: int, documents: int) -> dict[str, Any]:
    """A projection folds `documents` events into a binder; then one query reads them all."""
    await client.create_projection("docs", "feed", "big", "id", fold="replace")
    await client.create_channel("feed")
    batch = 1000
    for start in range(0, documents, batch):
        await client.publish_many("feed", [{"id": i, "v": i % 97}
                                           for i in range(start, min(start + batch, documents))])
    for _ in range(600):  # the projection catches up within a minute
        if await client.find_by_id("big", documents - 1) is not None:
            break
        await asyncio.sleep(0.1)

    async def query() -> None:
        seen = 0
        async for _ in client.query("big", {"v": {"$gte": 0}}):
            seen += 1
        if seen != documents:
            raise RuntimeError(f"the query returned {seen} of {documents} documents")

    return await timed(f"query results ({documents:,} docs)", pid, documents, query)


def run(events: int = 100_000, documents: int = 1_000_000) -> list[dict[str, Any]]:
    """Start a broker, measure every phase, stop it: one row per phase."""
    with tempfile.TemporaryDirectory() as tmp:
        server, ports = start_server(Path(tmp) / "data", Path(tmp) / "server.log")
        try:
            return asyncio.run(_phases(ports["bson"], server.pid, events, documents))
        finally:
            stop_server(server)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--documents", type=int, default=1_000_000)
    arguments = parser.parse_args()
    for row in run(arguments.events, arguments.documents):
        print(json.dumps(row), flush=True)
