"""RabbitMQ's Prometheus listener as a scrape config written for RabbitMQ finds it: /metrics
aggregated, /metrics/per-object, /metrics/detailed with its family= and vhost= filters, its
TLS twin; the management port no longer names queues to anyone who asks. Scraped with
aiohttp, parsed with prometheus_client's parser, after real pika traffic."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mainstem import Broker
from mainstem.config import ServerConfig, TlsConfig
from tests.support.tls_certs import make_certificates

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
TIMEOUT_S = 15
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def configured(tmp_path: Path, **changes: object) -> Broker:
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    return Broker(config=dataclasses.replace(config, **changes))


async def scrape(port: int, path: str, *, scheme: str = "http",
                 context: ssl.SSLContext | None = None) -> Samples:
    """Every sample of an exposition, after checking it parses as Prometheus text."""
    async with aiohttp.ClientSession() as http, http.get(
            f"{scheme}://localhost:{port}{path}", ssl=context or False) as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def labelled(samples: Samples, label: str) -> Iterator[tuple[str, dict[str, str]]]:
    for name, labels in samples:
        if label in dict(labels):
            yield name, dict(labels)


def declare(broker: Broker, vhost: str, queues: dict[str, int]) -> None:
    """Each queue with that many messages, over pika."""
    parameters = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"], vhost,
                                           pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        for queue, count in queues.items():
            channel.queue_declare(queue)
            for i in range(count):
                channel.basic_publish("", queue, b"m%d" % i)


async def two_vhosts(broker: Broker) -> None:
    """"/" with orders (3) and audit (0), "billing" with invoices (2)."""
    base = f"http://127.0.0.1:{broker.ports['admin']}/api"
    async with aiohttp.ClientSession(headers=ADMIN) as http:
        for path, body in (("/vhosts/billing", {}), ("/permissions/billing/guest", {
                "configure": ".*", "write": ".*", "read": ".*"})):
            async with http.put(base + path, json=body) as response:
                assert response.status in (201, 204)
    await asyncio.to_thread(declare, broker, "/", {"orders": 3, "audit": 0})
    await asyncio.to_thread(declare, broker, "billing", {"invoices": 2})


async def test_the_listener_aggregates_metrics_and_names_objects_per_object(broker):
    await two_vhosts(broker)
    port = broker.ports["prometheus"]
    assert broker.urls["prometheus"] == f"http://127.0.0.1:{port}/metrics"
    aggregated = await scrape(port, "/metrics")
    assert list(labelled(aggregated, "queue")) == []
    assert list(labelled(aggregated, "vhost")) == []
    assert aggregated[("rabbitmq_queue_messages_ready", frozenset())] == 5
    assert aggregated[("rabbitmq_queues", frozenset())] == 3
    per_object = await scrape(port, "/metrics/per-object")
    async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{port}/metrics/per-object",
            headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"  # as Prometheus asks
        assert "invoices" in await response.text()
    # the same families, with one sample per object, and RabbitMQ 4's queue_info beside
    assert names(per_object) - names(aggregated) == {"rabbitmq_queue_info"}
    assert per_object[("rabbitmq_queue_messages_ready", frozenset(
        {("vhost", "billing"), ("queue", "invoices")}))] == 2
    info = {(labels["vhost"], labels["queue"], labels["queue_type"])
            for name, labels in labelled(per_object, "queue") if name == "rabbitmq_queue_info"}
    assert info == {("/", "orders", "rabbit_classic_queue"), ("/", "audit", "rabbit_classic_queue"),
                    ("billing", "invoices", "rabbit_classic_queue")}


async def test_detailed_serves_the_families_and_vhosts_asked_for(broker):
    await two_vhosts(broker)
    port = broker.ports["prometheus"]
    coarse = await scrape(port, "/metrics/detailed?family=queue_coarse_metrics&vhost=%2F")
    assert names(coarse) == {
        "rabbitmq_detailed_queue_messages_ready", "rabbitmq_detailed_queue_messages_unacked",
        "rabbitmq_detailed_queue_messages", "rabbitmq_detailed_queue_info",
        "rabbitmq_identity_info"}
    assert {labels["queue"] for _, labels in labelled(coarse, "queue")} == {"orders", "audit"}
    assert coarse[("rabbitmq_detailed_queue_messages", frozenset(
        {("vhost", "/"), ("queue", "orders")}))] == 3

    both = await scrape(port, "/metrics/detailed?family=queue_coarse_metrics"
                              "&vhost=%2F&vhost=billing&vhost=nowhere")
    assert {labels["queue"] for _, labels in labelled(both, "queue")} == {
        "orders", "audit", "invoices"}
    unfiltered = await scrape(port, "/metrics/detailed?family=queue_consumer_count")
    assert {labels["vhost"] for _, labels in labelled(unfiltered, "vhost")} == {"/", "billing"}

    # queue_consumer_count is a part of queue_metrics: asked for both, served once
    counts = await scrape(port, "/metrics/detailed?family=queue_metrics"
                                "&family=queue_consumer_count&vhost=billing")
    consumers = [key for key in counts if key[0] == "rabbitmq_detailed_queue_consumers"]
    assert consumers == [("rabbitmq_detailed_queue_consumers", frozenset(
        {("vhost", "billing"), ("queue", "invoices")}))]
    assert "rabbitmq_detailed_queue_consumer_capacity" in names(counts)

    churn = await scrape(port, "/metrics/detailed?family=connection_churn_metrics")
    assert churn[("rabbitmq_detailed_connections_opened_total", frozenset())] >= 2
    assert churn[("rabbitmq_detailed_queues_declared_total", frozenset())] == 3
    for nothing in ("/metrics/detailed", "/metrics/detailed?family=no_such_family"):
        assert names(await scrape(port, nothing)) == {"rabbitmq_identity_info"}


async def test_return_per_object_metrics_labels_metrics_too(tmp_path):
    async with configured(tmp_path, return_per_object_metrics=True) as broker:
        await asyncio.to_thread(declare, broker, "/", {"orders": 4})
        samples = await scrape(broker.ports["prometheus"], "/metrics")
    assert samples[("rabbitmq_queue_messages_ready", frozenset(
        {("vhost", "/"), ("queue", "orders")}))] == 4


async def test_the_management_port_names_no_queue_without_a_login(broker):
    await asyncio.to_thread(declare, broker, "/", {"secret-project": 1})
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    async with aiohttp.ClientSession(base) as http:
        for path in ("/metrics", "/metrics/per-object", "/metrics/detailed?family=queue_metrics"):
            async with http.get(path) as response:
                assert response.status == 401
                assert "secret-project" not in await response.text()
            async with http.get(path, headers=ADMIN) as response:
                assert response.status == 200
                named = "secret-project" in await response.text()
                assert named == (path != "/metrics")  # aggregated: no object's name


@pytest.mark.parametrize(("served", "status"), [("open", 200), ("off", 404)])
async def test_metrics_on_the_management_port_as_configured(tmp_path, served, status):
    async with configured(tmp_path, admin_metrics=served) as broker, aiohttp.ClientSession(
            f"http://127.0.0.1:{broker.ports['admin']}") as http:
        async with http.get("/metrics") as response:
            assert response.status == status
        async with http.get("/api/overview") as response:
            assert response.status == 401  # the API still wants its login
        samples = await scrape(broker.ports["prometheus"], "/metrics")
        assert ("rabbitmq_queues", frozenset()) in samples


async def test_the_tls_twin_serves_the_same_endpoints(tmp_path):
    certs = make_certificates(tmp_path / "certs")
    tls = TlsConfig(certs.server_cert, certs.server_key, certs.ca, "none")
    async with configured(tmp_path, tls=tls) as broker:
        await asyncio.to_thread(declare, broker, "/", {"orders": 2})
        port = broker.ports["prometheus/tls"]
        assert port != broker.ports["prometheus"]
        assert broker.urls["prometheus/tls"] == f"https://127.0.0.1:{port}/metrics"
        context = ssl.create_default_context(cafile=str(certs.ca))
        plain = await scrape(broker.ports["prometheus"], "/metrics/per-object")
        secure = await scrape(port, "/metrics/per-object", scheme="https", context=context)
        assert names(secure) == names(plain)
        detailed = await scrape(port, "/metrics/detailed?family=queue_coarse_metrics",
                                scheme="https", context=context)
        assert detailed[("rabbitmq_detailed_queue_messages_ready", frozenset(
            {("vhost", "/"), ("queue", "orders")}))] == 2
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await scrape(port, "/metrics", scheme="https", context=ssl.create_default_context())


async def test_the_protocol_listener_check_knows_the_prometheus_listener(tmp_path):
    path = "/api/health/checks/protocol-listener/http%2Fprometheus"
    for enabled, status in ((True, 200), (False, 503)):
        config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
        prometheus = dataclasses.replace(config.prometheus, enabled=enabled)
        async with Broker(config=dataclasses.replace(config, prometheus=prometheus)) as broker, \
                aiohttp.ClientSession(headers=ADMIN) as http, http.get(
                    f"http://127.0.0.1:{broker.ports['admin']}{path}") as response:
            assert response.status == status
            assert ("prometheus" in broker.ports) is enabled


async def test_the_listener_serves_with_the_management_listener_off(tmp_path):
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    admin = dataclasses.replace(config.admin, enabled=False)
    async with Broker(config=dataclasses.replace(config, admin=admin)) as broker:
        assert "admin" not in broker.ports
        await asyncio.to_thread(declare, broker, "/", {"orders": 1})
        samples = await scrape(broker.ports["prometheus"], "/metrics")
    assert samples[("rabbitmq_queue_messages_ready", frozenset())] == 1


ALL_FAMILIES = ("connection_churn_metrics", "node_coarse_metrics", "node_metrics",
                "queue_coarse_metrics", "queue_consumer_count", "queue_metrics",
                "channel_metrics", "channel_exchange_metrics", "channel_queue_metrics",
                "connection_coarse_metrics", "connection_metrics",
                "channel_queue_exchange_metrics")


async def test_every_endpoint_declares_each_family_once(broker):
    await asyncio.to_thread(declare, broker, "/", {"orders": 1})
    every = "&".join(f"family={family}" for family in ALL_FAMILIES)
    for path in ("/metrics", "/metrics/per-object", f"/metrics/detailed?{every}"):
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{broker.ports['prometheus']}{path}") as response:
            text = await response.text()
        declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
        assert len(declared) == len(set(declared)) > 20, path
        families = {family.name for family in text_string_to_metric_families(text)}
        assert len(families) == len(declared), path
