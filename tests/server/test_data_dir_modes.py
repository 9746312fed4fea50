"""The data directory is the owner's alone: every directory the broker makes there is
0700 and every file 0600, whatever the umask it was started with (the catalog holds
password hashes)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import stat
import urllib.request
from pathlib import Path

import pika
from rstream import Producer

from mainstem.client.events import EventsClient
from tests.support.server_process import TIMEOUT_S, kill, start_server, started_ports


def _usual_umask() -> None:
    os.umask(0o022)


def _create_data_over_every_kind_of_storage(ports: dict[str, int]) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", ports["amqp"], credentials=pika.PlainCredentials("guest", "guest")))
    channel = connection.channel()
    channel.confirm_delivery()
    for queue, kind in (("classic", "classic"), ("quorum", "quorum"), ("stream", "stream")):
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
        channel.basic_publish("", queue, b"m", pika.BasicProperties(delivery_mode=2))
    connection.close()
    asyncio.run(_stream_and_events(ports))
    request = urllib.request.Request(
        f"http://127.0.0.1:{ports['admin']}/api/users/alice", method="PUT",
        data=json.dumps({"password": "secret", "tags": ""}).encode(),
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        assert response.status in (201, 204)


async def _stream_and_events(ports: dict[str, int]) -> None:
    async with Producer("127.0.0.1", port=ports["stream"], username="guest",
                        password="guest") as producer:
        await producer.create_stream("rstream")
        await producer.send_wait("rstream", b"m")
    events = await EventsClient.connect("127.0.0.1", ports["bson"], "guest", "guest")
    await events.create_channel("events")
    await events.create_projection("totals", "events", "by_id", "id")
    await events.publish("events", {"id": 1})
    load = await events.begin_load("by_id")
    await events.load_documents(load, [(1, {"id": 1})])
    await events.close()


def _modes(root: Path) -> dict[str, str]:
    """Every path under `root` (and root itself) whose mode is not 0700 for a directory
    or 0600 for a file, with that mode."""
    wrong = {}
    for path in (root, *root.rglob("*")):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong[str(path.relative_to(root))] = oct(mode)
    return wrong


def test_every_file_and_directory_of_the_data_dir_is_the_owners_alone(tmp_path: Path
                                                                      ) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)  # made beforehand by an administrator
    data_dir.chmod(0o755)
    log = tmp_path / "server.log"
    server = start_server(data_dir, log, preexec_fn=_usual_umask)
    try:
        _create_data_over_every_kind_of_storage(started_ports(server, log))
        assert (data_dir / "catalog.sqlite").exists()
        assert _modes(data_dir) == {}  # while running: SQLite's side files too
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(TIMEOUT_S) == 0
    finally:
        kill(server)
    assert len(list(data_dir.rglob("*"))) > 10
    assert _modes(data_dir) == {}
