"""A projection two ways on the same channel: the broker's live projection catching up on
the whole history, and the Spark rebuild (`mainstem pipeline project`) including its load
and hand-over. Prints events/s of each and the ratio Spark / live.

    .venv/bin/python -m bench.project_bench [--events 1000000] [--documents 100000]

Starts its own broker (data in a temporary directory); Spark runs in local[2].
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

from mainstem.broker.events.projections import Projection
from mainstem.client.events import EventsClient
from mainstem.spark.pipelines import spark_session
from mainstem.spark.projection import rebuild
from mainstem.testing import ThreadedBroker

BATCH = 1000


async def connect(port: int) -> EventsClient:
    return await EventsClient.connect("127.0.0.1", port, "guest", "guest")


async def fill(port: int, events: int, documents: int) -> None:
    client = await connect(port)
    await client.create_channel("orders")
    for start in range(0, events, BATCH):
        await client.publish_many("orders", [
            {"customer": i % documents, "amount": i % 7, "count": 1}
            for i in range(start, min(start + BATCH, events))])
    await client.close()


async def live_projection(port: int, events: int, documents: int) -> float:
    """Seconds the broker's projection takes to fold the whole channel."""
    client = await connect(port)
    started = time.perf_counter()
    await client.create_projection("live", "orders", "live", "customer", fold="increment")
    expected = len(range(documents - 1, events, documents))
    while True:
        last = await client.find_by_id("live", documents - 1)
        if last is not None and last["count"] == expected:
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--documents", type=int, default=100_000)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as data, ThreadedBroker(data) as broker:
        port = broker.ports["bson"]
        asyncio.run(fill(port, args.events, args.documents))
        live = live_projection(port, args.events, args.documents)
        live_s = asyncio.run(live)
        print(f"live projection: {args.events:>9,} events in {live_s:6.2f} s = "
              f"{args.events / live_s:>9,.0f}/s")
        spark = spark_session("local[2]", "mainstem-project-bench")
        spark.sparkContext.setLogLevel("ERROR")
        projection = Projection("rebuilt", "orders", "rebuilt", "customer", "increment")
        started = time.perf_counter()
        rebuilt = rebuild(spark, broker.urls["stream"], projection, events_port=port)
        spark_s = time.perf_counter() - started
        print(f"spark rebuild:   {args.events:>9,} events in {spark_s:6.2f} s = "
              f"{args.events / spark_s:>9,.0f}/s  ratio {live_s / spark_s:.2f}  "
              f"({rebuilt.documents:,} documents, live from offset {rebuilt.position:,})")
        spark.stop()


if __name__ == "__main__":
    main()
