"""SIGKILL a replicated stream's leader in the middle of confirmed publishing: a new
leader is elected among the in-sync replicas, the publisher resumes on it (deduplicated
by its publisher name), and every confirmed message is read exactly once, in order,
through every surviving node and through the killed one once it has caught up."""

from __future__ import annotations

import asyncio
import contextlib
import time

from rstream import ConfirmationStatus, Producer

from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import bodies_on, stream_metadata
from tests.support.stream_crash import BATCH, credentials, numbered, publish_until_killed

CONFIRMED_BEFORE_KILL = 3_000
STREAM = "ledger"
PUBLISHER = "ledger-writer"


async def leader_port(port: int, stream: str) -> int | None:
    """The stream port of the stream's leader, as the node at `port` knows it; None while
    it has none (Metadata answers the stream is not available)."""
    try:
        leader, _ = await stream_metadata(port, stream)
    except Exception:
        return None
    return int(leader.port)


async def resume(port: int, last: int, more: int) -> set[int]:
    """A new producer (same publisher name) resends everything and publishes `more`:
    what the old leader stored already is dropped as a duplicate."""
    confirmed: set[int] = set()

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.add(status.message_id)

    async with Producer(**credentials(port)) as producer:
        for first in range(1, last + more + 1, BATCH):
            await producer.send_batch(STREAM, numbered(first, first + BATCH - 1), PUBLISHER,
                                      on_publish_confirm=on_confirm)
        for _ in range(400):
            if len(confirmed) == last + more:
                break
            await asyncio.sleep(0.05)
    return confirmed


async def test_killing_the_leader_mid_publish_loses_no_confirmed_message(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    ports = {name: node.ports["stream"] for name, node in cluster.nodes.items()}
    confirmed, sent = await publish_until_killed(
        ports["node1"], lambda: cluster.kill("node1"), STREAM, PUBLISHER, CONFIRMED_BEFORE_KILL)
    assert len(confirmed) >= CONFIRMED_BEFORE_KILL

    killed_at = time.monotonic()
    new_leader = None
    while time.monotonic() - killed_at < 15 and new_leader is None:
        found = await leader_port(ports["node2"], STREAM)
        new_leader = found if found in (ports["node2"], ports["node3"]) else None
        await asyncio.sleep(0.1)
    assert new_leader is not None, "no new leader within 15 s"
    assert time.monotonic() - killed_at <= 12  # the lease TTL (5 s) plus an election

    resumed = await resume(new_leader, sent, 1_000)
    total = sent + 1_000
    assert resumed == set(range(1, total + 1))
    expected = [f"m{i}".encode() for i in range(1, total + 1)]
    for name in ("node2", "node3"):
        assert bodies_on(ports[name], STREAM) == expected, name

    cluster.start("node1")
    restarted = cluster.nodes["node1"].ports["stream"]
    for _ in range(100):  # the restarted replica cuts its divergent tail and catches up
        with contextlib.suppress(Exception):
            if len(bodies_on(restarted, STREAM)) >= total:
                break
        await asyncio.sleep(0.1)
    assert bodies_on(restarted, STREAM) == expected
