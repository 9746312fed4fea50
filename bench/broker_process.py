"""A real `mainstem serve` for benchmarks, started as the tests start theirs (every
listener on a loopback ephemeral port), and its broker-only CPU time read from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.support.server_process import kill, started_ports
from tests.support.server_process import start_server as start_process


def start_server(data_dir: Path, log_path: Path, *extra: str
                 ) -> tuple[subprocess.Popen, dict[str, int]]:
    """Start the broker (`extra`: more `mainstem serve` flags); the process and its ports
    by listener name."""
    server = start_process(data_dir, log_path, *extra)
    try:
        return server, started_ports(server, log_path)
    except BaseException:
        kill(server)
        raise


def stop_server(server: subprocess.Popen) -> None:
    kill(server, signal.SIGTERM)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
