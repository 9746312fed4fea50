"""Streams as tables, operated (issue 42): the Iceberg metadata objects are the tier's own
write-once puts, named by the head that reaches them; retention expires data files and
snapshots and deletes what no head or record names; the API, metrics and `mainstem ctl`
show each table's lag, files, bytes and errors; a table is rebuilt from the stream."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiohttp
import duckdb
import pytest
from pyiceberg.table import StaticTable
from rstream import AMQPMessage, Producer

from mainstem import Broker
from mainstem.broker.streams import Stream
from mainstem.broker.tables import Tables
from mainstem.log.errors import ObjectExists
from tests.admin.test_prometheus import scrape
from tests.broker.test_tables import publish, table_of, wait_until_in_table
from tests.broker.test_tiering import connect, tiered_config
from tests.support.waiting import wait_until

SMALL_SEGMENTS = {"table": "parquet", "stream-max-segment-size-bytes": "20000"}


def tables_of(broker: Broker) -> Tables:
    assert broker.core.tables is not None
    return broker.core.tables


def files_under(tier: Path, part: str) -> set[str]:
    """The tables' objects under their `part` folder (data or metadata)."""
    return {str(path.relative_to(tier)) for path in (tier / "tables").rglob("*")
            if path.is_file() and not path.name.startswith(".")
            and path.relative_to(tier).parts[2] == part}


def head_objects(broker: Broker, stream: str) -> set[str]:
    heads = broker.core.catalog.table_heads("/", stream)
    assert len(heads) == 1, heads  # older heads are dropped once a newer is recorded
    return set(next(iter(heads.values())).objects)


def table_keys(broker: Broker, stream: str) -> set[str]:
    return {file.key for files in broker.core.catalog.table_files("/", stream).values()
            for file in files}


async def write_rounds(broker: Broker, stream: str, rounds: int, per_round: int,
                       body: int = 0) -> None:
    """A file per round; `body`: bodies of that many bytes, else `publish`'s."""
    for first in range(0, rounds * per_round, per_round):
        if body:
            async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
                for _ in range(0, per_round, 50):
                    await producer.send_batch(stream, [AMQPMessage(body=bytes(body))] * 50)
        else:
            await publish(broker, stream, first, per_round)
        await wait_until_in_table(broker, stream, first + per_round)


async def test_metadata_objects_are_write_once_tier_puts_named_by_the_head(
        tmp_path: Path) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("orders", arguments={"table": "parquet"})
        await write_rounds(broker, "orders", 4, 100)
        tables = tables_of(broker)
        named = head_objects(broker, "orders")
        # no upload is left open, and every metadata object the tier holds is one the
        # head reaches (the older ones, out of the metadata log, went as garbage)
        await wait_until(lambda: files_under(tier, "metadata") == named
                         and broker.core.catalog.garbage_count() == 0,
                         what="the metadata objects no head names deleted")
        assert broker.core.catalog.uploads() == []
        metadata = (await table_of(broker, "orders"))["metadata_location"]
        assert metadata.removeprefix(tier.resolve().as_uri() + "/") in named
        assert any(key.endswith(".avro") for key in named)
        # a put to a key that exists fails, and the object stays as it was
        existing = tier / metadata.removeprefix(tier.resolve().as_uri() + "/")
        before = existing.read_bytes()
        with pytest.raises(ObjectExists):
            await asyncio.to_thread(tables._put_metadata, metadata, b"{}")
        assert existing.read_bytes() == before
    rows = StaticTable.from_metadata(metadata).scan().to_arrow()
    assert sorted(rows.column("offset").to_pylist()) == list(range(400))


def as_before_migration_15(data: Path) -> None:
    """The catalog as a broker before migration 15 left it: head records without the
    objects they reach (the migration gives them none)."""
    with sqlite3.connect(data / "catalog.sqlite") as db:
        db.execute("ALTER TABLE table_heads DROP COLUMN objects")
        db.execute("PRAGMA user_version = 14")


async def test_objects_of_heads_recorded_before_migration_15_are_collected(
        tmp_path: Path) -> None:
    """A head recorded before migration 15 names no objects: once newer heads replace it,
    what its metadata reached and no live head does leaves the tier (never what a live
    head reaches: the table reads whole)."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("old", arguments={"table": "parquet"})
        await write_rounds(broker, "old", 3, 100)
        before = head_objects(broker, "old")
    as_before_migration_15(data)
    async with Broker(config=tiered_config(data, tier)) as broker:
        heads = broker.core.catalog.table_heads("/", "old")
        assert [head.objects for head in heads.values()] == [()]  # as migration 15 left it
        assert files_under(tier, "metadata") == before
        for first in (300, 400, 500):
            await publish(broker, "old", first, 100)
            await wait_until_in_table(broker, "old", first + 100)
        await wait_until(lambda: files_under(tier, "metadata") == head_objects(broker, "old")
                         and broker.core.catalog.garbage_count() == 0,
                         what="the metadata objects no head names deleted")
        assert not before & files_under(tier, "metadata") - head_objects(broker, "old")
        metadata = (await table_of(broker, "old"))["metadata_location"]
    rows = StaticTable.from_metadata(metadata).scan().to_arrow()
    assert sorted(rows.column("offset").to_pylist()) == list(range(600))


async def test_retention_expires_the_tables_files_and_snapshots(tmp_path: Path) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("short", arguments=SMALL_SEGMENTS)
        await write_rounds(broker, "short", 6, 200, body=400)  # 6 files, many segments
        first_files = table_keys(broker, "short")
        assert len(first_files) == 6
        stream = broker.core.streams.get("/", "short")
        partition = stream.partitions[0]
        partition.retention = dataclasses.replace(partition.retention, max_bytes=250_000)
        partition.apply_retention()
        first = stream.services[0].first_offset
        assert first > 200  # the first file's records at least are gone

        def expired() -> bool:
            files = broker.core.catalog.table_files("/", "short")[0]
            return (all(file.next_offset > first for file in files) and
                    files_under(tier, "data") == table_keys(broker, "short") and
                    files_under(tier, "metadata") == head_objects(broker, "short") and
                    in_the_metadata(tables_of(broker), stream) == table_keys(broker, "short"))
        await wait_until(expired, what="expired files and snapshots deleted")
        kept = table_keys(broker, "short")
        assert kept < first_files
        metadata = (await table_of(broker, "short"))["metadata_location"]
        table = StaticTable.from_metadata(metadata)
        assert len(table.metadata.snapshots) == 1  # no grace period here: only the current
        offsets = sorted(table.scan().to_arrow().column("offset").to_pylist())
        assert offsets[-1] == 1199 and offsets == list(range(offsets[0], 1200))
        assert offsets[0] <= first  # a file holding a retained record stays whole
        assert table.scan().to_arrow().num_rows == duckdb.sql(
            f"SELECT count(*) FROM read_parquet('{tier}/tables/*/data/*/*.parquet')"
        ).fetchall()[0][0]
        summary = await table_of(broker, "short")
        assert (summary["files"], summary["rows"]) == (len(kept), len(offsets))
        assert tables_of(broker).stats.expired == len(first_files - kept)


async def test_removed_partitions_leave_the_table_the_catalog_and_the_tier(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Iggy's DELETE_PARTITIONS: the removed partitions' data files' records go, their
    objects through the garbage queue (logged), and the metadata stops naming them; a
    partition grown back under an old index is written to the table from its start."""
    caplog.set_level(logging.INFO, logger="mainstem")
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        streams, tables = broker.core.streams, tables_of(broker)
        split = streams.create("/", "split", 3, {"x-table": "parquet"})
        for index in range(3):
            await publish(broker, f"split-{index}", 0, 50)
        await wait_until(lambda: [tables.table_end(split, i) for i in range(3)] == [50] * 3
                         and tables.metadata_location(split) is not None
                         and in_the_metadata(tables, split) == table_keys(broker, "split"),
                         what="every partition in the table")
        files = broker.core.catalog.table_files("/", "split")
        removed = {file.key for index in (1, 2) for file in files[index]}
        await streams.remove_partitions("/", "split", 1)
        assert set(broker.core.catalog.table_files("/", "split")) == {0}
        await wait_until(lambda: in_the_metadata(tables, split) == table_keys(broker, "split")
                         and not removed & files_under(tier, "data")
                         and broker.core.catalog.garbage_count() == 0,
                         what="the removed partitions' files out of the table and the tier")
        assert files_under(tier, "data") == table_keys(broker, "split") == \
            {file.key for file in files[0]}
        deleted = {record.key for record in caplog.records  # type: ignore[attr-defined]
                   if record.getMessage() == "tier.deleted"
                   and record.reason == "partition removed"}  # type: ignore[attr-defined]
        assert deleted == removed
        streams.add_partitions("/", "split", 2)  # partition 1 again: a new one, empty
        await publish(broker, "split-1", 0, 50)
        await wait_until(lambda: tables.table_end(split, 1) == 50 and tables.lag(split) == 0,
                         what="the new partition 1 in the table")
        metadata = tables.metadata_location(split)
    assert metadata is not None
    rows = StaticTable.from_metadata(metadata).scan(row_filter="partition = 1").to_arrow()
    assert sorted(rows.column("offset").to_pylist()) == list(range(50))


def in_the_metadata(tables: Tables, stream: Stream) -> set[str] | None:
    """The data files the table's current Iceberg metadata holds (None: it changed while
    read, and no grace period kept the older objects)."""
    location = tables.metadata_location(stream)
    try:
        assert location is not None
        table = StaticTable.from_metadata(location)
        return {task.file.file_path.removeprefix(tables.location(stream).rsplit("/tables/")[0]
                                                 + "/") for task in table.scan().plan_files()}
    except OSError:
        return None


async def ctl(broker: Broker, *argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mainstem", "ctl", "--url",
        f"http://127.0.0.1:{broker.ports['admin']}", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_a_table_is_rebuilt_from_the_stream_by_ctl(tmp_path: Path) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("orders", arguments={"table": "parquet"})
            await producer.create_stream("plain")
        await write_rounds(broker, "orders", 3, 100)
        old_files = table_keys(broker, "orders")
        old_metadata = (await table_of(broker, "orders"))["metadata_location"]
        listed = (await ctl(broker, "tables", "list")).splitlines()
        assert listed[0].split()[:7] == ["vhost", "stream", "lag", "files", "rows", "bytes",
                                         "errors"]
        assert listed[1].split()[:5] == ["/", "orders", "0", "3", "300"]
        assert len(listed) == 2  # the plain stream is no table
        out = await ctl(broker, "tables", "rebuild", "orders")
        assert out.splitlines()[1].split() == ["/", "orders", "3"]
        await wait_until_in_table(broker, "orders", 300)
        row = await table_of(broker, "orders")
        assert row["metadata_location"] != old_metadata
        assert not table_keys(broker, "orders") & old_files  # written anew, one file
        await wait_until(lambda: files_under(tier, "data") == table_keys(broker, "orders"),
                         what="the old files deleted")
        rows = StaticTable.from_metadata(row["metadata_location"]).scan().to_arrow()
        assert sorted(rows.column("offset").to_pylist()) == list(range(300))
        assert len(rows.column("offset")) == 300
        log = broker.core.catalog
        assert log.uploads() == []
        refused = await rebuild(broker, "plain")
        assert refused[0] == 400 and "not written as a table" in refused[1]["reason"]


async def rebuild(broker: Broker, stream: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{broker.ports['admin']}/api/tables/%2F/{stream}/rebuild"
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=guest) as http, http.post(url) as response:
        return response.status, await response.json()


async def test_a_failing_table_counts_its_errors_in_the_api_and_metrics(tmp_path: Path
                                                                       ) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
            await producer.create_stream("orders", arguments={"table": "parquet"})
            await producer.create_stream("broken", arguments={"table": "parquet"})
        await publish(broker, "broken", 0, 50)
        await wait_until_in_table(broker, "broken", 50)
        # the broken table's head names metadata that is not there: its rounds fail, the
        # other table's go on
        stream = broker.core.streams.get("/", "broken")
        break_the_head(data, stream)
        await publish(broker, "broken", 50, 50)
        await publish(broker, "orders", 0, 100)
        await wait_until_in_table(broker, "orders", 100)
        await wait_until(lambda: tables_of(broker).summary(stream)["errors"] > 0,
                         what="the broken table's rounds fail")
        row = await table_of(broker, "broken")
        assert row["errors"] > 0 and "missing" in row["last_error"]
        assert (await table_of(broker, "orders"))["errors"] == 0
        metrics = await scrape(broker.ports["prometheus"], "/metrics/per-object")
        labels = frozenset({"vhost": "/", "stream": "broken"}.items())
        assert metrics["mainstem_table_stream_errors", labels] > 0
        assert metrics["mainstem_table_data_files", frozenset(
            {"vhost": "/", "stream": "orders"}.items())] == 1
        assert metrics["mainstem_table_data_rows", frozenset(
            {"vhost": "/", "stream": "orders"}.items())] == 100
        # a rebuild makes it whole again
        assert (await rebuild(broker, "broken"))[0] == 200
        await wait_until_in_table(broker, "broken", 100)
        assert (await table_of(broker, "broken"))["errors"] == 0


def break_the_head(data: Path, stream: Stream) -> None:
    """Point the table's head at a metadata file that does not exist (a lost object)."""
    with sqlite3.connect(data / "catalog.sqlite") as db:
        db.execute("UPDATE table_heads SET metadata_location = metadata_location || "
                   "'.missing' WHERE stream = ?", (stream.name,))
