"""A table-enabled stream read by Spark's own Parquet scan and, past the table, through the
broker (`mainstem.spark.read_stream_table`): a broker with a directory tier writes the
stream `orders` (`table: parquet`) as a table; records published after the table caught
up are the tail. The rows equal the plain source's, every offset once, and the broker
delivered only the tail (its stream protocol counts every record it sends); a streaming
query starts from the history, follows the tail, and restarted reads nothing twice."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
import requests
from rstream import AMQPMessage, Producer

from mainstem.spark import read_stream_table
from mainstem.spark.history import batch_parts
from mainstem.spark.options import SourceError, SourceOptions
from mainstem.testing import ThreadedBroker
from tests.broker.test_tiering import tiered_config
from tests.spark.test_spark_tier import delivered
from tests.support.readme import README, readme_python_blocks

pytestmark = pytest.mark.spark

COLUMNS = ["key", "value", "stream", "topic", "partition", "offset", "timestamp",
           "timestampType", "headers", "properties"]


def message(i: int) -> AMQPMessage:
    return AMQPMessage(body=json.dumps({"n": i, "amount": i % 10}).encode(),
                       message_annotations={"x-routing-key": f"k{i % 3}"},
                       application_properties={"n": str(i), "flag": i % 2 == 0})


def publish(broker: ThreadedBroker, first: int, count: int, **arguments: str) -> None:
    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("orders", exists_ok=True, arguments=arguments)
            for start in range(first, first + count, 50):
                await producer.send_batch("orders", [message(i) for i in range(start, start + 50)])
    asyncio.run(run())


def table_end(broker: ThreadedBroker, wanted: int, stream: str = "orders") -> None:
    """Wait until the table's committed Iceberg head holds `wanted` records (the broker
    holds this one table)."""
    url = f"http://127.0.0.1:{broker.ports['admin']}/api/tiering"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = requests.get(url, auth=("guest", "guest"), timeout=10).json()["tables"]
        if rows and rows[0]["ends"] == [wanted] and rows[0]["metadata_location"]:
            parts = batch_parts(SourceOptions.parse(options(broker, stream=stream)))
            if parts[0].history_end == wanted:
                return
        time.sleep(0.1)
    raise AssertionError(f"the table never held {wanted} records")


def options(broker: ThreadedBroker, **more: str) -> dict[str, str]:
    return {"url": broker.urls["stream"], "stream": "orders",
            "adminUrl": f"http://127.0.0.1:{broker.ports['admin']}", **more}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    # rounds every 2 s: records published right after a round stay a tail for a while
    config = tiered_config(root / "data", root / "tier")
    config = dataclasses.replace(config, tiering=dataclasses.replace(config.tiering,
                                                                     check_interval_ms=2000))
    with ThreadedBroker(root / "data", config=config) as running:
        publish(running, 0, 600, table="parquet")
        table_end(running, 600)
        yield running


def test_a_batch_read_takes_history_from_the_table_and_the_tail_from_the_broker(
        spark, broker) -> None:
    publish(broker, 600, 100)
    parts = batch_parts(SourceOptions.parse(options(broker)))
    assert [(p.start, p.end) for p in parts] == [(0, 700)]
    assert parts[0].files and parts[0].history_end >= 600
    before = delivered(broker)
    rows = read_stream_table(spark, options(broker)).collect()
    through_broker = delivered(broker) - before
    plain = spark.read.format("mainstem").options(**options(broker)).load().collect()
    assert sorted(r.offset for r in rows) == list(range(700))  # each offset once
    assert sorted(rows, key=lambda r: r.offset) == sorted(plain, key=lambda r: r.offset)
    assert list(rows[0].asDict()) == COLUMNS
    assert through_broker == 700 - parts[0].history_end < 700
    assert [h.asDict() for h in next(r for r in rows if r.offset == 4).headers] == [
        {"key": "n", "value": b"4"}, {"key": "flag", "value": b"true"}]


def test_offsets_and_options_hold_across_the_seam(spark, broker) -> None:
    end = batch_parts(SourceOptions.parse(options(broker)))[0].history_end
    ranged = options(broker, startingOffsets=json.dumps({"orders": {"0": end - 5}}),
                     endingOffsets=json.dumps({"orders": {"0": end + 5}}),
                     includeHeaders="false")
    rows = read_stream_table(spark, ranged).collect()
    assert sorted(r.offset for r in rows) == list(range(end - 5, min(end + 5, 700)))
    assert "headers" not in rows[0].asDict()
    spark_sql = read_stream_table(spark, options(broker)).groupBy("key").agg(
        {"offset": "count"}).collect()
    assert sorted((bytes(r.key), r["count(offset)"]) for r in spark_sql) == [
        (b"k0", 234), (b"k1", 233), (b"k2", 233)]


def test_the_table_option_turns_it_off(spark, broker) -> None:
    before = delivered(broker)
    rows = read_stream_table(spark, options(broker, table="false")).count()
    assert rows == 700 and delivered(broker) - before == 700
    with pytest.raises(SourceError, match="option 'table' must be true or false"):
        read_stream_table(spark, options(broker, table="maybe"))


def test_a_streaming_query_starts_from_the_history_and_follows_the_tail(
        spark, broker, tmp_path: Path) -> None:
    checkpoint, sink = str(tmp_path / "cp"), str(tmp_path / "out")

    def run() -> None:
        query = (read_stream_table(spark, options(broker, startingOffsets="earliest"),
                                   streaming=True, checkpoint_location=checkpoint)
                 .select("offset", "value", "partition", "stream")
                 .writeStream.format("parquet").option("path", sink)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)

    with pytest.raises(SourceError, match="checkpoint_location"):
        read_stream_table(spark, options(broker), streaming=True)
    before = delivered(broker)
    run()
    first = sorted(r.offset for r in spark.read.parquet(sink).collect())
    assert first == list(range(len(first))) and len(first) >= 700
    pinned = json.loads((tmp_path / "cp" / "mainstem-history").glob("part-*").__next__()
                        .read_text())
    assert delivered(broker) - before == len(first) - pinned[0]["history_end"]
    publish(broker, len(first), 200)  # the table writes them too before the restart
    table_end(broker, len(first) + 200)
    run()
    again = spark.read.parquet(sink).collect()
    assert sorted(r.offset for r in again) == list(range(len(first) + 200))
    assert {(r.partition, r.stream) for r in again} == {(0, "orders")}


def test_the_readme_table_example_runs(spark, broker, monkeypatch) -> None:
    blocks = readme_python_blocks("Spark: the `mainstem` data source")
    (block,) = [block for block in blocks if "read_stream_table" in block]
    monkeypatch.setenv("MAINSTEM_ADMIN_URL", f"http://127.0.0.1:{broker.ports['admin']}")
    namespace = {"os": os, "spark": spark, "url": broker.urls["stream"]}
    exec(compile(block, str(README), "exec"), namespace)
    total = spark.read.format("mainstem").options(**options(broker)).load().count()
    assert namespace["history"].count() == total
