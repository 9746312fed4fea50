"""Every listener of a real `mainstem serve` under fuzzed input: a canary of the protocol's
real client publishes and reads back through a recording proxy; its sessions, mutated with
a fixed seed, are replayed on fresh connections; each must be answered or closed the way
the protocol requires, the process must stay up with no unhandled error in its log, and
the canary must work again afterwards."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fuzzing import ServerLog, fuzz_listener
from tests.support.server_process import kill, start_server, started_ports

INPUTS = 120  # per listener: 5-10 s each on a loaded machine
LISTENERS = ["amqp", "stream", "iggy", "bson", "segment", "admin"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, dict[str, int], Path]]:
    log = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log, "--log-format", "json")
    try:
        yield process, started_ports(process, log), log
    finally:
        kill(process)


@pytest.mark.parametrize("listener", LISTENERS)
async def test_fuzzed_sessions_leave_the_listener_serving(
        listener: str, server: tuple[subprocess.Popen, dict[str, int], Path]) -> None:
    process, ports, log = server
    report = await fuzz_listener(listener, ports[listener], ServerLog(log),
                                 lambda: process.poll() is None,
                                 seed=LISTENERS.index(listener) + 16, inputs=INPUTS)
    assert process.poll() is None, f"the server died; log:\n{log.read_text()[-4000:]}"
    assert not report.failures, "\n".join(report.failures[:10])
    assert report.inputs == INPUTS
