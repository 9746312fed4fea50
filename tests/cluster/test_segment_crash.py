"""A segment in a cluster: events appended through the segment's leader node, the leader
SIGKILLed with appends in flight, the same appender (its connection id and event
numbers) set up again through another node and resending everything: the writer's
level replicated with the data, so the events are stored exactly once, in order, and
read so through every surviving node."""

from __future__ import annotations

import asyncio

from mainstem.client.segment import SegmentClient
from mainstem.testing_cluster import LocalCluster
from tests.support.segment_crash import EVENTS, append_until_killed

SEGMENT = "/ledger/0"




async def test_killing_the_leader_of_a_segment_stores_every_event_once(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    appender, acked = await append_until_killed(
        cluster.nodes["node1"].ports["segment"], SEGMENT, lambda: cluster.kill("node1"))

    client = await SegmentClient.connect("127.0.0.1", cluster.nodes["node2"].ports["segment"])
    appender.client = client
    level = await asyncio.wait_for(appender.setup(), 30)  # waits for the new leader
    assert level >= acked  # nothing confirmed is lost
    await appender.resend()
    await appender.flush()
    await client.close()
    for name in ("node2", "node3"):
        reader = await SegmentClient.connect("127.0.0.1", cluster.nodes[name].ports["segment"])
        try:
            for _ in range(100):
                stored = await reader.read_events(SEGMENT)
                if len(stored) >= len(EVENTS):
                    break
                await asyncio.sleep(0.1)
            assert stored == EVENTS, name  # no duplicate, no gap, in order
        finally:
            await reader.close()
