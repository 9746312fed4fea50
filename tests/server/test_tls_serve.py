"""`mainstem serve` as a real process with TLS from its flags, operated by `mainstem ctl`."""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import subprocess
import sys

from rstream import AMQPMessage, Producer

from mainstem.testing_wait import wait_while_progressing
from tests.support.server_process import TIMEOUT_S, clean_env, kill, start_server, started_ports
from tests.support.tls_certs import make_certificates


def ctl(port: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mainstem", "ctl", "--url", f"http://127.0.0.1:{port}", *argv],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=clean_env(), check=False)


async def test_serve_with_tls_flags_and_ctl(tmp_path):
    certs = make_certificates(tmp_path / "certs")
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path, "--tls-certfile", str(certs.server_cert),
                           "--tls-keyfile", str(certs.server_key))
    try:
        ports = started_ports(process, log_path)
        assert {"stream", "stream/tls", "admin", "admin/tls"} <= set(ports)
        context = ssl.create_default_context(cafile=str(certs.ca))
        async with Producer("localhost", ports["stream/tls"], username="guest",
                            password="guest", ssl_context=context) as producer:
            await producer.create_stream("over-tls")
            await producer.send_wait("over-tls", AMQPMessage(body=b"secret"))
            listed = await asyncio.to_thread(ctl, ports["admin"], "--json", "connections",
                                             "list")
            assert listed.returncode == 0, listed.stderr
            assert {c["protocol"] for c in json.loads(listed.stdout)} == {"stream/tls"}
            assert all(c["ssl"] for c in json.loads(listed.stdout))
        streams = await asyncio.to_thread(ctl, ports["admin"], "--json", "streams", "list")
        assert [(s["name"], s["messages"]) for s in json.loads(streams.stdout)] == [
            ("over-tls", 1)]
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT_S) == 0
    finally:
        kill(process)


def test_unreadable_certificate_exits_2(tmp_path):
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path, "--tls-certfile",
                           str(tmp_path / "missing.pem"))
    try:
        # waited on while the process makes progress: a loaded machine starts it slowly
        exited = wait_while_progressing(process.poll, lambda: process.poll() is None,
                                        process.pid, log_path)
        assert exited == 2, log_path.read_text()
        assert f"tls.certfile {tmp_path / 'missing.pem'}" in log_path.read_text()
    finally:
        kill(process)
