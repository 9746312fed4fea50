"""Table writes under SIGKILL (issue 42): a real `mainstem serve` with a directory tier
writes a table stream's records as Parquet every 10 ms while rstream publishes with
confirms, and is killed once files were committed. Planted beside what the kill
left: a data file put but never committed (a kill between put and record), a metadata
object put but never committed by a head (a kill during the Iceberg commit), and the
Iceberg head set back to an older snapshot (a kill between the record and the commit).
After the restart the table holds every record of the stream exactly once, in offset
order, no file but the committed ones is left, and the put's leftovers are gone."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from pyiceberg.table import StaticTable

from mainstem.broker.layout import storage_name
from tests.support.rstream_reads import read_with_rstream
from tests.support.server_process import kill, start_server, started_ports
from tests.support.stream_crash import assert_each_confirmed_once, publish_until_killed

DIRECTORY = storage_name("stream", "/", "crash")
CONFIRMED_BEFORE_KILL = 8_000


def serve(data: Path, tier: Path, log: Path) -> subprocess.Popen:
    return start_server(data, log, "--tier-url", str(tier), "--tier-check-interval-ms", "10")


def written(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines()
               if json.loads(line)["event"] == "table.written")


def kill_while_writing(server: subprocess.Popen, log: Path) -> None:
    """SIGKILL once two files were committed (normally at once: files are written while
    the publisher publishes; it waits here), with batches in flight and rounds going on."""
    for _ in range(2000):
        if written(log) >= 2:
            break
        time.sleep(0.01)
    kill(server)


def committed_keys(data: Path) -> set[str]:
    with sqlite3.connect(f"file:{data / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT record FROM table_files").fetchall()
    return {json.loads(record)["key"] for (record,) in rows}


def set_back_the_head(data: Path, tier: Path) -> None:
    """Point this node's Iceberg head at the first snapshot holding a file, as if the
    kill had landed before the later files reached the Iceberg metadata."""
    metadata = sorted((tier / "tables" / DIRECTORY / "metadata").glob("*.metadata.json"))
    first = next(path for path in metadata if json.loads(path.read_text())["snapshots"])
    with sqlite3.connect(data / "catalog.sqlite") as db:
        db.execute("DELETE FROM table_heads")
        db.execute("INSERT INTO table_heads (namespace, stream, version, metadata_location)"
                   " VALUES ('/', 'crash', 0, ?)", (first.as_uri(),))


async def table_row(admin: int) -> dict[str, Any]:
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=guest) as http, \
            http.get(f"http://127.0.0.1:{admin}/api/tiering") as response:
        row: dict[str, Any] = (await response.json())["tables"][0]
        return row


async def caught_up(admin: int, count: int) -> dict[str, Any]:
    for _ in range(300):
        row = await table_row(admin)
        if row["lag"] == 0 and row["metadata_location"] and row["ends"] == [count]:
            table = StaticTable.from_metadata(row["metadata_location"]).scan().to_arrow()
            if table.num_rows >= count:
                return row
        await asyncio.sleep(0.1)
    raise AssertionError(f"the table never caught up: {row}")


async def test_sigkill_during_table_writes_leaves_every_record_once(tmp_path: Path) -> None:
    data, tier, log = tmp_path / "data", tmp_path / "tier", tmp_path / "server.log"
    server = serve(data, tier, log)
    try:
        confirmed, _ = await publish_until_killed(
            started_ports(server, log)["stream"], lambda: kill_while_writing(server, log),
            confirmed_before_kill=CONFIRMED_BEFORE_KILL, arguments={"table": "parquet"})
    finally:
        kill(server)
    assert written(log) >= 2
    committed = committed_keys(data)
    orphan_key = next(iter(committed)).rsplit("/", 1)[0] + "/99999999999999999999-1-orphan.parquet"
    shutil.copyfile(tier / next(iter(committed)), tier / orphan_key)
    metadata = tier / "tables" / DIRECTORY / "metadata"
    manifest = next(metadata.glob("*-m0.avro")).relative_to(tier)
    orphan_manifest = str(manifest.with_name(f"{uuid.uuid4()}-m0.avro"))
    shutil.copyfile(tier / manifest, tier / orphan_manifest)
    with sqlite3.connect(data / "catalog.sqlite") as db:
        db.executemany("INSERT INTO tier_uploads (key, started_ms) VALUES (?, 0)",
                       [(orphan_key,), (orphan_manifest,)])
    set_back_the_head(data, tier)

    restarted = serve(data, tier, log)
    try:
        ports = started_ports(restarted, log)
        bodies = await read_with_rstream(ports["stream"], "crash")
        row = await caught_up(ports["admin"], len(bodies))
        for _ in range(250):  # the deletes run in the background
            if not (tier / orphan_key).exists() and not (tier / orphan_manifest).exists():
                break
            await asyncio.sleep(0.02)
    finally:
        kill(restarted)
    assert_each_confirmed_once(bodies, confirmed)
    table = StaticTable.from_metadata(row["metadata_location"]).scan().to_arrow()
    in_order = table.sort_by("offset")
    assert in_order.column("offset").to_pylist() == list(range(len(bodies)))  # once each
    assert in_order.column("value").to_pylist() == bodies
    data_files = {str(p.relative_to(tier)) for p in (tier / "tables").rglob("*")
                  if p.is_file() and "/data/" in str(p.relative_to(tier))}
    assert data_files == committed_keys(data)  # no orphan, no put's temporary file
    deleted = [json.loads(line)["key"] for line in log.read_text().splitlines()
               if json.loads(line)["event"] == "tier.deleted"]
    assert sorted(deleted) == sorted([orphan_key, orphan_manifest])  # no index: one object
    with sqlite3.connect(f"file:{data / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        (objects,), = db.execute("SELECT objects FROM table_heads").fetchall()  # one head
    named = json.loads(objects)
    assert row["metadata_location"].removeprefix(tier.resolve().as_uri() + "/") in named
    assert all((tier / key).is_file() for key in named)  # what the head reaches is there
