"""Idle connections cost the broker little memory: a connection's receive buffer takes
memory only as bytes arrive (the broker runs as a real process; its RSS is read from
/proc)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from tests.support.server_process import kill, rss_bytes, start_server, started_ports

CONNECTIONS = 60  # per protocol whose connections receive into buffers of their own
PROTOCOLS = ("stream", "bson", "segment")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Popen, Path]]:
    log = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log, "--workers", "0")
    try:
        yield process, log
    finally:
        kill(process)


def open_sockets(pid: int) -> int:
    return sum(1 for fd in Path(f"/proc/{pid}/fd").iterdir()
               if fd.readlink().name.startswith("socket:"))


def test_idle_connections_do_not_each_hold_a_receive_buffer(
        server: tuple[Popen, Path]) -> None:
    process, log = server
    ports = started_ports(process, log)
    sockets: list[socket.socket] = []
    try:
        sockets.append(socket.create_connection(("127.0.0.1", ports["stream"])))  # warm-up
        time.sleep(0.5)
        before, sockets_before = rss_bytes(process.pid), open_sockets(process.pid)
        for protocol in PROTOCOLS:
            sockets += [socket.create_connection(("127.0.0.1", ports[protocol]))
                        for _ in range(CONNECTIONS)]
        deadline = time.monotonic() + 20
        while open_sockets(process.pid) < sockets_before + CONNECTIONS * len(PROTOCOLS):
            assert time.monotonic() < deadline, "the broker did not accept every connection"
            time.sleep(0.05)
        time.sleep(0.5)  # each handler has started and taken its socket over
        per_connection = (rss_bytes(process.pid) - before) / (CONNECTIONS * len(PROTOCOLS))
        print(f"broker RSS per idle connection: {per_connection / 1024:.0f} KiB")
        # A receive buffer is 1 MiB: had each connection taken one, this would be ≥ 1 MiB.
        assert per_connection < 128 * 1024
    finally:
        for sock in sockets:
            sock.close()
