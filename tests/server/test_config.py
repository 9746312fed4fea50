"""Configuration: defaults < TOML < environment < flags, validation and unit parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.cli import build_parser
from mainstem.config import (
    DEFAULT_HOST,
    ConfigError,
    ListenerConfig,
    ServerConfig,
    load_config,
    parse_age,
    parse_size,
)
from mainstem.log.policy import FsyncMode
from mainstem.protocols.base import ConnectionLimits, ProtocolSpec


async def _unused_handler(ctx) -> None:
    raise AssertionError("no connection in config tests")


PROTOCOLS = [
    ProtocolSpec("stream", 5552, _unused_handler),
    ProtocolSpec("amqp", 5672, _unused_handler),
    ProtocolSpec("stream-tls", 5551, _unused_handler),
]


def serve_flags(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def load(tmp_path: Path, toml: str | None = None, env: dict | None = None, flags=()):
    environ = dict(env or {})
    if toml is not None:
        path = tmp_path / "mainstem.toml"
        path.write_text(toml)
        environ["MAINSTEM_CONFIG"] = str(path)
    return load_config(serve_flags(*flags), environ, protocols=PROTOCOLS)


def test_defaults(tmp_path):
    config = load(tmp_path)
    assert config.data_dir == Path("data")
    assert config.listeners == {
        "stream": ListenerConfig(DEFAULT_HOST, 5552, True),
        "amqp": ListenerConfig(DEFAULT_HOST, 5672, True),
        "stream-tls": ListenerConfig(DEFAULT_HOST, 5551, True),
    }
    assert config.storage.fsync is FsyncMode.BATCH
    assert config.retention.max_bytes is None and config.retention.max_age_ms is None
    assert config.limits() == ConnectionLimits(max_frame_size=1_048_576, heartbeat_s=60)
    assert (config.auth.default_user, config.auth.default_pass) == ("guest", "guest")
    assert (config.log.level, config.log.format) == ("info", "json")


def test_core_settings_follow_the_config(tmp_path):
    toml = """
[storage]
fsync = "interval"
fsync_interval_ms = 50
[retention]
max_bytes = "20GB"
max_age = "7D"
max_segment_bytes = "100MiB"
[auth]
default_user = "admin"
default_pass = "s3cret"
loopback_users = []
[limits]
queue_memory_messages = 500
queue_memory_bytes = "8MiB"
"""
    settings = load(tmp_path, toml).core_settings()
    assert settings.durability.mode is FsyncMode.INTERVAL
    assert settings.durability.interval_ms == 50
    assert settings.retention.max_bytes == 20 * 10**9
    assert settings.retention.max_age_ms == 7 * 86400 * 1000
    assert settings.retention.max_segment_bytes == 100 * 2**20
    assert (settings.bootstrap_user, settings.bootstrap_password) == ("admin", "s3cret")
    assert settings.loopback_users == ()
    assert settings.queue_memory == MemoryBound(messages=500, bytes=8 * 2**20)


def test_toml_overrides_defaults(tmp_path):
    toml = """
data_dir = "/var/lib/mainstem"
host = "10.0.0.1"
[listeners.stream]
port = 6000
[listeners.amqp]
host = "127.0.0.1"
enabled = false
[limits]
max_frame_size = 131072
heartbeat = 0
request_timeout_ms = 5000
[log]
level = "debug"
format = "text"
"""
    config = load(tmp_path, toml)
    assert config.data_dir == Path("/var/lib/mainstem")
    assert config.listeners["stream"] == ListenerConfig("10.0.0.1", 6000, True)
    assert config.listeners["amqp"] == ListenerConfig("127.0.0.1", 5672, False)
    assert config.limits() == ConnectionLimits(max_frame_size=131072, heartbeat_s=0,
                                               request_timeout_s=5.0)
    assert (config.log.level, config.log.format) == ("debug", "text")


def test_env_overrides_toml(tmp_path):
    toml = '[storage]\nfsync = "never"\n[listeners.stream]\nport = 6000\n'
    env = {
        "MAINSTEM_FSYNC": "batch",
        "MAINSTEM_STREAM_PORT": "7000",
        "MAINSTEM_STREAM_TLS_ENABLED": "false",
        "MAINSTEM_AMQP_HOST": "::1",
        "MAINSTEM_DATA_DIR": "/srv/data",
        "MAINSTEM_MAX_FRAME_SIZE": "1MiB",
        "MAINSTEM_LOOPBACK_USERS": "guest, ops",
        "MAINSTEM_DEFAULT_PASS": "",  # empty counts as unset
    }
    config = load(tmp_path, toml, env)
    assert config.storage.fsync is FsyncMode.BATCH
    assert config.listeners["stream"].port == 7000
    assert config.listeners["stream-tls"].enabled is False
    assert config.listeners["amqp"].host == "::1"
    assert config.data_dir == Path("/srv/data")
    assert config.max_frame_size == 2**20
    assert config.auth.loopback_users == ("guest", "ops")
    assert config.auth.default_pass == "guest"


def test_flags_override_env(tmp_path):
    env = {"MAINSTEM_FSYNC": "never", "MAINSTEM_STREAM_PORT": "7000", "MAINSTEM_HEARTBEAT": "5"}
    flags = ["--fsync", "interval", "--fsync-interval-ms", "20", "--listener", "stream=127.0.0.1:0",
             "--heartbeat", "30", "--retention-max-age", "12h", "--retention-max-bytes", "1000",
             "--default-user", "u", "--default-pass", "p", "--log-format", "text",
             "--queue-memory-messages", "0"]
    config = load(tmp_path, env=env, flags=flags)
    assert config.storage.fsync is FsyncMode.INTERVAL
    assert config.storage.fsync_interval_ms == 20
    assert config.listeners["stream"] == ListenerConfig("127.0.0.1", 0, True)
    assert config.heartbeat_s == 30
    assert config.retention.max_age_ms == 12 * 3600 * 1000
    assert config.retention.max_bytes == 1000
    assert (config.auth.default_user, config.auth.default_pass) == ("u", "p")
    assert config.log.format == "text"
    assert config.core_settings().queue_memory.messages == 0


def test_listener_flags(tmp_path):
    toml = '[listeners.amqp]\nenabled = false\n'
    flags = ["--host", "127.0.0.1", "--listener", "amqp=5673", "--listener", "stream=[::1]:0",
             "--disable", "stream-tls"]
    config = load(tmp_path, toml, flags=flags)
    assert config.listeners["amqp"] == ListenerConfig("127.0.0.1", 5673, True)
    assert config.listeners["stream"] == ListenerConfig("::1", 0, True)
    assert config.listeners["stream-tls"].enabled is False


def test_retention_can_be_reset_to_unlimited(tmp_path):
    toml = '[retention]\nmax_age = "7D"\nmax_bytes = 1000\n'
    flags = ["--retention-max-age", "unlimited", "--retention-max-bytes", "unlimited"]
    config = load(tmp_path, toml, flags=flags)
    assert config.retention.max_age_ms is None and config.retention.max_bytes is None


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("colour = 1\n", "unknown key 'colour'"),
        ("[storage]\nfsinc = 'batch'\n", "unknown key 'storage.fsinc'"),
        ("[listeners.strem]\nport = 1\n", "unknown listener 'strem'"),
        ("[listeners.stream]\nprt = 1\n", "unknown key 'listeners.stream.prt'"),
        ("[storage]\nfsync = 'fast'\n", "invalid value 'fast' for storage.fsync"),
        ("[listeners.stream]\nport = 70000\n", "listeners.stream.port"),
        ("[limits]\nmax_frame_size = 100\n", "must be at least 4096"),
        ("[retention]\nmax_age = '3w'\n", "retention.max_age"),
        ("[limits\n", "invalid TOML"),
        ("[server_properties]\nproduct = ''\n", "server_properties.product: expected a non"),
        ("[server_properties]\nvendor = 'x'\n", "unknown key 'server_properties.vendor'"),
    ],
)
def test_bad_toml_is_named(tmp_path, toml, message):
    with pytest.raises(ConfigError, match=message) as error:
        load(tmp_path, toml)
    assert "mainstem.toml" in str(error.value)


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"MAINSTEM_STREEM_PORT": "1"}, [], "MAINSTEM_STREEM_PORT: unknown listener 'streem'"),
        ({"MAINSTEM_STREAM_PORT": "x"}, [], "MAINSTEM_STREAM_PORT: invalid value 'x'"),
        ({"MAINSTEM_AMQP_ENABLED": "maybe"}, [], "expected true or false"),
        ({}, ["--listener", "nope=1"], "--listener: unknown listener 'nope'"),
        ({}, ["--listener", "stream"], "expected NAME=\\[HOST:\\]PORT"),
        ({}, ["--disable", "nope"], "--disable: unknown listener 'nope'"),
        ({}, ["--log-level", "loud"], "--log-level: invalid value 'loud'"),
    ],
)
def test_bad_env_and_flags_are_named(tmp_path, env, flags, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, env=env, flags=flags)


def test_server_properties_follow_the_precedence(tmp_path):
    toml = '[server_properties]\nproduct = "RabbitMQ"\nversion = "4.0.0"\ncopyright = "c"\n'
    env = {"MAINSTEM_SERVER_VERSION": "4.1.0", "MAINSTEM_CLUSTER_NAME": "east",
           "MAINSTEM_SERVER_PLATFORM": "Erlang/OTP"}
    flags = ["--server-platform", "Linux", "--server-information", "ours"]
    identity = load(tmp_path, toml, env, flags).identity
    assert identity.properties() == {
        "product": "RabbitMQ", "version": "4.1.0", "platform": "Linux", "copyright": "c",
        "information": "ours", "cluster_name": "east"}
    assert load(tmp_path).identity.product == "mainstem"


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(serve_flags("--config", str(tmp_path / "absent.toml")), {}, protocols=[])


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7D", 7 * 86400), ("12h", 43200), ("30m", 1800), ("10s", 10), ("1Y", 365 * 86400),
     ("2M", 60 * 86400), ("3600", 3600), (90, 90)],
)
def test_parse_age(value, seconds):
    assert parse_age(value) == seconds * 1000


def test_parse_age_unlimited():
    assert parse_age("unlimited") is None


@pytest.mark.parametrize("value", ["", "7x", "h", "-5s", 0, "0s", True, "1.5h", 1.5])
def test_parse_age_rejects(value):
    with pytest.raises(ValueError):
        parse_age(value)


@pytest.mark.parametrize(
    ("value", "size"),
    [(4096, 4096), ("4096", 4096), ("1MiB", 2**20), ("500MB", 500 * 10**6), ("2gib", 2 * 2**30)],
)
def test_parse_size(value, size):
    assert parse_size(value) == size


def test_embedded_defaults_bind_every_protocol():
    config = ServerConfig.defaults(PROTOCOLS, host="127.0.0.1", port=0)
    assert {listener.port for listener in config.listeners.values()} == {0}
    assert ServerConfig().listener(PROTOCOLS[0]) == ListenerConfig(DEFAULT_HOST, 5552, True)


def test_cluster_settings_from_the_environment(tmp_path):
    env = {"MAINSTEM_CLUSTER": "etcd://10.0.0.5:2379", "MAINSTEM_NODE_NAME": "n1",
           "MAINSTEM_REPLICATION_PORT": "6553", "MAINSTEM_LEASE_TTL": "9"}
    cluster = load(tmp_path, env=env).cluster
    assert (cluster.node_name, cluster.replication_port, cluster.lease_ttl) == ("n1", 6553, 9)
    assert load(tmp_path, env=env, flags=["--lease-ttl", "3"]).cluster.lease_ttl == 3
    with pytest.raises(ConfigError, match="MAINSTEM_LEASE_TTL"):
        load(tmp_path, env={"MAINSTEM_LEASE_TTL": "1"})  # at least 2 s


def test_the_prometheus_listener_as_rabbitmq_configures_it(tmp_path):
    default = load(tmp_path)
    assert default.prometheus == ListenerConfig(DEFAULT_HOST, 15692, True)
    assert default.tls_port("prometheus") == 15691  # RabbitMQ's prometheus.ssl.port
    assert (default.return_per_object_metrics, default.admin_metrics) == (
        False, "authenticated")
    toml = ('[prometheus]\nport = 9419\nreturn_per_object_metrics = true\n'
            '[admin]\nmetrics = "open"\n')
    from_toml = load(tmp_path, toml)
    assert from_toml.prometheus.port == 9419 and from_toml.tls_port("prometheus") == 15691
    assert from_toml.return_per_object_metrics and from_toml.admin_metrics == "open"
    env = {"MAINSTEM_PROMETHEUS_PORT": "9000", "MAINSTEM_PROMETHEUS_TLS_PORT": "9443",
           "MAINSTEM_PROMETHEUS_RETURN_PER_OBJECT_METRICS": "false",
           "MAINSTEM_ADMIN_METRICS": "off"}
    from_env = load(tmp_path, toml, env)
    assert (from_env.prometheus.port, from_env.tls_port("prometheus")) == (9000, 9443)
    assert not from_env.return_per_object_metrics and from_env.admin_metrics == "off"
    flags = ["--listener", "prometheus=127.0.0.1:0", "--tls-listener", "prometheus=0",
             "--prometheus-per-object-metrics", "true", "--admin-metrics", "authenticated"]
    from_flags = load(tmp_path, toml, env, flags)
    assert from_flags.prometheus == ListenerConfig("127.0.0.1", 0, True)
    assert from_flags.tls_port("prometheus") == 0
    assert from_flags.return_per_object_metrics and from_flags.admin_metrics == "authenticated"
    assert not load(tmp_path, flags=["--disable", "prometheus"]).prometheus.enabled
    with pytest.raises(ConfigError, match=r"admin\.metrics"):
        load(tmp_path, env={"MAINSTEM_ADMIN_METRICS": "sometimes"})
    embedded = ServerConfig.defaults(PROTOCOLS, host="127.0.0.1", port=0)
    assert (embedded.prometheus.port, embedded.tls_port("prometheus")) == (0, 0)


def test_tiering_from_toml_env_and_flags(tmp_path):
    toml = ('[tiering]\nurl = "s3://bucket/prefix"\nendpoint = "http://127.0.0.1:9000"\n'
            'local_max_age = "7D"\ncache_bytes = "2GiB"\n')
    env = {"MAINSTEM_TIER_SECRET_ACCESS_KEY": "s3cret", "MAINSTEM_TIER_ACCESS_KEY_ID": "me"}
    config = load(tmp_path, toml, env=env, flags=["--tier-local-max-bytes", "10GB"])
    tiering = config.core_settings().tiering
    assert tiering is not None
    assert (tiering.url, tiering.endpoint, tiering.access_key_id, tiering.secret_access_key,
            tiering.cache_bytes) == ("s3://bucket/prefix", "http://127.0.0.1:9000", "me",
                                     "s3cret", 2 << 30)
    assert tiering.cache_dir == config.data_dir / "tier-cache" and not tiering.clustered
    assert tiering.delete_grace_s == 300
    retention = config.core_settings().retention
    assert (retention.local_max_age_ms, retention.local_max_bytes) == (7 * 86_400_000,
                                                                       10_000_000_000)


def test_no_tier_unless_a_url_is_given(tmp_path):
    assert load(tmp_path, '[tiering]\nlocal_max_bytes = 1000\n').core_settings().tiering is None
