"""Spark batch read of a stream's tiered history, in one run: straight from the tier (the
tasks fetch the segments' indexes and chunks from the object store and decode them; the
broker only names the segments) against the same read through the broker (which reads the
tier through its block cache and sends the chunks over the stream protocol), and Spark's own
ceiling on this machine (`spark_bench.ReadyBatches`: the same rows, ready-made).

    .venv/bin/python -m bench.spark_tier_bench [--messages 5400000] [--runs 3]
        [--segment-bytes 32000000]

Starts its own broker with a directory tier (data and tier in a temporary directory), a
stream that keeps nothing sealed locally (`tier-local-max-bytes` 1) in 32 MB segments,
publishes 100-byte messages with rstream, waits until every sealed segment is tiered, then
counts the tiered offsets both ways, --runs rounds in turn, and prints each one's best and
median rows/s, the ratio of the bests, the machine's load, and the CPU seconds this process
(the broker; Spark's driver waits) spent per read: what the broker is spared. The broker's
tier cache (256 MiB) is smaller than the history, as it would be for a year of data.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rstream import AMQPMessage, Producer

from bench.spark_bench import BODY, _load, _ready, measure
from mainstem.client.stream import StreamClient
from mainstem.config import ServerConfig, TieringConfig
from mainstem.spark.pipelines import spark_session
from mainstem.spark.records import BATCH_ROWS
from mainstem.testing import ThreadedBroker

STREAM = "history"


async def fill(port: int, messages: int, segment_bytes: int) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream(STREAM, arguments={
            "stream-max-segment-size-bytes": segment_bytes, "tier-local-max-bytes": 1})
        batch = [AMQPMessage(body=BODY)] * 1000
        for _ in range(messages // 1000):
            await producer.send_batch(STREAM, batch)
        await producer.send_wait(STREAM, AMQPMessage(body=BODY))


def tiered_end(url: str) -> int:
    """The end of the tiered offsets once every sealed segment is tiered."""
    seen, since = -1, time.monotonic()
    deadline = since + 600
    with StreamClient.connect(url) as client:
        while time.monotonic() < deadline:
            segments = client.tiered_segments(STREAM).segments
            end = segments[-1].next_offset if segments else 0
            if end != seen:
                seen, since = end, time.monotonic()
            elif end and time.monotonic() - since > 5:  # no segment tiered for 5 s
                return end
            time.sleep(0.2)
    raise TimeoutError(f"tiering did not settle: tiered up to {seen}")


def cpu_counted(action: Callable[[], object], spent: list[float]) -> Callable[[], None]:
    """`action`, adding to `spent` the CPU seconds this process used while it ran."""
    def run() -> None:
        before = os.times()
        action()
        after = os.times()
        spent.append(after.user + after.system - before.user - before.system)
    return run


def config(data: Path) -> ServerConfig:
    return dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data), workers=0,
        tiering=TieringConfig(url=str(data / "tier"), check_interval_ms=200,
                              cache_bytes=256 * 1024 * 1024))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5_400_000)  # >= 5 M tiered
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--segment-bytes", type=int, default=32_000_000)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as data, \
            ThreadedBroker(data, config=config(Path(data))) as broker:
        started = time.perf_counter()
        asyncio.run(fill(broker.ports["stream"], args.messages, args.segment_bytes))
        url = broker.urls["stream"]
        rows = tiered_end(url)
        print(f"published {args.messages:,} and tiered {rows:,} records in "
              f"{time.perf_counter() - started:.0f} s")
        spark = spark_session("local[2]", "mainstem-tier-bench")
        spark.sparkContext.setLogLevel("ERROR")
        reads: dict[str, Callable[[], object]] = {}
        cpu: dict[str, list[float]] = {}
        for name, direct in (("from the tier", "true"), ("through the broker", "false")):
            df = spark.read.format("mainstem").option("url", url).option("stream", STREAM) \
                .option("endingOffsets", json.dumps({STREAM: {"0": rows}})) \
                .option("maxRecordsPerPartition", "250000").option("tier.direct", direct).load()
            assert df.count() == rows  # and a warm-up: JVM, Python workers
            reads[name] = cpu_counted(df.count, cpu.setdefault(name, []))
        reads["spark's ceiling"] = _ready(spark, url, STREAM, rows, BATCH_ROWS)
        print(f"load before: {_load()}")
        best = measure(rows, reads, args.runs)
        print(f"  from the tier / through the broker: "
              f"{best['from the tier'] / best['through the broker']:.2f}x")
        for name, spent in cpu.items():
            print(f"  broker CPU per read {name}: {statistics.median(spent):.2f} s")
        spark.stop()


if __name__ == "__main__":
    main()
