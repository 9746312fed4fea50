"""A replicated stream's partition count changed through Iggy (issue 39 follow-ups), on a
real etcd and three real nodes: removing more partitions at once than one etcd transaction
may name (128 operations) removes every key and record of them; a partition grown back
after removal is a new one, whose leader's fence no stale leader of the old one holds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mainstem.broker import layout
from mainstem.broker.catalog import TABLE_FILE, TIERED_SEGMENT, TableFile
from mainstem.broker.core import BrokerCore
from mainstem.broker.fence import Fence
from mainstem.broker.settings import CoreSettings
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.etcd_keys import path, prefix, segments
from mainstem.cluster.metadata.catalog_feed import AREA, CatalogFeed
from mainstem.testing_cluster import LocalCluster
from tests.cluster.test_protocol_metadata import eventually, iggy, put_tiered_record

WIDE = 41  # removing 40: 200 operations, in one transaction etcd refused them all


@pytest.fixture
async def etcd(cluster: LocalCluster) -> AsyncIterator[EtcdClient]:
    client = EtcdClient([cluster.etcd.endpoint])
    try:
        yield client
    finally:
        await client.close()


async def held_partitions(etcd: EtcdClient, namespace: str, stream: str
                          ) -> dict[str, set[int]]:
    """Per kind, the partitions etcd holds keys of: leaders, isr, epochs, and the
    tiered segments' and table files' records."""
    storage = layout.storage_name("stream", namespace, stream)
    found: dict[str, set[int]] = {}
    for kind in ("leaders", "isr", "epochs"):
        kvs, _ = await etcd.get_prefix(prefix(kind, storage))
        found[kind] = {int(segments(kv.key)[-1]) for kv in kvs}
    for kind in (TIERED_SEGMENT, TABLE_FILE):
        kvs, _ = await etcd.get_prefix(prefix(AREA, kind, namespace, stream))
        found[kind] = {int(segments(kv.key)[4]) for kv in kvs}
    return found


async def put_table_file(etcd: EtcdClient, namespace: str, stream: str, index: int) -> None:
    """A table file's record of a partition, as its leader writes it."""
    file = TableFile(f"tables/x/data/partition={index}/0-1-0.parquet", 0, 10, 10, 100)
    await etcd.put(path(AREA, TABLE_FILE, namespace, stream, index, 0),
                   json.dumps(dataclasses.asdict(file)).encode())


async def test_forty_partitions_removed_at_once_leave_no_key_or_record(
        cluster: LocalCluster, etcd: EtcdClient) -> None:
    a, b = await iggy(cluster, "node1"), await iggy(cluster, "node2")
    await a.create_stream("wide")
    await a.create_topic("wide", "logs", WIDE)
    everyone = set(range(WIDE))
    await eventually(lambda: held_partitions(etcd, "wide", "logs"),
                     lambda held: held["isr"] == held["epochs"] == everyone,
                     "every partition's keys")
    for index in (0, 7, 40):
        await put_tiered_record(cluster, "wide", "logs", index)
        await put_table_file(etcd, "wide", "logs", index)
    await b.delete_partitions("wide", "logs", WIDE - 1)
    await eventually(lambda: a.get_topic("wide", "logs"), lambda t: t.partitions_count == 1,
                     "one partition left through node1")
    assert await eventually(lambda: held_partitions(etcd, "wide", "logs"),
                            lambda held: held["isr"] == {0} and not held[TABLE_FILE] - {0},
                            "the removed partitions' keys and records gone") == {
        "leaders": {0}, "isr": {0}, "epochs": {0}, TIERED_SEGMENT: {0}, TABLE_FILE: {0}}
    storage = layout.storage_name("stream", "wide", "logs")

    async def removals() -> list[list[int]]:  # logged once the last transaction held
        return [event["partitions"] for node in cluster.nodes.values()
                for event in node.log_events("cluster.partitions_removed")
                if event["stream"] == storage]
    assert await eventually(removals, bool, "the removal logged") == [list(range(1, WIDE))]


@pytest.fixture
async def feed(tmp_path: Path, etcd: EtcdClient) -> AsyncIterator[CatalogFeed]:
    """A catalog feed to the cluster's etcd, as a node's: what a stale leader writes with."""
    core = await BrokerCore.open(tmp_path / "data", CoreSettings())
    try:
        yield CatalogFeed(NodeContext(core, etcd, "stale", lambda work: None, lambda: 0),
                          lambda kind, key, row: None)
    finally:
        await core.close()


async def test_a_partition_grown_back_refuses_the_removed_ones_fence(
        cluster: LocalCluster, etcd: EtcdClient, feed: CatalogFeed) -> None:
    a = await iggy(cluster, "node1")
    await a.create_stream("again")
    await a.create_topic("again", "logs", 2)
    leader = path("leaders", layout.storage_name("stream", "again", "logs"), 1)
    first = await eventually(lambda: etcd.get(leader), lambda kv: kv is not None,
                             "partition 1's leader")
    # the fence its leader holds (node1's, made with the topic) outlives the partition
    stale = Fence(((leader, first.value),), first.json()["epoch"])
    await a.delete_partitions("again", "logs", 1)
    await eventually(lambda: etcd.get(leader), lambda kv: kv is None, "partition 1's keys gone")
    await a.create_partitions("again", "logs", 1)
    grown = await eventually(lambda: etcd.get(leader), lambda kv: kv is not None,
                             "the new partition 1's leader")
    assert grown.json()["node"] == first.json()["node"]  # the same node leads it again
    assert grown.json()["epoch"] > first.json()["epoch"]  # in an epoch the old one never had
    feed.context.core.catalog.add_namespace("again")  # the stale node's own catalog
    feed.context.core.catalog.add_stream("again", "logs", 2)
    key = ("again", "logs", "1", "0")
    file = dataclasses.asdict(TableFile("tables/x/data/partition=1/0-1-0.parquet", 0, 1, 1, 1))
    assert not await feed.fenced(TABLE_FILE, key, file, stale)
    assert await etcd.get(path(AREA, TABLE_FILE, *key)) is None
    current = Fence(((leader, grown.value),), grown.json()["epoch"])
    assert await feed.fenced(TABLE_FILE, key, file, current)  # the new leader's holds
