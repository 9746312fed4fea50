"""Tiering in a cluster (issue 32, item 4): only a partition's leader uploads; followers
drop their local copies once the upload is recorded and read those segments from the tier;
after the leader is killed, the new leader goes on tiering where the old one stopped, and
every confirmed message is still read, in order, through every surviving node."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mainstem.broker.layout import storage_name
from mainstem.log.segment_file import first_chunk_id_of
from mainstem.testing_cluster import LocalCluster
from tests.broker.test_tiering import body, publish
from tests.cluster.test_leader_crash import leader_port
from tests.support.cluster_clients import stream_client
from tests.support.waiting import wait_until

STREAM = "archive"
ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}


class Port:
    """What `publish` needs of a broker: its stream port."""

    def __init__(self, port: int) -> None:
        self.ports = {"stream": port}


def tiered_cluster(tmp_path: Path, check_interval_ms: int = 100) -> LocalCluster:
    """Three nodes sharing a tier (a directory, `tmp_path / "tier"`), with small blocks."""
    return LocalCluster(tmp_path / "cluster", extra_args=(
        "--tier-url", str(tmp_path / "tier"), "--tier-check-interval-ms",
        str(check_interval_ms), "--tier-block-bytes", "16384"))


def raw_bodies(port: int) -> list[bytes]:
    """Every committed record of the stream as the node at `port` serves it."""
    client = stream_client(port)
    try:
        offsets = client.offsets(STREAM)
        return [bytes(entry.body) for chunk in client.chunks(STREAM, offsets.first, offsets.end)
                for entry in chunk.entries()]
    finally:
        client.close()


def local_segments(cluster: LocalCluster, name: str) -> list[int]:
    directory = cluster.nodes[name].data_dir / "streams" / storage_name("stream", "/", STREAM)
    return sorted(int(path.stem) for path in (directory / "0").glob("*.segment"))


def tiered(tier: Path) -> list[int]:
    return sorted(first_chunk_id_of(path.name) for path in tier.rglob("*.segment"))


async def test_the_leader_tiers_followers_follow_and_a_new_leader_goes_on(
        tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    with tiered_cluster(tmp_path) as cluster:
        ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
        await publish(Port(ports["node1"]), STREAM, 1000, ARGUMENTS)  # type: ignore[arg-type]

        def tiered_everywhere() -> bool:
            objects = tiered(tier)
            return len(objects) >= 10 and all(
                local_segments(cluster, name) and local_segments(cluster, name)[0] > objects[-1]
                for name in cluster.nodes)

        await wait_until(tiered_everywhere, what="every node's old segments tiered")
        expected = [body(i) for i in range(1000)]
        for name, port in ports.items():
            assert await asyncio.to_thread(raw_bodies, port) == expected, name

        leader = next(name for name in cluster.nodes
                      if cluster.nodes[name].log_events("tier.uploaded"))
        assert all(not cluster.nodes[name].log_events("tier.uploaded")
                   for name in cluster.nodes if name != leader)  # followers never upload
        before = tiered(tier)
        cluster.kill(leader)
        survivor = next(name for name in cluster.nodes if name != leader)
        live = {ports[name] for name in cluster.nodes if name != leader}

        async def new_leader() -> int | None:
            return await leader_port(ports[survivor], STREAM)

        for _ in range(150):
            if await new_leader() in live:
                break
            await asyncio.sleep(0.1)
        await publish(Port(ports[survivor]), STREAM, 1000, ARGUMENTS)  # type: ignore[arg-type]
        expected = [body(i) for i in range(1000)] * 2
        await wait_until(lambda: len(tiered(tier)) > len(before) + 10,
                         what="the new leader tiering")
        assert tiered(tier)[:len(before)] == before
        for name, port in ports.items():
            if name != leader:
                assert await asyncio.to_thread(raw_bodies, port) == expected, name
