"""Batch read of 1,000,000 100-byte messages through the Spark data source (count, and into
Parquet) against a plain Python stream-protocol consumer on the same data, in one run.

    .venv/bin/python -m bench.spark_bench [--messages 1000000] [--runs 3]

Starts its own broker (data in a temporary directory), publishes with rstream, then runs
each path --runs times and prints its best and median rows/s, the ratio of the bests
Spark / plain consumer, and the machine's load average (the cores may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from rstream import AMQPMessage, Producer

from mainstem.client.stream import StreamClient
from mainstem.spark.pipelines import spark_session
from mainstem.testing import ThreadedBroker

BODY = b"x" * 100


async def fill(port: int, messages: int) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream("bench")
        batch = [AMQPMessage(body=BODY)] * 1000
        for _ in range(messages // 1000):
            await producer.send_batch("bench", batch)
        await producer.send_wait("bench", AMQPMessage(body=BODY))


def plain_consumer(url: str) -> int:
    """Every record's body through the stream protocol, decoded in Python: the baseline."""
    rows = 0
    with StreamClient.connect(url) as client:
        end = client.offsets("bench").end
        for chunk in client.chunks("bench", 0, end):
            for _, record in chunk.records():
                bytes(record[5:])  # the data section's payload
                rows += 1
    return rows


def measure(name: str, rows: int, action: Callable[[], object], runs: int,
            baseline: float | None = None) -> float:
    """Run `action` `runs` times; print and return the best rate in rows/s."""
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        rates.append(rows / (time.perf_counter() - started))
    best = max(rates)
    ratio = f"  ratio {best / baseline:.2f}" if baseline else ""
    print(f"{name + ':':16} {rows:>9,} rows  best {best:>11,.0f}/s  median "
          f"{statistics.median(rates):>11,.0f}/s{ratio}  load {_load()}")
    return best


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as data, ThreadedBroker(data) as broker:
        asyncio.run(fill(broker.ports["stream"], args.messages))
        url = broker.urls["stream"]
        rows = plain_consumer(url)
        print(f"load before: {_load()}")
        plain = measure("plain consumer", rows, lambda: plain_consumer(url), args.runs)
        spark = spark_session("local[2]", "mainstem-bench")
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.read.format("mainstem").option("url", url).option("stream", "bench") \
            .option("maxRecordsPerPartition", "250000").load()
        df.count()  # warm-up: JVM, Python workers, data source lookup
        measure("spark count", rows, df.count, args.runs, plain)
        measure("spark parquet", rows, lambda: df.write.mode("overwrite").parquet(
            os.path.join(data, "out.parquet")), args.runs, plain)
        spark.stop()


if __name__ == "__main__":
    main()
