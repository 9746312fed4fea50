"""RabbitMQ's Grafana dashboards beyond Overview, against a broker under pika and rstream
traffic: every metric name of every query of the RabbitMQ-Stream dashboard has series
(tests/admin/fixtures/rabbitmq-dashboard-queries.json transcribes them from RabbitMQ's own
dashboards), with honest values: the stream protocol's errors as sent, no stream publish
counted routed, dead-lettered messages and logins by RabbitMQ's labels, the node's uptime."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pika
import pytest
from rstream import Producer
from rstream.exceptions import AuthenticationFailure, StreamAlreadyExists, StreamDoesNotExist

from mainstem import Broker
from tests.admin.test_admin_metrics import amqp_traffic, scrape, stream_traffic, value
from tests.support.rabbit_dashboards import queries_without_series

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ_NAMES = json.loads(
    (ROOT / "tests/admin/fixtures/rabbitmq-metric-names.json").read_text())["names"]


def stream_args(broker: Broker, password: str = "guest") -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": password}


async def stream_errors(broker: Broker) -> None:
    """One stream that already exists, one that does not, one wrong password."""
    async with Producer(**stream_args(broker)) as producer:  # type: ignore[arg-type]
        with pytest.raises(StreamAlreadyExists):
            await producer.create_stream("events")
        with pytest.raises(StreamDoesNotExist):
            await producer.delete_stream("no-such-stream")
    with pytest.raises(AuthenticationFailure):
        async with Producer(**stream_args(broker, "wrong")):  # type: ignore[arg-type]
            pass


def rejected_without_dead_letter_exchange(broker: Broker) -> None:
    parameters = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"],
                                           credentials=pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.queue_declare("refused")
        channel.basic_publish("", "refused", b"no")
        method, _, _ = channel.basic_get("refused")
        channel.basic_reject(method.delivery_tag, requeue=False)
        channel.queue_declare("refused", passive=True)  # the reject was handled before


async def test_the_stream_dashboards_queries_all_have_series(broker):
    await asyncio.to_thread(amqp_traffic, broker, lambda: None)
    await stream_traffic(broker, "events", 3)
    await stream_errors(broker)
    await asyncio.to_thread(rejected_without_dead_letter_exchange, broker)
    samples = await asyncio.to_thread(scrape, broker)
    names = {name for name, _ in samples}
    assert queries_without_series("RabbitMQ-Stream", names) == []
    # a single node has no replicated quorum journal, so no Raft series at all
    assert not [name for name in names if name.startswith("rabbitmq_raft_")]

    def errors(name: str) -> float:
        return value(samples, f"rabbitmq_global_stream_error_{name}_total", protocol="stream")

    assert errors("stream_already_exists") == 1
    assert errors("stream_does_not_exist") == 1
    assert errors("authentication_failure") == 1
    assert errors("frame_too_large") == 0
    # only exchanges route: the stream protocol's 3 publishes are received, not routed
    assert value(samples, "rabbitmq_global_messages_received_total", protocol="stream") == 3
    assert value(samples, "rabbitmq_global_messages_routed_total", protocol="stream") == 0
    assert value(samples, "rabbitmq_global_messages_routed_total", protocol="amqp091") == 6
    assert value(samples, "rabbitmq_global_messages_dead_lettered_rejected_total",
                 queue_type="rabbit_classic_queue", dead_letter_strategy="disabled") == 1
    assert value(samples, "rabbitmq_global_messages_dead_lettered_maxlen_total",
                 queue_type="rabbit_quorum_queue", dead_letter_strategy="at_most_once") == 0
    assert value(samples, "rabbitmq_auth_attempts_failed_total", protocol="stream") == 1
    succeeded = value(samples, "rabbitmq_auth_attempts_succeeded_total", protocol="stream")
    assert succeeded >= 3  # rstream's clients each log in on a connection or two
    assert value(samples, "rabbitmq_auth_attempts_total", protocol="stream") == succeeded + 1
    assert value(samples, "rabbitmq_auth_attempts_succeeded_total", protocol="amqp091") == 2


async def test_the_node_table_has_identity_build_and_a_growing_uptime(broker):
    """The Overview's node table joins rabbitmq_build_info and
    rabbitmq_erlang_uptime_seconds to rabbitmq_identity_info."""
    first = await asyncio.to_thread(scrape, broker)
    await asyncio.sleep(0.2)
    second = await asyncio.to_thread(scrape, broker)
    names = {name for name, _ in second}
    assert {"rabbitmq_identity_info", "rabbitmq_build_info",
            "rabbitmq_erlang_uptime_seconds"} <= names
    earlier = value(first, "rabbitmq_erlang_uptime_seconds")
    assert 0 < earlier < value(second, "rabbitmq_erlang_uptime_seconds") - 0.1
    detailed = await asyncio.to_thread(
        scrape, broker, "/metrics/detailed?family=node_metrics&family=auth_attempt_metrics")
    assert value(detailed, "rabbitmq_detailed_erlang_uptime_seconds") > earlier
    assert value(detailed, "rabbitmq_detailed_auth_attempts_total", protocol="amqp091") == 0


def documented() -> dict[str, str]:
    """docs/rabbitmq-metrics.md's table: RabbitMQ metric -> mainstem's source or absent."""
    text = (ROOT / "docs" / "rabbitmq-metrics.md").read_text()
    return dict(re.findall(r"^\| `(rabbitmq_\w+)` \| (.*) \|$", text, re.MULTILINE))


async def test_the_docs_table_names_exactly_what_a_scrape_lacks(broker):
    """Every RabbitMQ metric is in the table; those marked absent are the ones a single
    broker's scrapes lack, but for the Raft series, which only a cluster has."""
    table = documented()
    assert sorted(table) == sorted(RABBITMQ_NAMES)
    await asyncio.to_thread(amqp_traffic, broker, lambda: None)
    await stream_traffic(broker, "events", 3)
    served = set()
    for path in ("/metrics", "/metrics/per-object"):
        served |= {name for name, _ in await asyncio.to_thread(scrape, broker, path)}
    lacking = {name for name in RABBITMQ_NAMES if name not in served}
    in_a_cluster = {name for name, source in table.items() if source.startswith("in a cluster")}
    absent = {name for name, source in table.items() if source.startswith("absent")}
    assert lacking == absent | in_a_cluster
