"""Server configuration: defaults < TOML file < environment variables < command-line flags.

Every source is flattened to dotted keys ("storage.fsync", "listeners.stream.port") that
remember where each value came from, merged in precedence order, then validated once, so
an error always names the key and its source.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.broker.errors import InvalidArgument
from mainstem.broker.events.projections import FOLDS
from mainstem.broker.retention import parse_age_ms
from mainstem.broker.settings import CoreSettings, TieringSettings
from mainstem.broker.streams import DEFAULT_MAX_PARTITIONS
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.protocols import all_protocols
from mainstem.protocols.base import ConnectionLimits, ProtocolSpec
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity

# All interfaces, as RabbitMQ does; an embedded Broker binds 127.0.0.1 instead.
DEFAULT_HOST = "0.0.0.0"
UNLIMITED = "unlimited"
AUTO = "auto"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("json", "text")
MIN_FRAME_SIZE = 4096  # AMQP 0-9-1's frame-min-size: every protocol must fit its handshake
ADMIN = "admin"  # the management API's listener name in flags, ports and URLs
ADMIN_PORT = 15672
PROMETHEUS = "prometheus"  # the Prometheus scrape listener, as RabbitMQ's plugin serves it
PROMETHEUS_PORT = 15692
# Who may read /metrics on the management listener: logged-in users (default), anyone, or
# nobody (scrape the prometheus listener instead, as with RabbitMQ).
ADMIN_METRICS = ("authenticated", "open", "off")
REPLICATION_PORT = 5553  # followers fetch chunks from their leader here (cluster only)
MAX_WORKERS = 64  # [server] workers: more only adds processes a machine cannot feed
AUTO_WORKERS = 4  # "auto" stops here: beyond, the broker's own loop is the limit
# The TLS twin of each listener, where RabbitMQ or the protocol's project has a convention
# (AMQP 5671, stream 5551, management 15671); the others take the next port up.
DEFAULT_TLS_PORTS = {"amqp": 5671, "stream": 5551, "iggy": 8091, "bson": 7452,
                     "segment": 12346, "admin": 15671, "prometheus": 15691}
TLS_VERIFY = ("none", "optional", "required")


class ConfigError(ValueError):
    """Invalid configuration; the message names the key and where it came from."""


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    host: str = DEFAULT_HOST
    port: int = 0
    enabled: bool = True
    # What the stream protocol and Iggy's cluster metadata tell clients to connect to
    # (RabbitMQ's stream.advertised_host and _port); None: the address and port the client
    # reached.
    advertised_host: str | None = None
    advertised_port: int | None = None


@dataclass(frozen=True, slots=True)
class StorageConfig:
    fsync: FsyncMode = FsyncMode.BATCH
    fsync_interval_ms: int = 200  # only used by FsyncMode.INTERVAL
    max_partitions: int = DEFAULT_MAX_PARTITIONS  # per stream
    open_files: int = 0  # log-file descriptors kept open; 0: (RLIMIT_NOFILE - 128) / 4
    scrub_rate: int = 16 << 20  # bytes a second the background scrub checks; 0: off


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Defaults for streams declared without their own retention; None means unlimited."""

    max_bytes: int | None = None
    max_age_ms: int | None = None
    max_segment_bytes: int = 500_000_000


@dataclass(frozen=True, slots=True)
class TieringConfig:
    """[tiering]: with a url (a directory, or s3://bucket/prefix), a stream's sealed
    segments past its local bounds move to that tier and are read from there."""

    url: str | None = None
    endpoint: str | None = None  # an S3-compatible store's, when not AWS
    region: str = "us-east-1"
    access_key_id: str | None = None  # None: the usual AWS_* environment
    secret_access_key: str | None = None
    timeout_ms: int = 10_000  # one call to the store, retries included
    cache_dir: Path | None = None  # default: <data_dir>/tier-cache
    cache_bytes: int = 1 << 30
    block_bytes: int = 1 << 20
    read_ahead: int = 2
    local_max_bytes: int | None = None  # defaults for streams without their own bounds
    local_max_age_ms: int | None = None
    check_interval_ms: int = 10_000
    delete_grace_ms: int = 300_000  # an object whose record went stays this long


@dataclass(frozen=True, slots=True)
class AuthConfig:
    default_user: str = "guest"
    default_pass: str = "guest"
    loopback_users: tuple[str, ...] = ("guest",)
    failed_login_delay_ms: int = 1000  # every refused login is answered this late
    # Per client address and per (address, user), in bursts of as many; beyond them a
    # failure is answered later and password checks wait (see broker/login_throttle.py).
    failed_logins_per_minute: int = 30
    # Password checks queued for a thread or running per client address; its others wait
    # in its own backlog, users with no recent failure first (broker/password_checks.py).
    password_checks_per_address: int = 2


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Certificates of every TLS listener; TLS listeners start only when certfile is set."""

    certfile: Path | None = None
    keyfile: Path | None = None  # None: the key is in certfile
    cafile: Path | None = None  # CAs that client certificates must chain to
    verify: str = "none"  # client certificates: none | optional | required

    @property
    def enabled(self) -> bool:
        return self.certfile is not None


@dataclass(frozen=True, slots=True)
class AlarmConfig:
    """Resource alarms: publishers are held back while either watermark is crossed."""

    memory_high_watermark: float = 0.4  # fraction of RAM the process may use, as RabbitMQ
    disk_free_limit: int = 50_000_000  # bytes free on the data directory's file system
    check_interval_ms: int = 1000


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """[cluster]: with etcd endpoints, this node joins the cluster they coordinate."""

    etcd: tuple[str, ...] = ()  # host:port of each etcd member; empty: a single node
    node_name: str | None = None  # default: the host name
    advertise_host: str | None = None  # what other nodes and clients reach this node at
    replication_port: int = REPLICATION_PORT
    lease_ttl: int = 5  # seconds without etcd before this node's leaderships lapse

    @property
    def enabled(self) -> bool:
        return bool(self.etcd)


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = "info"
    format: str = "json"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    data_dir: Path = Path("data")
    listeners: Mapping[str, ListenerConfig] = field(default_factory=dict)
    storage: StorageConfig = field(default_factory=StorageConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    tiering: TieringConfig = field(default_factory=TieringConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    log: LogConfig = field(default_factory=LogConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # The management API's listener, outside `listeners` as it is HTTP, not a protocol.
    admin: ListenerConfig = field(default_factory=lambda: ListenerConfig(port=ADMIN_PORT))
    tls: TlsConfig = field(default_factory=TlsConfig)
    # /metrics on the management listener: one of ADMIN_METRICS
    admin_metrics: str = "authenticated"
    # RabbitMQ's Prometheus listener: /metrics, /metrics/per-object, /metrics/detailed
    prometheus: ListenerConfig = field(
        default_factory=lambda: ListenerConfig(port=PROMETHEUS_PORT))
    # prometheus.return_per_object_metrics: /metrics with a sample per object, as RabbitMQ
    return_per_object_metrics: bool = False
    # listener name -> port of its TLS twin (0: ephemeral); "admin" and "prometheus" included.
    tls_ports: Mapping[str, int] = field(default_factory=dict)
    alarms: AlarmConfig = field(default_factory=AlarmConfig)
    # The [limits] section, kept flat so that limits() can build the handlers' view.
    max_frame_size: int = 1_048_576
    heartbeat_s: int = 60
    # None: derived from the descriptor limit; 0: unlimited; the server closes sockets beyond
    max_connections: int | None = None
    handshake_timeout_ms: int = 10_000  # a connection not logged in by then is closed
    # Connections not logged in yet (admin HTTP: until a request authenticates), per client
    # address and in all (None: half of max_connections; 0: unlimited); beyond either, the
    # oldest such connection is closed (in all, a suspect login's first: handshakes.py).
    max_unauthenticated_per_address: int = 256
    max_unauthenticated_connections: int | None = None
    # New connections per client address: a token bucket of this many a second, in bursts
    # of as many as the burst (0: unlimited); beyond it a socket is closed at once.
    accept_rate_per_address: int = 200
    accept_burst_per_address: int = 1000
    # A stream client that leaves a server request (ConsumerUpdate) unanswered this long is
    # disconnected: RabbitMQ's stream request_timeout, with its default.
    request_timeout_ms: int = 60_000
    channel_max: int = 2047
    max_consumers_per_queue: int = 0
    # Ready messages (and their body bytes) a classic queue keeps in memory; more wait on disk.
    queue_memory_messages: int = 10_000
    queue_memory_bytes: int = 32 * 1024 * 1024
    max_event_size: int = 4 * 1024 * 1024  # BSON events
    max_unacked_events: int = 1000  # per BSON subscription
    max_unacked_results: int = 100  # per BSON query
    # [server] workers: processes that decode stream Publish frames (0: all in one process;
    # None: "auto", one per core beyond two, at most AUTO_WORKERS)
    workers: int | None = None
    # [[projections]] tables: name, channel, binder, id_field, fold, matcher, namespace
    projections: tuple[dict[str, object], ...] = ()
    # [server_properties]: what the handshakes and the management API say the server is
    identity: ServerIdentity = DEFAULT_IDENTITY

    @classmethod
    def defaults(cls, protocols: Sequence[ProtocolSpec] | None = None, *,
                 data_dir: Path | str = Path("data"), host: str = DEFAULT_HOST,
                 port: int | None = None) -> ServerConfig:
        """Every protocol listening on `host`, on its default port unless `port` (0: ephemeral)."""
        specs = all_protocols() if protocols is None else protocols
        listeners = {
            spec.name: ListenerConfig(host, spec.default_port if port is None else port)
            for spec in specs
        }
        admin = ListenerConfig(host, ADMIN_PORT if port is None else port)
        prometheus = ListenerConfig(host, PROMETHEUS_PORT if port is None else port)
        http = {ADMIN: admin, PROMETHEUS: prometheus}
        tls_ports = {
            name: default_tls_port(name, listener.port) if port is None else port
            for name, listener in {**listeners, **http}.items()
        }
        return cls(data_dir=Path(data_dir), listeners=listeners, admin=admin,
                   prometheus=prometheus, tls_ports=tls_ports)

    def listener(self, spec: ProtocolSpec) -> ListenerConfig:
        """This protocol's listener; one missing from the configuration gets its default port."""
        return self.listeners.get(spec.name) or ListenerConfig(port=spec.default_port)

    def tls_port(self, name: str) -> int:
        """The port of a listener's TLS twin (its own listener port decides the default)."""
        if name in self.tls_ports:
            return self.tls_ports[name]
        listener = {ADMIN: self.admin, PROMETHEUS: self.prometheus}.get(name)
        return default_tls_port(name, (listener or self.listeners[name]).port)

    def environment(self) -> dict[str, Any]:
        """The effective configuration as `mainstem ctl environment` shows it: every
        setting by section, secrets (`REDACTED_SETTINGS`) replaced by "********"."""
        shown: dict[str, Any] = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        for section, key in REDACTED_SETTINGS:
            if shown[section].get(key) is not None:
                shown[section][key] = "********"
        return shown

    def core_settings(self) -> CoreSettings:
        return CoreSettings(
            durability=DurabilityPolicy(self.storage.fsync, self.storage.fsync_interval_ms),
            retention=RetentionPolicy(max_bytes=self.retention.max_bytes,
                                      max_age_ms=self.retention.max_age_ms,
                                      max_segment_bytes=self.retention.max_segment_bytes,
                                      local_max_bytes=self.tiering.local_max_bytes,
                                      local_max_age_ms=self.tiering.local_max_age_ms),
            tiering=self._tiering(),
            bootstrap_user=self.auth.default_user,
            bootstrap_password=self.auth.default_pass,
            loopback_users=self.auth.loopback_users,
            max_partitions=self.storage.max_partitions,
            open_files=self.storage.open_files,
            scrub_rate=self.storage.scrub_rate,
            failed_login_delay_s=self.auth.failed_login_delay_ms / 1000,
            failed_logins_per_minute=self.auth.failed_logins_per_minute,
            password_checks_per_address=self.auth.password_checks_per_address,
            queue_memory=MemoryBound(self.queue_memory_messages, self.queue_memory_bytes),
        )

    def _tiering(self) -> TieringSettings | None:
        tiering = self.tiering
        if tiering.url is None:
            return None
        return TieringSettings(
            tiering.url, endpoint=tiering.endpoint, region=tiering.region,
            access_key_id=tiering.access_key_id, secret_access_key=tiering.secret_access_key,
            timeout_s=tiering.timeout_ms / 1000,
            cache_dir=tiering.cache_dir or self.data_dir / "tier-cache",
            cache_bytes=tiering.cache_bytes, block_bytes=tiering.block_bytes,
            read_ahead=tiering.read_ahead, check_interval_s=tiering.check_interval_ms / 1000,
            clustered=self.cluster.enabled,
            delete_grace_s=tiering.delete_grace_ms / 1000)

    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(max_frame_size=self.max_frame_size, heartbeat_s=self.heartbeat_s,
                                channel_max=self.channel_max,
                                max_consumers_per_queue=self.max_consumers_per_queue,
                                max_event_size=self.max_event_size,
                                max_unacked_events=self.max_unacked_events,
                                max_unacked_results=self.max_unacked_results,
                                request_timeout_s=self.request_timeout_ms / 1000)


def default_tls_port(name: str, port: int) -> int:
    """The conventional TLS port, or plain port + 1; an ephemeral listener gets ephemeral TLS."""
    if port == 0:
        return 0
    return DEFAULT_TLS_PORTS.get(name, port + 1)


# --- value parsers: accept TOML's typed values and the strings of env vars and flags ---

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"(\d+)\s*([a-zA-Z]*)")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def parse_age(value: object) -> int | None:
    """A retention age in milliseconds, written as streams' x-max-age is.

    7D, 12h, 30m, 10s, 1Y, 2M (M is months, m minutes) or plain seconds; "unlimited" gives
    None.
    """
    if value == UNLIMITED:
        return None
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise ValueError("expected a number of seconds or a string such as 7D")
    try:
        age_ms = parse_age_ms(value)
    except InvalidArgument as exc:
        raise ValueError(str(exc)) from None
    if age_ms <= 0:
        raise ValueError(f"must be positive (use {UNLIMITED!r} for no limit)")
    return age_ms


def parse_size(value: object) -> int:
    """A byte count: 1048576, "1MiB", "500MB", "2GiB"."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.fullmatch(str(value).strip())
        unit = match[2].lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ValueError("expected bytes with an optional unit kB, MB, GB, TB, KiB, MiB, GiB")
        size = int(match[1]) * _SIZE_UNITS[unit]
    if size <= 0:
        raise ValueError("must be positive")
    return size


def _rate(value: object) -> int:
    """Bytes a second, as a size ("16MiB"); 0 turns off what it paces."""
    return 0 if str(value).strip() == "0" else parse_size(value)


def _optional_size(value: object) -> int | None:
    return None if value == UNLIMITED else parse_size(value)


def _connection_limit(value: object) -> int | None:
    return None if value == AUTO else _int_at_least(0)(value)


def _frame_size(value: object) -> int:
    size = parse_size(value)
    if size < MIN_FRAME_SIZE:
        raise ValueError(f"must be at least {MIN_FRAME_SIZE}")
    return size


def _int_at_least(minimum: int) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError("expected an integer")
        number = int(value)
        if number < minimum:
            raise ValueError(f"must be at least {minimum}")
        return number

    return parse


def _port(value: object) -> int:
    port = _int_at_least(0)(value)
    if port > 65535:
        raise ValueError("must be at most 65535")
    return port


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise ValueError("expected true or false")
    return text in _TRUE


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _names(value: object) -> tuple[str, ...]:
    """A TOML list of strings, or a comma-separated string from env/flags."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a list of names")
    return tuple(name.strip() for name in items if name.strip())


def _etcd_endpoints(value: object) -> tuple[str, ...]:
    """`etcd://HOST:PORT[,HOST:PORT...]` (flag, env) or a TOML list of HOST:PORT."""
    if isinstance(value, str):
        value = value.removeprefix("etcd://").split(",")
    endpoints = _names(value)
    for endpoint in endpoints:
        host, _, port = endpoint.removeprefix("etcd://").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {endpoint!r}")
    return tuple(e.removeprefix("etcd://") for e in endpoints)


def _choice(choices: Sequence[str]) -> Callable[[object], str]:
    def parse(value: object) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text

    return parse


def _fraction(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError("expected a number between 0 and 1") from None
    if not 0 < number <= 1:
        raise ValueError("expected a number between 0 (exclusive) and 1")
    return number


def _disk_limit(value: object) -> int:
    return 0 if value in (0, "0") else parse_size(value)


def _path(value: object) -> Path:
    return Path(_text(value))


def _workers(value: object) -> int | None:
    if value == AUTO:
        return None
    count = _int_at_least(0)(value)
    if count > MAX_WORKERS:
        raise ValueError(f"at most {MAX_WORKERS}")
    return count


def default_workers(cores: int | None) -> int:
    """Workers for "auto": one per core beyond two. The loop takes one core, and the
    kernel's part (sockets, fsync) and local clients most of another; on two cores one
    process took more stream publishes than one with workers (docs/multicore.md)."""
    return max(0, min((cores or 1) - 2, AUTO_WORKERS))


def _fsync_mode(value: object) -> FsyncMode:
    return FsyncMode(_choice([mode.value for mode in FsyncMode])(value))


# (section, key) of each setting that is a secret: never shown
REDACTED_SETTINGS = (("auth", "default_pass"), ("tiering", "secret_access_key"))


def _plain(value: object) -> object:
    """A setting's value as JSON holds it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # a path


_SETTINGS: dict[str, Callable[[object], object]] = {
    "data_dir": _path,
    "host": _text,
    "storage.fsync": _fsync_mode,
    "storage.fsync_interval_ms": _int_at_least(1),
    "storage.max_partitions": _int_at_least(1),
    "storage.open_files": _int_at_least(0),
    "storage.scrub_rate": _rate,
    "retention.max_bytes": _optional_size,
    "retention.max_age": parse_age,
    "retention.max_segment_bytes": parse_size,
    "tiering.url": _text,
    "tiering.endpoint": _text,
    "tiering.region": _text,
    "tiering.access_key_id": _text,
    "tiering.secret_access_key": _text,
    "tiering.timeout_ms": _int_at_least(1),
    "tiering.cache_dir": _path,
    "tiering.cache_bytes": parse_size,
    "tiering.block_bytes": parse_size,
    "tiering.read_ahead": _int_at_least(0),
    "tiering.local_max_bytes": _optional_size,
    "tiering.local_max_age": parse_age,
    "tiering.check_interval_ms": _int_at_least(1),
    "tiering.delete_grace_ms": _int_at_least(0),
    "limits.max_frame_size": _frame_size,
    "limits.heartbeat": _int_at_least(0),  # 0 disables heartbeats, as in AMQP
    "limits.max_connections": _connection_limit,
    "limits.handshake_timeout_ms": _int_at_least(1),
    "limits.max_unauthenticated_per_address": _int_at_least(0),
    "limits.max_unauthenticated_connections": _connection_limit,
    "limits.accept_rate_per_address": _int_at_least(0),
    "limits.accept_burst_per_address": _int_at_least(1),
    "limits.request_timeout_ms": _int_at_least(1),
    "limits.channel_max": _int_at_least(1),
    "limits.max_consumers_per_queue": _int_at_least(0),
    "limits.queue_memory_messages": _int_at_least(0),
    "limits.queue_memory_bytes": parse_size,
    "limits.max_event_size": parse_size,
    "projections": lambda value: _projections(value),
    "limits.max_unacked_events": _int_at_least(1),
    "limits.max_unacked_results": _int_at_least(1),
    "auth.default_user": _text,
    "auth.default_pass": _text,
    "auth.loopback_users": _names,
    "auth.failed_login_delay_ms": _int_at_least(0),
    "auth.failed_logins_per_minute": _int_at_least(1),
    "auth.password_checks_per_address": _int_at_least(1),
    "log.level": _choice(LOG_LEVELS),
    "log.format": _choice(LOG_FORMATS),
    "admin.host": _text,
    "admin.port": _port,
    "admin.enabled": _bool,
    "admin.tls_port": _port,
    "admin.metrics": _choice(ADMIN_METRICS),
    "prometheus.host": _text,
    "prometheus.port": _port,
    "prometheus.enabled": _bool,
    "prometheus.tls_port": _port,
    "prometheus.return_per_object_metrics": _bool,
    "tls.certfile": _path,
    "tls.keyfile": _path,
    "tls.cafile": _path,
    "tls.verify": _choice(TLS_VERIFY),
    "alarms.memory_high_watermark": _fraction,
    "alarms.disk_free_limit": _disk_limit,
    "alarms.check_interval_ms": _int_at_least(10),
    "cluster.etcd": _etcd_endpoints,
    "cluster.node_name": _text,
    "cluster.advertise_host": _text,
    "cluster.replication_port": _port,
    "cluster.lease_ttl": _int_at_least(2),
    "server.workers": _workers,
    **{f"server_properties.{each.name}": _text for each in fields(ServerIdentity)},
}
_LISTENER_SETTINGS: dict[str, Callable[[object], object]] = {
    "host": _text,
    "port": _port,
    "enabled": _bool,
    "tls_port": _port,
    "advertised_host": _text,
    "advertised_port": _port,
}

_LISTENER_ENV_VAR = re.compile(
    r"MAINSTEM_(\w+?)_(HOST|PORT|ENABLED|ADVERTISED_HOST|ADVERTISED_PORT)")
_TLS_PORT_ENV_VAR = re.compile(r"MAINSTEM_(\w+)_TLS_PORT")

# (flag, key, metavar, help); --listener and --disable are handled separately.
_FLAGS = (
    ("--data-dir", "data_dir", "DIR", "where streams and the catalog live (default: ./data)"),
    ("--host", "host", "HOST", f"bind address of every listener (default: {DEFAULT_HOST})"),
    ("--fsync", "storage.fsync", "MODE", "batch | interval | never (default: batch)"),
    ("--fsync-interval-ms", "storage.fsync_interval_ms", "MS", "period of --fsync interval"),
    ("--scrub-rate", "storage.scrub_rate", "SIZE",
     "bytes a second the background scrub reads back and checks (default: 16MiB; 0: off)"),
    ("--retention-max-bytes", "retention.max_bytes", "SIZE", "default per-stream size limit"),
    ("--retention-max-age", "retention.max_age", "AGE", "default per-stream age limit: 7D, 12h"),
    ("--retention-max-segment-bytes", "retention.max_segment_bytes", "SIZE", "segment roll size"),
    ("--tier-url", "tiering.url", "URL",
     "move sealed segments past the local bounds to this tier: a directory or "
     "s3://bucket/prefix (default: no tier)"),
    ("--tier-endpoint", "tiering.endpoint", "URL", "an S3-compatible store's endpoint"),
    ("--tier-region", "tiering.region", "REGION", "the S3 region (default: us-east-1)"),
    ("--tier-access-key-id", "tiering.access_key_id", "KEY", "S3 key (default: AWS_* env)"),
    ("--tier-secret-access-key", "tiering.secret_access_key", "SECRET", "S3 secret"),
    ("--tier-timeout-ms", "tiering.timeout_ms", "MS", "one call to the tier (default: 10000)"),
    ("--tier-cache-dir", "tiering.cache_dir", "DIR", "default: <data-dir>/tier-cache"),
    ("--tier-cache-bytes", "tiering.cache_bytes", "SIZE",
     "local cache of tiered bytes (default: 1GiB)"),
    ("--tier-block-bytes", "tiering.block_bytes", "SIZE", "cache block (default: 1MiB)"),
    ("--tier-read-ahead", "tiering.read_ahead", "N", "blocks fetched ahead (default: 2)"),
    ("--tier-local-max-bytes", "tiering.local_max_bytes", "SIZE",
     "default bytes a stream partition keeps locally before tiering (default: unbounded)"),
    ("--tier-local-max-age", "tiering.local_max_age", "AGE",
     "default age past which a sealed segment is tiered: 7D, 12h (default: none)"),
    ("--tier-check-interval-ms", "tiering.check_interval_ms", "MS",
     "how often segments are checked for tiering (default: 10000)"),
    ("--tier-delete-grace-ms", "tiering.delete_grace_ms", "MS",
     "how long an object whose record went stays in the tier for readers that planned on "
     "it (default: 300000)"),
    ("--max-frame-size", "limits.max_frame_size", "SIZE", "largest frame a client may send"),
    ("--heartbeat", "limits.heartbeat", "SECONDS", "heartbeat proposed to clients (0: off)"),
    ("--max-connections", "limits.max_connections", "N",
     "open connections (auto: from the descriptor limit; 0: unlimited)"),
    ("--handshake-timeout-ms", "limits.handshake_timeout_ms", "MS",
     "close a connection not logged in by then (default: 10000)"),
    ("--max-unauthenticated-per-address", "limits.max_unauthenticated_per_address", "N",
     "connections not logged in per client address (default: 256; 0: unlimited)"),
    ("--max-unauthenticated-connections", "limits.max_unauthenticated_connections", "N",
     "connections not logged in, in all (auto: half of --max-connections; 0: unlimited)"),
    ("--accept-rate-per-address", "limits.accept_rate_per_address", "N",
     "new connections a second per client address, beyond them closed at once"
     " (default: 200; 0: unlimited)"),
    ("--accept-burst-per-address", "limits.accept_burst_per_address", "N",
     "burst of new connections per client address (default: 1000)"),
    ("--channel-max", "limits.channel_max", "N", "channels per connection (default: 2047)"),
    ("--max-consumers-per-queue", "limits.max_consumers_per_queue", "N", "0: unlimited"),
    ("--queue-memory-messages", "limits.queue_memory_messages", "N",
     "ready messages a classic queue keeps in memory, the rest on disk (default: 10000)"),
    ("--queue-memory-bytes", "limits.queue_memory_bytes", "SIZE",
     "body bytes a classic queue keeps in memory (default: 32MiB)"),
    ("--default-user", "auth.default_user", "USER", "user created when the catalog has none"),
    ("--default-pass", "auth.default_pass", "PASSWORD", "password of --default-user"),
    ("--loopback-users", "auth.loopback_users", "U1,U2", "users allowed from loopback only"),
    ("--password-checks-per-address", "auth.password_checks_per_address", "N",
     "password checks queued or running per client address; its others wait (default: 2)"),
    ("--admin-metrics", "admin.metrics", "WHO",
     "/metrics on the management listener: authenticated | open | off"
     " (default: authenticated)"),
    ("--prometheus-per-object-metrics", "prometheus.return_per_object_metrics", "BOOL",
     "the prometheus listener's /metrics with a sample per object (default: false)"),
    ("--log-level", "log.level", "LEVEL", "debug | info | warning | error"),
    ("--log-format", "log.format", "FORMAT", "json (one object per line) | text (key=value)"),
    ("--tls-certfile", "tls.certfile", "PATH", "PEM certificate chain; enables TLS listeners"),
    ("--tls-keyfile", "tls.keyfile", "PATH", "PEM private key (default: in --tls-certfile)"),
    ("--tls-cafile", "tls.cafile", "PATH", "CA bundle for client certificates"),
    ("--tls-verify", "tls.verify", "MODE", "client certificates: none | optional | required"),
    ("--memory-high-watermark", "alarms.memory_high_watermark", "FRACTION",
     "memory alarm above this fraction of RAM (default: 0.4)"),
    ("--disk-free-limit", "alarms.disk_free_limit", "SIZE",
     "disk alarm below this much free space (default: 50MB)"),
    ("--cluster", "cluster.etcd", "etcd://HOST:PORT[,HOST:PORT]",
     "join the cluster these etcd members coordinate (default: run alone)"),
    ("--node-name", "cluster.node_name", "NAME", "this node's name (default: the host name)"),
    ("--advertise-host", "cluster.advertise_host", "HOST",
     "host other nodes and clients reach this node at, advertised by every listener that"
     " sets no advertised_host of its own (default: the address a client reached; to other"
     " nodes, the bind address)"),
    ("--replication-port", "cluster.replication_port", "PORT",
     f"port followers fetch from (default: {REPLICATION_PORT}; 0: ephemeral)"),
    ("--lease-ttl", "cluster.lease_ttl", "SECONDS",
     "seconds without etcd before this node's leaderships lapse (default: 5)"),
    ("--workers", "server.workers", "N",
     "processes that decode stream Publish frames beside the broker (auto: one per "
     "core beyond two, at most 4; 0: none)"),
    ("--server-product", "server_properties.product", "NAME",
     "the product clients are told (default: mainstem)"),
    ("--server-version", "server_properties.version", "VERSION",
     "the version clients are told (default: mainstem's)"),
    ("--server-platform", "server_properties.platform", "TEXT",
     "the platform clients are told (default: Python and its version)"),
    ("--server-copyright", "server_properties.copyright", "TEXT",
     "the copyright clients are told"),
    ("--server-information", "server_properties.information", "TEXT",
     "the information clients are told"),
    ("--cluster-name", "server_properties.cluster_name", "NAME",
     "the cluster name clients and the management API are told (default: mainstem@HOST)"),
)

# Each flag's variable (--retention-max-age: MAINSTEM_RETENTION_MAX_AGE, but
# MAINSTEM_PROMETHEUS_RETURN_PER_OBJECT_METRICS), and the variables of keys without a flag.
_ENV_VARS = {
    **{"MAINSTEM_" + flag[2:].replace("-", "_").upper(): key for flag, key, _m, _h in _FLAGS
       if key != "prometheus.return_per_object_metrics"},
    **{f"MAINSTEM_{key.replace('.', '_').upper()}": key
       for key in ("prometheus.return_per_object_metrics", "admin.host", "admin.port",
                   "admin.enabled", "admin.tls_port", "prometheus.host", "prometheus.port",
                   "prometheus.enabled", "prometheus.tls_port")},
    "MAINSTEM_MAX_PARTITIONS": "storage.max_partitions",
    "MAINSTEM_OPEN_FILES": "storage.open_files",
    "MAINSTEM_REQUEST_TIMEOUT_MS": "limits.request_timeout_ms",
    "MAINSTEM_ALARM_CHECK_INTERVAL_MS": "alarms.check_interval_ms",
}

# dotted key -> (raw value, where it came from)
_Layer = dict[str, tuple[object, str]]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The configuration flags of `mainstem serve`."""
    parser.add_argument("--config", metavar="PATH", help="TOML file (default: $MAINSTEM_CONFIG)")
    for flag, _key, metavar, help_text in _FLAGS:
        parser.add_argument(flag, metavar=metavar, help=help_text)
    parser.add_argument(
        "--listener", action="append", default=[], metavar="NAME=[HOST:]PORT",
        help="enable listener NAME on HOST:PORT (port 0: ephemeral); repeatable",
    )
    parser.add_argument(
        "--disable", action="append", default=[], metavar="NAME", help="disable a listener"
    )
    parser.add_argument(
        "--tls-listener", action="append", default=[], metavar="NAME=PORT",
        help="port of listener NAME's TLS twin (needs --tls-certfile); repeatable",
    )


def load_config(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None, *,
                protocols: Sequence[ProtocolSpec] | None = None) -> ServerConfig:
    """Merge defaults, the TOML file, the environment (default os.environ) and parsed flags."""
    environ = os.environ if environ is None else environ
    specs = all_protocols() if protocols is None else protocols
    names = [spec.name for spec in specs]
    config_path = getattr(args, "config", None) or environ.get("MAINSTEM_CONFIG")
    merged: _Layer = {}
    if config_path:
        merged.update(_toml_layer(Path(config_path), names))
    merged.update(_env_layer(environ, names))
    if args is not None:
        merged.update(_flag_layer(args, names))
    return _build(merged, specs)


def _toml_layer(path: Path, names: Sequence[str]) -> _Layer:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from None
    layer: _Layer = {}
    for key, value in _flatten(document):
        _check_known(key, names, origin=str(path))
        layer[key] = (value, str(path))
    return layer


def _flatten(table: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    items: list[tuple[str, object]] = []
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            items.extend(_flatten(value, f"{key}."))
        else:
            items.append((key, value))
    return items


_PROJECTION_KEYS = {"name", "channel", "binder", "id_field", "fold", "matcher", "namespace"}


def _projections(value: object) -> tuple[dict[str, object], ...]:
    """[[projections]] tables, checked for their keys (the broker checks the values)."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError("projections must be [[projections]] tables")
    for table in value:
        unknown = set(table) - _PROJECTION_KEYS
        missing = {"name", "channel", "binder", "id_field"} - set(table)
        if unknown or missing:
            raise ValueError(f"projection {table.get('name')!r}: unknown keys "
                             f"{sorted(unknown)}, missing keys {sorted(missing)}")
        if table.get("fold", "merge") not in FOLDS:
            raise ValueError(f"projection {table['name']!r}: fold must be one of {FOLDS}")
    return tuple(value)


def _check_known(key: str, names: Sequence[str], origin: str) -> None:
    if key in _SETTINGS:
        return
    section, _, rest = key.partition(".")
    if section == "listeners":
        name, _, setting = rest.partition(".")
        if name not in names:
            raise ConfigError(f"{origin}: unknown listener {name!r} in {key!r}{_known(names)}")
        if setting in _LISTENER_SETTINGS:
            return
    raise ConfigError(f"{origin}: unknown key {key!r}")


def _known(names: Sequence[str]) -> str:
    return f" (known: {', '.join(names)})" if names else " (no protocol is implemented yet)"


def _env_layer(environ: Mapping[str, str], names: Sequence[str]) -> _Layer:
    by_env_name = {_env_token(name): name for name in names}
    layer: _Layer = {}
    for var, value in environ.items():
        if not value:
            continue  # an empty variable counts as unset, as container tooling often sets them
        tls_match = _TLS_PORT_ENV_VAR.fullmatch(var)
        match = _LISTENER_ENV_VAR.fullmatch(var)
        if var in _ENV_VARS:
            layer[_ENV_VARS[var]] = (value, var)
        elif (tls_match and tls_match[1] in by_env_name
              and (match is None or match[1] not in by_env_name)):
            # MAINSTEM_STREAM_TLS_PORT, unless a listener is itself named "stream-tls"
            layer[f"listeners.{by_env_name[tls_match[1]]}.tls_port"] = (value, var)
        elif match:
            name = by_env_name.get(match[1])
            if name is None:
                raise ConfigError(f"{var}: unknown listener {match[1].lower()!r}{_known(names)}")
            layer[f"listeners.{name}.{match[2].lower()}"] = (value, var)
    return layer


def _env_token(listener_name: str) -> str:
    return re.sub(r"\W", "_", listener_name).upper()


def _flag_layer(args: argparse.Namespace, names: Sequence[str]) -> _Layer:
    layer: _Layer = {}
    for flag, key, _metavar, _help in _FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            layer[key] = (value, flag)
    for spec in getattr(args, "listener", []):
        layer.update(_listener_flag(spec, names))
    for name in getattr(args, "disable", []):
        _check_listener_name(name, names, "--disable")
        layer[f"{_listener_prefix(name)}.enabled"] = (False, "--disable")
    for spec in getattr(args, "tls_listener", []):
        name, equals, port = spec.partition("=")
        if not equals:
            raise ConfigError(f"--tls-listener {spec!r}: expected NAME=PORT")
        _check_listener_name(name, names, "--tls-listener")
        layer[f"{_listener_prefix(name)}.tls_port"] = (port, "--tls-listener")
    return layer


def _listener_flag(spec: str, names: Sequence[str]) -> _Layer:
    """NAME=HOST:PORT or NAME=PORT; an IPv6 host goes in brackets: NAME=[::1]:5552."""
    name, equals, address = spec.partition("=")
    if not equals:
        raise ConfigError(f"--listener {spec!r}: expected NAME=[HOST:]PORT")
    _check_listener_name(name, names, "--listener")
    host, _, port = address.rpartition(":")
    prefix = _listener_prefix(name)
    layer: _Layer = {
        f"{prefix}.port": (port, "--listener"),
        f"{prefix}.enabled": (True, "--listener"),
    }
    if host:
        layer[f"{prefix}.host"] = (host.strip("[]"), "--listener")
    return layer


def _listener_prefix(name: str) -> str:
    """Where a listener's keys live: the HTTP listeners have sections of their own."""
    return name if name in (ADMIN, PROMETHEUS) else f"listeners.{name}"


def _check_listener_name(name: str, names: Sequence[str], origin: str) -> None:
    if name not in names and name not in (ADMIN, PROMETHEUS):
        raise ConfigError(f"{origin}: unknown listener {name!r}{_known(names)}")


def _build(layer: _Layer, specs: Sequence[ProtocolSpec]) -> ServerConfig:
    # Each value was checked by its key's parser, so it has the type its field wants.
    values: dict[str, Any] = {key: _parse(key, raw, origin)
                              for key, (raw, origin) in layer.items()}
    host = values.get("host", DEFAULT_HOST)
    # --advertise-host is every listener's advertised host unless the listener sets its own
    advertise_host = values.get("cluster.advertise_host")
    listeners = {
        spec.name: ListenerConfig(
            host=values.get(f"listeners.{spec.name}.host", host),
            port=values.get(f"listeners.{spec.name}.port", spec.default_port),
            enabled=values.get(f"listeners.{spec.name}.enabled", True),
            advertised_host=values.get(f"listeners.{spec.name}.advertised_host",
                                       advertise_host),
            advertised_port=values.get(f"listeners.{spec.name}.advertised_port"),
        )
        for spec in specs
    }

    def section(cls: type, prefix: str, **renamed: str) -> Any:
        fields = {renamed.get(key, key): value for key, value in _section(values, prefix).items()}
        return cls(**fields)

    http = {name: _http_listener(values, name, host, port)
            for name, port in ((ADMIN, ADMIN_PORT), (PROMETHEUS, PROMETHEUS_PORT))}
    tls_ports = {
        name: values.get(f"listeners.{name}.tls_port", default_tls_port(name, listener.port))
        for name, listener in listeners.items()
    }
    for name, listener in http.items():
        tls_ports[name] = values.get(f"{name}.tls_port", default_tls_port(name, listener.port))
    return ServerConfig(
        listeners=listeners,
        admin=http[ADMIN],
        prometheus=http[PROMETHEUS],
        tls=section(TlsConfig, "tls"),
        tls_ports=tls_ports,
        alarms=section(AlarmConfig, "alarms"),
        storage=section(StorageConfig, "storage"),
        retention=section(RetentionConfig, "retention", max_age="max_age_ms"),
        tiering=section(TieringConfig, "tiering", local_max_age="local_max_age_ms"),
        auth=section(AuthConfig, "auth"),
        log=section(LogConfig, "log"),
        cluster=section(ClusterConfig, "cluster"),
        identity=section(ServerIdentity, "server_properties"),
        **section(dict, "limits", heartbeat="heartbeat_s"),  # [limits] is kept flat
        **{name: values[key] for key, name in _FLAT.items() if key in values},
    )


# Other keys that are ServerConfig's own fields: key -> field.
_FLAT = {"data_dir": "data_dir", "admin.metrics": "admin_metrics",
         "prometheus.return_per_object_metrics": "return_per_object_metrics",
         "projections": "projections", "server.workers": "workers"}


def _http_listener(values: Mapping[str, Any], name: str, host: str, port: int
                   ) -> ListenerConfig:
    """The [admin] or [prometheus] listener."""
    return ListenerConfig(host=values.get(f"{name}.host", host),
                          port=values.get(f"{name}.port", port),
                          enabled=values.get(f"{name}.enabled", True))


def _section(values: Mapping[str, object], prefix: str) -> dict[str, object]:
    start = f"{prefix}."
    return {key[len(start):]: value for key, value in values.items() if key.startswith(start)}


def _parse(key: str, raw: object, origin: str) -> object:
    parser = _SETTINGS.get(key) or _LISTENER_SETTINGS[key.rpartition(".")[2]]
    try:
        return parser(raw)
    except ValueError as exc:
        raise ConfigError(f"{origin}: invalid value {raw!r} for {key}: {exc}") from None
