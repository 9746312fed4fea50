"""Nothing an AMQP publisher was confirmed is lost: SIGKILL mid-publish, restart, and every
confirmed persistent message is in its durable queue (classic and stream) exactly once;
messages acked before the kill do not come back."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pika
import pytest

from tests.support.server_process import kill, start_server, started_ports


def _publish_until_killed(port: int, queue: str, confirmed: list[bytes],
                          stop: threading.Event) -> None:
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        i = 0
        while not stop.is_set():
            body = f"m{i}".encode()
            channel.basic_publish("", queue, body, persistent)  # returns once confirmed
            confirmed.append(body)
            i += 1


@pytest.mark.parametrize("queue_type", ["classic", "stream"])
def test_confirmed_messages_survive_sigkill(tmp_path: Path, queue_type: str) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server = start_server(data, log)
    confirmed: list[bytes] = []
    stop = threading.Event()
    try:
        port = started_ports(server, log)["amqp"]
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.queue_declare("crash", durable=True, arguments={"x-queue-type": queue_type})
        if queue_type == "classic":  # two acked messages must stay gone
            for body in (b"acked-1", b"acked-2"):
                channel.basic_publish("", "crash", body, pika.BasicProperties(delivery_mode=2))
            for _ in range(2):
                method, _, _ = channel.basic_get("crash")
                channel.basic_ack(method.delivery_tag)
        publisher = threading.Thread(target=_publish_until_killed,
                                     args=(port, "crash", confirmed, stop))
        publisher.start()
        while len(confirmed) < 300 and publisher.is_alive():
            threading.Event().wait(0.01)
        kill(server)
        stop.set()
        publisher.join(10)
    finally:
        kill(server)
    assert len(confirmed) >= 300
    server = start_server(data, log)
    try:
        port = started_ports(server, log)["amqp"]
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        stored = _read_all(channel, queue_type)
        connection.close()
    finally:
        kill(server)
    assert b"acked-1" not in stored and b"acked-2" not in stored
    assert len(stored) == len(set(stored))
    missing = set(confirmed) - set(stored)
    assert not missing, f"{len(missing)} confirmed messages lost"


def _read_all(channel: pika.adapters.blocking_connection.BlockingChannel,
              queue_type: str) -> list[bytes]:
    if queue_type == "classic":
        stored = []
        while (got := channel.basic_get("crash", auto_ack=True))[0] is not None:
            stored.append(got[2])
        return stored
    channel.basic_qos(prefetch_count=1000)
    stored = []
    for method, _, body in channel.consume("crash", arguments={"x-stream-offset": "first"},
                                           inactivity_timeout=1):
        if method is None:
            break
        stored.append(body)
        channel.basic_ack(method.delivery_tag)
    return stored
