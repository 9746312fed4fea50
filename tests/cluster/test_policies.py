"""Policies are cluster-wide, as in RabbitMQ: one set on a node reaches every node through
the catalog feed and holds there on queues declared through pika; one cleared on another
node goes everywhere. A policy's queue-leader-locator places a quorum queue's leader."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pika
from pika.adapters.blocking_connection import BlockingChannel

from mainstem.testing_cluster import LocalCluster
from tests.support.catalog_clients import api, until


def channel_on(cluster: LocalCluster, node: str) -> BlockingChannel:
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", cluster.nodes[node].ports["amqp"]))
    return connection.channel()


def names(cluster: LocalCluster, node: str) -> list[str]:
    return [row["name"] for row in api(cluster, node, "GET", "/api/policies/%2F")]


def queue_row(cluster: LocalCluster, node: str, queue: str) -> Any:
    return api(cluster, node, "GET", f"/api/queues/%2F/{quote(queue)}")


def test_a_policy_set_on_one_node_applies_on_every_node(mainstem_cluster: LocalCluster):
    cluster = mainstem_cluster
    api(cluster, "node1", "PUT", "/api/policies/%2F/cap",
        {"pattern": "^capped", "definition": {"max-length": 3}, "apply-to": "classic_queues"})
    until(lambda: names(cluster, "node3") == ["cap"], "the policy on node3")
    channel = channel_on(cluster, "node3")
    try:
        channel.queue_declare("capped-here")
        for i in range(10):
            channel.basic_publish("", "capped-here", b"m%d" % i)
        until(lambda: channel.queue_declare("capped-here", passive=True)
              .method.message_count == 3, "the queue capped")
        assert queue_row(cluster, "node3", "capped-here")["policy"] == "cap"
        api(cluster, "node2", "DELETE", "/api/policies/%2F/cap")
        until(lambda: names(cluster, "node1") == [] and names(cluster, "node3") == [],
              "the policy gone")
        assert queue_row(cluster, "node3", "capped-here")["policy"] == ""
    finally:
        channel.connection.close()

    # queue-leader-locator: client-local puts the leader on the declaring node (node1);
    # a balanced policy puts it on the node with the fewest replicas instead
    single = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 1}
    channel = channel_on(cluster, "node1")
    try:
        channel.queue_declare("local", durable=True, arguments=single)
        until(lambda: queue_row(cluster, "node1", "local").get("leader") == "node1",
              "the leader on node1")
        api(cluster, "node1", "PUT", "/api/policies/%2F/spread",
            {"pattern": "^spread", "definition": {"queue-leader-locator": "balanced"},
             "apply-to": "quorum_queues"})
        channel.queue_declare("spread", durable=True, arguments=single)
        until(lambda: queue_row(cluster, "node1", "spread").get("leader") == "node2",
              "the leader on node2")
    finally:
        channel.connection.close()
