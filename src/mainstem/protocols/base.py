"""What every protocol package gives the server: a listener spec and a connection handler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mainstem.broker.core import BrokerCore


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_frame_size: int = 1_048_576
    heartbeat_s: int = 60


@dataclass(slots=True)
class ConnectionContext:
    """Everything a connection handler needs; the server builds one per accepted socket."""

    core: BrokerCore
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    limits: ConnectionLimits
    log: logging.LoggerAdapter
    # The server sets this when it shuts down: handlers finish in-flight work and return.
    closing: asyncio.Event


ConnectionHandler = Callable[[ConnectionContext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    name: str  # listener name in configuration and logs: "stream", "amqp", ...
    default_port: int
    handler: ConnectionHandler
