"""A `mainstem serve` that cannot start says why in one JSON log line on stderr, as every
other event (it was plain text), and exits 2: a bad flag, a bad environment variable, an
unknown TOML key, a port in use, a data directory locked by another server, a missing TLS
file (named)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from tests.support.server_process import (
    MAINSTEM,
    clean_env,
    kill,
    loopback_listener_flags,
    start_server,
    started_ports,
)

TIMEOUT_S = 60


def cannot_start(tmp_path: Path, *flags: str, **env: str) -> dict:
    """Run `mainstem serve` that fails (exit code 2): its stderr is JSON lines, one of them
    saying why, returned parsed."""
    result = subprocess.run(
        [str(MAINSTEM), "serve", "--data-dir", str(tmp_path / "data"),
         *loopback_listener_flags(), *flags],
        capture_output=True, text=True, timeout=TIMEOUT_S, env={**clean_env(), **env})
    assert result.returncode == 2, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    [entry] = [line for line in lines if line["event"] == "server.cannot_start"]
    assert entry["level"] == "critical"
    assert "traceback" not in entry
    return entry


def test_a_bad_flag(tmp_path):
    assert cannot_start(tmp_path, "--no-such-flag")["error"] == \
        "unrecognized arguments: --no-such-flag"
    assert "--fsync: invalid value 'sometimes'" in cannot_start(
        tmp_path, "--fsync", "sometimes")["error"]


def test_a_bad_environment_variable(tmp_path):
    assert cannot_start(tmp_path, MAINSTEM_FSYNC="sometimes")["error"].startswith(
        "MAINSTEM_FSYNC: invalid value 'sometimes'")


def test_an_unknown_toml_key(tmp_path):
    config = tmp_path / "mainstem.toml"
    config.write_text("[storage]\nfsink = 'batch'\n")
    assert cannot_start(tmp_path, "--config", str(config))["error"] == \
        f"{config}: unknown key 'storage.fsink'"


def test_a_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        entry = cannot_start(tmp_path, "--listener", f"amqp=127.0.0.1:{port}")
    assert (entry["listener"], entry["host"], entry["port"]) == ("amqp", "127.0.0.1", port)
    assert f"127.0.0.1:{port}" in entry["error"]


def test_a_locked_data_dir(tmp_path):
    log_path = tmp_path / "first.log"
    first = start_server(tmp_path / "data", log_path)
    try:
        started_ports(first, log_path)
        entry = cannot_start(tmp_path)
    finally:
        kill(first)
    assert (entry["path"], entry["holder_pid"]) == (str(tmp_path / "data"), str(first.pid))


def test_a_missing_tls_file_is_named(tmp_path):
    missing = tmp_path / "missing-key.pem"
    certificate = tmp_path / "cert.pem"
    certificate.write_text("not checked before the key is found missing\n")
    entry = cannot_start(tmp_path, "--tls-certfile", str(certificate),
                         "--tls-keyfile", str(missing))
    assert entry["path"] == str(missing)
    assert f"tls.keyfile {missing}" in entry["error"]
