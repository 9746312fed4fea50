"""SASL mechanisms of the stream protocol: credentials out of the client's bytes."""

from __future__ import annotations

MECHANISMS = ["PLAIN"]


class SaslError(Exception):
    """The SASL payload could not be understood."""


def plain_credentials(data: bytes) -> tuple[str, str]:
    """(username, password) from a PLAIN response: authzid NUL authcid NUL password."""
    parts = bytes(data).split(b"\x00")
    if len(parts) != 3:
        raise SaslError("PLAIN response must be authzid NUL username NUL password")
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise SaslError("PLAIN credentials are not UTF-8") from None
