"""What every protocol package gives the server: a listener spec and a connection handler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mainstem.broker.audit import log_change
from mainstem.broker.errors import AuthenticationFailed
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity

if TYPE_CHECKING:
    from mainstem.broker.auth import User
    from mainstem.broker.core import BrokerCore
    from mainstem.broker.message_stats import MessageStats


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_frame_size: int = 1_048_576
    heartbeat_s: int = 60
    # For the protocols that have them, with the protocol's error when exceeded:
    channel_max: int = 2047  # channels per connection (AMQP channel-max; RabbitMQ's default)
    max_consumers_per_queue: int = 0  # 0: unlimited
    max_event_size: int = 4 * 1024 * 1024  # BSON events: a bigger PUBLISH is refused
    max_unacked_events: int = 1000  # BSON subscriptions: RECEV frames before an ACKEV
    max_unacked_results: int = 100  # BSON queries: QUERYRESULT frames before QUERYACKs
    request_timeout_s: float = 60.0  # stream: a ConsumerUpdate unanswered this long drops


@dataclass(slots=True)
class ConnectionContext:
    """Everything a connection handler needs; the server builds one per accepted socket."""

    core: BrokerCore
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    limits: ConnectionLimits
    log: logging.LoggerAdapter[logging.Logger]
    # The server sets this when it shuts down: handlers finish in-flight work and return.
    closing: asyncio.Event
    # What the management API lists for this connection; the server fills the first three,
    # the handler calls identify() once the client has logged in: until then the server
    # closes the connection at its handshake timeout.
    listener: str = ""
    peer: str = ""
    tls: bool = False
    user: str | None = None
    namespace: str | None = None
    client_properties: dict[str, object] = field(default_factory=dict)
    # What the handshake reports as the server's properties (product, version, ...).
    identity: ServerIdentity = DEFAULT_IDENTITY
    # The listener's configured advertised host and port, None if unset: see
    # advertised_address().
    advertised: tuple[str | None, int | None] = (None, None)
    # With worker processes (`--workers`): sends bytes to this connection's worker to be
    # decoded there (the stream protocol's Publish frames), and returns its answer.
    offload: Callable[[bytes], Awaitable[bytes]] | None = None
    # Set by a handler that can close politely (AMQP connection.close, stream Close):
    # called with the reason when an operator closes the connection; else it is cancelled.
    on_close_request: Callable[[str], Awaitable[None]] | None = None
    # Set by the server: called by identify(), the connection then leaves the budget of
    # connections not logged in.
    on_login: Callable[[], None] | None = None
    # Set by the server: called when a login on this connection looks like guessing
    # (`BrokerCore.login`); the connection is then among the first evicted.
    on_suspect: Callable[[], None] | None = None

    # consumer tag -> {"queue": name, ...}: what /api/consumers lists for this connection
    consumers: dict[str, dict[str, object]] = field(default_factory=dict)
    # channel number -> channel (AMQP 0-9-1): what /api/channels lists
    channels: dict[int, ChannelView] = field(default_factory=dict)
    # Set by the stream protocol's handler: its publishers' and subscriptions' rows for
    # /api/stream/publishers and /api/stream/consumers, built when asked, not kept in step.
    stream_publishers: Callable[[], list[dict[str, Any]]] | None = None
    stream_consumers: Callable[[], list[dict[str, Any]]] | None = None
    # Set by admit(): gives the connection's place under its limits back (see leave()).
    admitted: Callable[[], None] | None = None

    def identify(self, user: str, namespace: str | None = None, **client_properties: object
                 ) -> None:
        """Record who is connected, for the connection registry and the log lines."""
        self.user = user
        self.namespace = namespace
        self.client_properties.update(client_properties)
        if self.on_login is not None:
            self.on_login()

    def admit(self, user: str, namespace: str | None = None) -> None:
        """Count this connection under its virtual host's and user's `max-connections`
        before the client is told it is in; NotAllowed, with RabbitMQ's text, when a limit
        is reached. A connection that logs in again is counted again, for its new user."""
        self.leave()
        self.admitted = self.core.limits.admit_connection(user, namespace)

    def leave(self) -> None:
        """No longer count this connection (it closed, or its user logged out)."""
        if self.admitted is not None:
            self.admitted()
            self.admitted = None

    def audit(self, action: str, **names: str) -> None:
        """One audit line (`admin.change`) for a change this connection's client made."""
        log_change(self.listener, self.user or "", self.peer, action, names)

    def advertised_address(self) -> tuple[str, int]:
        """The host and port to tell clients to connect to: the configured ones, else the
        address the client reached (never a wildcard bind address such as 0.0.0.0)."""
        host, port = self.advertised
        sockname = self.writer.get_extra_info("sockname")
        return host or str(sockname[0]), port or int(sockname[1])

    @property
    def peer_host(self) -> str | None:
        peer = self.writer.get_extra_info("peername")
        return peer[0] if isinstance(peer, tuple) else None

    async def login(self, username: str, password: str) -> User:
        """Check credentials with the broker; a refusal is logged the same way on every
        listener (warning `auth.failed` with user, peer, protocol and reason), then raised;
        counted by listener and outcome for /metrics."""
        logins = self.core.counters.logins
        try:
            user = await self.core.login(username, password, self.peer_host,
                                         self.on_suspect)
        except AuthenticationFailed as error:
            logins[self.listener, False] += 1
            self.log.warning("auth.failed", extra={
                "user": username, "protocol": self.listener, "reason": error.message})
            raise
        logins[self.listener, True] += 1
        return user

    def add_consumer(self, tag: str, queue: str, **details: object) -> None:
        """Record a subscription (AMQP consumer, stream subscription, ...) for the API."""
        self.consumers[tag] = {"queue": queue, **details}

    def remove_consumer(self, tag: str) -> None:
        self.consumers.pop(tag, None)


class ChannelView(Protocol):
    """A channel as the management API sees it."""

    stats: MessageStats

    def describe(self) -> dict[str, object]: ...


ConnectionHandler = Callable[[ConnectionContext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    name: str  # listener name in configuration and logs: "stream", "amqp", ...
    default_port: int
    handler: ConnectionHandler
    # A client speaking another protocol (see `sniff`) is logged and, unless the protocol
    # answers such clients itself (AMQP sends its own header back), cut off at once.
    answers_wrong_protocol: bool = False
