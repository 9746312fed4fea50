"""Streams as tables in a cluster (issue 42): only the partition's leader writes the
table's files and its Iceberg metadata, under its fence; every node holds the same records
of them and the same head (the cluster's metadata), and the table holds every record of
the stream once, in order."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from pyiceberg.table import StaticTable

from mainstem.testing_cluster import LocalCluster
from tests.broker.test_tiering import body, publish
from tests.cluster.test_leader_crash import leader_port
from tests.cluster.test_tiering_cluster import Port
from tests.support.waiting import wait_until

STREAM = "ledger"
NEWEST_HEAD = "SELECT metadata_location FROM table_heads ORDER BY version DESC LIMIT 1"
COUNT = 400


def catalog_rows(data_dir: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{data_dir / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def table_rows(head: str) -> list[bytes]:
    table = StaticTable.from_metadata(head).scan().to_arrow().sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(table.num_rows))  # once each
    values: list[bytes] = table.column("value").to_pylist()
    return values


async def test_only_the_leader_writes_and_a_new_leader_goes_on_with_the_table(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", extra_args=(
            "--tier-url", str(tmp_path / "tier"), "--tier-check-interval-ms", "100")) as cluster:
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        await publish(Port(ports["node1"]), STREAM, COUNT,  # type: ignore[arg-type]
                      {"table": "parquet"})

        def writers() -> list[str]:
            return [name for name, node in cluster.nodes.items()
                    if node.log_events("table.written")]

        def head() -> str | None:
            for name in writers():
                found = catalog_rows(cluster.nodes[name].data_dir, NEWEST_HEAD)
                if found and len(table_rows(str(found[0][0]))) == COUNT:
                    return str(found[0][0])
            return None

        await wait_until(lambda: head() is not None, what="the whole stream in the table",
                         timeout_s=60)
        assert len(writers()) == 1  # followers never write

        def keys(name: str) -> set[str]:
            return {json.loads(str(row[0]))["key"] for row in catalog_rows(
                cluster.nodes[name].data_dir, "SELECT record FROM table_files")}

        leader = writers()[0]
        await wait_until(lambda: all(keys(name) == keys(leader) for name in cluster.nodes),
                         what="every node holding the leader's records")
        final = head()
        assert final is not None
        await wait_until(lambda: all(catalog_rows(node.data_dir, NEWEST_HEAD) == [(final,)]
                                     for node in cluster.nodes.values()),
                         what="every node holding the head")
        assert table_rows(final) == [body(i) for i in range(COUNT)]
        version = catalog_rows(cluster.nodes[leader].data_dir, "SELECT max(version) FROM "
                               "table_heads")[0][0]

        # the leader killed: the new one goes on with the same table, the next version
        cluster.kill(leader)
        survivor = next(name for name in cluster.nodes if name != leader)
        live = {ports[name] for name in cluster.nodes if name != leader}
        for _ in range(150):
            if await leader_port(ports[survivor], STREAM) in live:
                break
            await asyncio.sleep(0.1)
        await publish(Port(ports[survivor]), STREAM, COUNT,  # type: ignore[arg-type]
                      {"table": "parquet"})

        def newest(name: str) -> tuple[int, str] | None:
            found = catalog_rows(cluster.nodes[name].data_dir, "SELECT version, "
                                 "metadata_location FROM table_heads ORDER BY version DESC")
            return (int(str(found[0][0])), str(found[0][1])) if found else None

        def caught_up() -> bool:
            head = newest(survivor)
            return head is not None and len(table_rows(head[1])) == 2 * COUNT

        await wait_until(caught_up, what="the new leader's table", timeout_s=60)
        head = newest(survivor)
        assert head is not None and head[0] > version
        metadata = json.loads(Path(head[1].removeprefix("file://")).read_text())
        assert final in [entry["metadata-file"] for entry in metadata["metadata-log"]]
    assert table_rows(head[1]) == [body(i) for i in range(COUNT)] * 2
