"""Deep classic queues page to disk: a stalled consumer costs a few bytes of broker RAM per
queued message, a fast publisher is held back (credit flow) while its queue's pager catches
up, and paged persistent messages survive SIGKILL (the broker runs as a real process)."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pika
import pytest

from tests.support.server_process import kill, rss_bytes, start_server, started_ports

BOUND = 1000  # messages a queue keeps in memory in these tests


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Popen, Path, Path]]:
    data, log = tmp_path / "data", tmp_path / "server.log"
    process = start_server(data, log, "--queue-memory-messages", str(BOUND))
    try:
        yield process, data, log
    finally:
        kill(process)


def body(i: int) -> bytes:
    return f"m{i:015d}".encode()  # 16 bytes


def publish_confirmed(port: int, queue: str, start: int, count: int,
                      window: int = 1000) -> None:
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


def queue_info(admin_port: int, queue: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{admin_port}/api/queues/%2F/{queue}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_fast_publisher_is_held_while_the_pager_catches_up(
        server: tuple[Popen, Path, Path]) -> None:
    """No confirms, transient messages into a non-durable queue of bound 10: the broker
    stops reading the publisher whenever more than a bound's worth waits for the pager, so
    the queue's in-memory part never exceeds two bounds while it grows to 30,000."""
    process, _, log = server
    ports = started_ports(process, log)
    bound, count = 10, 30_000
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", ports["amqp"]))
    channel = connection.channel()
    channel.queue_declare("fast", arguments={"x-max-in-memory-length": bound})
    done = threading.Event()

    def publish() -> None:
        for i in range(count):
            channel.basic_publish("", "fast", body(i))
        done.set()

    publisher = threading.Thread(target=publish)
    publisher.start()
    most_in_memory = samples = 0
    # a sample every 10 ms, each a new HTTP connection: well inside the broker's accept
    # rate per address (200/s), which a loop without pause outran on a fast machine
    while not done.wait(0.01):
        most_in_memory = max(most_in_memory, queue_info(ports["admin"], "fast")["messages_ram"])
        samples += 1
    publisher.join()
    assert channel.queue_declare("fast", passive=True).method.message_count == count
    info = queue_info(ports["admin"], "fast")
    connection.close()
    assert samples > 10
    assert most_in_memory <= 2 * bound + 1, most_in_memory
    assert info["messages_paged_out"] >= count - 2 * bound - 1


def test_paged_persistent_messages_survive_sigkill(server: tuple[Popen, Path, Path]) -> None:
    """Confirmed persistent messages, most of them paged out, some acked, transient ones
    among them: after SIGKILL and a restart the persistent ones are all there, in order."""
    process, data, log = server
    port = started_ports(process, log)["amqp"]
    count = 5 * BOUND
    publish_confirmed(port, "kept", 0, count)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    for _ in range(100):
        channel.basic_publish("", "kept", b"transient")
    for i in range(300):  # acked from the head: gone for good
        method, _, received = channel.basic_get("kept")
        assert received == body(i)
        channel.basic_ack(method.delivery_tag)
    channel.basic_get("kept")  # unacked when killed: delivered again after the restart
    channel.confirm_delivery()
    channel.basic_publish("", "kept", body(count), pika.BasicProperties(delivery_mode=2))
    kill(process)
    assert list((data / "queue-spill").iterdir())  # the transient ones were paged out
    restarted = start_server(data, log, "--queue-memory-messages", str(BOUND))
    try:
        port = started_ports(restarted, log)["amqp"]
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        stored = []
        while (got := channel.basic_get("kept", auto_ack=True))[0] is not None:
            stored.append(got[2])
        connection.close()
        assert not (data / "queue-spill").exists() or not list((data / "queue-spill").iterdir())
    finally:
        kill(restarted)
    assert stored == [body(i) for i in range(300, count + 1)]


def test_requeue_priorities_purge_and_delete_with_paged_messages(
        server: tuple[Popen, Path, Path]) -> None:
    process, data, log = server
    port = started_ports(process, log)["amqp"]
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.queue_declare("ranked", arguments={"x-max-priority": 5})
    count = 3 * BOUND
    for i in range(count):  # low priority first, then high: the high ones come out first
        channel.basic_publish("", "ranked", body(i),
                              pika.BasicProperties(priority=0 if i < count // 2 else 5))
    taken = [channel.basic_get("ranked") for _ in range(3)]
    assert [received for _, _, received in taken] == [body(count // 2 + i) for i in range(3)]
    for method, _, _ in reversed(taken):
        channel.basic_nack(method.delivery_tag, requeue=True)
    expected = [body(i) for i in range(count // 2, count)] + [body(i) for i in range(count // 2)]
    received = []
    for i in range(count):
        method, _, message = channel.basic_get("ranked", auto_ack=True)
        assert method.redelivered == (i < 3)
        received.append(message)
    assert received == expected

    def spills() -> int:
        """Once the broker handled everything sent so far and its pagers ran: a second round
        trip is read after the callbacks the first one scheduled."""
        for _ in range(2):
            channel.queue_declare("ranked", passive=True)
        return len(list((data / "queue-spill").iterdir()))

    channel.queue_declare("purged")
    channel.queue_declare("deleted", durable=True)
    before = spills()
    for i in range(3 * BOUND):
        channel.basic_publish("", "purged", body(i))
        channel.basic_publish("", "deleted", body(i), pika.BasicProperties(delivery_mode=2))
    assert spills() == before + 1  # persistent messages of a durable queue stay in its journal
    channel.basic_publish("", "deleted", b"transient")
    assert spills() == before + 2
    assert channel.queue_purge("purged").method.message_count == 3 * BOUND
    assert spills() == before + 1
    journals = {path for path in (data / "queues").rglob("*") if path.is_dir()}
    channel.queue_delete("deleted")
    assert spills() == before
    assert len({path for path in journals if path.exists()}) == len(journals) - 1
    channel.basic_publish("", "purged", b"after")
    assert channel.basic_get("purged", auto_ack=True)[2] == b"after"
    connection.close()


def test_large_bodies_are_bounded_by_bytes(tmp_path: Path) -> None:
    """A byte bound keeps large messages on disk too: of 40 bodies of 256 KiB under a 1 MiB
    bound, at most 4 are in memory, even while being consumed."""
    data, log = tmp_path / "data", tmp_path / "server.log"
    process = start_server(data, log, "--queue-memory-bytes", "1MiB")
    try:
        ports = started_ports(process, log)
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", ports["amqp"]))
        channel = connection.channel()
        channel.queue_declare("large", durable=True)
        channel.confirm_delivery()
        bodies = [bytes([i]) * 256 * 1024 for i in range(40)]
        for large in bodies:
            channel.basic_publish("", "large", large, pika.BasicProperties(delivery_mode=2))
        assert queue_info(ports["admin"], "large")["messages_ram"] <= 4
        for i, large in enumerate(bodies):
            assert channel.basic_get("large", auto_ack=True)[2] == large
            if i % 10 == 0:
                assert queue_info(ports["admin"], "large")["messages_ram"] <= 4
        connection.close()
    finally:
        kill(process)


def test_paged_messages_expire_and_dead_letter_in_order(server: tuple[Popen, Path, Path]
                                                        ) -> None:
    """x-message-ttl expires paged-out messages too, without a consumer; they reach the
    dead-letter queue (itself paging) in their order."""
    process, _, log = server
    port = started_ports(process, log)["amqp"]
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.queue_declare("dead")
    channel.queue_declare("short", arguments={"x-message-ttl": 200,
                                              "x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "dead"})
    count = 3 * BOUND
    for i in range(count):
        channel.basic_publish("", "short", body(i))
    deadline = time.monotonic() + 10
    while channel.queue_declare("dead", passive=True).method.message_count < count:
        assert time.monotonic() < deadline, "paged messages did not expire"
        time.sleep(0.05)
    assert channel.queue_declare("short", passive=True).method.message_count == 0
    for i in range(count):
        assert channel.basic_get("dead", auto_ack=True)[2] == body(i)
    connection.close()
