"""Typed columns (issue 42): a table stream declaring its JSON bodies' schema
(`x-table-schema`, `table-schema` on the stream protocol and in a policy) gets a typed
column per field and `schema_error`; a record that does not fit keeps its row, its value,
null typed columns and why. DuckDB, Polars and pyiceberg read the same typed columns, equal
to what the bodies read from the stream say (checked here by Python's own json). The table
is partitioned by stream partition and the day of `timestamp`: a file holds one day, and a
scan of one day reads only its files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import duckdb
import polars as pl
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from rstream import Producer
from rstream.exceptions import ServerError

from mainstem import Broker
from mainstem.formats.amqp10 import Message, Properties, encode_message
from mainstem.formats.table_schema import SOURCE_COLUMNS, parse_schema
from mainstem.spark.records import ARROW_SCHEMA
from tests.broker.test_tables import refused_policy, table_of, wait_until_in_table
from tests.broker.test_tiering import connect, tiered_config
from tests.support.rstream_reads import read_with_rstream

SCHEMA = {"id": "long", "amount": "double", "customer": "string", "vip": "boolean?",
          "due": "timestamp?"}
COUNT = 400
DAY_MS = 86_400_000
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def body(i: int) -> bytes:
    """Record i's body: most fit the schema, every tenth (and a few more) does not."""
    good: dict[str, Any] = {"id": i, "amount": i % 977 + 0.25, "customer": f"c{i % 5}"}
    if i % 4 == 0:
        good["vip"] = i % 8 == 0
    if i % 6 == 0:
        good["due"] = "2026-02-03T04:05:06Z"
    kind = i % 20
    if kind == 3:
        return json.dumps(good, indent=2).encode()  # newlines between tokens: fits
    if kind == 7:
        return json.dumps({**good, "amount": i}).encode()  # an integer double: fits
    bad = {10: b"not json", 11: b"null", 12: b"[1, 2]", 13: b"", 14: b'{"id": 1} {"id": 2}',
           15: json.dumps({**good, "id": str(i)}).encode(),  # mistyped
           16: json.dumps({k: v for k, v in good.items() if k != "customer"}).encode(),
           17: json.dumps({**good, "id": 1.5}).encode(),
           18: b'{"id": 1, "amount": 2, "customer": "\xff"}',  # not UTF-8
           19: json.dumps({**good, "customer": None}).encode()}
    return bad.get(kind, json.dumps({**good, "extra": [1, {"x": None}]}).encode())


def expected(value: bytes) -> dict[str, Any] | None:
    """The typed fields of a body that fits, by Python's json; None when it does not."""
    try:
        found = json.loads(value.decode())
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    checks = {"id": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "amount": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
              "customer": lambda v: isinstance(v, str)}
    if any(not check(found.get(name)) for name, check in checks.items()):
        return None
    return {"id": found["id"], "amount": float(found["amount"]), "customer": found["customer"],
            "vip": found.get("vip"), "due": found.get("due")}


def record(i: int, day: int = 0) -> bytes:
    """Record i as an AMQP 1.0 message with a creation time on `day` (from EPOCH_MS)."""
    return encode_message(Message(body=body(i), properties=Properties(
        creation_time=EPOCH_MS + day * DAY_MS + i)))


def test_the_table_columns_are_the_sources() -> None:
    assert tuple(ARROW_SCHEMA.names) == SOURCE_COLUMNS


async def test_declared_fields_become_typed_columns_in_duckdb_polars_and_pyiceberg(
        tmp_path: Path) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("orders", arguments={
                "table": "parquet", "table-schema": json.dumps(SCHEMA)})
            for first in range(0, COUNT, 100):
                await producer.send_batch("orders", [record(i) for i in range(first, first + 100)])
        await wait_until_in_table(broker, "orders", COUNT)
        bodies = await read_with_rstream(broker.ports["stream"], "orders", expected=COUNT)
        table = await table_of(broker, "orders")
    assert table["schema"] == SCHEMA
    wanted = [expected(value) for value in bodies]
    assert sum(row is None for row in wanted) == COUNT // 2  # kinds 10 to 19

    iceberg = StaticTable.from_metadata(table["metadata_location"])
    typed = ["id", "amount", "customer", "vip", "due", "schema_error"]
    assert [field.name for field in iceberg.schema().fields] == [*ARROW_SCHEMA.names, *typed]
    rows = iceberg.scan().to_arrow().sort_by("offset")
    assert rows.column("value").to_pylist() == bodies  # every record, fitting or not
    assert_typed(rows, wanted)
    assert rows.schema.field("id").type == pa.int64()
    assert rows.schema.field("due").type == pa.timestamp("us", tz="UTC")

    files = f"{table['location'].removeprefix('file://')}/data/*/*.parquet"
    assert_typed(duckdb.sql(f"SELECT * FROM read_parquet('{files}') ORDER BY \"offset\""
                            ).to_arrow_table(), wanted)
    from_polars = pl.scan_iceberg(table["metadata_location"]).sort("offset").collect().to_arrow()
    assert_typed(from_polars, wanted)
    totals = duckdb.sql(f"SELECT customer, count(*), sum(amount) FROM read_parquet('{files}') "
                        "WHERE schema_error IS NULL GROUP BY customer ORDER BY customer"
                        ).fetchall()
    fits = [row for row in wanted if row is not None]
    assert totals == [(name, sum(r["customer"] == name for r in fits),
                       sum(r["amount"] for r in fits if r["customer"] == name))
                      for name in sorted({r["customer"] for r in fits})]


def assert_typed(rows: pa.Table, wanted: list[dict[str, Any] | None]) -> None:
    """The typed columns are the fitting bodies' fields, null with a reason elsewhere."""
    errors = rows.column("schema_error").to_pylist()
    assert [error is None for error in errors] == [row is not None for row in wanted]
    for name in ("id", "amount", "customer", "vip"):
        assert rows.column(name).to_pylist() == [None if row is None else row[name]
                                                 for row in wanted], name
    due = [None if moment is None else moment.isoformat().replace("+00:00", "Z")
           for moment in rows.column("due").to_pylist()]
    assert due == [None if row is None else row["due"] for row in wanted]
    assert errors[10] == "not a JSON object" and errors[11] == "not a JSON object"
    assert errors[13] == "not a JSON object" and errors[18] == "not UTF-8"
    assert errors[15].startswith("does not fit: ") and "/id" in errors[15]
    assert errors[16] == "field 'customer' is missing or null"


async def test_a_file_holds_one_day_and_a_scan_of_a_day_reads_only_its_files(
        tmp_path: Path) -> None:
    """Creation times of three days, the first day coming back after the second: each
    file holds one day (the writer cuts where the day changes), the spec partitions by
    stream partition and day, and a filter on a day plans only that day's files."""
    days = [0] * 100 + [1] * 100 + [0] * 50 + [2] * 50
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("days", arguments={"table": "parquet"})
            await producer.send_batch("days", [record(i, day) for i, day in enumerate(days)])
        await wait_until_in_table(broker, "days", len(days))
        table = await table_of(broker, "days")
    iceberg = StaticTable.from_metadata(table["metadata_location"])
    assert [(field.name, str(field.transform)) for field in iceberg.spec().fields] == [
        ("partition", "identity"), ("timestamp_day", "day")]
    tasks = list(iceberg.scan().plan_files())
    assert len(tasks) >= 4
    for task in tasks:  # one day a file
        assert task.file.partition[1] in {20454, 20455, 20456}  # days since 1970
    second = list(iceberg.scan(row_filter="timestamp >= '2026-01-02T00:00:00+00:00' and "
                                          "timestamp < '2026-01-03T00:00:00+00:00'"
                               ).plan_files())
    assert 0 < len(second) < len(tasks)
    rows = iceberg.scan().to_arrow().sort_by("offset")
    assert rows.column("offset").to_pylist() == list(range(len(days)))
    assert [moment.timestamp() * 1000 // DAY_MS - EPOCH_MS // DAY_MS
            for moment in rows.column("timestamp").to_pylist()] == days


@pytest.mark.parametrize("schema", ['{"id": "int"}', "[]", "{}", "not json",
                                    '{"offset": "long"}', '{"schema_error": "string"}'])
async def test_a_schema_that_is_not_one_is_refused(tmp_path: Path, schema: str) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            with pytest.raises(ServerError):
                await producer.create_stream("bad", arguments={"table": "parquet",
                                                               "table-schema": schema})
        declared = json.loads(schema) if schema.startswith(("{", "[")) else schema
        answer = await refused_policy(broker, {"table": "parquet", "table-schema": declared})
        assert "a valid table schema" in answer
        assert broker.core.streams.find("/", "bad") is None


def test_the_schema_shape() -> None:
    declared = parse_schema({"id": "long", "note": "string?"})
    assert [(f.name, f.type, f.optional) for f in declared.fields] == [
        ("id", "long", False), ("note", "string", True)]
    assert declared.spark_ddl() == "`id` BIGINT, `note` STRING, schema_error STRING"
    assert parse_schema(json.dumps(declared.as_json())) == declared


async def test_a_policy_schema_that_gains_a_field_widens_the_table(tmp_path: Path) -> None:
    url = "/api/policies/%2F/typed"
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        admin = f"http://127.0.0.1:{broker.ports['admin']}"

        async def policy(schema: dict[str, str]) -> None:
            definition = {"table": "parquet", "table-schema": schema}
            async with aiohttp.ClientSession(headers=guest) as http, http.put(
                    admin + url, json={"pattern": "^grown$", "apply-to": "streams",
                                       "definition": definition}) as response:
                assert response.status in (201, 204), await response.text()

        await policy({"id": "long"})
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("grown")
            await producer.send_batch("grown", [record(i) for i in range(50)])
            await wait_until_in_table(broker, "grown", 50)
            await policy({"id": "long", "customer": "string?"})
            await producer.send_batch("grown", [record(i) for i in range(50, 100)])
            await wait_until_in_table(broker, "grown", 100)
        table = await table_of(broker, "grown")
    assert table["schema"] == {"id": "long", "customer": "string?"}
    rows = StaticTable.from_metadata(table["metadata_location"]).scan().to_arrow().sort_by(
        "offset")
    customers = rows.column("customer").to_pylist()
    assert customers[:50] == [None] * 50  # written before the field was declared
    assert customers[50:] == [None if expected(body(i)) is None else f"c{i % 5}"
                              for i in range(50, 100)]
