"""Tiering in a cluster is fenced (issue 39, item 1): a node uploads only while it leads
the partition, once it has joined and knows its role, and records an upload only under
its leader key at its epoch; a tiered object, once recorded, is never replaced.

The campaign's loss: a restarted former leader tiered its own, stale copy of a segment
at start-up, before it knew another node led, to the key the leader's object had. Here
a follower is killed with segments the leader has not tiered yet (their local age bound
has not passed), the leader tiers them while it is down, and it starts again holding them,
past their bound, with a catalog that has no record of them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

from mainstem.log.tier import file_crc32
from mainstem.testing_cluster import LocalCluster
from tests.broker.test_tiering import body, publish
from tests.cluster.test_leader_crash import leader_port
from tests.cluster.test_tiering_cluster import STREAM, Port, raw_bodies, tiered_cluster
from tests.support.waiting import wait_until

AGE_S = 4  # a sealed segment is tiered once this old
ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-age": f"{AGE_S}s"}
MESSAGES = 600


def objects(tier: Path) -> dict[str, tuple[int, int]]:
    """key -> (inode, size) of every object in the tier (its marks aside)."""
    return {str(path.relative_to(tier)): (path.stat().st_ino, path.stat().st_size)
            for pattern in ("*.segment", "*.index") for path in tier.rglob(pattern)}


async def leader_of(ports: dict[str, int], asked: str) -> str | None:
    """The stream's leader as node `asked` knows it."""
    port = await leader_port(ports[asked], STREAM)
    return next((name for name, p in ports.items() if p == port), None)


async def new_leader(ports: dict[str, int], old: str) -> str:
    """Once another node than `old` leads, as the others know it."""
    asked = next(name for name in ports if name != old)
    for _ in range(600):
        leader = await leader_of(ports, asked)
        if leader not in (None, old):
            return leader
        await asyncio.sleep(0.1)
    raise AssertionError(f"no leader but {old} within 60 s")


def uploads(cluster: LocalCluster, name: str) -> list[str]:
    return [str(event["key"]) for event in cluster.nodes[name].log_events("tier.uploaded")]


def recorded(cluster: LocalCluster, name: str) -> dict[str, tuple[int, int]]:
    """key -> (size, CRC-32) of each object a tiered record on node `name` names."""
    path = cluster.nodes[name].data_dir / "catalog.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = [json.loads(row[0]) for row in db.execute("SELECT record FROM tiered_segments")]
    named = {}
    for row in rows:
        named[row["key"]] = (row["segment_size"], row["segment_crc"])
        named[row["key"].removesuffix(".segment") + ".index"] = (row["index_size"],
                                                                 row["index_crc"])
    return named


async def test_a_restarted_follower_never_replaces_the_leaders_objects(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    with tiered_cluster(tmp_path) as cluster:
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        started = time.monotonic()
        await publish_all(ports["node1"])
        leader = await leader_of(ports, "node1")
        assert leader is not None
        follower = next(name for name in cluster.nodes if name != leader)
        # every confirm came once all in-sync replicas held the chunk: the follower has
        # every segment; none is old enough to tier yet
        assert time.monotonic() - started < AGE_S and not uploads(cluster, leader)
        cluster.kill(follower)
        await wait_until(lambda: len(objects(tier)) >= 2 * 10, what="the leader tiering",
                         timeout_s=60)
        await asyncio.sleep(0.5)  # the leader's rounds catch up with every old segment
        before = objects(tier)
        cluster.start(follower)
        ports[follower] = cluster.nodes[follower].ports["stream"]
        expected = [body(i) for i in range(MESSAGES)]
        await asyncio.sleep(2)  # rounds every 100 ms on the restarted node
        assert uploads(cluster, follower) == []  # it never led: it uploaded nothing
        after = objects(tier)
        assert {key: after.get(key) for key in before} == before  # none replaced or gone
        named = recorded(cluster, leader)
        assert set(named) == set(after)  # every object recorded, every record's object there
        for key, (size, crc) in named.items():
            assert (after[key][1], file_crc32(tier / key)) == (size, crc), key
        for name, port in ports.items():
            assert await asyncio.to_thread(raw_bodies, port) == expected, name


async def test_a_frozen_leader_that_wakes_replaces_nothing(tmp_path: Path) -> None:
    """The leader frozen (SIGSTOP) past its lease, before its segments were old enough to
    tier; a new leader elected tiers them. The old one wakes: whatever its rounds try
    before it learns it lost the lead goes to keys of its own and is refused a record (its
    objects deleted again); the new leader's objects are never replaced, and every node
    reads every message."""
    tier = tmp_path / "tier"
    with tiered_cluster(tmp_path, 50) as cluster:
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        await publish_all(ports["node1"])
        old = await leader_of(ports, "node1")
        assert old is not None
        os.kill(cluster.nodes[old].pid, signal.SIGSTOP)
        try:
            new = await new_leader(ports, old)
            await wait_until(lambda: len(uploads(cluster, new)) >= 10, what="the new leader "
                             "tiering", timeout_s=60)
            await asyncio.sleep(0.5)
            before = objects(tier)
        finally:
            os.kill(cluster.nodes[old].pid, signal.SIGCONT)
        node = cluster.nodes[old]
        await wait_until(lambda: bool(node.log_events("replica.stepped_down")),
                         what="the old leader stepping down")
        await asyncio.sleep(1)  # rounds every 50 ms
        assert not uploads(cluster, old)  # nothing it may have uploaded was recorded
        fenced = {e["key"] for e in node.log_events("tier.upload_fenced")}
        await wait_until(lambda: not fenced & set(objects(tier)), what="its objects deleted")
        after = objects(tier)
        assert {key: after.get(key) for key in before} == before  # none replaced or gone
        named = recorded(cluster, new)
        assert set(named) == set(after)
        for key, (size, crc) in named.items():
            assert (after[key][1], file_crc32(tier / key)) == (size, crc), key
        expected = [body(i) for i in range(MESSAGES)]
        for name, port in ports.items():
            assert await asyncio.to_thread(raw_bodies, port) == expected, name


async def publish_all(port: int) -> None:
    await publish(Port(port), STREAM, MESSAGES, ARGUMENTS)  # type: ignore[arg-type]
