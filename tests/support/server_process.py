"""A real `mainstem serve` process for tests: start it on loopback ports, read its
JSON log, and stop it by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from mainstem.protocols import all_protocols
from mainstem.testing_wait import wait_while_progressing

TIMEOUT_S = 30.0  # a bound for what takes a second or two; a loaded 2-core machine takes ten
MAINSTEM = Path(sys.executable).with_name("mainstem")


def clean_env() -> dict[str, str]:
    """No MAINSTEM_* setting reaches the server, but the switch to its pure-Python build."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith("MAINSTEM_") or key == "MAINSTEM_PURE"}


def loopback_listener_flags() -> list[str]:
    """Every protocol on 127.0.0.1 with an ephemeral port: tests never bind 0.0.0.0."""
    flags = []
    for spec in all_protocols():
        flags += ["--listener", f"{spec.name}=127.0.0.1:0"]
    flags += ["--listener", "admin=127.0.0.1:0", "--listener", "prometheus=127.0.0.1:0"]
    return flags


def start_server(data_dir: Path, log_path: Path, *extra: str,
                 preexec_fn: Callable[[], None] | None = None, mainstem: Path = MAINSTEM,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """`preexec_fn` runs in the child before the server starts (e.g. to lower a limit);
    `mainstem` and `env` choose another installation (default: this one, clean_env())."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [str(mainstem), "serve", "--data-dir", str(data_dir), *loopback_listener_flags(),
             *extra],
            stdout=subprocess.DEVNULL, stderr=log_file, env=env or clean_env(),
            preexec_fn=preexec_fn,
        )


def wait_for_event(process: subprocess.Popen, log_path: Path, event: str,
                   after_pid: int | None = None) -> dict:
    """The first log line of `event` (written by process `after_pid`, if given), waited
    for while the server makes progress (see mainstem.testing_wait)."""

    def logged() -> dict | None:
        for line in log_path.read_text().splitlines():
            entry = json.loads(line)
            if entry["event"] == event and after_pid in (None, entry.get("pid")):
                return entry
        return None

    entry = wait_while_progressing(logged, lambda: process.poll() is None, process.pid,
                                   log_path)
    if entry is None:
        raise AssertionError(f"no {event!r} line; server log:\n{log_path.read_text()}")
    return entry


def started_ports(process: subprocess.Popen, log_path: Path) -> dict[str, int]:
    return wait_for_event(process, log_path, "broker.started", after_pid=process.pid)["ports"]


def kill(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if process.poll() is None:
        os.kill(process.pid, sig)
        process.wait(TIMEOUT_S)


class ServerProcess:
    """A test's own `mainstem serve`, its data and log under `tmp_path`, the disk alarm
    off (`extra`: more flags); killed when its `with` block ends."""

    def __init__(self, tmp_path: Path, *extra: str,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self.data_dir, self.log_path = tmp_path / "data", tmp_path / "server.log"
        self.process = start_server(self.data_dir, self.log_path, "--disk-free-limit", "0",
                                    *extra, preexec_fn=preexec_fn)
        self.ports = started_ports(self.process, self.log_path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        kill(self.process)


def rss_bytes(pid: int) -> int:
    """The process's resident memory, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
