"""A real cluster on one machine for tests: an etcd and N `mainstem serve` processes on
loopback, each node with its own data directory and ephemeral ports. Processes are
real so that a test can SIGKILL, SIGSTOP or restart any of them; every one is stopped
by its pid when the cluster is closed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainstem.testing_wait import wait_while_progressing

ETCD = "etcd"


def free_port() -> int:
    """A loopback port free now (etcd takes fixed ports, not 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MAINSTEM_", "ETCD"))}


def _stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    os.kill(process.pid, sig)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


class Etcd:
    """One etcd member on loopback ports, its data under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> None:
        """Start etcd; its loopback ports were free when chosen, but another process may
        take one meanwhile: then it starts again on new ports (on a first start only)."""
        retries = 0 if self.started else 2  # a restart keeps the ports the nodes know
        for attempt in range(retries + 1):
            try:
                self._start_once()
                break
            except RuntimeError:
                if attempt == retries:
                    raise
                shutil.rmtree(self.directory / "data", ignore_errors=True)
                self.client_port, self.peer_port = free_port(), free_port()
        self.started = True

    def _start_once(self) -> None:
        if shutil.which(ETCD) is None:
            raise RuntimeError("etcd is not installed (Debian: apt-get install etcd-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.directory / "etcd.log", "ab") as log:
            self.process = subprocess.Popen(
                [ETCD, "--name", "test", "--data-dir", str(self.directory / "data"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"test={peer}"],
                stdout=log, stderr=log, env=_clean_env())
        process, log_path = self.process, self.directory / "etcd.log"
        if wait_while_progressing(self._answers, lambda: process.poll() is None, process.pid,
                                  log_path):
            return
        if process.poll() is not None:
            raise RuntimeError(f"etcd exited: {log_path.read_text()}")
        raise TimeoutError("etcd did not start")

    def _answers(self) -> bool | None:
        try:
            with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.2):
                return True
        except OSError:
            return None

    def stop(self) -> None:
        _stop(self.process)
        self.process = None


@dataclass
class Node:
    name: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_events(self, event: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == event:
                found.append(entry)
        return found


class LocalCluster:
    """An etcd and `size` nodes named node1..nodeN."""

    def __init__(self, directory: Path, size: int = 3, extra_args: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.etcd = Etcd(directory / "etcd")
        self.extra_args = extra_args
        self.nodes = {f"node{i}": Node(f"node{i}", directory / f"node{i}",
                                       directory / f"node{i}.log")
                      for i in range(1, size + 1)}

    def __enter__(self) -> LocalCluster:
        try:
            self.etcd.start()
            for node in self.nodes.values():
                self.start(node.name, wait=False)
            for node in self.nodes.values():
                self.wait_started(node.name)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for node in self.nodes.values():
            _stop(node.process)
        self.etcd.stop()

    def start(self, name: str, *, wait: bool = True) -> Node:
        """Start (or restart, with the same data directory) a node."""
        node = self.nodes[name]
        listeners = []
        for listener in ("stream", "amqp", "iggy", "bson", "segment", "admin", "prometheus"):
            listeners += ["--listener", f"{listener}=127.0.0.1:0"]
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(
                [sys.executable, "-m", "mainstem", "serve", "--data-dir", str(node.data_dir),
                 *listeners, "--cluster", f"etcd://{self.etcd.endpoint}", "--node-name", name,
                 "--advertise-host", "127.0.0.1", "--replication-port", "0",
                 *self.extra_args],
                stdout=subprocess.DEVNULL, stderr=log, env=_clean_env())
        if wait:
            self.wait_started(name)
        return node

    def wait_started(self, name: str) -> dict[str, int]:
        node = self.nodes[name]

        def started() -> dict[str, int] | None:
            for entry in node.log_events("broker.started"):
                if entry.get("pid") == node.pid:
                    return dict(entry["ports"])
            return None

        ports = wait_while_progressing(started, lambda: node.alive, node.pid, node.log_path)
        if ports is None:
            raise RuntimeError(f"{name} did not start:\n{node.log_path.read_text()[-4000:]}")
        node.ports = ports
        return ports

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig`; for SIGKILL and SIGTERM, wait until the process is gone."""
        node = self.nodes[name]
        assert node.process is not None
        os.kill(node.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            node.process.wait(10)

    def live(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.alive]
