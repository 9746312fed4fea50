"""Tiered records written before records carried epochs (issue 40's leftover): a replica
that comes back behind its leader, whose log is tiered past where the replica's ends
under such records, follows again and serves every message. Before, the leader took the
unknown epoch of its tiered chunk for a different one: it had the replica cut its
committed chunks one by one, down into the replica's own tier, where no cut is made,
and asked again forever.

An old node wrote records without `epochs`, in etcd and in its catalog; here the records
of a running cluster are rewritten so while every node is down."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from mainstem.broker.catalog import TIERED_SEGMENT
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.etcd_keys import prefix
from mainstem.cluster.metadata.catalog_feed import AREA
from tests.broker.test_tiering import body, publish
from tests.cluster.test_tier_fencing import leader_of, objects, uploads
from tests.cluster.test_tiering_cluster import STREAM, Port, raw_bodies, tiered_cluster
from tests.support.waiting import wait_until

ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-age": "1s"}
MESSAGES = 300  # a batch: about 7 segments


async def strip_epochs_in_etcd(endpoint: str) -> int:
    """Rewrite every tiered record in etcd without its epochs; how many there were."""
    etcd = EtcdClient([endpoint])
    try:
        held, _ = await etcd.get_prefix(prefix(AREA, TIERED_SEGMENT))
        for kv in held:
            row = kv.json()
            if row is not None:
                row.pop("epochs")
                await etcd.put(kv.key, json.dumps(row).encode())
        return len(held)
    finally:
        await etcd.close()


def strip_epochs_in_catalog(data_dir: Path) -> None:
    with sqlite3.connect(data_dir / "catalog.sqlite") as db:
        for key, record in db.execute("SELECT rowid, record FROM tiered_segments").fetchall():
            row = json.loads(record)
            row.pop("epochs")
            db.execute("UPDATE tiered_segments SET record = ? WHERE rowid = ?",
                       (json.dumps(row), key))


async def test_a_replica_behind_a_log_tiered_under_pre_epoch_records_follows_again(
        tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    with tiered_cluster(tmp_path) as cluster:
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        await publish(Port(ports["node1"]), STREAM, MESSAGES, ARGUMENTS)  # type: ignore[arg-type]
        leader = await leader_of(ports, "node1")
        assert leader is not None
        behind = next(name for name in cluster.nodes if name != leader)
        cluster.kill(behind)  # its log ends here
        await publish(Port(ports[leader]), STREAM, MESSAGES, ARGUMENTS)  # type: ignore[arg-type]
        # the leader tiers past where the replica's log ends
        await wait_until(lambda: len(uploads(cluster, leader)) >= 12, what="the leader tiering",
                         timeout_s=60)
        await asyncio.sleep(1)  # the records reach the other replica
        for name in cluster.nodes:
            if name != behind:
                cluster.kill(name)
        assert await strip_epochs_in_etcd(cluster.etcd.endpoint) >= 12
        for node in cluster.nodes.values():
            strip_epochs_in_catalog(node.data_dir)
        for name in cluster.nodes:
            if name != behind:
                cluster.start(name)
        cluster.start(behind)
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        expected = [body(i) for i in range(MESSAGES)] * 2
        port = ports[behind]
        await wait_until(lambda: raw_bodies(port) == expected, what="the replica caught up",
                         timeout_s=30)
        # its log agreed with the leader's where it ended: nothing of it was cut
        assert cluster.nodes[behind].log_events("replica.truncated") == []
        assert cluster.nodes[behind].log_events("replica.failed") == []
        assert objects(tier)  # read through the tier, where the leader tiered
