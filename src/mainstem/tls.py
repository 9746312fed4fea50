"""The server side TLS context shared by every TLS listener."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from mainstem.config import TlsConfig

_VERIFY_MODES = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,  # a client certificate, if sent, must verify
    "required": ssl.CERT_REQUIRED,  # the handshake fails without a valid client certificate
}


class TlsSetupError(Exception):
    """The certificate, key or CA files cannot be loaded; `path` names the file, if one."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """TLS 1.2+ with the configured certificate chain and client-certificate policy."""
    if tls.certfile is None:
        raise TlsSetupError("TLS needs tls.certfile")
    for setting, path in (("tls.certfile", tls.certfile), ("tls.keyfile", tls.keyfile),
                          ("tls.cafile", tls.cafile)):
        # ssl's own error names no file: say which one first
        if path is not None and not os.access(path, os.R_OK):
            raise TlsSetupError(f"cannot load TLS certificates: {setting} {path} is missing"
                                " or unreadable", path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile)
        if tls.cafile is not None:
            context.load_verify_locations(cafile=tls.cafile)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load TLS certificates: {exc}") from None
    if tls.verify != "none" and tls.cafile is None:
        raise TlsSetupError(f"tls.verify = {tls.verify!r} needs tls.cafile")
    context.verify_mode = _VERIFY_MODES[tls.verify]
    return context
