"""Exactly-once segment appends across a SIGKILL of a real `mainstem serve` and a restart."""

from __future__ import annotations

from pathlib import Path

from mainstem.client.segment import SegmentClient
from tests.support.segment_crash import EVENTS, append_until_killed
from tests.support.server_process import kill, start_server, started_ports

SEGMENT = "/crash/0"




async def test_sigkill_mid_append_then_resend_everything(tmp_path: Path) -> None:
    data_dir, log_path = tmp_path / "data", tmp_path / "server.log"
    server = start_server(data_dir, log_path)
    try:
        port = started_ports(server, log_path)["segment"]
        appender, acked = await append_until_killed(port, SEGMENT, lambda: kill(server))

        server = start_server(data_dir, log_path)
        port = started_ports(server, log_path)["segment"]
        client = await SegmentClient.connect("127.0.0.1", port)
        appender.client = client
        level = await appender.setup()
        assert level >= acked  # nothing confirmed is lost
        await appender.resend()
        await appender.flush()
        assert await client.read_events(SEGMENT) == EVENTS  # no duplicate, no gap
        await client.close()
    finally:
        kill(server)
