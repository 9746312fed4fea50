"""Typed columns read by Spark (issue 42): a table stream declaring its JSON bodies' schema
is read by `read_stream_table` with the typed columns and `schema_error`, from the table's
Parquet files (history) and made from the tail's bodies as the broker makes the table's;
the rows equal the plain source's plus the typed columns, which equal what the bodies say
(Python's json) and what DuckDB reads from the same files."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import duckdb
import pytest
import requests
from rstream import Producer

from mainstem.spark import read_stream_table
from mainstem.spark.history import batch_parts
from mainstem.spark.options import SourceOptions
from mainstem.testing import ThreadedBroker
from tests.broker.test_tables_typed import SCHEMA, expected, record
from tests.broker.test_tiering import tiered_config
from tests.spark.test_spark_table import options as table_options
from tests.spark.test_spark_table import table_end
from tests.spark.test_spark_tier import delivered

pytestmark = pytest.mark.spark

HISTORY, TAIL = 400, 60
TYPED = ["id", "amount", "customer", "vip", "due", "schema_error"]


def publish(broker: ThreadedBroker, first: int, count: int) -> None:
    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("typed", exists_ok=True, arguments={
                "table": "parquet", "table-schema": json.dumps(SCHEMA)})
            await producer.send_batch("typed", [record(i) for i in range(first, first + count)])
    asyncio.run(run())


def options(broker: ThreadedBroker) -> dict[str, str]:
    return table_options(broker, stream="typed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed")
    config = tiered_config(root / "data", root / "tier")
    # one round a minute: the records published after the first stay a tail
    config = dataclasses.replace(config, tiering=dataclasses.replace(config.tiering,
                                                                     check_interval_ms=60_000))
    with ThreadedBroker(root / "data", config=config) as running:
        publish(running, 0, HISTORY)
        table_end(running, HISTORY, stream="typed")
        publish(running, HISTORY, TAIL)
        yield running


def test_typed_columns_from_the_table_and_the_tail_agree_with_the_stream(spark, broker
                                                                          ) -> None:
    parts = batch_parts(SourceOptions.parse(options(broker)))
    assert (parts[0].history_end, parts[0].end) == (HISTORY, HISTORY + TAIL)
    before = delivered(broker)
    rows = sorted(read_stream_table(spark, options(broker)).collect(), key=lambda r: r.offset)
    assert delivered(broker) - before == TAIL  # the history came from the files
    plain = sorted(spark.read.format("mainstem").options(**options(broker)).load().collect(),
                   key=lambda r: r.offset)
    assert list(rows[0].asDict())[-len(TYPED):] == TYPED
    assert [{k: v for k, v in r.asDict().items() if k not in TYPED} for r in rows] == [
        r.asDict() for r in plain]
    wanted = [expected(bytes(r.value)) for r in plain]
    assert [r.schema_error is None for r in rows] == [w is not None for w in wanted]
    for name in ("id", "amount", "customer", "vip"):
        assert [r[name] for r in rows] == [None if w is None else w[name] for w in wanted]
    assert rows[6].due is not None and rows[HISTORY + 2].due is not None  # i % 6 == 0

    table = requests.get(f"http://127.0.0.1:{broker.ports['admin']}/api/tiering",
                         auth=("guest", "guest"), timeout=10).json()["tables"][0]
    files = f"{table['location'].removeprefix('file://')}/data/*/*.parquet"
    compared = [name for name in TYPED if name != "due"]  # Spark's timestamps are local
    from_duckdb = duckdb.sql(f"SELECT {', '.join(compared)} FROM read_parquet('{files}') "
                             f"WHERE \"offset\" < {HISTORY} ORDER BY \"offset\"").fetchall()
    assert from_duckdb == [tuple(r[name] for name in compared) for r in rows[:HISTORY]]


def test_a_spark_sql_aggregate_over_typed_columns(spark, broker) -> None:
    read_stream_table(spark, options(broker)).createOrReplaceTempView("typed")
    found = spark.sql("SELECT customer, count(*) AS n, sum(amount) AS total FROM typed "
                      "WHERE schema_error IS NULL GROUP BY customer ORDER BY customer"
                      ).collect()
    fits = [w for w in (expected(v) for v in (bytes(r.value) for r in spark.read.format(
        "mainstem").options(**options(broker)).load().collect())) if w is not None]
    assert [(r.customer, r.n, r.total) for r in found] == [
        (name, sum(w["customer"] == name for w in fits),
         sum(w["amount"] for w in fits if w["customer"] == name))
        for name in sorted({w["customer"] for w in fits})]
