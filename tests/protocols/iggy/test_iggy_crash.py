"""Nothing an Iggy client was told is stored is lost: SIGKILL mid-publish, restart,
read back every confirmed message; stream and topic ids survive the restart."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from mainstem.client.iggy import IggyClient, IggyClientError, Message, Polling
from tests.support.server_process import kill, start_server, started_ports


async def test_confirmed_messages_survive_sigkill(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server = start_server(data, log)
    try:
        port = started_ports(server, log)["iggy"]
        client = await IggyClient.connect("127.0.0.1", port)
        await client.login("guest", "guest")
        await client.create_stream("crash", 11)
        await client.create_topic(11, "t", partitions=1, topic_id=5)
        confirmed: list[bytes] = []

        async def publish() -> None:
            batch = 0
            while True:
                payloads = [f"{batch}:{i}".encode() for i in range(100)]
                await client.send(11, 5, [Message(p) for p in payloads], partition=1)
                confirmed.extend(payloads)
                batch += 1

        task = asyncio.create_task(publish())
        while len(confirmed) < 2000:
            await asyncio.sleep(0.01)
        kill(server)
        with contextlib.suppress(IggyClientError, OSError, asyncio.IncompleteReadError):
            await asyncio.wait_for(task, 5)
    finally:
        kill(server)
    server = start_server(data, log)
    try:
        port = started_ports(server, log)["iggy"]
        client = await IggyClient.connect("127.0.0.1", port)
        await client.login("guest", "guest")
        stored: list[bytes] = []
        while True:  # numeric ids resolve after the restart
            polled = await client.poll(11, 5, 1, Polling.OFFSET, len(stored), count=1000)
            if not polled.messages:
                break
            stored.extend(m.payload for m in polled.messages)
        assert stored[: len(confirmed)] == confirmed
        await client.close()
    finally:
        kill(server)
