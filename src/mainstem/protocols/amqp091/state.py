"""AMQP 0-9-1's connection rules as pure objects: decoded events in, actions out, no asyncio.

- ``ConnectionState``: the handshake (protocol header, start/start-ok with SASL PLAIN or
  AMQPLAIN, tune/tune-ok, open/open-ok) and the closing handshakes on channel 0.
- ``ChannelTable``: which channels are open or closing, within the negotiated channel_max,
  and the channel.close/close-ok crossing rules.
- ``HeartbeatClock``: when to send a heartbeat and when the peer is dead.
- ``ChannelCredit``: basic.qos prefetch (per consumer or channel-wide), unacked
  deliveries and channel.flow: whether a consumer may have one more delivery.

The asyncio connection feeds them what it decoded (and the broker's answers to the actions
that need the broker, such as ``CheckLogin``) and carries out the actions they return.
The peer's protocol violations raise ``AmqpCodecError``, the codec's error, which the
connection answers with connection.close; a driver that breaks the rules (an answer
nobody asked for) raises ``StateMisuse``.
"""

from __future__ import annotations

import enum
from collections.abc import Sized
from dataclasses import dataclass
from typing import Any

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.errors import AmqpCodecError, ProtocolHeaderMismatch
from mainstem.protocols.amqp091.events import (
    ContentMessage,
    Event,
    MethodFrame,
    ProtocolHeaderReceived,
)
from mainstem.protocols.amqp091.methods import FRAME_MIN_SIZE, ReplyCode
from mainstem.protocols.amqp091.wire import Method, read_table
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity

MECHANISMS = b"PLAIN AMQPLAIN"
CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": False,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": False,
}
ALARM_REASONS = {"memory": "low on memory", "disk": "low on disk"}


class StateMisuse(Exception):
    """The driver fed an event the state object did not ask for: a bug, not the peer's."""


# -- actions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send this method on this channel."""

    channel: int
    method: Method


@dataclass(frozen=True, slots=True)
class SendProtocolHeader:
    """Send AMQP 0-9-1's protocol header: the answer to a client speaking another protocol
    (or another version), before hanging up."""


@dataclass(frozen=True, slots=True)
class CheckLogin:
    """Ask the broker whether these credentials log in; answer with ``LoginAccepted`` or
    ``LoginRefused``."""

    mechanism: str
    username: str
    password: str


@dataclass(frozen=True, slots=True)
class Tuned:
    """Tune-ok settled these: parse frames up to ``frame_max`` from now on."""

    frame_max: int
    channel_max: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class OpenVirtualHost:
    """Ask the broker to open this virtual host for the user; answer with
    ``VirtualHostOpened`` or ``VirtualHostRefused``."""

    name: str


@dataclass(frozen=True, slots=True)
class EndChannels:
    """The connection ends: settle what the channels owe (confirms) and release them."""


@dataclass(frozen=True, slots=True)
class DiscardInput:
    """Read the peer's bytes until it hangs up; while ``ConnectionState.awaiting_close_ok``,
    feed their frames back, and stop once it is no longer."""


@dataclass(frozen=True, slots=True)
class HangUp:
    """Close the transport."""


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    pass


@dataclass(frozen=True, slots=True)
class PeerDead:
    """Nothing came from the peer for two heartbeat intervals: abort the transport."""


Action = (Send | SendProtocolHeader | CheckLogin | Tuned | OpenVirtualHost | EndChannels
          | DiscardInput | HangUp | SendHeartbeat | PeerDead)

# -- the broker's answers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginAccepted:
    user: Any


@dataclass(frozen=True, slots=True)
class LoginRefused:
    pass


@dataclass(frozen=True, slots=True)
class VirtualHostOpened:
    pass


@dataclass(frozen=True, slots=True)
class VirtualHostRefused:
    text: str


Answer = LoginAccepted | LoginRefused | VirtualHostOpened | VirtualHostRefused

# -- the connection --------------------------------------------------------------------------


class Phase(enum.Enum):
    AWAIT_HEADER = "await-header"
    AWAIT_START_OK = "await-start-ok"
    LOGGING_IN = "logging-in"  # CheckLogin is out
    AWAIT_TUNE_OK = "await-tune-ok"
    AWAIT_OPEN = "await-open"
    OPENING = "opening"  # OpenVirtualHost is out
    OPEN = "open"  # the handshake is over: channels are served
    CLOSING = "closing"  # we sent connection.close: only the peer's close-ok matters
    CLOSED = "closed"  # close-ok sent or received: nothing more is read


_EXPECTED: dict[Phase, type[Method]] = {
    Phase.AWAIT_START_OK: m.ConnectionStartOk,
    Phase.AWAIT_TUNE_OK: m.ConnectionTuneOk,
    Phase.AWAIT_OPEN: m.ConnectionOpen,
}


class ConnectionState:
    """The connection as RabbitMQ's reader sees it, from the protocol header to the end.

    ``receive`` takes the codec's events; channel frames of an open connection belong to
    ``ChannelTable`` and raise ``StateMisuse`` here. ``answer`` takes the broker's answer to
    ``CheckLogin`` or ``OpenVirtualHost``. ``fail`` starts our close with an error.
    """

    def __init__(self, *, channel_max: int, frame_max: int, heartbeat: int,
                 identity: ServerIdentity = DEFAULT_IDENTITY) -> None:
        self.identity = identity  # what connection.start reports
        self.phase = Phase.AWAIT_HEADER
        self.our_channel_max = channel_max
        self.our_frame_max = frame_max
        self.our_heartbeat = heartbeat
        self.channel_max = channel_max  # negotiated by tune-ok
        self.frame_max = FRAME_MIN_SIZE
        self.heartbeat = 0
        self.client_properties: dict[str, Any] = {}
        self.mechanism = ""
        self.username = ""
        self.user: Any = None
        self.virtual_host = ""

    @property
    def cancel_notify(self) -> bool:
        return bool(self._capabilities().get("consumer_cancel_notify"))

    @property
    def blocked_capable(self) -> bool:
        return bool(self._capabilities().get("connection.blocked"))

    @property
    def awaiting_close_ok(self) -> bool:
        return self.phase is Phase.CLOSING

    def alarms_changed(self, active: frozenset[str]) -> list[Send]:
        """connection.blocked while a resource alarm is on, for clients that understand it
        (the ``connection.blocked`` capability), and unblocked once all are off."""
        if self.phase is not Phase.OPEN or not self.blocked_capable:
            return []
        if active:
            reason = ALARM_REASONS.get(min(active), "resource alarm")
            return [Send(0, m.ConnectionBlocked(reason))]
        return [Send(0, m.ConnectionUnblocked())]

    def _capabilities(self) -> dict[str, Any]:
        capabilities = self.client_properties.get("capabilities")
        return capabilities if isinstance(capabilities, dict) else {}

    # -- events from the peer --------------------------------------------------------

    def receive(self, event: Event) -> list[Action]:
        phase = self.phase
        if phase is Phase.AWAIT_HEADER:
            if not isinstance(event, ProtocolHeaderReceived):
                raise StateMisuse("the codec hands the protocol header over first")
            self.phase = Phase.AWAIT_START_OK
            properties = {**self.identity.properties(), "capabilities": CAPABILITIES}
            return [Send(0, m.ConnectionStart(0, 9, properties, MECHANISMS, b"en_US"))]
        if phase in (Phase.LOGGING_IN, Phase.OPENING):
            raise StateMisuse(f"a frame arrived while the broker's answer is out ({phase})")
        if not isinstance(event, MethodFrame):
            return []  # heartbeats; content before the handshake is over is dropped
        if phase is Phase.CLOSED:
            return []
        if phase is Phase.CLOSING:
            return self._while_closing(event)
        if phase is Phase.OPEN:
            if event.channel != 0:
                raise StateMisuse("channel frames belong to the ChannelTable")
            return self._connection_method(event.method)
        return self._handshake_method(phase, event)

    def _handshake_method(self, phase: Phase, event: MethodFrame) -> list[Action]:
        method, expected = event.method, _EXPECTED[phase]
        if event.channel != 0 or not isinstance(method, expected):
            raise AmqpCodecError(ReplyCode.COMMAND_INVALID,
                                 f"expected {expected.NAME}, got {method.NAME}", method=method)
        if isinstance(method, m.ConnectionStartOk):
            return self._start_ok(method)
        if isinstance(method, m.ConnectionTuneOk):
            self._tune_ok(method)
            self.phase = Phase.AWAIT_OPEN
            return [Tuned(self.frame_max, self.channel_max, self.heartbeat)]
        assert isinstance(method, m.ConnectionOpen)
        self.virtual_host = method.virtual_host
        self.phase = Phase.OPENING
        return [OpenVirtualHost(method.virtual_host)]

    def _start_ok(self, method: m.ConnectionStartOk) -> list[Action]:
        self.client_properties = dict(method.client_properties)
        self.mechanism = method.mechanism
        self.username, password = credentials(method.mechanism, method.response)
        self.phase = Phase.LOGGING_IN
        return [CheckLogin(method.mechanism, self.username, password)]

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        """The client's frame_max within ours (0: ours), the smaller channel_max, and the
        client's heartbeat, as RabbitMQ takes them."""
        frame_max = method.frame_max or self.our_frame_max
        if frame_max < FRAME_MIN_SIZE or frame_max > self.our_frame_max:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED,
                                 f"frame_max={frame_max} outside "
                                 f"{FRAME_MIN_SIZE}..{self.our_frame_max}",
                                 class_id=10, method_id=31)
        self.frame_max = frame_max
        self.channel_max = min(method.channel_max or self.our_channel_max,
                               self.our_channel_max)
        self.heartbeat = method.heartbeat

    def _connection_method(self, method: Method) -> list[Action]:
        if isinstance(method, m.ConnectionClose):
            self.phase = Phase.CLOSED
            return [EndChannels(), Send(0, m.ConnectionCloseOk()), DiscardInput(), HangUp()]
        if isinstance(method, m.ConnectionCloseOk):
            self.phase = Phase.CLOSED
            return [HangUp()]
        if isinstance(method, m.ConnectionUpdateSecret):
            return [Send(0, m.ConnectionUpdateSecretOk())]
        raise AmqpCodecError(ReplyCode.COMMAND_INVALID,
                             f"method {method.NAME} not allowed on channel 0", method=method)

    def _while_closing(self, event: MethodFrame) -> list[Action]:
        """After our close, the peer's close-ok ends it; so does its own close that crossed
        ours. Everything else is dropped."""
        if event.channel == 0 and isinstance(event.method,
                                             m.ConnectionCloseOk | m.ConnectionClose):
            self.phase = Phase.CLOSED
        return []

    # -- the broker's answers ----------------------------------------------------------

    def answer(self, answer: Answer) -> list[Action]:
        if self.phase is Phase.LOGGING_IN and isinstance(answer, LoginAccepted | LoginRefused):
            return self._login_answer(answer)
        if self.phase is Phase.OPENING and isinstance(answer,
                                                      VirtualHostOpened | VirtualHostRefused):
            return self._open_answer(answer)
        raise StateMisuse(f"{type(answer).__name__} was not asked for ({self.phase})")

    def _login_answer(self, answer: LoginAccepted | LoginRefused) -> list[Action]:
        if isinstance(answer, LoginRefused):
            raise AmqpCodecError(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {self.mechanism}. "
                "For details see the broker logfile.")
        self.user = answer.user
        self.phase = Phase.AWAIT_TUNE_OK
        return [Send(0, m.ConnectionTune(self.our_channel_max, self.our_frame_max,
                                         self.our_heartbeat))]

    def _open_answer(self, answer: VirtualHostOpened | VirtualHostRefused) -> list[Action]:
        if isinstance(answer, VirtualHostRefused):
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED, answer.text, class_id=10,
                                 method_id=40)
        self.phase = Phase.OPEN
        return [Send(0, m.ConnectionOpenOk())]

    # -- our close ---------------------------------------------------------------------

    def fail(self, error: AmqpCodecError) -> list[Action]:
        """Close with the error (ours, the peer's violation, or a forced close), then wait
        for the peer's close-ok; nothing if the connection is closing already. A client
        that did not open with our protocol header gets ours, without connection.close
        (the spec's answer to a protocol we do not speak)."""
        if self.phase in (Phase.CLOSING, Phase.CLOSED):
            return []
        if isinstance(error, ProtocolHeaderMismatch):
            self.phase = Phase.CLOSED
            return [SendProtocolHeader(), HangUp()]
        self.phase = Phase.CLOSING
        return [EndChannels(), Send(0, error.close_method()), DiscardInput(), HangUp()]


def credentials(mechanism: str, response: bytes) -> tuple[str, str]:
    """The username and password of a SASL PLAIN or AMQPLAIN response."""
    if mechanism == "PLAIN":
        parts = response.split(b"\0")
        if len(parts) != 3:
            raise AmqpCodecError(ReplyCode.ACCESS_REFUSED, "malformed PLAIN response")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        prefixed = len(response).to_bytes(4, "big") + response
        try:
            table, _ = read_table(memoryview(prefixed), 0)
        except Exception:
            raise AmqpCodecError(ReplyCode.ACCESS_REFUSED, "malformed AMQPLAIN response"
                                 ) from None
        return _text(table.get("LOGIN")), _text(table.get("PASSWORD"))
    raise AmqpCodecError(ReplyCode.ACCESS_REFUSED,
                         f"unsupported authentication mechanism '{mechanism}'")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


# -- channels ------------------------------------------------------------------------------


class Verdict(enum.Enum):
    """What the connection does with a frame on channel n > 0."""

    OPEN = "open"  # channel.open: make the channel, send open-ok
    HANDLE = "handle"  # the channel's own method or content
    CLOSE = "close"  # the peer's channel.close: end the channel, then send close-ok
    FORGET = "forget"  # close-ok to our close: the channel is gone
    ANSWER_CLOSE = "answer-close"  # its close crossed ours: send close-ok, keep waiting
    DROP = "drop"


class ChannelTable:
    """Open and closing channels. Any number will do; RabbitMQ limits how many are open,
    not which. After our channel.close only the peer's close-ok ends the channel, a close
    of its own that crossed ours is answered, and everything else is dropped (the spec)."""

    def __init__(self, channel_max: int) -> None:
        self.channel_max = channel_max
        self.closing: dict[int, bool] = {}  # open channels; True once we sent close

    def __len__(self) -> int:
        return len(self.closing)

    def method(self, number: int, method: Method) -> Verdict:
        closing = self.closing.get(number)
        if closing is None:
            if isinstance(method, m.ChannelOpen):
                return self._open(number)
            raise _not_open(number, method)
        if closing:
            if isinstance(method, m.ChannelCloseOk):
                del self.closing[number]
                return Verdict.FORGET
            return Verdict.ANSWER_CLOSE if isinstance(method, m.ChannelClose) else Verdict.DROP
        if isinstance(method, m.ChannelOpen):
            raise AmqpCodecError(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen",
                                 class_id=20, method_id=10)
        if isinstance(method, m.ChannelClose):
            del self.closing[number]
            return Verdict.CLOSE
        return Verdict.DROP if isinstance(method, m.ChannelCloseOk) else Verdict.HANDLE

    def content(self, message: ContentMessage) -> Verdict:
        closing = self.closing.get(message.channel)
        if closing is None:
            raise _not_open(message.channel, message.method)
        return Verdict.DROP if closing else Verdict.HANDLE

    def _open(self, number: int) -> Verdict:
        if len(self.closing) >= self.channel_max:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED,
                                 f"number of channels opened ({len(self.closing)}) has "
                                 f"reached the negotiated channel_max ({self.channel_max})",
                                 class_id=20, method_id=10)
        self.closing[number] = False
        return Verdict.OPEN

    def close_sent(self, number: int) -> None:
        """We sent channel.close (a channel error): wait for the peer's close-ok."""
        if number not in self.closing:
            raise StateMisuse(f"channel {number} is not open")
        self.closing[number] = True

    def clear(self) -> None:
        self.closing.clear()


def _not_open(number: int, method: Method) -> AmqpCodecError:
    return AmqpCodecError(ReplyCode.CHANNEL_ERROR, f"expected 'channel.open' on channel {number}",
                          method=method)


# -- heartbeats -----------------------------------------------------------------------------


class HeartbeatClock:
    """Heartbeats every half interval, as RabbitMQ sends them; the peer is dead once
    nothing came from it for two intervals. Times are the caller's monotonic seconds."""

    def __init__(self, interval: int, now: float) -> None:
        self.interval = interval
        self.last_received = now

    @property
    def period(self) -> float:
        """How long to sleep between ticks."""
        return self.interval / 2

    def received(self, now: float) -> None:
        self.last_received = now

    def tick(self, now: float) -> list[Action]:
        if now - self.last_received > 2 * self.interval:
            return [SendHeartbeat(), PeerDead()]
        return [SendHeartbeat()]


# -- credit -----------------------------------------------------------------------------------


class ChannelCredit:
    """A channel's delivery credit, as RabbitMQ 4.x grants it: basic.qos global=false sets
    the prefetch of consumers created from then on, global=true a limit that the channel's
    unacked deliveries share; prefetch_size is not supported, nor channel.flow active=false
    (RabbitMQ does not let a client stop its deliveries). A closing channel delivers
    nothing. The unacked deliveries are the channel's own (counted by ``len``)."""

    __slots__ = ("global_prefetch", "open", "prefetch_count", "unacked")

    def __init__(self, unacked: Sized) -> None:
        self.unacked = unacked
        self.prefetch_count = 0
        self.global_prefetch = 0
        self.open = True

    def qos(self, method: m.BasicQos) -> m.BasicQosOk:
        if method.prefetch_size:
            raise AmqpCodecError(ReplyCode.NOT_IMPLEMENTED,
                                 f"prefetch_size!=0 ({method.prefetch_size})", method=method)
        if method.global_:
            self.global_prefetch = method.prefetch_count
        else:
            self.prefetch_count = method.prefetch_count
        return m.BasicQosOk()

    def flow(self, method: m.ChannelFlow) -> m.ChannelFlowOk:
        if not method.active:
            raise AmqpCodecError(ReplyCode.NOT_IMPLEMENTED, "active=false", method=method)
        return m.ChannelFlowOk(True)

    def consumer_prefetch(self, *, stream: bool) -> int:
        """A new consumer's prefetch; a stream queue's consumer needs one, and takes the
        channel's global one if no per-consumer one is set."""
        if stream:
            return self.prefetch_count or self.global_prefetch
        return self.prefetch_count

    def allows(self, prefetch: int, unacked: int, no_ack: bool) -> bool:
        """Whether one more delivery may go to a consumer with this prefetch and this many
        unacked deliveries: within its own prefetch (no-ack consumers have none), within
        the channel's global prefetch, on an open channel. Once per delivery: keep it
        lean."""
        if prefetch and unacked >= prefetch and not no_ack:
            return False
        limit = self.global_prefetch
        return self.open and (not limit or len(self.unacked) < limit)

    def close(self) -> None:
        self.open = False
