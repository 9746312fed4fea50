"""Streams as tables (issue 42): a stream declared with `x-table: parquet` (AMQP queue
argument, `table` on the stream protocol or in a policy) is written by the broker as
Parquet with Iceberg metadata in its directory tier; DuckDB, Polars and pyiceberg read the
same rows, in the same order, as reading the stream gives. Anything else is refused."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import duckdb
import polars as pl
import pytest
from pyarrow.dataset import dataset as parquet_dataset
from pyarrow.fs import S3FileSystem
from pyiceberg.table import StaticTable
from rstream import AMQPMessage, Producer
from rstream.exceptions import ServerError

from mainstem import Broker
from mainstem.config import ServerConfig
from mainstem.testing import ThreadedBroker
from tests.admin.test_prometheus import scrape
from tests.broker.test_tiering import connect, tiered_config
from tests.support.readme import README, readme_python_blocks
from tests.support.rstream_reads import read_with_rstream
from tests.support.s3_servers import S3Server
from tests.support.waiting import wait_until

COUNT = 700  # several chunks and, at 250 a round of publishing, several table files


async def tables_api(broker: Broker) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{broker.ports['admin']}/api/tiering"
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=guest) as http, http.get(url) as response:
        assert response.status == 200, await response.text()
        rows: list[dict[str, Any]] = (await response.json())["tables"]
        return rows


async def table_of(broker: Broker, stream: str) -> dict[str, Any]:
    return next(row for row in await tables_api(broker) if row["stream"] == stream)


def message(i: int) -> AMQPMessage:
    return AMQPMessage(body=f"body-{i}".encode(),
                       application_properties={"key": f"k{i % 7}", "n": str(i)})


async def publish(broker: Broker, stream: str, first: int, count: int) -> None:
    async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
        for start in range(first, first + count, 50):
            await producer.send_batch(stream, [message(i) for i in range(start, start + 50)])


async def test_a_table_stream_reads_the_same_in_duckdb_polars_and_pyiceberg(tmp_path: Path
                                                                            ) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("orders", arguments={"table": "parquet"})
            await producer.create_stream("plain")
        for first in range(0, COUNT, 250):  # several rounds: several files
            await publish(broker, "orders", first, min(250, COUNT - first))
            await asyncio.sleep(0.2)
        await wait_until_in_table(broker, "orders", COUNT)
        bodies = await read_with_rstream(broker.ports["stream"], "orders", expected=COUNT)
        table = await table_of(broker, "orders")
        assert [row["stream"] for row in await tables_api(broker)] == ["orders"]
        assert table["lag"] == 0 and table["ends"] == [COUNT]
    assert len(bodies) == COUNT

    files = f"{table['location'].removeprefix('file://')}/data/*/*.parquet"
    from_duckdb = duckdb.sql(
        f"SELECT \"offset\", value, key, headers FROM read_parquet('{files}') "
        "ORDER BY partition, \"offset\"").fetchall()
    assert [row[0] for row in from_duckdb] == list(range(COUNT))
    assert [bytes(row[1]) for row in from_duckdb] == bodies
    assert [bytes(row[2]) for row in from_duckdb] == [f"k{i % 7}".encode() for i in range(COUNT)]
    assert from_duckdb[3][3] == [{"key": "key", "value": b"k3"}, {"key": "n", "value": b"3"}]
    assert duckdb.sql(f"SELECT count(DISTINCT filename) > 1 FROM read_parquet('{files}', "
                      "filename = true)").fetchall() == [(True,)]

    metadata = table["metadata_location"]
    from_iceberg = StaticTable.from_metadata(metadata).scan().to_arrow().sort_by("offset")
    assert from_iceberg.column("offset").to_pylist() == list(range(COUNT))
    assert from_iceberg.column("value").to_pylist() == bodies
    assert set(from_iceberg.column("partition").to_pylist()) == {0}
    from_polars = pl.scan_iceberg(metadata).sort("offset").collect()
    assert from_polars["value"].to_list() == bodies
    assert from_polars["stream"].unique().to_list() == ["orders"]


async def wait_until_in_table(broker: Broker, stream: str, count: int,
                              properties: dict[str, str] | None = None) -> None:
    tables = broker.core.tables
    assert tables is not None
    found = broker.core.streams.get("/", stream)
    await wait_until(lambda: sum(tables.table_end(found, i) for i in range(len(found.services)))
                     >= count and
                     tables.metadata_location(found) is not None, what="the table written",
                     timeout_s=30)
    await wait_until(lambda: tables.lag(found) == 0, what="no lag", timeout_s=30)
    for _ in range(100):  # the Iceberg commit follows the data file's record
        row = await table_of(broker, stream)
        if row["metadata_location"] and _rows_in(row["metadata_location"],
                                                 properties or {}) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the Iceberg metadata never held every row")


def _rows_in(metadata: str, properties: dict[str, str]) -> int:
    table = StaticTable.from_metadata(metadata, properties)
    return int(table.scan().to_arrow().num_rows)


async def test_an_amqp_stream_queue_with_x_table_is_a_table(tmp_path: Path) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/")
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue("audit", durable=True, arguments={
                "x-queue-type": "stream", "x-table": "parquet"})
            for i in range(30):
                await channel.default_exchange.publish(aio_pika.Message(f"a{i}".encode()),
                                                       routing_key="audit")
        await wait_until_in_table(broker, "audit", 30)
        table = await table_of(broker, "audit")
    rows = StaticTable.from_metadata(table["metadata_location"]).scan().to_arrow()
    assert sorted(rows.column("value").to_pylist()) == sorted(f"a{i}".encode()
                                                              for i in range(30))
    assert set(rows.column("key").to_pylist()) == {b"audit"}  # x-routing-key, as Spark's


@pytest.mark.parametrize("value", ["csv", "", 1, True])
async def test_any_other_table_value_is_refused(tmp_path: Path, value: object) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/")
        async with connection:
            channel = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed,
                               match="x-table must be one of 'parquet'"):
                await channel.declare_queue("bad", durable=True, arguments={
                    "x-queue-type": "stream", "x-table": value})
        if isinstance(value, str):  # the stream protocol's arguments are strings
            async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
                with pytest.raises(ServerError):
                    await producer.create_stream("bad", arguments={"table": value})
        assert "a valid table format" in await refused_policy(broker, {"table": value})
        assert broker.core.streams.find("/", "bad") is None


async def refused_policy(broker: Broker, definition: dict[str, object]) -> str:
    """The management API's answer to a policy for the stream `bad` with `definition`,
    which it must refuse (400)."""
    url = f"http://127.0.0.1:{broker.ports['admin']}/api/policies/%2F/refused"
    policy = {"pattern": "^bad$", "apply-to": "streams", "definition": definition}
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=guest) as http, \
            http.put(url, json=policy) as response:
        assert response.status == 400
        return await response.text()


async def test_a_policy_makes_a_stream_a_table(tmp_path: Path) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        url = f"http://127.0.0.1:{broker.ports['admin']}/api/policies/%2F/tables"
        policy = {"pattern": "^ledger$", "apply-to": "streams",
                  "definition": {"table": "parquet"}}
        guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
        async with aiohttp.ClientSession(headers=guest) as http, \
                http.put(url, json=policy) as response:
            assert response.status == 201, await response.text()
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("ledger")
        await publish(broker, "ledger", 0, 100)
        await wait_until_in_table(broker, "ledger", 100)


async def test_a_partitioned_stream_is_one_table_partitioned_by_stream_partition(
        tmp_path: Path) -> None:
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        broker.core.streams.create("/", "wide", 3, {"x-table": "parquet"})
        for index in range(3):
            await publish(broker, f"wide-{index}", index * 1000, 100 * (index + 1))
        tables = broker.core.tables
        assert tables is not None
        wide = broker.core.streams.get("/", "wide")
        await wait_until(lambda: [tables.table_end(wide, i) for i in range(3)] == [100, 200, 300]
                         and tables.lag(wide) == 0, what="every partition in the table")
        read = [await read_with_rstream(broker.ports["stream"], f"wide-{index}",
                                        expected=100 * (index + 1)) for index in range(3)]
        await wait_until_in_table(broker, "wide", 600)
        table = await table_of(broker, "wide")
    iceberg = StaticTable.from_metadata(table["metadata_location"])
    assert [field.name for field in iceberg.spec().fields] == ["partition", "timestamp_day"]
    for index in range(3):  # one partition's rows, pruned by the partition column
        rows = iceberg.scan(row_filter=f"partition = {index}").to_arrow().sort_by("offset")
        assert rows.column("value").to_pylist() == read[index]
        assert rows.column("offset").to_pylist() == list(range(100 * (index + 1)))
        assert set(rows.column("stream").to_pylist()) == {"wide"}


async def test_the_readme_tables_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """The blocks run in order in one namespace, as a reader would paste them."""
    blocks = readme_python_blocks("Streams as tables")
    assert len(blocks) == 2
    config = tiered_config(tmp_path / "data", tmp_path / "tier")
    with ThreadedBroker(tmp_path / "data", config=config) as broker:
        monkeypatch.setenv("MAINSTEM_STREAM_PORT", str(broker.ports["stream"]))
        monkeypatch.setenv("MAINSTEM_ADMIN_URL", f"http://127.0.0.1:{broker.ports['admin']}")
        namespace: dict[str, Any] = {}
        for block in blocks:
            await asyncio.to_thread(exec, compile(block, str(README), "exec"), namespace)
    assert namespace["totals"] == [(b"c0", 100, 14850), (b"c1", 100, 14950),
                                   (b"c2", 100, 15050)]


async def test_a_table_without_a_tier_is_refused(tmp_path: Path) -> None:
    config = dataclasses.replace(ServerConfig.defaults(host="127.0.0.1", port=0,
                                                       data_dir=tmp_path / "data"), workers=0)
    async with Broker(config=config) as broker:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/")
        async with connection:
            channel = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed,
                               match="x-table needs a tier"):
                await channel.declare_queue("untiered", durable=True, arguments={
                    "x-queue-type": "stream", "x-table": "parquet"})
        assert broker.core.streams.find("/", "untiered") is None


async def test_a_table_in_an_s3_tier_reads_the_same(tmp_path: Path, s3: S3Server) -> None:
    """pyiceberg reads the table from the bucket, and DuckDB its Parquet files (through
    pyarrow's S3 file system: DuckDB's own S3 reader is an extension it downloads)."""
    config = tiered_config(tmp_path / "data", s3.url("history"), endpoint=s3.endpoint,
                           **s3.keys)
    async with Broker(config=config) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("s3-orders", arguments={"table": "parquet"})
        await publish(broker, "s3-orders", 0, 200)
        await wait_until_in_table(broker, "s3-orders", 200, s3.pyiceberg_properties)
        bodies = await read_with_rstream(broker.ports["stream"], "s3-orders", expected=200)
        table = await table_of(broker, "s3-orders")
    assert table["location"].startswith(f"{s3.url('history')}/tables/")
    rows = StaticTable.from_metadata(table["metadata_location"], s3.pyiceberg_properties
                                     ).scan().to_arrow().sort_by("offset")
    assert rows.column("value").to_pylist() == bodies
    bucket = S3FileSystem(access_key=s3.access_key_id, secret_key=s3.secret_access_key,
                          endpoint_override=s3.endpoint, region="us-east-1")
    files = duckdb.from_arrow(parquet_dataset(f"{table['location'].removeprefix('s3://')}/data",
                                              filesystem=bucket, format="parquet"))
    assert files.query("files", 'SELECT value FROM files ORDER BY "offset"').fetchall() == [
        (body,) for body in bodies]


async def test_a_deleted_streams_table_goes_and_a_new_one_starts_clean(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    async with Broker(config=tiered_config(tmp_path / "data", tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("again", arguments={"table": "parquet"})
        await publish(broker, "again", 0, 100)
        await wait_until_in_table(broker, "again", 100)
        location = Path((await table_of(broker, "again"))["location"].removeprefix("file://"))
        assert list(location.rglob("*.parquet"))
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.delete_stream("again")
        await wait_until(lambda: not list(location.rglob("*")) or not any(
            path.is_file() for path in location.rglob("*")), what="the old table deleted")

        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("again", arguments={"table": "parquet"})
        await publish(broker, "again", 500, 50)
        await wait_until_in_table(broker, "again", 50)
        table = await table_of(broker, "again")
    files = f"{location}/data/*/*.parquet"
    values = [bytes(row[0]) for row in duckdb.sql(
        f"SELECT value FROM read_parquet('{files}') ORDER BY \"offset\"").fetchall()]
    assert values == [f"body-{i}".encode() for i in range(500, 550)]
    rows = StaticTable.from_metadata(table["metadata_location"]).scan().to_arrow()
    assert rows.column("value").to_pylist() == values


async def test_the_lag_shows_in_the_api_and_the_metrics_until_a_round_writes(
        tmp_path: Path) -> None:
    config = tiered_config(tmp_path / "data", tmp_path / "tier")
    assert config.tiering is not None
    rare = dataclasses.replace(config.tiering, check_interval_ms=3_600_000)  # one round
    async with Broker(config=dataclasses.replace(config, tiering=rare)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("lagging", arguments={"table": "parquet"})
        await publish(broker, "lagging", 0, 150)
        tables = broker.core.tables
        assert tables is not None
        assert (await table_of(broker, "lagging"))["lag"] == 150
        lag = ("mainstem_table_lag_records", frozenset({"vhost": "/", "stream": "lagging"}.items()))
        metrics = await scrape(broker.ports["prometheus"], "/metrics/per-object")
        assert metrics[lag] == 150
        assert await tables.round() == 1
        row = await table_of(broker, "lagging")
        assert (row["lag"], row["ends"]) == (0, [150])
        metrics = await scrape(broker.ports["prometheus"], "/metrics/per-object")
        assert metrics[lag] == 0
        assert metrics["mainstem_table_rows_total", frozenset()] == 150
        assert metrics["mainstem_table_files_total", frozenset()] == 1
