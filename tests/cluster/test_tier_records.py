"""A tiered segment's record in a cluster is a fenced, write-once change (issue 39, item 1):
the catalog writes it to a real etcd through the catalog feed only while the writer's
leader key holds the value its fence names, never over a different record, and drops it
(retention) only under the fence too. A refused change leaves etcd and this node's
catalog as they were."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mainstem.broker.catalog import TIERED_SEGMENT
from mainstem.broker.core import BrokerCore
from mainstem.broker.fence import Fence, FencedOut
from mainstem.broker.settings import CoreSettings
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.etcd_keys import path
from mainstem.cluster.metadata.catalog_feed import AREA, CatalogFeed
from mainstem.log.tier_upload import TieredRecord
from mainstem.testing_cluster import Etcd

LEADER = path("leaders", "storage", 0)
ME = json.dumps({"node": "a", "epoch": 2}).encode()


def record(first: int, crc: int = 7) -> TieredRecord:
    return TieredRecord(f"s/0/{first:020d}-2-{crc:x}.segment", first, first + 10, 0, 100,
                        1, 2, 120, crc, 48, 9, 2)


def row_key(first: int) -> str:
    return path(AREA, TIERED_SEGMENT, "/", "s", "0", str(first))


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def node(tmp_path: Path, etcd: Etcd) -> AsyncIterator[tuple[BrokerCore, EtcdClient]]:
    core = await BrokerCore.open(tmp_path / "data", CoreSettings())
    client = EtcdClient([etcd.endpoint])
    feed = CatalogFeed(NodeContext(core, client, "a", lambda work: None, lambda: 0),
                       lambda kind, key, row: None)
    core.catalog.on_fenced = feed.fenced
    core.catalog.add_stream("/", "s")
    await client.put(LEADER, ME)
    try:
        yield core, client
    finally:
        await client.close()
        await core.close()


async def test_a_record_is_written_once_and_only_under_the_leaders_fence(
        node: tuple[BrokerCore, EtcdClient]) -> None:
    core, etcd = node
    fence = Fence(((LEADER, ME),), 2)
    await core.catalog.record_tiered("/", "s", 0, record(0), fence)
    held = await etcd.get(row_key(0))
    assert held is not None and TieredRecord(**held.json()) == record(0)
    assert core.catalog.tiered("/", "s", 0) == [record(0)]
    await core.catalog.record_tiered("/", "s", 0, record(0), fence)  # the same: done
    with pytest.raises(FencedOut):  # another record of the same segment: never replaces
        await core.catalog.record_tiered("/", "s", 0, record(0, crc=8), fence)
    held = await etcd.get(row_key(0))
    assert held is not None and TieredRecord(**held.json()) == record(0)
    assert core.catalog.tiered("/", "s", 0) == [record(0)]

    await etcd.put(LEADER, json.dumps({"node": "b", "epoch": 3}).encode())  # b leads now
    with pytest.raises(FencedOut):
        await core.catalog.record_tiered("/", "s", 0, record(10), fence)
    assert await etcd.get(row_key(10)) is None
    assert core.catalog.tiered("/", "s", 0) == [record(0)]


async def test_retention_drops_a_record_only_under_the_fence(
        node: tuple[BrokerCore, EtcdClient]) -> None:
    core, etcd = node
    fence = Fence(((LEADER, ME),), 2)
    for first in (0, 10):
        await core.catalog.record_tiered("/", "s", 0, record(first), fence)
    stale = Fence(((LEADER, json.dumps({"node": "a", "epoch": 1}).encode()),), 1)
    with pytest.raises(FencedOut):
        await core.catalog.expire_tiered("/", "s", 0, record(0), stale, 0, "retention")
    assert core.catalog.tiered("/", "s", 0) == [record(0), record(10)]
    assert core.catalog.garbage_count() == 0
    assert await etcd.get(row_key(0)) is not None

    await core.catalog.expire_tiered("/", "s", 0, record(0), fence, 0, "retention")
    held = await etcd.get(row_key(0))
    assert held is not None and held.value == b"null"  # a tombstone, as the kind keeps
    assert core.catalog.tiered("/", "s", 0) == [record(10)]
    assert core.catalog.due_garbage(0) == [(record(0).index_key, "retention"),
                                           (record(0).key, "retention")]
