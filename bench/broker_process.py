"""A real `mainstem serve` for benchmarks: started on loopback ports with the listeners
named, its broker-only CPU time read from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

MAINSTEM = Path(sys.executable).with_name("mainstem")
START_TIMEOUT_S = 15


def start_server(data_dir: Path, log_path: Path, listeners: list[str]
                 ) -> tuple[subprocess.Popen, dict[str, int]]:
    """Start the broker with only `listeners` (each on an ephemeral port); its ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINSTEM_")}
    flags = [flag for name in listeners for flag in ("--listener", f"{name}=127.0.0.1:0")]
    with open(log_path, "ab") as log_file:
        server = subprocess.Popen(
            [str(MAINSTEM), "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
             *flags], stdout=subprocess.DEVNULL, stderr=log_file, env=env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("event") == "broker started":
                return server, entry["ports"]
        time.sleep(0.05)
    server.kill()
    raise SystemExit(f"server did not start:\n{log_path.read_text()}")


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(30)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
