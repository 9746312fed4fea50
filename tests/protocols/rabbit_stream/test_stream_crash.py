"""Crash test of the stream protocol's durable path: rstream publishes with confirms into
a real `mainstem serve`, the server is SIGKILLed mid-publish, restarted, and every
confirmed message must be readable exactly once."""

from __future__ import annotations

from pathlib import Path

from tests.support.rstream_reads import read_with_rstream
from tests.support.server_process import kill, start_server, started_ports
from tests.support.stream_crash import (
    CONFIRMED_BEFORE_KILL,
    assert_each_confirmed_once,
    publish_until_killed,
)


async def test_sigkill_mid_publish_keeps_every_confirmed_message_once(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server = start_server(data, log)
    try:
        confirmed, _ = await publish_until_killed(started_ports(server, log)["stream"],
                                                  lambda: kill(server))
    finally:
        kill(server)
    assert len(confirmed) >= CONFIRMED_BEFORE_KILL

    restarted = start_server(data, log)
    try:
        bodies = await read_with_rstream(started_ports(restarted, log)["stream"], "crash")
    finally:
        kill(restarted)
    assert_each_confirmed_once(bodies, confirmed)
