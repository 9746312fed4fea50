"""What the broker says it is: the product, version and the rest that AMQP 0-9-1's
connection.start, the stream protocol's PeerProperties response and the management API
report. Operators may set each (``[server_properties]``), as RabbitMQ's server_properties:
some client test suites expect ``product`` to be ``RabbitMQ``."""

from __future__ import annotations

import dataclasses
import platform
import socket
from dataclasses import dataclass

from mainstem import __version__

# This node's name where RabbitMQ shows rabbit@host: the management API's node fields and
# the default cluster name.
NODE = f"mainstem@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    product: str = "mainstem"
    version: str = __version__
    platform: str = f"Python {platform.python_version()}"
    copyright: str = "mainstem contributors"
    information: str = "A persistent message streaming broker"
    cluster_name: str = NODE

    def properties(self) -> dict[str, str]:
        """The server properties as both protocols send them (AMQP adds capabilities)."""
        return dataclasses.asdict(self)


DEFAULT_IDENTITY = ServerIdentity()
