"""RabbitMQ's Prometheus names on /metrics and /metrics/per-object, after real pika and
rstream traffic: the series the RabbitMQ-Overview Grafana dashboard queries are there,
per-object series come and go with their objects, global counters count by protocol."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.request import urlopen

import pika
from prometheus_client.parser import text_string_to_metric_families
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from mainstem import Broker

TIMEOUT_S = 10

# Every metric name in the PromQL of RabbitMQ-Overview.json, the dashboard that ships
# with RabbitMQ's Prometheus plugin (deps/rabbitmq_prometheus/docker/grafana/dashboards).
OVERVIEW_DASHBOARD = (
    "rabbitmq_identity_info", "rabbitmq_build_info",
    "rabbitmq_erlang_uptime_seconds",  # the node table of its current version
    "rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked",
    "rabbitmq_queue_messages_published_total",
    "rabbitmq_connections", "rabbitmq_channels", "rabbitmq_queues",
    "rabbitmq_channel_consumers", "rabbitmq_channel_messages_unconfirmed",
    "rabbitmq_channel_messages_published_total", "rabbitmq_channel_messages_confirmed_total",
    "rabbitmq_channel_messages_unroutable_dropped_total",
    "rabbitmq_channel_messages_unroutable_returned_total",
    "rabbitmq_channel_messages_delivered_total", "rabbitmq_channel_messages_delivered_ack_total",
    "rabbitmq_channel_messages_redelivered_total", "rabbitmq_channel_messages_acked_total",
    "rabbitmq_channel_get_total", "rabbitmq_channel_get_ack_total",
    "rabbitmq_channel_get_empty_total",
    "rabbitmq_resident_memory_limit_bytes", "rabbitmq_process_resident_memory_bytes",
    "rabbitmq_disk_space_available_bytes",
    "rabbitmq_process_max_fds", "rabbitmq_process_open_fds",
    "rabbitmq_process_max_tcp_sockets", "rabbitmq_process_open_tcp_sockets",
    "rabbitmq_queues_declared_total", "rabbitmq_queues_created_total",
    "rabbitmq_queues_deleted_total",
    "rabbitmq_channels_opened_total", "rabbitmq_channels_closed_total",
    "rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total",
)


def scrape(broker: Broker, path: str = "/metrics") -> dict[tuple[str, frozenset], float]:
    """Every sample: (name, labels) -> value."""
    with urlopen(f"http://127.0.0.1:{broker.ports['prometheus']}{path}", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def amqp_traffic(broker: Broker, while_consuming: Callable[[], None]) -> None:
    """5 confirmed publishes and 1 unroutable; gets (acked, requeued, auto-ack, empty);
    then one unacked delivery to a prefetch-1 consumer, during which `while_consuming`
    runs. Closing the connection requeues that delivery."""
    parameters = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"],
                                           credentials=pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("work")
        channel.queue_declare("empty")
        for i in range(5):
            channel.basic_publish("", "work", b"m%d" % i)
        channel.basic_publish("", "nowhere", b"lost")
        method, _, _ = channel.basic_get("work")
        channel.basic_ack(method.delivery_tag)
        method, _, _ = channel.basic_get("work")
        channel.basic_nack(method.delivery_tag, requeue=True)
        method, _, _ = channel.basic_get("work", auto_ack=True)
        assert method.redelivered
        assert channel.basic_get("empty") == (None, None, None)
        channel.basic_qos(prefetch_count=1)
        for _delivery in channel.consume("work", inactivity_timeout=TIMEOUT_S):
            break
        while_consuming()


async def stream_traffic(broker: Broker, stream: str, count: int) -> None:
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    async with Producer(**args) as producer:
        await producer.create_stream(stream, exists_ok=True)
        for i in range(count):
            await producer.send_wait(stream, AMQPMessage(body=b"%d" % i))
    received = asyncio.Event()
    seen: list[bytes] = []

    async def on_message(message: AMQPMessage, context) -> None:
        seen.append(bytes(message.body))
        if len(seen) == count:
            received.set()

    async with Consumer(**args) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST))
        await asyncio.wait_for(received.wait(), TIMEOUT_S)


async def test_the_overview_dashboards_series_are_all_there(broker):
    await asyncio.to_thread(amqp_traffic, broker, lambda: None)
    await stream_traffic(broker, "events", 3)
    samples = await asyncio.to_thread(scrape, broker)
    names = {name for name, _ in samples}
    assert [name for name in OVERVIEW_DASHBOARD if name not in names] == []
    [(labels, identity)] = [(dict(labels), v) for (name, labels), v in samples.items()
                            if name == "rabbitmq_identity_info"]
    assert identity == 1 and labels["rabbitmq_node"].startswith("mainstem@")
    assert labels["rabbitmq_cluster"]  # the dashboard's $rabbitmq_cluster variable
    # aggregated: one sample without labels, the sum over every queue
    assert value(samples, "rabbitmq_queue_messages_ready") == 3 + 3  # "work" and "events"
    assert value(samples, "rabbitmq_queue_messages_published_total") == 5 + 3
    assert value(samples, "rabbitmq_queues") == 3
    assert value(samples, "rabbitmq_queues_created_total") == 2
    assert value(samples, "rabbitmq_channel_messages_published_total") == 6
    assert value(samples, "rabbitmq_channel_messages_unroutable_dropped_total") == 1
    assert value(samples, "rabbitmq_channel_get_ack_total") == 2
    assert value(samples, "rabbitmq_channel_get_total") == 1
    assert value(samples, "rabbitmq_channel_get_empty_total") == 1
    assert value(samples, "rabbitmq_channel_messages_delivered_ack_total") == 1
    assert value(samples, "rabbitmq_channels_opened_total") == 1
    assert value(samples, "rabbitmq_channels_closed_total") == 1
    assert value(samples, "rabbitmq_connections") == 0
    assert value(samples, "rabbitmq_connections_opened_total") >= 3  # pika, two rstream
    assert value(samples, "rabbitmq_process_resident_memory_bytes") > 0
    # mainstem's own series stay beside RabbitMQ's, aggregated too
    assert value(samples, "mainstem_segment_write_offset_bytes") > 0
    assert value(samples, "mainstem_stream_messages_in_total") == 3
    assert not [labels for (name, labels) in samples if ("vhost", "/") in labels]


async def test_global_counters_carry_the_protocol_label(broker):
    await asyncio.to_thread(amqp_traffic, broker, lambda: None)
    await stream_traffic(broker, "events", 4)
    samples = await asyncio.to_thread(scrape, broker)
    expected = {
        "received": (6, 4), "received_confirm": (6, 4), "routed": (5, 0),
        "unroutable_dropped": (1, 0), "confirmed": (6, 4), "acknowledged": (1, 0),
        "delivered_consume_manual_ack": (1, 0), "delivered_consume_auto_ack": (0, 4),
        "delivered_get_manual_ack": (2, 0), "delivered_get_auto_ack": (1, 0),
        "get_empty": (1, 0), "redelivered": (1, 0), "delivered": (4, 4),
    }
    for counter, (amqp, stream) in expected.items():
        name = f"rabbitmq_global_messages_{counter}_total"
        assert value(samples, name, protocol="amqp091") == amqp, counter
        assert value(samples, name, protocol="stream") == stream, counter
    assert value(samples, "rabbitmq_global_publishers", protocol="stream") == 0


async def test_per_object_series_come_and_go_with_their_objects(broker):
    seen: dict[str, dict] = {}

    def while_consuming() -> None:
        seen["during"] = scrape(broker, "/metrics/per-object")

    await asyncio.to_thread(amqp_traffic, broker, while_consuming)
    during = seen["during"]
    queue = {"vhost": "/", "queue": "work"}
    assert value(during, "rabbitmq_queue_messages_ready", **queue) == 2
    assert value(during, "rabbitmq_queue_messages_unacked", **queue) == 1
    assert value(during, "rabbitmq_queue_messages", **queue) == 3
    assert value(during, "rabbitmq_queue_consumers", **queue) == 1
    assert value(during, "rabbitmq_queue_messages_published_total", **queue) == 5
    assert value(during, "rabbitmq_queue_messages_ready", vhost="/", queue="empty") == 0
    channels = [dict(labels) for name, labels in during
                if name == "rabbitmq_channel_consumers"]
    assert len(channels) == 1 and channels[0]["vhost"] == "/"
    assert value(during, "rabbitmq_channel_consumers", **channels[0]) == 1
    assert value(during, "rabbitmq_channel_messages_unacked", **channels[0]) == 1
    assert value(during, "rabbitmq_channel_messages_published_total", **channels[0]) == 6
    assert value(during, "rabbitmq_connections") == 1
    assert value(during, "rabbitmq_global_publishers", protocol="amqp091") == 1
    assert value(during, "rabbitmq_global_consumers", protocol="amqp091") == 1

    after = await asyncio.to_thread(scrape, broker, "/metrics/per-object")
    assert value(after, "rabbitmq_queue_messages_ready", **queue) == 3  # requeued on close
    assert not [name for name, labels in after if name.startswith("rabbitmq_channel_")]
    assert not [name for name, labels in after if name.startswith("rabbitmq_connection_")]

    host = broker.core.queues.vhost("/")
    host.remove_queue(host.queues["work"])
    gone = await asyncio.to_thread(scrape, broker, "/metrics/per-object")
    assert not [name for name, labels in gone if ("queue", "work") in labels]
    assert value(gone, "rabbitmq_queues_deleted_total") == 1
