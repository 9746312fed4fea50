"""The server: data-directory lock, broker core, one listener per protocol, lifecycle, signals.

Protocol handlers know nothing of this module: each accepted socket becomes a
ConnectionContext handed to the protocol's handler, and the server owns everything around
it (logging, isolation of failures, closing the socket, graceful shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import itertools
import logging
import os
import signal
import socket
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import quote

from mainstem.broker.core import BrokerCore
from mainstem.config import ServerConfig
from mainstem.logs import ContextLog, describe_error
from mainstem.protocols import all_protocols
from mainstem.protocols.base import ConnectionContext, ProtocolSpec

log = logging.getLogger("mainstem.server")
connection_log = logging.getLogger("mainstem.connection")

EMBEDDED_HOST = "127.0.0.1"
SHUTDOWN_GRACE_S = 5.0
# Kernels cap the accept backlog at net.core.somaxconn; 100 (asyncio's default) is small
# for benchmarks that open hundreds of connections at once.
LISTEN_BACKLOG = 1024
_CLOSE_TIMEOUT_S = 1.0  # a peer that stops reading must not hold up a close forever

# How to reach each listener; the fallback is "NAME://HOST:PORT".
_URL_TEMPLATES = {
    "stream": "rabbitmq-stream://{user}:{password}@{host}:{port}/%2F",
    "amqp": "amqp://{user}:{password}@{host}:{port}/%2F",
    "iggy": "iggy://{user}:{password}@{host}:{port}",
    "admin": "http://{host}:{port}/",
}


class DataDirLocked(Exception):
    """Another server holds the data directory's lock."""

    def __init__(self, data_dir: Path, pid: str) -> None:
        super().__init__(f"data directory {data_dir} is in use by another server (pid {pid})")
        self.data_dir = data_dir
        self.pid = pid


class ListenerBindError(Exception):
    """A listener could not bind its address (in use, not available, permission)."""

    def __init__(self, listener: str, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen for {listener} on {host}:{port}: {reason}")
        self.listener = listener
        self.host = host
        self.port = port


class Broker:
    """A running mainstem server: embed it with `async with Broker(path) as broker:`.

    Embedded defaults suit tests: every protocol on 127.0.0.1 with an ephemeral port.
    With `config` (what `mainstem serve` passes) the listeners come from the configuration;
    `host` and `port_overrides` still apply on top of either.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        config: ServerConfig | None = None,
        host: str | None = None,
        port_overrides: Mapping[str, int] | None = None,
        protocols: Sequence[ProtocolSpec] | None = None,
        shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    ) -> None:
        self._protocols = list(all_protocols() if protocols is None else protocols)
        if config is None:
            if data_dir is None:
                raise TypeError("Broker needs a data_dir or a config")
            config = ServerConfig.defaults(self._protocols, host=EMBEDDED_HOST, port=0)
        self.config = _with_overrides(config, self._protocols, data_dir, host, port_overrides)
        self.data_dir = Path(self.config.data_dir).absolute()
        self._grace_s = shutdown_grace_s
        self._lock = _DataDirLock(self.data_dir)
        self._core: BrokerCore | None = None
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task] = set()
        self._conn_ids = itertools.count(1)
        self._closing = asyncio.Event()  # renewed by start(); handed to every connection
        self.ports: dict[str, int] = {}
        self._hosts: dict[str, str] = {}

    @property
    def core(self) -> BrokerCore:
        if self._core is None:
            raise RuntimeError("the broker is not running")
        return self._core

    @property
    def urls(self) -> dict[str, str]:
        """A client URL per running listener, with the bootstrap user's credentials."""
        user = quote(self.config.auth.default_user, safe="")
        password = quote(self.config.auth.default_pass, safe="")
        urls = {}
        for name, port in self.ports.items():
            template = _URL_TEMPLATES.get(name, name + "://{host}:{port}")
            host = _url_host(self._hosts[name])
            urls[name] = template.format(user=user, password=password, host=host, port=port)
        return urls

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Lock the data directory, open the core, then bind every enabled listener."""
        if self._core is not None:
            raise RuntimeError("the broker is already running")
        self._lock.acquire()
        self._closing = asyncio.Event()
        try:
            self._core = await BrokerCore.open(self.data_dir, self.config.core_settings())
            for spec in self._protocols:
                listener = self.config.listener(spec)
                if listener.enabled:
                    await self._listen(spec, listener.host, listener.port)
        except BaseException:
            await self._release()
            raise
        log.info("broker started", extra={
            "data_dir": str(self.data_dir), "ports": dict(self.ports), "pid": os.getpid(),
        })

    async def stop(self) -> None:
        """Stop accepting, let connections finish within the grace period, close the core."""
        if self._core is None:
            return
        for server in self._servers:
            server.close()
        self._closing.set()
        await self._end_connections()
        await self._release()
        log.info("broker stopped", extra={"data_dir": str(self.data_dir)})

    async def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully (starting first if needed)."""
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, signum, stop_requested)
        try:
            if self._core is None:
                await self.start()
            await stop_requested.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            await self.stop()

    async def _listen(self, spec: ProtocolSpec, host: str, port: int) -> None:
        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
            await self._serve_connection(spec, reader, writer)

        try:
            server = await asyncio.start_server(
                on_connection, host, port, limit=self._read_buffer_limit(), backlog=LISTEN_BACKLOG
            )
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ListenerBindError(spec.name, host, port, reason) from exc
        self._servers.append(server)
        self.ports[spec.name] = server.sockets[0].getsockname()[1]
        self._hosts[spec.name] = host
        log.info("listener started",
                 extra={"listener": spec.name, "host": host, "port": self.ports[spec.name]})

    def _read_buffer_limit(self) -> int:
        # Buffer up to one maximum frame (within 64 KiB..4 MiB) so a handler parses every
        # complete frame per wakeup; readexactly() of a larger frame still works.
        return min(max(self.config.max_frame_size, 64 * 1024), 4 * 1024 * 1024)

    async def _serve_connection(
        self, spec: ProtocolSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = _format_address(writer.get_extra_info("peername"))
        fields = {"listener": spec.name, "conn_id": next(self._conn_ids), "peer": peer}
        ctx = ConnectionContext(
            core=self.core, reader=reader, writer=writer, limits=self.config.limits(),
            log=ContextLog(connection_log, fields), closing=self._closing,
        )
        loop = asyncio.get_running_loop()
        opened_at = loop.time()
        ctx.log.info("connection opened")
        outcome = "ended"
        try:
            await spec.handler(ctx)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            outcome = "lost"
            ctx.log.warning("connection lost", extra={"error": describe_error(exc)})
        except Exception as exc:
            outcome = "failed"
            ctx.log.exception("connection failed", extra={"error": describe_error(exc)})
        finally:
            self._connections.discard(task)
            traffic = _socket_traffic(writer)
            await _close_writer(writer)
            # ctx.log, not the local fields: the handler may have bound user and namespace.
            ctx.log.info("connection closed", extra={
                "outcome": outcome, "duration_s": round(loop.time() - opened_at, 3), **traffic,
            })

    async def _end_connections(self) -> None:
        if not self._connections:
            return
        _done, pending = await asyncio.wait(set(self._connections), timeout=self._grace_s)
        if pending:
            log.warning("cancelling connections after the shutdown grace period",
                        extra={"connections": len(pending), "grace_s": self._grace_s})
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=self._grace_s)

    async def _release(self) -> None:
        """Close whatever start() opened: listeners, then the core, then the lock."""
        for server in self._servers:
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), _CLOSE_TIMEOUT_S)
        self._servers.clear()
        self.ports.clear()
        core, self._core = self._core, None
        try:
            if core is not None:
                await core.close()
        finally:
            self._lock.release()


def _with_overrides(
    config: ServerConfig,
    protocols: Sequence[ProtocolSpec],
    data_dir: Path | str | None,
    host: str | None,
    port_overrides: Mapping[str, int] | None,
) -> ServerConfig:
    ports = dict(port_overrides or {})
    unknown = ports.keys() - {spec.name for spec in protocols}
    if unknown:
        raise ValueError(f"port_overrides for unknown listeners: {', '.join(sorted(unknown))}")
    listeners = {}
    for spec in protocols:
        listener = config.listener(spec)
        listeners[spec.name] = dataclasses.replace(
            listener, host=host or listener.host, port=ports.get(spec.name, listener.port)
        )
    return dataclasses.replace(
        config, data_dir=Path(data_dir or config.data_dir), listeners=listeners
    )


class _DataDirLock:
    """`data_dir/.lock`, flock'ed for the server's lifetime and holding its pid."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self._data_dir.mkdir(parents=True, exist_ok=True)
        # "a+" so that opening does not erase the pid of a server that holds the lock.
        file = open(self._data_dir / ".lock", "a+", encoding="ascii")  # noqa: SIM115
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            file.close()
            raise DataDirLocked(self._data_dir, holder) from None
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        self._file = file

    def release(self) -> None:
        # Closing the file drops the flock; the file stays, as deleting it would race.
        if self._file is not None:
            self._file.close()
            self._file = None


def _on_signal(signum: int, stop_requested: asyncio.Event) -> None:
    log.info("shutdown requested", extra={"signal": signal.Signals(signum).name})
    stop_requested.set()


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), _CLOSE_TIMEOUT_S)
    except TimeoutError:
        writer.transport.abort()
    except OSError:
        pass  # the peer reset the connection: it is closed either way


# struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, both u64.
_TCP_INFO_TRAFFIC = struct.Struct("=120xQQ")


def _socket_traffic(writer: asyncio.StreamWriter) -> dict[str, int]:
    """Bytes out and in, from the kernel's TCP counters (Linux; empty elsewhere).

    One syscall per connection, and unlike counting in Python it includes sendfile().
    The counts are TCP sequence space, so they may include one for each side's FIN.
    """
    sock = writer.get_extra_info("socket")
    tcp_info = getattr(socket, "TCP_INFO", None)
    if sock is None or tcp_info is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return {}
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_TRAFFIC.size)
    except OSError:
        return {}
    if len(info) < _TCP_INFO_TRAFFIC.size:
        return {}  # a kernel older than 4.2 has no byte counters
    bytes_out, bytes_in = _TCP_INFO_TRAFFIC.unpack(info)
    return {"bytes_in": bytes_in, "bytes_out": bytes_out}


def _format_address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{_bracketed(address[0])}:{address[1]}"
    return str(address)


def _url_host(host: str) -> str:
    """A host as it appears in a URL: a wildcard address becomes loopback."""
    return _bracketed({"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
