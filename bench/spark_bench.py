"""Batch read through the Spark data source (count, and into Parquet) against two plain
Python consumers of the same data, in one run: rstream's ``Consumer`` (the issue's
baseline: the stream client a user's Python code would use) and mainstem's own
``StreamClient.chunks``; and Spark's own ceiling, a source that hands Spark ready-made
batches of the same rows (``ReadyBatches``). Two kinds of records:

- data-only: 100-byte messages that are only a data section (--messages, default 1,000,000);
- keyed: JSON messages as a publisher keys them with rstream (--keyed, default 500,000): a
  message annotation ``x-routing-key``, properties (message-id, content-type,
  creation-time) and two application properties.

Each consumer takes every record's body as bytes: rstream decodes the message
(``amqp_decoder``), mainstem's client cuts the data section out (``message_body``).

    .venv/bin/python -m bench.spark_bench [--messages 1000000] [--keyed 500000] [--runs 3]

Starts its own broker (data in a temporary directory), publishes with rstream, then runs
the paths in turn, --runs rounds (so a change in the load falls on all of them), and
prints each one's best and median rows/s, the ratios of the bests to rstream's and to
mainstem's client, and the machine's load average (the cores may be shared).
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
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream._pyamqp.message import Properties

from mainstem.client.stream import StreamClient
from mainstem.formats.amqp10 import message_body
from mainstem.spark.pipelines import spark_session
from mainstem.spark.records import BATCH_ROWS, record_batches, schema_ddl
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


def client_consumer(url: str, stream: str) -> int:
    """Every record's body through mainstem's stream client. Data-only messages are cut at
    a fixed place; others go through ``message_body``, which skips the other sections
    without decoding them."""
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


async def _rstream_read(port: int, stream: str, rows: int) -> int:
    seen = 0
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: object) -> None:
        nonlocal seen
        bytes(message.body)
        seen += 1
        if seen == rows:
            done.set()

    async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 600)
    return seen


def rstream_consumer(port: int, stream: str, rows: int) -> int:
    """Every record's body through rstream's consumer, as a user's Python code reads."""
    return asyncio.run(_rstream_read(port, stream, rows))


class ReadyBatches(DataSource):
    """Spark's own ceiling: the stream's first batch as the mainstem source makes it, made
    once per task and handed over again and again (``batchRows`` rows at a time) up to
    ``rows``, so Spark gets the same columns with no broker and no decoding."""

    @classmethod
    def name(cls) -> str:
        return "ready-batches"

    def schema(self) -> str:
        return schema_ddl(True)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ReadyReader(self.options)


class _ReadyReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        """As the bench reads the stream: 250,000 rows a task."""
        rows = int(self.options["rows"])
        return [InputPartition(min(250_000, rows - start)) for start in range(0, rows, 250_000)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows: int = partition.value
        stream = self.options["stream"]
        with StreamClient.connect(self.options["url"]) as client:
            end = client.offsets(stream).end
            first = next(record_batches(client.chunks(stream, 0, end), stream, 0, 0, end))
        size = int(self.options["batchRows"])
        copies = -(-size // first.num_rows)
        batch = pa.Table.from_batches([first] * copies).combine_chunks().to_batches()[0]
        batch = batch.slice(0, size)
        for start in range(0, rows, size):
            yield batch.slice(0, min(size, rows - start))


def measure(rows: int, paths: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Run the paths in turn, `runs` rounds; print each one's best and median rate (rows/s)
    and return the bests."""
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(runs):
        for name, action in paths.items():
            started = time.perf_counter()
            action()
            rates[name].append(rows / (time.perf_counter() - started))
    for name, found in rates.items():
        print(f"{name + ':':22} {rows:>9,} rows  best {max(found):>11,.0f}/s  median "
              f"{statistics.median(found):>11,.0f}/s")
    print(f"  load {_load()}")
    return {name: max(found) for name, found in rates.items()}


def ratios(label: str, best: dict[str, float]) -> None:
    """The ratios of the bests: each reader to rstream's consumer and to mainstem's client."""
    rstream, client = best[f"{label} rstream"], best[f"{label} client"]
    for name, rate in best.items():
        if name != f"{label} rstream":
            print(f"  {name:22} / rstream {rate / rstream:5.2f}x   / client "
                  f"{rate / client:5.2f}x")


def _ready(spark: Any, url: str, stream: str, rows: int, batch_rows: int
           ) -> Callable[[], object]:
    """Spark's count of ready-made batches of the stream's rows (see ReadyBatches)."""
    spark.dataSource.register(ReadyBatches)
    df = spark.read.format("ready-batches").option("url", url).option("stream", stream) \
        .option("rows", str(rows)).option("batchRows", str(batch_rows)).load()
    df.count()  # warm-up
    return df.count


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
        port = broker.ports["stream"]
        asyncio.run(fill(port, args.messages, args.keyed))
        url = broker.urls["stream"]
        spark = spark_session("local[2]", "mainstem-bench")
        spark.sparkContext.setLogLevel("ERROR")
        print(f"load before: {_load()}")
        for stream, label in (("bench", "data-only"), ("keyed", "keyed")):
            rows = client_consumer(url, stream)
            df = spark.read.format("mainstem").option("url", url).option("stream", stream) \
                .option("maxRecordsPerPartition", "250000").load()
            df.count()  # warm-up: JVM, Python workers, data source lookup
            ready = {f"{label} ready {size // 1024}k": _ready(spark, url, stream, rows, size)
                     for size in (BATCH_ROWS, 4 * BATCH_ROWS)}
            best = measure(rows, {
                f"{label} rstream": partial(rstream_consumer, port, stream, rows),
                f"{label} client": partial(client_consumer, url, stream),
                f"{label} count": df.count,
                f"{label} parquet": partial(df.write.mode("overwrite").parquet,
                                            os.path.join(data, "out.parquet")),
                **ready,
            }, args.runs)
            ratios(label, best)
        spark.stop()


if __name__ == "__main__":
    main()
