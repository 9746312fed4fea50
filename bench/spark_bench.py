"""Batch read of 1,000,000 100-byte messages through the Spark data source (count, and into
Parquet) against a plain Python stream-protocol consumer on the same data, in one run.

    .venv/bin/python -m bench.spark_bench [--messages 1000000]

Starts its own broker (data in a temporary directory), publishes with rstream, then prints
rows/s of each path and the ratio Spark / plain consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

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


def plain_consumer(url: str) -> tuple[int, float]:
    """Every record's body through the stream protocol, decoded in Python: the baseline."""
    started = time.perf_counter()
    rows = 0
    with StreamClient.connect(url) as client:
        end = client.offsets("bench").end
        for chunk in client.chunks("bench", 0, end):
            for _, record in chunk.records():
                bytes(record[5:])  # the data section's payload
                rows += 1
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as data, ThreadedBroker(data) as broker:
        asyncio.run(fill(broker.ports["stream"], args.messages))
        url = broker.urls["stream"]
        rows, seconds = plain_consumer(url)
        print(f"plain consumer:  {rows:>9,} rows in {seconds:6.2f} s = {rows / seconds:>11,.0f}/s")
        spark = spark_session("local[2]", "mainstem-bench")
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.read.format("mainstem").option("url", url).option("stream", "bench") \
            .option("maxRecordsPerPartition", "250000").load()
        df.count()  # warm-up: JVM, Python workers, data source lookup
        results = {}
        for name, action in (("spark count", lambda: df.count()),
                             ("spark parquet", lambda: df.write.mode("overwrite").parquet(
                                 os.path.join(data, "out.parquet")))):
            started = time.perf_counter()
            action()
            elapsed = time.perf_counter() - started
            results[name] = rows / elapsed
            print(f"{name + ':':16} {rows:>9,} rows in {elapsed:6.2f} s = "
                  f"{rows / elapsed:>11,.0f}/s  ratio {rows / elapsed / (rows / seconds):.2f}")
        spark.stop()


if __name__ == "__main__":
    main()
