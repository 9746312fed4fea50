"""Why a stream connection failed before the server answered, in words: the TLS alert the
handshake got, a TLS port reached without TLS, or a TLS connection the server closed right
after its handshake (what a server that requires a client certificate does when it gets
none, if it sends no alert)."""

from __future__ import annotations

import re
import socket
import ssl

PROBE_TIMEOUT_S = 5.0


def tls_failure(exc: ssl.SSLError) -> str:
    """An SSL error in words: the alert the server sent (``alert certificate required``),
    or OpenSSL's reason (``certificate verify failed: ...``)."""
    reason = exc.reason or ""
    if "ALERT" in reason:
        alert = re.sub(r"^(SSLV3|TLSV1\d*)_ALERT_", "", reason).lower().replace("_", " ")
        return f"the server sent the TLS alert {alert!r}"
    return str(exc)


def closed_before_answering(host: str, port: int, tls: bool, certificate: bool) -> str:
    """What a connection the server closed before its first answer most likely met."""
    if tls and not certificate:
        return (f"TLS with {host}:{port}: the server closed the connection right after the "
                "handshake, before answering, as a server that requires a client certificate "
                "does when it gets none: give a client certificate and its key")
    if tls:
        return (f"TLS with {host}:{port}: the server closed the connection right after the "
                "handshake, before answering, as a server does when it refuses the client "
                "certificate: is it signed by a CA the server trusts?")
    if speaks_tls(host, port):
        return (f"the server closed the connection before answering: {host}:{port} speaks "
                "TLS; use a rabbitmq-stream+tls:// url")
    return f"{host}:{port} closed the connection before answering"


def speaks_tls(host: str, port: int) -> bool:
    """Whether the port completes a TLS handshake (or answers one with a TLS alert); the
    server's certificate is not checked, nothing is sent after the handshake."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "")
    except OSError:
        return False
