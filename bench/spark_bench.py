"""Batch read through the Spark data source (count, and into Parquet) against a plain
Python stream-protocol consumer on the same data, in one run, for two kinds of records:

- data-only: 100-byte messages that are only a data section (--messages, default 1,000,000);
- keyed: JSON messages as a publisher keys them with rstream (--keyed, default 500,000): a
  message annotation ``x-routing-key``, properties (message-id, content-type,
  creation-time) and two application properties; the plain consumer cuts out each body.

    .venv/bin/python -m bench.spark_bench [--messages 1000000] [--keyed 500000] [--runs 3]

Starts its own broker (data in a temporary directory), publishes with rstream, then runs
each path --runs times and prints its best and median rows/s, the ratio of the bests
Spark / plain consumer, and the machine's load average (the cores may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial

from rstream import AMQPMessage, Producer
from rstream._pyamqp.message import Properties

from mainstem.client.stream import StreamClient
from mainstem.formats.amqp10 import message_body
from mainstem.spark.pipelines import spark_session
from mainstem.testing import ThreadedBroker

BODY = b"x" * 100


def keyed_message(index: int, moment: int) -> AMQPMessage:
    """A JSON record as a publisher keys it: about 100 bytes of body."""
    user = f"user-{index % 1000}"
    body = json.dumps({"id": index, "user": user, "amount": index % 977,
                       "currency": "EUR", "note": "x" * 20}).encode()
    return AMQPMessage(body=body, message_annotations={"x-routing-key": user},
                       properties=Properties(message_id=str(index),
                                             content_type="application/json",
                                             creation_time=moment),
                       application_properties={"type": "order", "version": 2})


async def fill(port: int, messages: int, keyed: int) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream("bench")
        batch = [AMQPMessage(body=BODY)] * 1000
        for _ in range(messages // 1000):
            await producer.send_batch("bench", batch)
        await producer.send_wait("bench", AMQPMessage(body=BODY))
        await producer.create_stream("keyed")
        moment = int(time.time() * 1000)
        for start in range(0, keyed, 1000):
            await producer.send_batch("keyed", [keyed_message(i, moment + i // 1000)
                                                for i in range(start, min(start + 1000, keyed))])
        await producer.send_wait("keyed", keyed_message(keyed, moment))


def plain_consumer(url: str, stream: str = "bench") -> int:
    """Every record's body through the stream protocol, decoded in Python: the baseline.
    Data-only messages are cut at a fixed place; others go through ``message_body``,
    which skips the other sections without decoding them."""
    rows = 0
    with StreamClient.connect(url) as client:
        end = client.offsets(stream).end
        for chunk in client.chunks(stream, 0, end):
            for _, record in chunk.records():
                if stream == "bench":
                    bytes(record[5:])  # the data section's payload
                else:
                    bytes(message_body(record))
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
    print(f"{name + ':':18} {rows:>9,} rows  best {best:>11,.0f}/s  median "
          f"{statistics.median(rates):>11,.0f}/s{ratio}  load {_load()}")
    return best


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keyed", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as data, ThreadedBroker(data) as broker:
        asyncio.run(fill(broker.ports["stream"], args.messages, args.keyed))
        url = broker.urls["stream"]
        spark = spark_session("local[2]", "mainstem-bench")
        spark.sparkContext.setLogLevel("ERROR")
        print(f"load before: {_load()}")
        for stream, label in (("bench", "data-only"), ("keyed", "keyed")):
            rows = plain_consumer(url, stream)
            plain = measure(f"{label} plain", rows, partial(plain_consumer, url, stream),
                            args.runs)
            df = spark.read.format("mainstem").option("url", url).option("stream", stream) \
                .option("maxRecordsPerPartition", "250000").load()
            df.count()  # warm-up: JVM, Python workers, data source lookup
            measure(f"{label} count", rows, df.count, args.runs, plain)
            measure(f"{label} parquet", rows, partial(df.write.mode("overwrite").parquet,
                                                      os.path.join(data, "out.parquet")),
                    args.runs, plain)
        spark.stop()


if __name__ == "__main__":
    main()
