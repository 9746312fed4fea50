"""The stream connection's handshake, tune and heartbeat rules as a pure object.

`ConnectionState` is fed the client's connection-level frames (peer properties, SASL,
Tune, Open, Close, Heartbeat, command versions, unknown commands) and the broker's
answers to what it asked for (a login, a namespace), and answers each with a list of
actions for the connection to carry out. It does no I/O and knows no event loop:
the connection moves the bytes, calls the broker and feeds the outcome back, as a
sans-IO core inside a connection process. A frame that breaks the protocol raises
`ProtocolError`, whose code the connection closes with.

    PEER_PROPERTIES -> AUTHENTICATING -> TUNING -> OPENING -> OPEN -> CLOSED

`ClientHandshake` walks the same phases from the client's side (h11's one state machine
for both roles): mainstem's own client sends what it says and feeds it the server's frames.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.constants import Key, ResponseCode
from mainstem.protocols.rabbit_stream.sasl import MECHANISMS, SaslError, plain_credentials

if TYPE_CHECKING:  # the server's; the client side loads none of it
    from mainstem.protocols.identity import ServerIdentity


class Phase(enum.Enum):
    PEER_PROPERTIES = 1
    AUTHENTICATING = 2
    TUNING = 3
    OPENING = 4
    OPEN = 5
    CLOSED = 6


# What a client may send before the connection is open.
HANDSHAKE_FRAMES = frozenset({f.PeerProperties, f.SaslHandshake, f.SaslAuthenticate, f.Tune,
                              f.Open, f.Close, f.Heartbeat, f.Response})
# What ConnectionState.receive() takes; every other frame is a command for the broker.
CONNECTION_FRAMES = HANDSHAKE_FRAMES | {f.ExchangeCommandVersions, f.UnknownCommand}


class ProtocolError(Exception):
    """The client broke the protocol: the connection closes with `code`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# -- actions: what the connection is to do, in order ---------------------------


@dataclass(frozen=True, slots=True)
class Send:
    frame: f.Frame


@dataclass(frozen=True, slots=True)
class ShowClientProperties:
    """What the client says it is (connection_name, product, ...), for the management API."""

    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class Authenticate:
    """Check these credentials with the broker; feed back login_succeeded/login_failed."""

    username: str
    password: str


@dataclass(frozen=True, slots=True)
class OpenNamespace:
    """Open this namespace for the user; feed back namespace_opened/namespace_refused."""

    user: Any
    namespace: str


@dataclass(frozen=True, slots=True)
class LimitFrames:
    """Refuse incoming frames whose size field exceeds `max_frame_size` (0: no limit)."""

    max_frame_size: int


@dataclass(frozen=True, slots=True)
class StartHeartbeat:
    """Call heartbeat_tick() every `interval_s` seconds from now on."""

    interval_s: int


@dataclass(frozen=True, slots=True)
class Opened:
    """The connection is open: commands are accepted from now on."""

    user: Any
    namespace: str


@dataclass(frozen=True, slots=True)
class Close:
    """Say Close with this code after what came before, then hang up."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Drop:
    """Hang up without a word: the peer is gone."""

    reason: str


Action = (Send | ShowClientProperties | Authenticate | OpenNamespace | LimitFrames
          | StartHeartbeat | Opened | Close | Drop)


class Correlations:
    """Correlation ids of the server's own requests (Close, ConsumerUpdate), one sequence
    per connection."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last = (self._last + 1) & 0xFFFF_FFFF
        return self._last


class ConnectionState:
    """One connection's handshake, negotiated limits and liveness."""

    def __init__(self, frame_max: int, heartbeat_s: int, identity: ServerIdentity,
                 correlations: Correlations | None = None) -> None:
        self.identity = identity  # what the PeerProperties response reports
        self.phase = Phase.PEER_PROPERTIES
        self.frame_max = frame_max  # the server's proposal, then what Tune settled
        self.heartbeat_s = heartbeat_s
        self.deliver_version = 1
        self.user: Any = None
        self.namespace = "/"
        self.correlations = correlations or Correlations()
        self._pending: int | None = None  # the request waiting for the broker's answer
        self._opening = "/"  # the namespace an Open asked for
        self._last_heard = 0.0

    @property
    def is_open(self) -> bool:
        return self.phase is Phase.OPEN

    def admit(self, kind: type) -> None:
        """Raise unless a frame of this kind may come now: only the handshake's before Open."""
        if self.phase is not Phase.OPEN and kind not in HANDSHAKE_FRAMES:
            raise ProtocolError(ResponseCode.UNKNOWN_FRAME,
                                f"{kind.__name__} before the connection was opened")

    def receive(self, frame: f.Frame) -> list[Action]:
        """The actions one connection-level frame (of CONNECTION_FRAMES) calls for."""
        self.admit(type(frame))
        if self._pending is not None:
            raise RuntimeError("a frame fed while the broker's answer is awaited")
        if self.phase is Phase.CLOSED:
            return []  # the connection is going away
        return _RECEIVERS[type(frame)](self, frame)

    # -- the handshake, frame by frame ------------------------------------------

    def _peer_properties(self, frame: f.PeerProperties) -> list[Action]:
        if self.phase is Phase.PEER_PROPERTIES:
            self.phase = Phase.AUTHENTICATING
        return [ShowClientProperties(frame.properties),
                Send(r.PeerPropertiesResponse(frame.correlation_id, ResponseCode.OK,
                                              self.identity.properties()))]

    def _sasl_handshake(self, frame: f.SaslHandshake) -> list[Action]:
        return [Send(r.SaslHandshakeResponse(frame.correlation_id, ResponseCode.OK, MECHANISMS))]

    def _sasl_authenticate(self, frame: f.SaslAuthenticate) -> list[Action]:
        if self.phase not in (Phase.PEER_PROPERTIES, Phase.AUTHENTICATING):
            raise ProtocolError(ResponseCode.PRECONDITION_FAILED,
                                "SaslAuthenticate out of sequence")
        if frame.mechanism not in MECHANISMS:
            return [Send(r.SaslAuthenticateResponse(frame.correlation_id,
                                                    ResponseCode.SASL_MECHANISM_NOT_SUPPORTED))]
        try:
            username, password = plain_credentials(frame.data)
        except SaslError:
            return [Send(r.SaslAuthenticateResponse(frame.correlation_id, ResponseCode.SASL_ERROR)),
                    Close(ResponseCode.SASL_ERROR, "malformed SASL response")]
        self._pending = frame.correlation_id
        return [Authenticate(username, password)]

    def _tune(self, frame: f.Tune) -> list[Action]:
        if self.phase is not Phase.TUNING:
            raise ProtocolError(ResponseCode.PRECONDITION_FAILED, "Tune out of sequence")
        # The client may lower what the server proposed, never raise it.
        if frame.frame_max:
            self.frame_max = min(self.frame_max, frame.frame_max)
        self.heartbeat_s = min(self.heartbeat_s, frame.heartbeat) if frame.heartbeat else 0
        self.phase = Phase.OPENING
        # As RabbitMQ: frame_max bounds a whole frame, size prefix included.
        actions: list[Action] = [LimitFrames(max(self.frame_max - 4, 0))]
        if self.heartbeat_s:
            actions.append(StartHeartbeat(self.heartbeat_s))
        return actions

    def _open(self, frame: f.Open) -> list[Action]:
        if self.user is None:
            raise ProtocolError(ResponseCode.AUTHENTICATION_FAILURE, "open before login")
        if self.phase is Phase.OPEN:
            raise ProtocolError(ResponseCode.PRECONDITION_FAILED, "Open out of sequence")
        self._pending = frame.correlation_id
        self._opening = frame.virtual_host
        return [OpenNamespace(self.user, frame.virtual_host)]

    def _close(self, frame: f.Close) -> list[Action]:
        self.phase = Phase.CLOSED
        return [Send(f.Response(Key.CLOSE, frame.correlation_id, ResponseCode.OK))]

    def _response(self, frame: f.Response) -> list[Action]:
        if frame.key == Key.CLOSE:  # the client acknowledged our Close
            self.phase = Phase.CLOSED
        return []

    def _heartbeat(self, frame: f.Heartbeat) -> list[Action]:
        return []  # liveness counts every read, see heard_from_peer()

    def _unknown(self, frame: f.UnknownCommand) -> list[Action]:
        if frame.correlation_id is None:
            raise ProtocolError(ResponseCode.UNKNOWN_FRAME,
                                f"unknown command 0x{frame.key:04x} v{frame.version}")
        return [Send(f.Response(frame.key, frame.correlation_id, ResponseCode.UNKNOWN_FRAME))]

    def _exchange_command_versions(self, frame: f.ExchangeCommandVersions) -> list[Action]:
        for version in frame.versions:
            if version.key == Key.DELIVER:
                self.deliver_version = min(2, version.max_version)
        return [Send(r.ExchangeCommandVersionsResponse(frame.correlation_id, ResponseCode.OK,
                                                       r.SERVER_COMMAND_VERSIONS))]

    # -- the broker's answers ---------------------------------------------------

    def login_succeeded(self, user: Any) -> list[Action]:
        correlation_id = self._answered(Phase.PEER_PROPERTIES, Phase.AUTHENTICATING)
        self.user = user
        self.phase = Phase.TUNING
        return [Send(r.SaslAuthenticateResponse(correlation_id, ResponseCode.OK)),
                Send(f.Tune(self.frame_max, self.heartbeat_s))]

    def login_failed(self, message: str) -> list[Action]:
        correlation_id = self._answered(Phase.PEER_PROPERTIES, Phase.AUTHENTICATING)
        code = (ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK if "localhost" in message
                else ResponseCode.AUTHENTICATION_FAILURE)
        return [Send(r.SaslAuthenticateResponse(correlation_id, code)), Close(code, message)]

    def namespace_opened(self, advertised_host: str, advertised_port: int) -> list[Action]:
        correlation_id = self._answered(Phase.TUNING, Phase.OPENING)
        self.phase = Phase.OPEN
        self.namespace = self._opening
        return [Send(r.OpenResponse(correlation_id, ResponseCode.OK, {
                    "advertised_host": advertised_host,
                    "advertised_port": str(advertised_port)})),
                Opened(self.user, self.namespace)]

    def namespace_refused(self, message: str) -> list[Action]:
        correlation_id = self._answered(Phase.TUNING, Phase.OPENING)
        return [Send(r.OpenResponse(correlation_id, ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE)),
                Close(ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE, message)]

    def _answered(self, *phases: Phase) -> int:
        """The correlation id of the request an answer is for; the caller's mistake if none."""
        if self._pending is None or self.phase not in phases:
            raise RuntimeError(f"no request awaits the broker's answer in {self.phase.name}")
        correlation_id, self._pending = self._pending, None
        return correlation_id

    # -- the server's own close, and liveness -----------------------------------

    def close(self, code: int, reason: str) -> list[Action]:
        """The server closes: the Close frame to send; nothing is accepted after it."""
        self.phase = Phase.CLOSED
        return [Send(f.Close(self.correlations.next(), code, reason))]

    def connection_lost(self) -> None:
        """The socket is gone: nothing more is accepted."""
        self.phase = Phase.CLOSED

    def heard_from_peer(self, now: float) -> None:
        """Bytes came in at `now` (or reading resumed after a pause of ours)."""
        self._last_heard = now

    def heartbeat_tick(self, now: float, *, reading_paused: bool) -> list[Action]:
        """Every heartbeat interval: heartbeat the peer, or drop it when it has been
        silent for two intervals (unless we are the ones not reading)."""
        if not reading_paused and now - self._last_heard > 2 * self.heartbeat_s:
            return [Drop("stream peer silent for two heartbeats, dropping it")]
        return [Send(f.Heartbeat())]


_RECEIVERS: dict[type[f.Frame], Callable[[ConnectionState, Any], list[Action]]] = {
    f.PeerProperties: ConnectionState._peer_properties,
    f.SaslHandshake: ConnectionState._sasl_handshake,
    f.SaslAuthenticate: ConnectionState._sasl_authenticate,
    f.Tune: ConnectionState._tune,
    f.Open: ConnectionState._open,
    f.Close: ConnectionState._close,
    f.Response: ConnectionState._response,
    f.Heartbeat: ConnectionState._heartbeat,
    f.UnknownCommand: ConnectionState._unknown,
    f.ExchangeCommandVersions: ConnectionState._exchange_command_versions,
}


# -- the client's side ----------------------------------------------------------


class StepRefused(Exception):
    """The server refused a step of the handshake: `request` got `code`."""

    def __init__(self, code: int, request: str) -> None:
        super().__init__(f"{request} refused with code {code}")
        self.code = code
        self.request = request


HandshakeRequest = f.PeerProperties | f.SaslHandshake | f.SaslAuthenticate | f.Open
HandshakeReply = (r.PeerPropertiesResponse | r.SaslHandshakeResponse
                  | r.SaslAuthenticateResponse | r.OpenResponse)


@dataclass(frozen=True, slots=True)
class _Awaited:
    reply: type[HandshakeReply]
    correlation_id: int
    request: str  # the request's name, for errors


class ClientHandshake:
    """A client's handshake with PLAIN credentials: `begin` gives the first frame, each
    server frame fed to `receive` the frames to send in answer, until `phase` is OPEN. The
    client takes the server's Tune as it is, as rstream and the Java client do."""

    def __init__(self, username: str, password: str, namespace: str,
                 properties: dict[str, str]) -> None:
        self.phase = Phase.PEER_PROPERTIES
        self.correlations = Correlations()  # the client's requests, from 1
        self.frame_max = self.heartbeat_s = 0  # as the server's Tune settles them
        self._credentials = f"\0{username}\0{password}".encode()
        self._namespace = namespace
        self._properties = properties
        self._awaited: _Awaited | None = None

    def begin(self) -> f.Frame:
        return self._request(r.PeerPropertiesResponse,
                             lambda corr: f.PeerProperties(corr, self._properties))

    def receive(self, frame: f.Frame) -> list[f.Frame]:
        """The frames to send in answer to one of the server's; StepRefused when it
        refused a step, ProtocolError when it answered out of order."""
        if isinstance(frame, f.Heartbeat):
            return []
        if isinstance(frame, f.Tune) and self.phase is Phase.TUNING:
            self.frame_max, self.heartbeat_s = frame.frame_max, frame.heartbeat
            self.phase = Phase.OPENING
            return [frame, self._request(r.OpenResponse,
                                         lambda corr: f.Open(corr, self._namespace))]
        awaited, self._awaited = self._awaited, None
        if (awaited is None or not isinstance(frame, awaited.reply)
                or frame.correlation_id != awaited.correlation_id):
            raise ProtocolError(ResponseCode.PRECONDITION_FAILED,
                                f"{type(frame).__name__} in {self.phase.name}")
        if frame.response_code != ResponseCode.OK:
            self.phase = Phase.CLOSED
            raise StepRefused(frame.response_code, awaited.request)
        return self._next_step(frame)

    def _next_step(self, reply: HandshakeReply) -> list[f.Frame]:
        if isinstance(reply, r.PeerPropertiesResponse):
            self.phase = Phase.AUTHENTICATING
            return [self._request(r.SaslHandshakeResponse, f.SaslHandshake)]
        if isinstance(reply, r.SaslHandshakeResponse):
            if "PLAIN" not in reply.mechanisms:
                self.phase = Phase.CLOSED
                raise StepRefused(ResponseCode.SASL_MECHANISM_NOT_SUPPORTED, "SaslHandshake")
            return [self._request(r.SaslAuthenticateResponse, lambda corr: f.SaslAuthenticate(
                corr, "PLAIN", self._credentials))]
        if isinstance(reply, r.SaslAuthenticateResponse):
            self.phase = Phase.TUNING  # the server's Tune comes next
        else:
            self.phase = Phase.OPEN
        return []

    def _request(self, reply: type[HandshakeReply], make: Callable[[int], HandshakeRequest]
                 ) -> HandshakeRequest:
        request = make(self.correlations.next())
        self._awaited = _Awaited(reply, request.correlation_id, type(request).__name__)
        return request
