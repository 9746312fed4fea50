"""A definitions import in a cluster (issue 43): checked whole on the node that takes it,
made etcd first, seen by every node; one that fails part way (a queue already there with
other settings) is put back on every node: no user, vhost or permission of it stays."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.error import HTTPError

import pika
import pytest

from mainstem.testing_cluster import LocalCluster
from tests.support.catalog_clients import api, until

FIXTURE = Path(__file__).parents[1] / "admin" / "fixtures" / "rabbitmq-3.10.8-migration.json"


def plain(rabbit: dict) -> dict:
    """Without the shapes only a fixed import takes: a broker before the fix got as far
    as the queues with it (having made the users, vhosts and permissions)."""
    gone = ("ha-", "queue-mode")
    return {**rabbit, "topic_permissions": [],
            "parameters": [row for row in rabbit["parameters"]
                           if row["value"] and row["component"] == "vhost-limits"],
            "policies": [p for p in rabbit["policies"]
                         if not any(k.startswith(gone) for k in p["definition"])]}


def users(cluster: LocalCluster, node: str) -> set[str]:
    return {row["name"] for row in api(cluster, node, "GET", "/api/users")}


def vhosts(cluster: LocalCluster, node: str) -> set[str]:
    return {row["name"] for row in api(cluster, node, "GET", "/api/vhosts")}


def test_an_import_is_whole_on_every_node_or_nowhere(mainstem_cluster: LocalCluster):
    cluster = mainstem_cluster
    rabbit = json.loads(FIXTURE.read_text())
    # a queue already there with other settings fails the import once its catalog changes
    # are made: they are put back everywhere
    api(cluster, "node1", "PUT", "/api/queues/%2F/legacy.inbox", {"durable": True})
    with pytest.raises(HTTPError) as refused:
        api(cluster, "node2", "POST", "/api/definitions", plain(rabbit))
    assert refused.value.code == 400
    for node in cluster.nodes:
        until(lambda node=node: users(cluster, node) == {"guest"}
              and vhosts(cluster, node) == {"/"}, "the import put back")
        assert [p["user"] for p in api(cluster, node, "GET", "/api/permissions")] == ["guest"]
        assert api(cluster, node, "GET", "/api/policies") == []

    api(cluster, "node1", "DELETE", "/api/queues/%2F/legacy.inbox")
    answer = api(cluster, "node2", "POST", "/api/definitions", rabbit)
    assert len(answer["warnings"]) == 3
    expected = {row["name"] for row in rabbit["users"]} | {"guest"}
    for node in cluster.nodes:
        until(lambda node=node: users(cluster, node) == expected
              and vhosts(cluster, node) == {"/", "shop", "iot"}, "the import seen")
    exported = api(cluster, "node3", "GET", "/api/definitions")
    assert len(exported["topic_permissions"]) == 2

    # the topic permission holds on another node than the one that imported it (once the
    # exchange, after the users and vhosts in etcd, is there too)
    until(lambda: "orders" in {row["name"] for row in
                               api(cluster, "node3", "GET", "/api/exchanges/shop")},
          "the exchange on node3")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", cluster.nodes["node3"].ports["amqp"], "shop",
        pika.PlainCredentials("orders-api", "orders-api-secret")))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("orders", "order.1.paid", b"ok")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish("orders", "refund.1", b"no")
        assert closed.value.reply_code == 403
    finally:
        connection.close()
