"""A segment in a cluster: events appended through the segment's leader node, the leader
SIGKILLed with appends in flight, the same appender (its connection id and event
numbers) set up again through another node and resending everything: the writer's
level replicated with the data, so the events are stored exactly once, in order, and
read so through every surviving node."""

from __future__ import annotations

import asyncio

from mainstem.client.segment import SegmentClient
from mainstem.testing_cluster import LocalCluster

SEGMENT = "/ledger/0"




async def test_killing_the_leader_of_a_segment_stores_every_event_once(
        mainstem_cluster: LocalCluster) -> None:
    cluster = mainstem_cluster
    client = await SegmentClient.connect("127.0.0.1", cluster.nodes["node1"].ports["segment"])
    await client.create(SEGMENT)
    appender = await client.appender(SEGMENT)
    events = [b"event-%05d" % i for i in range(3000)]
    for start in range(0, 1000, 100):
        appender.append_block(events[start:start + 100])
    acked = await appender.flush()
    for start in range(1000, 3000, 100):  # in flight when the leader dies
        appender.append_block(events[start:start + 100])
    await asyncio.sleep(0.01)
    cluster.kill("node1")
    await client.close()

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
                if len(stored) >= len(events):
                    break
                await asyncio.sleep(0.1)
            assert stored == events, name  # no duplicate, no gap, in order
        finally:
            await reader.close()
