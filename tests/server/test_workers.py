"""`mainstem serve --workers N`: stream Publish frames decoded in worker processes, driven
by rstream and mainstem's own stream client against a real server."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rstream import AMQPMessage, ConfirmationStatus, Producer

from mainstem.cli import build_parser
from mainstem.client.stream import Endpoint, StreamClient
from mainstem.config import default_workers, load_config
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.workers import READY
from tests.support.rstream_reads import read_with_rstream
from tests.support.server_process import (
    MAINSTEM,
    TIMEOUT_S,
    clean_env,
    kill,
    start_server,
    started_ports,
    wait_for_event,
)
from tests.support.stream_crash import (
    CONFIRMED_BEFORE_KILL,
    assert_each_confirmed_once,
    credentials,
    publish_until_killed,
)

STREAMS = ("orders", "payments", "audit")
PER_STREAM = 3_000
BATCH = 100
HEARTBEAT = struct.pack(">IHH", 4, 0x0017, 1)


def start_with_workers(tmp_path: Path, workers: int) -> tuple[subprocess.Popen, dict, Path]:
    """A server with `workers` workers; its process, its broker.started line, its log."""
    log = tmp_path / "server.log"
    server = start_server(tmp_path / "data", log, "--workers", str(workers))
    try:
        return server, wait_for_event(server, log, "broker.started", server.pid), log
    except BaseException:
        kill(server)
        raise


def amqp(body: bytes) -> bytes:
    """An AMQP 1.0 message, as rstream reads them back."""
    return bytes(AMQPMessage(body=body))


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_until_gone(pids: list[int]) -> list[int]:
    """The pids still running after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if running(pid)]


async def publish_numbered(port: int, stream: str, count: int) -> int:
    """Publish `count` bodies "STREAM-i" in batches; the number confirmed."""
    confirmed = 0
    done = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        nonlocal confirmed
        confirmed += status.is_confirmed
        if confirmed == count:
            done.set()

    async with Producer(**credentials(port)) as producer:  # type: ignore[arg-type]
        await producer.create_stream(stream, exists_ok=True)
        for first in range(0, count, BATCH):
            batch = [AMQPMessage(body=f"{stream}-{i}".encode())
                     for i in range(first, min(first + BATCH, count))]
            await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
        await asyncio.wait_for(done.wait(), 30)
    return confirmed


async def test_rstream_publishers_and_consumers_through_workers(tmp_path: Path) -> None:
    server, started, _log = start_with_workers(tmp_path, 2)
    try:
        pids = started["workers"]
        assert len(pids) == 2 and all(parent_of(pid) == server.pid for pid in pids)
        port = started["ports"]["stream"]
        confirmed = await asyncio.gather(
            *(publish_numbered(port, stream, PER_STREAM) for stream in STREAMS))
        assert confirmed == [PER_STREAM] * len(STREAMS)
        for stream in STREAMS:
            bodies = await read_with_rstream(port, stream, expected=PER_STREAM)
            assert bodies == [f"{stream}-{i}".encode() for i in range(PER_STREAM)]
    finally:
        kill(server)


async def test_publisher_deduplication_is_kept_with_workers(tmp_path: Path) -> None:
    server, started, _log = start_with_workers(tmp_path, 2)
    try:
        port = started["ports"]["stream"]
        with StreamClient(Endpoint("127.0.0.1", port, "guest", "guest", "/")) as client:
            client.create_stream("dedup")
            assert client.declare_publisher(1, "app-1", "dedup") == -1
            first = [(i, amqp(b"%d" % i)) for i in range(1, 51)]
            client.publish(1, first)
            client.publish(1, first[25:] + [(i, amqp(b"%d" % i)) for i in range(51, 61)])
            assert client.declare_publisher(2, "app-1", "dedup") == 60
        bodies = await read_with_rstream(port, "dedup", expected=60)
        assert bodies == [b"%d" % i for i in range(1, 61)]
    finally:
        kill(server)


@pytest.mark.parametrize("workers", [0, 2])
async def test_a_malformed_publish_closes_the_connection_with_or_without_workers(
        tmp_path: Path, workers: int) -> None:
    server, started, log = start_with_workers(tmp_path, workers)
    try:
        port = started["ports"]["stream"]
        with StreamClient(Endpoint("127.0.0.1", port, "guest", "guest", "/")) as client:
            client.create_stream("bad")
            client.declare_publisher(1, "", "bad")
            good = f.Publish.of_bodies(1, [(1, amqp(b"fine"))]).body()
            # One message claiming 1,000 body bytes, followed by 3.
            bad = struct.pack(">BIQI", 1, 1, 2, 1000) + b"abc"
            for body in (good, bad):
                client._sock.sendall(struct.pack(">IHH", 4 + len(body), 2, 1) + body)
            client._sock.settimeout(0.5)
            for _ in range(100):  # bounded: the server closes after its Close frame
                if not _recv(client._sock):
                    break
        invalid = wait_for_event(server, log, "frame.invalid")
        assert invalid["reason"] == "published message runs past the end of the frame"
        # The frame before the malformed one was stored, as it is without workers.
        assert await read_with_rstream(port, "bad", expected=1, quiet_s=0.5) == [b"fine"]
    finally:
        kill(server)


def _recv(sock: socket.socket) -> bytes:
    """What arrives next; b"" once closed. When nothing comes, a heartbeat goes out: a
    codec that read good frames before a bad one reports the bad one at the next read."""
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""
    except TimeoutError:
        sock.sendall(HEARTBEAT)
        return b"..."


async def test_sigkill_mid_publish_with_workers_keeps_every_confirmed_message_once(
        tmp_path: Path) -> None:
    server, started, log = start_with_workers(tmp_path, 2)
    try:
        confirmed, _ = await publish_until_killed(started["ports"]["stream"],
                                                  lambda: kill(server))
    finally:
        kill(server)
    assert len(confirmed) >= CONFIRMED_BEFORE_KILL
    assert wait_until_gone(started["workers"]) == [], "a worker outlived its broker"

    restarted = start_server(tmp_path / "data", log, "--workers", "2")
    try:
        bodies = await read_with_rstream(started_ports(restarted, log)["stream"], "crash")
    finally:
        kill(restarted)
    assert_each_confirmed_once(bodies, confirmed)


def test_sigterm_stops_every_worker_by_pid(tmp_path: Path) -> None:
    server, started, log = start_with_workers(tmp_path, 3)
    try:
        for pid in started["workers"]:  # as a service manager signals the whole group
            os.kill(pid, signal.SIGTERM)
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(TIMEOUT_S) == 0
    finally:
        kill(server)
    stopped = wait_for_event(server, log, "workers.stopped")
    assert sorted(stopped["pids"]) == sorted(started["workers"])
    assert wait_until_gone(started["workers"]) == []
    assert '"worker.lost"' not in log.read_text()  # they waited for the broker


async def test_a_lost_worker_leaves_publishing_working(tmp_path: Path) -> None:
    server, started, log = start_with_workers(tmp_path, 1)
    try:
        (worker,) = started["workers"]
        os.kill(worker, signal.SIGKILL)
        lost = wait_for_event(server, log, "worker.lost")
        assert lost["pid"] == worker
        port = started["ports"]["stream"]
        assert await publish_numbered(port, "after", 500) == 500
        assert await read_with_rstream(port, "after", expected=500) == [
            f"after-{i}".encode() for i in range(500)]
    finally:
        kill(server)


def test_a_worker_whose_broker_vanishes_mid_exchange_exits_quietly() -> None:
    """A broker killed with an answer unread and half a request sent: the worker ends
    with status 0 and writes nothing (its stderr is the broker's JSON log)."""
    ours, theirs = socket.socketpair()
    worker = subprocess.Popen(
        [sys.executable, "-m", "mainstem.workers", str(theirs.fileno())],
        pass_fds=(theirs.fileno(),), stderr=subprocess.PIPE)
    theirs.close()
    try:
        ours.settimeout(TIMEOUT_S)
        assert ours.recv(1) == READY
        request = encode(f.Publish.of_bodies(1, [(i, b"x" * 100) for i in range(100)])) * 20
        ours.sendall(struct.pack(">I", len(request)) + request)
        assert select.select([ours], [], [], TIMEOUT_S)[0], "no answer from the worker"
        ours.sendall(struct.pack(">I", len(request)) + request[:1000])
        ours.close()
        assert worker.wait(TIMEOUT_S) == 0
        assert worker.stderr is not None and worker.stderr.read() == b""
    finally:
        kill(worker)


def test_the_worker_count_comes_from_flag_environment_or_file(tmp_path: Path) -> None:
    toml = tmp_path / "mainstem.toml"
    toml.write_text("[server]\nworkers = 3\n")
    parser = build_parser()
    assert load_config(parser.parse_args(["serve"]), {}).workers is None  # auto
    assert load_config(parser.parse_args(["serve", "--config", str(toml)]), {}).workers == 3
    assert load_config(parser.parse_args(["serve"]), {"MAINSTEM_WORKERS": "2"}).workers == 2
    assert load_config(parser.parse_args(["serve", "--workers", "auto"]),
                       {"MAINSTEM_WORKERS": "2"}).workers is None
    assert [default_workers(cores) for cores in (None, 1, 2, 3, 4, 16)] == [0, 0, 0, 1, 2, 4]


def test_serve_starts_the_automatic_number_of_workers(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = start_server(tmp_path / "data", log)
    try:
        started = wait_for_event(server, log, "broker.started", server.pid)
        assert len(started["workers"]) == default_workers(os.cpu_count())
    finally:
        kill(server)


def test_a_negative_worker_count_stops_the_server(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(MAINSTEM), "serve", "--data-dir", str(tmp_path), "--workers", "-1"],
        capture_output=True, text=True, env=clean_env(), timeout=TIMEOUT_S)
    assert result.returncode == 2
    assert "server.workers" in result.stderr
