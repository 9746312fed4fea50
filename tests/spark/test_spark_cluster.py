"""Spark on a cluster: the source locates each partition's replicas through the stream
protocol's Metadata and spreads its input partitions over them, so the leader keeps its
CPU for writers; the rows are the stream's, whichever replica served them."""

from __future__ import annotations

import pytest

from mainstem.spark.options import SourceOptions
from mainstem.spark.source import BatchReader
from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import FollowingPublisher

pytestmark = pytest.mark.spark


async def test_reads_are_planned_on_replicas_and_return_every_row(
        spark, mainstem_cluster: LocalCluster) -> None:
    publisher = FollowingPublisher(mainstem_cluster, "clicks")
    await publisher.create()
    await publisher.publish(2_000)
    await publisher.settle()
    await publisher.close()
    leader = mainstem_cluster.nodes["node1"]
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:{leader.ports['stream']}/%2F"
    options = {"url": url, "stream": "clicks", "minPartitions": "4"}

    planned = BatchReader(SourceOptions.parse(options)).partitions()
    replicas = {mainstem_cluster.nodes[n].ports["stream"] for n in ("node2", "node3")}
    assert len(planned) == 4
    assert {part.endpoint.port for part in planned} == replicas  # both, never the leader

    rows = (spark.read.format("mainstem").options(**options).load()
            .orderBy("offset").select("value").collect())
    assert [bytes(row.value) for row in rows] == [f"m{i}".encode() for i in range(1, 2_001)]
