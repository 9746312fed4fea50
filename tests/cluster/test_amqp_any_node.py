"""AMQP clients as they are used, each connection on a different node of one cluster: a
pika RPC whose server answers into the caller's exclusive reply queue through another
node, and a celery task round trip (kombu, py-amqp, RPC results) with the worker on one
node and the caller on another: each publishes to queues the other's node is home to."""

from __future__ import annotations

import logging
import threading
import uuid

import pika
from celery import Celery
from celery.contrib.testing.worker import start_worker

from mainstem.testing_cluster import LocalCluster


def amqp_url(cluster: LocalCluster, node: str) -> str:
    return f"amqp://guest:guest@127.0.0.1:{cluster.nodes[node].ports['amqp']}/%2F"


def serve_rpc(url: str, ready: threading.Event, requests: int) -> None:
    """An RPC server: answers `requests` calls of the `rpc` queue with the body doubled."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare("rpc", durable=True)
    channel.basic_qos(prefetch_count=10)
    answered = 0

    def on_request(ch, method, properties, body: bytes) -> None:  # type: ignore[no-untyped-def]
        nonlocal answered
        ch.basic_publish("", properties.reply_to, body * 2, pika.BasicProperties(
            correlation_id=properties.correlation_id))
        ch.basic_ack(method.delivery_tag)
        answered += 1
        if answered == requests:
            ch.stop_consuming()

    channel.basic_consume("rpc", on_request)
    ready.set()
    channel.start_consuming()
    connection.close()


def test_rpc_replies_reach_an_exclusive_queue_on_another_node(
        cluster: LocalCluster) -> None:
    ready = threading.Event()
    server = threading.Thread(target=serve_rpc, daemon=True, args=(
        amqp_url(cluster, "node2"), ready, 20))
    server.start()
    assert ready.wait(30)
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url(cluster,
                                                                     "node3")))
    channel = connection.channel()
    channel.confirm_delivery()
    reply_to = channel.queue_declare("", exclusive=True).method.queue  # lives on node3
    answers: dict[str, bytes] = {}

    def on_answer(ch, method, properties, body: bytes) -> None:  # type: ignore[no-untyped-def]
        answers[properties.correlation_id] = body

    channel.basic_consume(reply_to, on_answer, auto_ack=True)
    asked = {}
    for i in range(20):
        correlation = str(uuid.uuid4())
        asked[correlation] = f"q{i}".encode()
        channel.basic_publish("", "rpc", asked[correlation], pika.BasicProperties(
            reply_to=reply_to, correlation_id=correlation), mandatory=True)
    for _ in range(300):
        if len(answers) == len(asked):
            break
        connection.process_data_events(time_limit=0.1)
    connection.close()
    server.join(30)
    assert answers == {c: body * 2 for c, body in asked.items()}


def test_celery_worker_and_caller_on_other_nodes(cluster: LocalCluster) -> None:
    def app_on(node: str) -> Celery:
        app = Celery("cluster_test", broker=amqp_url(cluster, node),
                     backend="rpc://")
        app.conf.update(broker_connection_retry_on_startup=False,
                        worker_hijack_root_logger=False, worker_redirect_stdouts=False)
        return app

    worker_app, caller_app = app_on("node2"), app_on("node3")

    @worker_app.task(name="add")
    def add(x: int, y: int) -> int:
        return x + y

    root_level = logging.getLogger().level  # the worker sets the root logger to ERROR
    try:
        with start_worker(worker_app, pool="solo", perform_ping_check=False,
                          shutdown_timeout=30):
            result = caller_app.send_task("add", (2, 3))
            assert result.get(timeout=30) == 5
            assert caller_app.send_task("add", (40, 2)).get(timeout=30) == 42
    finally:
        logging.getLogger().setLevel(root_level)
