"""A Spark SQL aggregate over a stream's history: Spark's own Parquet scan of the stream's
table (`mainstem.spark.read_stream_table`) against the same query through the `mainstem`
source (every record through the broker and Spark's Python data source).

    .venv/bin/python -m bench.spark_table_bench [--messages 500000] [--runs 2]

One run: a `mainstem serve` with a directory tier, rstream publishing --messages JSON
records (about 35 bytes, keyed by `x-routing-key` over 100 keys) into a stream declared
with `table: parquet` and `table-schema: {"id": "long", "amount": "long"}`; once the
table's committed Iceberg head holds them all, the query `GROUP BY key: count(*),
sum(amount)` on a `local[2]` SparkSession three ways: on the table's typed column
`amount`, on the table's `value` through `get_json_object` (what the table offered before
typed columns), and through the source (`get_json_object` over the bodies it delivers);
and the same grouping without the JSON (count by key) on the table and through the
source; each --runs times in turns (the best kept). The table's DataFrame is planned once
and run again, as the source's is (`read_stream_table` planning, a fixed cost per query of
asking the management API and reading the Iceberg metadata, is timed apart, and the typed
query is timed with it too). Prints rows/s of each, their ratios to the source's and the
load average; checks that every way gives the same groups, asserts nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rstream import AMQPMessage, Producer

from bench.broker_process import start_server, stop_server
from mainstem.spark import read_stream_table
from mainstem.spark.history import batch_parts
from mainstem.spark.options import SourceOptions
from mainstem.spark.pipelines import spark_session

BATCH = 1000
KEYS = 100
SCHEMA = json.dumps({"id": "long", "amount": "long"})


def message(index: int) -> AMQPMessage:
    return AMQPMessage(body=json.dumps({"id": index, "amount": index % 977}).encode(),
                       message_annotations={"x-routing-key": f"user-{index % KEYS}"})


async def publish(port: int, messages: int) -> None:
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream("orders", arguments={"table": "parquet",
                                                          "table-schema": SCHEMA})
        for start in range(0, messages, BATCH):
            await producer.send_batch("orders", [message(i) for i in
                                                 range(start, min(start + BATCH, messages))])


def wait_for_table(options: dict[str, str], messages: int) -> None:
    for _ in range(3600):
        if batch_parts(SourceOptions.parse(options))[0].history_end == messages:
            return
        time.sleep(0.5)
    raise AssertionError("the table never caught up")


def aggregate(frame: Any) -> list[tuple[str, int, int]]:
    """The issue's query: per key, the count and the sum of the body's JSON `amount`."""
    rows = (frame.selectExpr("CAST(key AS STRING) AS key",
                             "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)"
                             " AS amount")
            .groupBy("key").agg({"*": "count", "amount": "sum"}).collect())
    return sorted((r["key"], r["count(1)"], r["sum(amount)"]) for r in rows)


def typed_aggregate(frame: Any) -> list[tuple[str, int, int]]:
    """The same query on the table's typed column."""
    rows = (frame.selectExpr("CAST(key AS STRING) AS key", "amount")
            .groupBy("key").agg({"*": "count", "amount": "sum"}).collect())
    return sorted((r["key"], r["count(1)"], r["sum(amount)"]) for r in rows)


def count_by_key(frame: Any) -> list[tuple[str, int, int]]:
    """The same without the JSON: what reading costs, Spark's JSON parsing left out."""
    rows = frame.groupBy("key").count().collect()
    return sorted((bytes(r["key"]).decode(), r["count"], 0) for r in rows)


def best_rates(queries: dict[str, Callable[[], list[tuple[str, int, int]]]], rows: int,
               runs: int) -> tuple[dict[str, float], dict[str, list[tuple[str, int, int]]]]:
    """Each query's best rows/s of `runs`, the queries taking turns (so that both see the
    same load), and what each gave."""
    best = dict.fromkeys(queries, 0.0)
    results: dict[str, list[tuple[str, int, int]]] = {}
    for _ in range(runs):
        for name, query in queries.items():
            started = time.perf_counter()
            results[name] = query()
            best[name] = max(best[name], rows / (time.perf_counter() - started))
    return best, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark listens on loopback only
    with tempfile.TemporaryDirectory() as root:
        server, ports = start_server(Path(root, "data"), Path(root, "server.log"),
                                     "--tier-url", str(Path(root, "tier")))
        try:
            started = time.perf_counter()
            asyncio.run(publish(ports["stream"], args.messages))
            print(f"published {args.messages} in {time.perf_counter() - started:.0f} s")
            options = {"url": f"rabbitmq-stream://guest:guest@127.0.0.1:{ports['stream']}/%2F",
                       "stream": "orders", "adminUrl": f"http://127.0.0.1:{ports['admin']}"}
            wait_for_table(options, args.messages)
            print(f"table caught up after {time.perf_counter() - started:.0f} s")
            spark = spark_session("local[2]", "mainstem-table-bench")
            spark.sparkContext.setLogLevel("ERROR")
            spark.conf.set("spark.sql.shuffle.partitions", "2")  # 2 cores, 100 groups
            source = spark.read.format("mainstem").options(**options).load()
            source.limit(10).collect()  # warm-up: JVM, Python workers, data source lookup
            started = time.perf_counter()
            table = read_stream_table(spark, options)
            print(f"planning the table read: {time.perf_counter() - started:.2f} s")
            print(f"load before: {os.getloadavg()[0]:.2f}")
            best, results = best_rates({
                "table typed, planned each time": lambda: typed_aggregate(
                    read_stream_table(spark, options)),
                "table typed": lambda: typed_aggregate(table),
                "table json": lambda: aggregate(table),
                "source json": lambda: aggregate(source),
                "table count": lambda: count_by_key(table),
                "source count": lambda: count_by_key(source)}, args.messages, args.runs)
            print(f"load after: {os.getloadavg()[0]:.2f}")
            for way, through in (("table typed, planned each time", "source json"),
                                 ("table typed", "source json"),
                                 ("table json", "source json"),
                                 ("table count", "source count")):
                assert results[way] == results[through]
                assert sum(n for _, n, _ in results[way]) == args.messages
            print(f"{len(results['table json'])} groups, identical every way")
            for way, through, label in (
                    ("table typed, planned each time", "source json",
                     "count and sum of amount by key, the table's typed column, planning "
                     "counted"),
                    ("table typed", "source json",
                     "count and sum of amount by key, the table's typed column"),
                    ("table json", "source json",
                     "count and sum of $.amount by key, get_json_object on the table"),
                    ("table count", "source count", "count by key (no JSON)")):
                print(f"{label}: table (Spark's Parquet scan) {best[way] / 1e6:.2f} M rows/s, "
                      f"through the source {best[through] / 1e6:.2f} M rows/s: "
                      f"{best[way] / best[through]:.1f}x")
            spark.stop()
        finally:
            stop_server(server)


if __name__ == "__main__":
    main()
