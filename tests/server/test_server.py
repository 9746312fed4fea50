"""The server: lifecycle, data-directory lock, listeners, connection isolation, the CLI."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mainstem
from mainstem import server as server_module
from mainstem.broker.alarms import ResourceAlarms
from mainstem.broker.counters import BrokerCounters
from mainstem.config import ListenerConfig, ServerConfig
from mainstem.logging_setup import ContextLog, JsonFormatter, TextFormatter, configure_logging
from mainstem.protocols import all_protocols
from mainstem.protocols.base import ConnectionContext, ProtocolSpec
from mainstem.server import Broker, DataDirLocked, ListenerBindError
from mainstem.testing import ThreadedBroker
from tests.support.server_process import (
    MAINSTEM,
    TIMEOUT_S,
    clean_env,
    kill,
    loopback_listener_flags,
    start_server,
    wait_for_event,
)


async def echo_lines(ctx: ConnectionContext) -> None:
    """Echo each line; "boom" raises, "who" answers with the connection's limits."""
    while line := await ctx.reader.readline():
        if line == b"boom\n":
            raise RuntimeError("boom")
        if line == b"who\n":
            line = f"{ctx.limits.max_frame_size} {ctx.limits.heartbeat_s}\n".encode()
        ctx.writer.write(line)
        await ctx.writer.drain()


async def say_bye_on_shutdown(ctx: ConnectionContext) -> None:
    ctx.writer.write(b"hello\n")
    await ctx.closing.wait()
    ctx.writer.write(b"bye\n")
    await ctx.writer.drain()


async def ignore_shutdown(ctx: ConnectionContext) -> None:
    ctx.writer.write(b"hello\n")
    await asyncio.sleep(3600)


ECHO = ProtocolSpec("echo", 7999, echo_lines)
POLITE = ProtocolSpec("polite", 7998, say_bye_on_shutdown)
STUBBORN = ProtocolSpec("stubborn", 7997, ignore_shutdown)
HTTP = {"admin", "prometheus"}  # the HTTP listeners beside the protocols


def lock_is_held(data_dir: Path) -> bool:
    with open(data_dir / ".lock") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


async def exchange(port: int, line: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(line)
        return await asyncio.wait_for(reader.readline(), TIMEOUT_S)
    finally:
        writer.close()
        await writer.wait_closed()


# --- embedded lifecycle ---


async def test_starts_and_stops_cleanly_holding_the_lock(tmp_path):
    data_dir = tmp_path / "data"
    async with Broker(data_dir, protocols=[]) as broker:
        assert broker.core is not None
        with pytest.raises(RuntimeError, match="already running"):
            await broker.start()
        assert lock_is_held(data_dir)
        assert (data_dir / ".lock").read_text().strip() == str(os.getpid())
    assert not lock_is_held(data_dir)
    with pytest.raises(RuntimeError, match="not running"):
        broker.core  # noqa: B018


async def test_second_broker_on_the_same_data_dir_is_refused(tmp_path):
    async with Broker(tmp_path, protocols=[]):
        with pytest.raises(DataDirLocked) as error:
            await Broker(tmp_path, protocols=[]).start()
        assert str(error.value) == (
            f"data directory {tmp_path} is in use by another server (pid {os.getpid()})"
        )
    async with Broker(tmp_path, protocols=[]):
        pass  # free again once the first one stopped


def test_broker_needs_a_data_dir():
    with pytest.raises(TypeError, match="data_dir"):
        Broker()


def test_unknown_port_override_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nope"):
        Broker(tmp_path, protocols=[ECHO], port_overrides={"nope": 1})


def test_package_exports_broker():
    assert mainstem.Broker is Broker


# --- listeners and connections ---


async def test_serves_connections_on_loopback_and_logs_them(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    async with Broker(tmp_path, protocols=[ECHO]) as broker:
        port = broker.ports["echo"]
        assert port > 0
        assert broker.urls == {"echo": f"echo://127.0.0.1:{port}"}
        assert await exchange(port, b"ping\n") == b"ping\n"
        assert await exchange(port, b"who\n") == b"1048576 60\n"

    opened = [r for r in caplog.records if r.getMessage() == "connection.opened"]
    closed = [r for r in caplog.records if r.getMessage() == "connection.closed"]
    assert len(opened) == len(closed) == 2
    assert {r.conn_id for r in opened} == {r.conn_id for r in closed} == {1, 2}
    assert all(r.listener == "echo" and r.peer.startswith("127.0.0.1:") for r in opened)
    assert all(r.outcome == "ended" and r.duration_s >= 0 for r in closed)
    if sys.platform == "linux":  # traffic comes from the kernel's TCP_INFO counters
        assert all(r.bytes_in >= 5 and r.bytes_out >= 5 for r in closed)
    started = next(r for r in caplog.records if r.getMessage() == "broker.started")
    assert started.ports == {"echo": port}


async def test_handler_failure_is_logged_and_isolated(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    async with Broker(tmp_path, protocols=[ECHO]) as broker:
        port = broker.ports["echo"]
        bystander_reader, bystander = await asyncio.open_connection("127.0.0.1", port)
        assert await exchange(port, b"boom\n") == b""  # the failing connection is closed
        bystander.write(b"still here\n")
        assert await asyncio.wait_for(bystander_reader.readline(), TIMEOUT_S) == b"still here\n"
        assert await exchange(port, b"new\n") == b"new\n"  # and the listener still accepts
        bystander.close()
        await bystander.wait_closed()

    failed = [r for r in caplog.records if r.getMessage() == "connection.failed"]
    assert len(failed) == 1
    assert failed[0].levelno == logging.ERROR and failed[0].error == "RuntimeError: boom"
    assert failed[0].exc_info is not None
    outcomes = [r.outcome for r in caplog.records if r.getMessage() == "connection.closed"]
    assert sorted(outcomes) == ["ended", "ended", "failed"]


async def test_port_in_use_names_the_listener_and_releases_everything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = Broker(tmp_path, protocols=[POLITE, ECHO], port_overrides={"echo": port})
        with pytest.raises(ListenerBindError) as error:
            await broker.start()
    assert str(error.value) == f"cannot listen for echo on 127.0.0.1:{port}: address already in use"
    assert error.value.listener == "echo"
    assert not lock_is_held(tmp_path)
    assert broker.ports == {}


async def test_disabled_listener_is_not_started(tmp_path):
    listeners = {"echo": ListenerConfig("127.0.0.1", 0), "polite": ListenerConfig(enabled=False)}
    config = ServerConfig(data_dir=tmp_path, listeners=listeners)
    async with Broker(config=config, protocols=[ECHO, POLITE]) as broker:
        assert list(broker.ports) == ["echo"]


# --- shutdown ---


class RecordingCore:
    """Stands in for BrokerCore to observe when the server closes it."""

    events: list[str]
    alarms: ResourceAlarms
    counters: BrokerCounters

    @classmethod
    async def open(cls, data_dir: Path, settings, table_rows=None) -> RecordingCore:
        core = cls()
        core.alarms = ResourceAlarms()
        core.counters = BrokerCounters()
        core.events = ["open"]
        return core

    async def close(self) -> None:
        self.events.append("close")


async def test_shutdown_lets_handlers_finish_then_closes_the_core(tmp_path, monkeypatch):
    monkeypatch.setattr(server_module, "BrokerCore", RecordingCore)
    broker = Broker(tmp_path, protocols=[POLITE])
    async with broker:
        core = broker.core
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["polite"])
        assert await asyncio.wait_for(reader.readline(), TIMEOUT_S) == b"hello\n"
        core.events.append("connected")
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b"bye\n"  # then EOF
    writer.close()
    assert core.events == ["open", "connected", "close"]


async def test_shutdown_cancels_handlers_after_the_grace_period(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    broker = Broker(tmp_path, protocols=[STUBBORN], shutdown_grace_s=0.2)
    async with broker:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["stubborn"])
        assert await asyncio.wait_for(reader.readline(), TIMEOUT_S) == b"hello\n"
        began = time.monotonic()
    assert time.monotonic() - began < 2.0
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    writer.close()
    closed = next(r for r in caplog.records if r.getMessage() == "connection.closed")
    assert closed.outcome == "cancelled"


# --- structured logs ---


def format_record(formatter: logging.Formatter, **extra) -> str:
    log = ContextLog(logging.getLogger("t"), {"listener": "echo", "conn_id": 7})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    log.logger.addHandler(handler)
    try:
        log.bind(user="guest").warning("hello world", extra=extra)
    finally:
        log.logger.removeHandler(handler)
    return stream.getvalue()


def test_json_lines_carry_context_fields():
    entry = json.loads(format_record(JsonFormatter(), peer="127.0.0.1:5"))
    assert entry["event"] == "hello world" and entry["level"] == "warning"
    assert entry["ts"].endswith("Z")
    assert (entry["listener"], entry["conn_id"], entry["user"], entry["peer"]) == (
        "echo", 7, "guest", "127.0.0.1:5"
    )


def test_text_lines_are_key_value():
    line = format_record(TextFormatter(), namespace="/")
    assert 'event="hello world"' in line
    assert "listener=echo conn_id=7 user=guest namespace=/" in line


def test_configure_logging_json_to_a_stream():
    stream = io.StringIO()
    configure_logging("debug", "json", stream)
    try:
        logging.getLogger("mainstem.test").debug("configured", extra={"answer": 42})
    finally:
        logging.basicConfig(force=True)  # hand the root logger back to pytest's defaults
    assert json.loads(stream.getvalue())["answer"] == 42


# --- the pytest plugin ---


async def test_plugin_async_fixture(mainstem_broker):
    assert isinstance(mainstem_broker, Broker)
    assert set(mainstem_broker.ports) == {spec.name for spec in all_protocols()} | HTTP
    assert lock_is_held(mainstem_broker.data_dir)


def test_plugin_sync_fixture(mainstem_server):
    assert set(mainstem_server.ports) == {spec.name for spec in all_protocols()} | HTTP
    assert lock_is_held(mainstem_server.data_dir)


def test_threaded_broker_serves_sync_clients(tmp_path):
    with ThreadedBroker(tmp_path, protocols=[ECHO]) as broker:
        with socket.create_connection(("127.0.0.1", broker.ports["echo"]), TIMEOUT_S) as conn:
            conn.sendall(b"sync\n")
            assert conn.makefile("rb").readline() == b"sync\n"
        assert broker.urls["echo"].startswith("echo://127.0.0.1:")
    assert not lock_is_held(tmp_path)


def test_threaded_broker_reports_startup_errors(tmp_path):
    with ThreadedBroker(tmp_path, protocols=[]), pytest.raises(DataDirLocked):
        ThreadedBroker(tmp_path, protocols=[]).start()


# --- the command line, as a subprocess ---


def test_cli_serves_until_sigterm(tmp_path):
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    try:
        started = wait_for_event(process, log_path, "broker.started")
        assert started["pid"] == process.pid
        assert set(started["ports"]) == {spec.name for spec in all_protocols()} | HTTP
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(TIMEOUT_S) == 0
        wait_for_event(process, log_path, "broker.stopped")
    finally:
        kill(process)


def test_cli_refuses_a_data_dir_in_use(tmp_path):
    data_dir = tmp_path / "data"
    log_path = tmp_path / "server.log"
    process = start_server(data_dir, log_path)
    try:
        wait_for_event(process, log_path, "broker.started")
        second = subprocess.run(
            [str(MAINSTEM), "serve", "--data-dir", str(data_dir), *loopback_listener_flags()],
            capture_output=True, text=True, timeout=TIMEOUT_S, env=clean_env(),
        )
        assert second.returncode == 2
        assert json.loads(second.stderr)["error"] == (
            f"data directory {data_dir} is in use by another server (pid {process.pid})")
    finally:
        kill(process)


def test_cli_names_a_corrupt_catalog_in_one_log_line(tmp_path):
    """Garbage in catalog.sqlite: exit 2 and one structured line naming the file (it was
    a 35-line traceback that named no file)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    catalog = data_dir / "catalog.sqlite"
    catalog.write_bytes(b"this is not a database\n" * 200)
    log_path = tmp_path / "server.log"
    process = start_server(data_dir, log_path)
    try:
        assert process.wait(TIMEOUT_S) == 2
    finally:
        kill(process)
    lines = log_path.read_text().splitlines()
    assert len(lines) == 1, lines
    entry = json.loads(lines[0])
    assert entry["event"] == "catalog.unreadable" and entry["level"] == "critical"
    assert entry["path"] == str(catalog)
    assert "file is not a database" in entry["error"]
    assert "traceback" not in entry
    assert catalog.read_bytes() == b"this is not a database\n" * 200  # left as it was


def test_cli_reports_config_errors_without_traceback(tmp_path):
    result = subprocess.run(
        [str(MAINSTEM), "serve", "--data-dir", str(tmp_path), "--fsync", "sometimes"],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=clean_env(),
    )
    assert result.returncode == 2
    assert json.loads(result.stderr)["error"].startswith("--fsync: invalid value 'sometimes'")
    assert "Traceback" not in result.stderr


def test_python_dash_m_version():
    result = subprocess.run(
        [sys.executable, "-m", "mainstem", "--version"],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=clean_env(),
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"mainstem {mainstem.__version__}"
