"""Deep classic queues page to disk: a stalled consumer costs a few bytes of broker RAM per
queued message, a fast publisher is held back (credit flow) while its queue's pager catches
up, and paged persistent messages survive SIGKILL (the broker runs as a real process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pika
import pytest

from server_process import kill, start_server, started_ports

BOUND = 1000  # messages a queue keeps in memory in these tests


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Popen, Path, Path]]:
    data, log = tmp_path / "data", tmp_path / "server.log"
    process = start_server(data, log, "--queue-memory-messages", str(BOUND))
    try:
        yield process, data, log
    finally:
        kill(process)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def body(i: int) -> bytes:
    return f"m{i:015d}".encode()  # 16 bytes


def publish_confirmed(port: int, queue: str, start: int, count: int,
                      window: int = 5000) -> None:
    """Publish persistent messages with confirms, up to `window` unconfirmed at a time."""
    sent = confirmed = 0
    persistent = pika.BasicProperties(delivery_mode=2)

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: pika.channel.Channel) -> None:
        channel.confirm_delivery(lambda frame: on_confirm(channel, frame),
                                 callback=lambda _: channel.queue_declare(
                                     queue, durable=True, callback=lambda _: pump(channel)))

    def on_confirm(channel: pika.channel.Channel, frame: pika.frame.Method) -> None:
        nonlocal confirmed
        assert isinstance(frame.method, pika.spec.Basic.Ack), frame.method
        confirmed = max(confirmed, frame.method.delivery_tag)
        if confirmed == count:
            channel.connection.close()
        else:
            pump(channel)

    def pump(channel: pika.channel.Channel) -> None:
        nonlocal sent
        while sent < count and sent - confirmed < window:
            channel.basic_publish("", queue, body(start + sent), persistent)
            sent += 1

    connection = pika.SelectConnection(
        pika.ConnectionParameters("127.0.0.1", port), on_open_callback=on_open,
        on_close_callback=lambda *_: connection.ioloop.stop())
    connection.ioloop.start()
    assert confirmed == count


def consume_in_order(port: int, queue: str, count: int) -> None:
    """Every message, acked, in publish order and never redelivered; then the queue is empty."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2000)
    for expected, (method, _, received) in enumerate(
            channel.consume(queue, inactivity_timeout=10), 1):
        assert method is not None, f"stalled after {expected - 1} messages"
        assert received == body(expected - 1), (received, expected - 1)
        assert not method.redelivered
        if expected % 1000 == 0 or expected == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if expected == count:
            break
    channel.cancel()
    assert channel.queue_declare(queue, durable=True, passive=True).method.message_count == 0
    connection.close()


def test_stalled_consumer_costs_few_bytes_per_message(server: tuple[Popen, Path, Path]
                                                      ) -> None:
    process, _, log = server
    port = started_ports(process, log)["amqp"]
    count = 200_000
    publish_confirmed(port, "deep", 0, 2 * BOUND)  # the in-memory part, warm
    before = rss_bytes(process.pid)
    publish_confirmed(port, "deep", 2 * BOUND, count)
    per_message = (rss_bytes(process.pid) - before) / count
    print(f"broker RSS per queued message: {per_message:.1f} bytes")
    assert per_message <= 100, f"{per_message:.0f} bytes of broker RAM per queued message"
    consume_in_order(port, "deep", count + 2 * BOUND)
