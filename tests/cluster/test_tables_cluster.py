"""Streams as tables in a cluster (issue 42): only the partition's leader writes the
table's files, under its fence; every node holds the same records of them (the cluster's
metadata), and the table holds every record of the stream once, in order."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pyiceberg.table import StaticTable

from mainstem.testing_cluster import LocalCluster
from tests.broker.test_tiering import body, publish
from tests.cluster.test_tiering_cluster import Port
from tests.support.waiting import wait_until

STREAM = "ledger"
COUNT = 400


def catalog_rows(data_dir: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{data_dir / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def table_rows(head: str) -> list[bytes]:
    table = StaticTable.from_metadata(head).scan().to_arrow().sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(table.num_rows))  # once each
    values: list[bytes] = table.column("value").to_pylist()
    return values


async def test_only_the_leader_writes_and_every_node_holds_the_records(tmp_path: Path
                                                                       ) -> None:
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
                found = catalog_rows(cluster.nodes[name].data_dir,
                                     "SELECT metadata_location FROM table_heads")
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
        assert table_rows(final) == [body(i) for i in range(COUNT)]
