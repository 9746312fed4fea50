"""Repair from an in-sync replica (issue 40, item 2) on a real three-node cluster and a real
etcd: bytes flipped in a sealed segment on a follower and, in another chunk, on the leader
are found by each node's scrub and replaced by another replica's intact copy, checked
before it is written and logged with the range replaced; then rstream consumers from the
first offset, through every node, get every message once and intact."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

from rstream import ConfirmationStatus, Producer

from mainstem.broker.layout import storage_name
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.index import SegmentIndex
from mainstem.testing_cluster import LocalCluster, Node
from tests.cluster.conftest import AUTH
from tests.support.cluster_clients import stream_metadata
from tests.support.rstream_reads import read_with_rstream
from tests.support.stream_crash import credentials, numbered

STREAM = "ledger"
COUNT = 1000  # in batches of 100: chunks of about 2 KB, segments of two or three chunks
REPAIRED_WITHIN_S = 60.0  # a pass over a few KB is instant; the machine may be loaded


async def publish(node: Node) -> None:
    confirmed: set[int] = set()

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.add(status.message_id)

    async with Producer(**credentials(node.ports["stream"])) as producer:  # type: ignore[arg-type]
        await producer.create_stream(STREAM, arguments={
            "stream-max-segment-size-bytes": 5_000})
        for first in range(1, COUNT + 1, 100):
            await producer.send_batch(STREAM, numbered(first, first + 99),
                                      on_publish_confirm=on_confirm)
            for _ in range(600):
                if len(confirmed) >= first + 99:
                    break
                await asyncio.sleep(0.05)
    assert confirmed == set(range(1, COUNT + 1))


def segments_of(node: Node) -> list[Path]:
    directory = node.data_dir / "streams" / storage_name("stream", "/", STREAM)
    return sorted(directory.rglob("*.segment"))


def flip(segment: Path, chunk: int) -> int:
    """Flip a byte in the data of `chunk` of `segment`; its chunk id."""
    entry = SegmentIndex.load(segment.with_suffix(".index")).entry(chunk)
    with open(segment, "r+b") as file:
        file.seek(entry.file_pos + HEADER_SIZE + 20)
        byte = file.read(1)
        file.seek(entry.file_pos + HEADER_SIZE + 20)
        file.write(bytes([byte[0] ^ 0xFF]))
    return entry.chunk_id


def verify_report(node: Node) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{node.ports['admin']}/api/streams/%2F/{STREAM}/verify", headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as response:
        report: dict[str, Any] = json.load(response)["partitions"][0]
        return report


async def repaired(node: Node, chunk_id: int) -> dict[str, Any]:
    """The node's log event of the chunk's repair, once the scrub made it."""
    for _ in range(int(REPAIRED_WITHIN_S / 0.2)):
        events = [e for e in node.log_events("chunk.repaired") if e["chunk_id"] == chunk_id]
        if events:
            return events[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{node.name} did not repair chunk {chunk_id}: "
                         f"{verify_report(node)}")


async def test_damaged_chunks_are_repaired_from_an_in_sync_replica(
        mainstem_cluster: LocalCluster) -> None:
    nodes = mainstem_cluster.nodes
    await publish(nodes["node1"])
    expected = [f"m{i}".encode() for i in range(1, COUNT + 1)]
    leader_port = (await stream_metadata(nodes["node1"].ports["stream"], STREAM))[0].port
    leader = next(n for n in nodes.values() if n.ports["stream"] == leader_port)
    follower = next(n for n in nodes.values() if n is not leader)
    for node in nodes.values():  # every replica holds every chunk before the damage
        assert await read_with_rstream(node.ports["stream"], STREAM, expected=COUNT,
                                       quiet_s=2.0) == expected
    assert len(segments_of(follower)) >= 3 and len(segments_of(leader)) >= 3

    on_follower = flip(segments_of(follower)[0], 1)
    on_leader = flip(segments_of(leader)[1], 0)
    for node, chunk_id in ((follower, on_follower), (leader, on_leader)):
        event = await repaired(node, chunk_id)
        assert event["source"] in nodes and event["source"] != node.name
        assert event["size"] > HEADER_SIZE and event["file_pos"] >= 16
        damaged = [e for e in node.log_events("chunk.damaged") if e["chunk_id"] == chunk_id]
        assert damaged, f"{node.name} repaired chunk {chunk_id} without logging its damage"
        report = verify_report(node)
        assert report["damaged_chunk_ids"] == []
        assert [r["chunk_id"] for r in report["repaired"]] == [chunk_id]

    for node in nodes.values():  # once, in order, intact, through every node
        assert await read_with_rstream(node.ports["stream"], STREAM, expected=COUNT,
                                       quiet_s=2.0) == expected, node.name
