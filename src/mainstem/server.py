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
import gc
import itertools
import logging
import os
import resource
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, SupportsIndex
from urllib.parse import quote

from mainstem import compiled
from mainstem.broker.alarms import AlarmMonitor, Watermarks
from mainstem.broker.core import BrokerCore
from mainstem.broker.events.projections import Projection
from mainstem.broker.tables import TableRows
from mainstem.cluster.node import ClusterNode
from mainstem.config import ADMIN, PROMETHEUS, ListenerConfig, ServerConfig, default_workers
from mainstem.handshakes import AcceptRate, Handshakes
from mainstem.log.descriptors import PROCESS_DESCRIPTORS
from mainstem.logging_setup import ContextLog, describe_error
from mainstem.protocols import all_protocols
from mainstem.protocols.base import ConnectionContext, ProtocolSpec
from mainstem.protocols.registry import ConnectionRegistry, socket_traffic
from mainstem.protocols.sniff import HEAD_SIZE, identify
from mainstem.spark.records import ARROW_SCHEMA, record_batches
from mainstem.tls import server_context
from mainstem.workers import Workers

if TYPE_CHECKING:  # the admin site imports aiohttp when it starts
    from aiohttp import web

log = logging.getLogger("mainstem.server")
connection_log = logging.getLogger("mainstem.connection")

EMBEDDED_HOST = "127.0.0.1"
SHUTDOWN_GRACE_S = 5.0
# Kernels cap the accept backlog at net.core.somaxconn; 100 (asyncio's default) is small
# for benchmarks that open hundreds of connections at once.
LISTEN_BACKLOG = 1024
PRIVATE_UMASK = 0o077  # files 0600, directories 0700
_CLOSE_TIMEOUT_S = 1.0  # a peer that stops reading must not hold up a close forever

# How to reach each listener; the fallback is "NAME://HOST:PORT".
_URL_TEMPLATES = {
    "stream": "rabbitmq-stream://{user}:{password}@{host}:{port}/%2F",
    "amqp": "amqp://{user}:{password}@{host}:{port}/%2F",
    "iggy": "iggy://{user}:{password}@{host}:{port}",
    "admin": "http://{host}:{port}/",
    "stream/tls": "rabbitmq-stream+tls://{user}:{password}@{host}:{port}/%2F",
    "amqp/tls": "amqps://{user}:{password}@{host}:{port}/%2F",
    "admin/tls": "https://{host}:{port}/",
    "prometheus": "http://{host}:{port}/metrics",
    "prometheus/tls": "https://{host}:{port}/metrics",
}
TLS_SUFFIX = "/tls"  # a listener's TLS twin is named "stream/tls", "amqp/tls", ...


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

    def __init__(self, data_dir: Path | str | None = None, *, config: ServerConfig | None = None,
                 host: str | None = None, port_overrides: Mapping[str, int] | None = None,
                 protocols: Sequence[ProtocolSpec] | None = None,
                 shutdown_grace_s: float = SHUTDOWN_GRACE_S, admin: bool | None = None) -> None:
        self._protocols = list(all_protocols() if protocols is None else protocols)
        if config is None:
            if data_dir is None:
                raise TypeError("Broker needs a data_dir or a config")
            # No worker processes unless asked: an embedding program owns its processes.
            config = dataclasses.replace(
                ServerConfig.defaults(self._protocols, host=EMBEDDED_HOST, port=0), workers=0)
        if admin is None and protocols is not None:
            admin = False  # hand-picked protocols make a test harness: no HTTP unless asked
        if admin is not None:
            config = dataclasses.replace(
                config, admin=dataclasses.replace(config.admin, enabled=admin)
            )
        if admin is False:  # nor Prometheus' listener
            config = dataclasses.replace(
                config, prometheus=dataclasses.replace(config.prometheus, enabled=False))
        self.config = _with_overrides(config, self._protocols, data_dir, host, port_overrides)
        self.data_dir = Path(self.config.data_dir).absolute()
        self._grace_s = shutdown_grace_s
        self._lock = _DataDirLock(self.data_dir)
        self._core: BrokerCore | None = None
        self.cluster: ClusterNode | None = None
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._conn_ids = itertools.count(1)
        self._closing = asyncio.Event()  # renewed by start(); handed to every connection
        self.connections = ConnectionRegistry()  # what the management API lists and closes
        self.alarm_monitor: AlarmMonitor | None = None
        self._background: list[asyncio.Task[None]] = []
        self.workers: Workers | None = None  # with config.workers: the decoding processes
        self._http_runners: list[web.AppRunner] = []  # aiohttp's runners of the HTTP listeners
        self.max_connections = 0  # the limit in force, set by start(); 0: unlimited
        self._handshakes = Handshakes(0, 0)  # connections not logged in, set by start()
        self._accept_rate = AcceptRate(0, 0)  # new connections per address, set by start()
        self.ports: dict[str, int] = {}
        self.hosts: dict[str, str] = {}  # the bind address of each listener, as `ports`

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
            host = _url_host(self.hosts[name])
            urls[name] = template.format(user=user, password=password, host=host, port=port)
        return urls

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _declare_projections(self) -> None:
        """The configuration's [[projections]], (re)declared at every start."""
        for table in self.config.projections:
            definition = dict(table)
            namespace = str(definition.pop("namespace", "/"))
            self.core.projections.declare(namespace, Projection(**definition))  # type: ignore[arg-type]

    async def start(self) -> None:
        """Lock the data directory, open the core, then bind every enabled listener.

        The process umask becomes 077: what the broker creates (the catalog with its
        password hashes, SQLite's side files, segments) is its owner's alone."""
        if self._core is not None:
            raise RuntimeError("the broker is already running")
        os.umask(PRIVATE_UMASK)
        self._lock.acquire()
        self._closing = asyncio.Event()
        self.max_connections = _connection_limit(self.config.max_connections)
        self._handshakes = Handshakes(self.config.max_unauthenticated_per_address,
                                      self._unauthenticated_limit())
        self._accept_rate = AcceptRate(self.config.accept_rate_per_address,
                                       self.config.accept_burst_per_address)
        try:
            self._core = await BrokerCore.open(self.data_dir, self.config.core_settings(),
                                               TableRows(record_batches, ARROW_SCHEMA))
            self._declare_projections()
            workers = self.config.workers
            if workers is None:
                workers = default_workers(os.cpu_count())
            if workers:
                self.workers = Workers(workers)
                await self.workers.start()
            tls = server_context(self.config.tls) if self.config.tls.enabled else None
            # A cluster node binds its listeners (other nodes learn their ports) but
            # takes clients only once it has joined: until etcd has answered, its catalog
            # (users, permissions, streams) may be stale.
            serve = not self.config.cluster.enabled
            for spec in self._protocols:
                listener = self.config.listener(spec)
                if listener.enabled:
                    await self._listen(spec, listener.host, listener.port, serve=serve)
                    if tls is not None:
                        tls_port = self.config.tls_port(spec.name)
                        await self._listen(spec, listener.host, tls_port, tls, serve=serve)
            self._start_alarm_monitor()
            if self.config.admin.enabled or self.config.prometheus.enabled:
                await self._start_http(tls)  # its health check tells while etcd is awaited
            if self.config.cluster.enabled:
                await self._join_cluster()
                for server in self._servers:
                    await server.start_serving()
        except BaseException:
            await self._release()
            raise
        log.info("broker.started", extra={
            "data_dir": str(self.data_dir), "ports": dict(self.ports), "pid": os.getpid(),
            "max_connections": self.max_connections,
            "max_unauthenticated_connections": self._unauthenticated_limit(),
            "workers": [] if self.workers is None else self.workers.pids,
            "compiled": compiled.COMPILED, "compiled_reason": compiled.REASON,
        })

    async def stop(self) -> None:
        """Stop accepting, let connections finish within the grace period, close the core."""
        if self._core is None:
            return
        for server in self._servers:
            server.close()
        await self._stop_http()
        self._closing.set()
        await self._end_connections()
        await self._release()
        log.info("broker.stopped", extra={"data_dir": str(self.data_dir)})

    async def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully (starting first if needed)."""
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, signum, stop_requested)
        try:
            if self._core is None:
                await _unless_stopped(self.start(), stop_requested)
            # What startup built (modules, catalog, configuration) lives as long as the
            # process: out of the collector's generations, full collections stop walking
            # it (an 18 ms gen-2 pause was seen at a publish's p999).
            gc.freeze()
            await stop_requested.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            await self.stop()

    async def _join_cluster(self) -> None:
        """Join the cluster once the listeners are bound: other nodes learn their ports."""
        settings = self.config.cluster
        host = self.hosts.get("stream") or next(iter(self.hosts.values()), "127.0.0.1")
        advertise = settings.advertise_host or (socket.gethostname() if host in ("0.0.0.0", "::")
                                                else host)
        self.cluster = ClusterNode(self.core, list(settings.etcd), settings.node_name,
                                   advertise, dict(self.ports), host, settings.replication_port,
                                   settings.lease_ttl)
        await self.cluster.start()
        self.core.cluster = self.cluster
        self.core.streams.replication = self.cluster
        self.ports["replication"] = self.cluster.replication_port

    def _not_ready(self) -> str | None:
        """Why this node takes no clients yet (a cluster node joining); None once it does."""
        if not self.config.cluster.enabled:
            return None
        return "joining the cluster" if self.cluster is None else self.cluster.not_ready

    async def _listen(self, spec: ProtocolSpec, host: str, port: int,
                      tls: ssl.SSLContext | None = None, *, serve: bool = True) -> None:
        """Serve `spec` on host:port; with `tls`, as its TLS twin "NAME/tls". The handler
        sees plain streams either way: asyncio runs the TLS layer."""
        name = spec.name + TLS_SUFFIX if tls is not None else spec.name

        async def on_connection(reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
            await self._serve_connection(spec, reader, writer, name)

        loop = asyncio.get_running_loop()
        # Buffer up to one maximum frame (within 64 KiB..4 MiB) so a handler parses every
        # complete frame per wakeup; readexactly() of a larger frame still works.
        limit = min(max(self.config.max_frame_size, 64 * 1024), 4 * 1024 * 1024)

        def accept() -> asyncio.StreamReaderProtocol:  # asyncio.start_server's, our reader
            return asyncio.StreamReaderProtocol(FirstBytesReader(spec, limit, loop),
                                                on_connection)

        await self._bind(name, accept, host, port, tls, serve)

    async def _bind(self, name: str, accept: Callable[[], asyncio.BaseProtocol], host: str,
                    port: int, tls: ssl.SSLContext | None, serve: bool = True) -> None:
        """Bind host:port; accepting connections at once when `serve`, else once
        `start_serving` is called."""
        try:
            server = await asyncio.get_running_loop().create_server(
                accept, host, port, backlog=LISTEN_BACKLOG, ssl=tls, start_serving=serve,
                ssl_handshake_timeout=self._handshake_timeout_s if tls else None,
            )
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ListenerBindError(name, host, port, reason) from exc
        self._servers.append(server)
        self.ports[name] = port = server.sockets[0].getsockname()[1]
        self.hosts[name] = host
        log.info("listener.started", extra={"listener": name, "host": host, "port": port})

    async def _start_http(self, tls: ssl.SSLContext | None) -> None:
        """The management API, metrics and console, and RabbitMQ's Prometheus listener:
        each HTTP on its port, HTTPS on its twin. The management app runs even with its
        listener off: it keeps the state both serve (rates, fsync timings)."""
        from mainstem.admin.app import create_app, prometheus_app
        from mainstem.admin.state import AdminState

        state = AdminState(
            core=self.core, connections=self.connections, monitor=self.alarm_monitor,
            listeners=self.ports, hosts=self.hosts, certfile=self.config.tls.certfile,
            identity=self.config.identity, on_login=self._handshakes.end,
            not_ready=self._not_ready, environment=self.config.environment())
        admin = create_app(state, served_metrics=self.config.admin_metrics,
                           per_object_metrics=self.config.return_per_object_metrics)
        runners = {ADMIN: await self._http_runner(admin)}
        if self.config.prometheus.enabled:
            # A scrape needs no login: once answered, its connection is no handshake.
            runners[PROMETHEUS] = await self._http_runner(
                prometheus_app(admin, on_answered=self._handshakes.end))
        for name, runner in runners.items():
            listener = self.config.admin if name == ADMIN else self.config.prometheus
            if listener.enabled:
                await self._serve_http(name, listener, runner, tls)

    async def _http_runner(self, app: web.Application) -> web.AppRunner:
        from aiohttp import web

        from mainstem.admin.http_log import HttpServerLog

        # aiohttp closes a connection that has no request under way for the keep-alive
        # timeout, from its first byte on: silent and slow-header clients are handshakes.
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0,
                               keepalive_timeout=self._handshake_timeout_s,
                               logger=HttpServerLog(logging.getLogger("mainstem.admin.http")))
        await runner.setup()
        self._http_runners.append(runner)
        return runner

    async def _serve_http(self, name: str, listener: ListenerConfig, runner: web.AppRunner,
                          tls: ssl.SSLContext | None) -> None:
        http = runner.server
        assert http is not None
        sites: list[tuple[str, int, ssl.SSLContext | None]] = [(name, listener.port, None)]
        if tls is not None:
            sites.append((name + TLS_SUFFIX, self.config.tls_port(name), tls))

        def accept() -> asyncio.BaseProtocol:
            if self._refused(name):
                return _Refused()
            return _HttpHandshake(http(), self._handshakes, self._accept_rate, name)

        for site, port, context in sites:
            await self._bind(site, accept, listener.host, port, context)

    async def _stop_http(self) -> None:
        runners, self._http_runners = self._http_runners, []
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()

    def _start_alarm_monitor(self) -> None:
        alarms = self.config.alarms
        self.alarm_monitor = AlarmMonitor(
            self.core.alarms, self.data_dir,
            Watermarks(alarms.memory_high_watermark, alarms.disk_free_limit),
            interval_s=alarms.check_interval_ms / 1000,
        )
        self.alarm_monitor.check()  # alarms hold from the first connection on
        self._background.append(asyncio.get_running_loop().create_task(self.alarm_monitor.run()))

    @property
    def _handshake_timeout_s(self) -> float:
        return self.config.handshake_timeout_ms / 1000

    def _unauthenticated_limit(self) -> int:
        """The configured budget, else half the connection limit: the other half stays
        for clients that log in, however many sockets stay silent."""
        configured = self.config.max_unauthenticated_connections
        if configured is not None:
            return configured
        return max(1, self.max_connections // 2) if self.max_connections else 0

    def _open_connections(self) -> int:
        """Protocol connections and the HTTP listeners' connections."""
        http = sum(len(runner.server.connections) for runner in self._http_runners
                   if runner.server is not None)
        return len(self.connections) + http

    def _refused(self, listener: str, peer: str = "") -> bool:
        """True (and logged) when a new socket is beyond the connection limit."""
        limit = self.max_connections
        if not limit or self._open_connections() < limit:
            return False
        # Refused before any protocol byte, as RabbitMQ does past its connection_max.
        log.warning("connection.refused", extra={"reason": "connection limit reached",
                                             "listener": listener, "peer": peer,
                                             "max_connections": limit})
        return True

    async def _serve_connection(
        self, spec: ProtocolSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        listener: str,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        peer = _format_address(peername)
        if self._refused(listener, peer) or not self._accept_rate.admits(
                peername[0] if isinstance(peername, tuple) else None, listener):
            await _close_writer(writer)
            return
        self._connections.add(task)
        conn_id = next(self._conn_ids)
        fields = {"listener": listener, "conn_id": conn_id, "peer": peer}
        tls = listener.endswith(TLS_SUFFIX)
        configured = self.config.listener(spec)
        ctx = ConnectionContext(
            core=self.core, reader=reader, writer=writer, limits=self.config.limits(),
            identity=self.config.identity,
            log=ContextLog(connection_log, fields), closing=self._closing,
            listener=listener, peer=peer, tls=tls,
            advertised=(configured.advertised_host, None if tls else configured.advertised_port),
            offload=None if self.workers is None else self.workers.lane(conn_id),
            on_login=lambda: self._handshakes.end(conn_id),
            on_suspect=lambda: self._handshakes.suspect(conn_id),
        )
        self.connections.add(
            conn_id, ctx, task, _format_address(writer.get_extra_info("sockname"))
        )
        loop = asyncio.get_running_loop()
        opened_at = loop.time()
        self.core.counters.connections_opened += 1
        ctx.log.info("connection.opened")
        if isinstance(reader, FirstBytesReader):
            reader.on_wrong_protocol(ctx.log)
        handshake = _Handshake(ctx, task, self._handshake_timeout_s)
        self._handshakes.begin(conn_id, ctx.peer_host, handshake.evict)
        outcome = "ended"
        try:
            await spec.handler(ctx)
        except asyncio.CancelledError:
            if handshake.ended_by is None:
                outcome = "cancelled"
                raise
            outcome = handshake.ended_by
            task.uncancel()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            outcome = "lost"
            ctx.log.warning("connection.lost", extra={"error": describe_error(exc)})
        except Exception as exc:
            outcome = "failed"
            ctx.log.exception("connection.failed", extra={"error": describe_error(exc)})
        finally:
            self._handshakes.end(conn_id)
            handshake.cancel()
            self._connections.discard(task)
            self.connections.remove(conn_id)
            ctx.leave()
            self.core.counters.connections_closed += 1
            traffic = socket_traffic(writer)
            await _close_writer(writer)
            # ctx.log, not the local fields: the handler may have bound user and namespace.
            ctx.log.info("connection.closed", extra={
                "outcome": outcome, "duration_s": round(loop.time() - opened_at, 3), **traffic,
            })

    async def _end_connections(self) -> None:
        if not self._connections:
            return
        _done, pending = await asyncio.wait(set(self._connections), timeout=self._grace_s)
        if pending:
            log.warning("shutdown.cancelling_connections",
                        extra={"connections": len(pending), "grace_s": self._grace_s})
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=self._grace_s)

    async def _release(self) -> None:
        """Close whatever start() opened: listeners, then the core, then the lock."""
        for server in self._servers:
            server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await server.wait_closed()
        self._servers.clear()
        await self._stop_http()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        if self.cluster is not None:
            await self.cluster.stop()
            self.cluster = None
        if self.workers is not None:
            await self.workers.stop()
            self.workers = None
        self.ports.clear()
        core, self._core = self._core, None
        try:
            if core is not None:
                await core.close()
        finally:
            self._lock.release()


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> None:
    """Run `work`, cancelled if `stop` is set first: a SIGTERM ends a cluster node still
    waiting for etcd."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
    if not task.cancelled():
        task.result()


class _Handshake:
    """Cancels a connection whose client has not logged in (ctx.identify) in time, as
    RabbitMQ's handshake_timeout does: a silent socket must not hold a descriptor. The
    budget of connections not logged in may evict it earlier."""

    def __init__(self, ctx: ConnectionContext, task: asyncio.Task[None], timeout_s: float
                 ) -> None:
        self.ended_by: str | None = None  # the outcome, once this cancelled the connection
        self._ctx = ctx
        self._task = task
        self._handle = asyncio.get_running_loop().call_later(timeout_s, self._expire, timeout_s)

    def _expire(self, timeout_s: float) -> None:
        if self._ctx.user is None:
            self._ctx.log.warning("handshake.timeout",
                                  extra={"handshake_timeout_s": timeout_s})
            self._end("handshake timeout")

    def evict(self) -> None:
        self._ctx.log.warning("handshake.evicted", extra={
            "reason": "connections not logged in beyond their budget"})
        self._end("evicted")

    def _end(self, outcome: str) -> None:
        self.ended_by = outcome
        self._task.cancel()

    def cancel(self) -> None:
        self._handle.cancel()


class _HttpHandshake(asyncio.Protocol):
    """aiohttp's protocol for one admin HTTP connection, with the connection in the budget
    of connections not logged in until a request on it authenticates (the admin app
    calls `Handshakes.end` with its transport); evicted, the socket is closed. Beyond its
    address's accept rate, it is closed at once, aiohttp never sees it."""

    def __init__(self, http: asyncio.Protocol, handshakes: Handshakes,
                 accept_rate: AcceptRate, listener: str) -> None:
        self._http = http
        self._handshakes = handshakes
        self._accept_rate = accept_rate
        self._listener = listener
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else None
        if not self._accept_rate.admits(host, self._listener):
            self._http = _Refused()
            self._http.connection_made(transport)
            return
        self._transport = transport
        self._http.connection_made(transport)
        self._handshakes.begin(transport, host, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._handshakes.end(self._transport)
        self._http.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._http.data_received(data)

    def eof_received(self) -> bool | None:
        return self._http.eof_received()

    def pause_writing(self) -> None:
        self._http.pause_writing()

    def resume_writing(self) -> None:
        self._http.resume_writing()


class _Refused(asyncio.Protocol):
    """What an HTTP socket beyond the connection limit gets: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class FirstBytesReader(asyncio.StreamReader):
    """The reader of one accepted socket: before the handler reads anything, the first
    bytes are checked once for another protocol's opening (`sniff.identify`). Those are
    logged (`protocol.mismatch`: what arrived, on which listener) and, unless the listener's
    protocol answers them itself, the handler sees the end of the stream instead."""

    def __init__(self, spec: ProtocolSpec, limit: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self._spec = spec
        self._checked = False
        self._refused = False
        self._mismatch: tuple[str, bytes] | None = None  # (what arrived, its first bytes)
        self._log: logging.LoggerAdapter[logging.Logger] | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if self.first_bytes(bytes(data)):
            super().feed_data(data)

    def first_bytes(self, data: bytes) -> bool:
        """Check the connection's first chunk (also for a handler that took its socket
        over, `protocols.receiver`); False once refused: the handler saw the end."""
        if not self._checked:
            self._checked = True
            self._check(data)
        return not self._refused

    def _check(self, data: bytes) -> None:
        arrived = identify(data)
        if arrived is None or arrived == self._spec.name:
            return
        self._mismatch = (arrived, bytes(data[:HEAD_SIZE]))
        self._report()
        if not self._spec.answers_wrong_protocol:
            self._refused = True
            self.feed_eof()

    def on_wrong_protocol(self, connection_log: logging.LoggerAdapter[logging.Logger]) -> None:
        """Log a mismatch through the connection's log (its fields: listener, peer)."""
        self._log = connection_log
        self._report()

    def _report(self) -> None:
        if self._log is not None and self._mismatch is not None:
            arrived, head = self._mismatch
            self._log.warning("protocol.mismatch", extra={
                "arrived": arrived, "expected": self._spec.name, "first_bytes": head.hex(),
                "answered": self._spec.answers_wrong_protocol})
            self._mismatch = None


def _connection_limit(configured: int | None) -> int:
    """The configured limit, else the default for this process's descriptor limit."""
    if configured is not None:
        return configured
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return default_max_connections(soft)


def default_max_connections(descriptors: int) -> int:
    """Connections allowed by default under a limit of `descriptors` open files.

    A fixed set is kept for the process itself; of the rest, a quarter stays for the
    broker's files (segments, indexes, queue journals) and three quarters go to sockets,
    so a flood of connections cannot starve storage or the alarm checks of descriptors.
    """
    if descriptors == resource.RLIM_INFINITY:
        descriptors = 1 << 20
    return max(1, (descriptors - PROCESS_DESCRIPTORS) * 3 // 4)


def _with_overrides(config: ServerConfig, protocols: Sequence[ProtocolSpec],
                    data_dir: Path | str | None, host: str | None,
                    port_overrides: Mapping[str, int] | None) -> ServerConfig:
    ports = dict(port_overrides or {})
    unknown = ports.keys() - {spec.name for spec in protocols} - {ADMIN, PROMETHEUS}
    if unknown:
        raise ValueError(f"port_overrides for unknown listeners: {', '.join(sorted(unknown))}")
    listeners = {}
    for spec in protocols:
        listener = config.listener(spec)
        listeners[spec.name] = dataclasses.replace(
            listener, host=host or listener.host, port=ports.get(spec.name, listener.port)
        )
    admin, prometheus = (
        dataclasses.replace(http, host=host or http.host, port=ports.get(name, http.port))
        for name, http in ((ADMIN, config.admin), (PROMETHEUS, config.prometheus)))
    return dataclasses.replace(config, data_dir=Path(data_dir or config.data_dir),
                               listeners=listeners, admin=admin, prometheus=prometheus)


class _DataDirLock:
    """`data_dir/.lock`, flock'ed for the server's lifetime and holding its pid."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self._data_dir.mkdir(parents=True, exist_ok=True)
        try:  # a directory made beforehand (or by an older version) is closed too
            self._data_dir.chmod(0o700)
        except OSError as exc:  # owned by another user: its owner decides
            log.warning("data_dir.mode_kept", extra={"data_dir": str(self._data_dir),
                                                     "reason": describe_error(exc)})
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
    log.info("shutdown.requested", extra={"signal": signal.Signals(signum).name})
    stop_requested.set()


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()
    except OSError:
        pass  # the peer reset the connection: it is closed either way


def _format_address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{_bracketed(address[0])}:{address[1]}"
    return str(address)


def _url_host(host: str) -> str:
    """A host as it appears in a URL: a wildcard address becomes loopback."""
    return _bracketed({"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
