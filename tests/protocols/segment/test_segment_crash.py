"""Exactly-once segment appends across a SIGKILL of a real `mainstem serve` and a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mainstem.client.segment import SegmentClient
from tests.support.server_process import kill, start_server, started_ports

SEGMENT = "/crash/0"




async def test_sigkill_mid_append_then_resend_everything(tmp_path: Path) -> None:
    data_dir, log_path = tmp_path / "data", tmp_path / "server.log"
    server = start_server(data_dir, log_path)
    try:
        port = started_ports(server, log_path)["segment"]
        client = await SegmentClient.connect("127.0.0.1", port)
        await client.create(SEGMENT)
        appender = await client.appender(SEGMENT)
        events = [b"event-%05d" % i for i in range(3000)]
        for start in range(0, 1000, 100):
            appender.append_block(events[start:start + 100])
        acked = await appender.flush()
        for start in range(1000, 3000, 100):  # in flight when the server dies
            appender.append_block(events[start:start + 100])
        await asyncio.sleep(0.01)
        kill(server)
        await client.close()

        server = start_server(data_dir, log_path)
        port = started_ports(server, log_path)["segment"]
        client = await SegmentClient.connect("127.0.0.1", port)
        appender.client = client
        level = await appender.setup()
        assert level >= acked  # nothing confirmed is lost
        await appender.resend()
        await appender.flush()
        assert await client.read_events(SEGMENT) == events  # no duplicate, no gap
        await client.close()
    finally:
        kill(server)
