"""The segment store protocol's connection state as a pure object: decoded messages and
broker outcomes in, actions out; no asyncio, no sockets.

It holds the handshake (Authenticate first, the login checked by the broker and fed back
as an outcome), the keep-alive and idleness rules, the appenders set up on the connection
with their block framing and ack levels, and the reassembly of split messages. The
asyncio connection moves bytes, carries out the actions and calls the broker.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass, field

from mainstem.protocols.segment import codec as c

MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # a message joined from partial pieces
FRAMED_LENGTH = struct.Struct(">I")  # an event's length, as c.Events frames it


class Violation(Exception):
    """The peer broke the protocol: reply with `reply`, then drop the connection."""

    def __init__(self, reply: c.Message) -> None:
        super().__init__(getattr(reply, "message", ""))
        self.reply = reply


# -- actions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    message: c.Message


@dataclass(frozen=True, slots=True)
class Login:
    """Check these credentials with the broker, then feed `logged_in` or `login_refused`."""

    username: str
    password: str


@dataclass(frozen=True, slots=True)
class Serve:
    """A request for the broker (setup, read, info, segment management)."""

    request: c.Message


@dataclass(frozen=True, slots=True)
class Close:
    """Send `reply`, then drop the connection."""

    reply: c.Message


@dataclass(frozen=True, slots=True)
class Drop:
    """Drop the connection without a word (an idle peer)."""

    reason: str


Action = Send | Login | Serve | Close | Drop
NOTHING: tuple[Action, ...] = ()

REQUESTS = (c.SetupAppend, c.ReadSegment, c.GetStreamSegmentInfo, c.CreateSegment,
            c.SealSegment, c.TruncateSegment, c.DeleteSegment)


class Phase(enum.Enum):
    AWAIT_AUTH = "await-auth"  # nothing but Authenticate is acceptable
    AUTHENTICATING = "authenticating"  # the broker is checking the credentials
    READY = "ready"
    CLOSED = "closed"


@dataclass(slots=True)
class Appender:
    """One (connection id, segment) writer and its offsets on the append connection."""

    segment: str
    connection_id: uuid.UUID
    level: int  # connection offset after the last complete event received
    cursor: int  # connection offset after the last byte received
    events: list[bytes | memoryview] = field(default_factory=list)  # framed as in c.Events
    flushed: int = 0  # level of the last write to the log
    acked: int = -1  # level of the last DataAppended sent


@dataclass(slots=True)
class Block:
    appender: Appender
    start: int
    received: int = 0


@dataclass(frozen=True, slots=True)
class Write:
    """Buffered events of one appender for the log (each its length u32 and data, as
    c.Events holds them), stored up to connection offset `level`."""

    appender: Appender
    events: list[bytes | memoryview]
    level: int


class SegmentState:
    """The states and rules of one segment store connection."""

    def __init__(self, idle_s: float = 0, now: float = 0.0) -> None:
        self.phase = Phase.AWAIT_AUTH
        self.user: str | None = None
        self.appenders: dict[uuid.UUID, Appender] = {}
        self.block: Block | None = None
        self.partial_owner: Appender | None = None
        self.reassembler = c.Reassembler(MAX_MESSAGE_SIZE)
        self.idle_s = idle_s
        self.last_heard = now
        self.holding = False  # reads paused by a resource alarm: silence is not idleness

    # -- handshake ---------------------------------------------------------------------

    def receive(self, message: c.Message, size: int) -> tuple[Action, ...]:
        """One decoded message of `size` bytes on the wire; raises Violation."""
        if self.phase is not Phase.READY:
            return self._handshake(message)
        if isinstance(message, c.Event):
            self.on_event(message, size)
            return NOTHING
        if isinstance(message, c.Partial):
            return self._partial(message, size)
        if isinstance(message, c.BeginAppendBlock):
            self._begin_block(message)
        elif isinstance(message, c.EndAppendBlock):
            self._end_block(message)
        elif isinstance(message, REQUESTS):
            return (Serve(message),)
        elif not isinstance(message, c.KeepAlive):
            raise Violation(c.ProtocolError("", f"{type(message).__name__} is a reply"))
        return NOTHING

    def _handshake(self, message: c.Message) -> tuple[Action, ...]:
        if self.phase is Phase.AWAIT_AUTH and isinstance(message, c.Authenticate):
            self.phase = Phase.AUTHENTICATING
            return (Login(message.username, message.password),)
        if self.phase is Phase.CLOSED:
            return NOTHING
        # pipelined requests behind Authenticate are no better than requests before it
        self.phase = Phase.CLOSED
        raise Violation(c.AuthenticationFailed("", "the first frame must be Authenticate"))

    def logged_in(self, user: str) -> tuple[Action, ...]:
        """The broker accepted the credentials of `Login`."""
        self._expect(Phase.AUTHENTICATING)
        self.phase = Phase.READY
        self.user = user
        return (Send(c.Authenticated()),)

    def login_refused(self, reason: str) -> tuple[Action, ...]:
        self._expect(Phase.AUTHENTICATING)
        self.phase = Phase.CLOSED
        return (Close(c.AuthenticationFailed("", reason)),)

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise RuntimeError(f"a login outcome in phase {self.phase.value}")

    # -- keep-alive ----------------------------------------------------------------------

    def heard(self, now: float) -> None:
        """Bytes arrived from the peer."""
        self.last_heard = now

    def hold(self) -> None:
        """Reads pause under a resource alarm; the peer's keep-alives go unread meanwhile."""
        self.holding = True

    def release(self, now: float) -> None:
        self.holding = False
        self.last_heard = now

    @property
    def keepalive_interval(self) -> float:
        """How often `tick` is due; 0: no keep-alives, no idleness checks."""
        return self.idle_s / 2

    def tick(self, now: float) -> tuple[Action, ...]:
        """A keep-alive interval passed: drop an idle peer, else send a keep-alive."""
        if not self.holding and now - self.last_heard > self.idle_s:
            self.phase = Phase.CLOSED
            return (Drop(f"segment peer idle for {self.idle_s:g}s, dropping it"),)
        return (Send(c.KeepAlive()),)

    # -- appending ---------------------------------------------------------------------

    @property
    def appending(self) -> bool:
        return bool(self.appenders)

    def append_setup(self, segment: str, connection_id: uuid.UUID, level: int
                     ) -> tuple[Action, ...]:
        """The broker found the stored ack level of a SetupAppend."""
        self.appenders[connection_id] = Appender(segment, connection_id, level, level,
                                                 flushed=level)
        return (Send(c.AppendSetup(segment, connection_id, level)),)

    def _begin_block(self, message: c.BeginAppendBlock) -> None:
        appender = self.appenders.get(message.connection_id)
        if appender is None or self.block is not None:
            raise Violation(c.ProtocolError("", "BeginAppendBlock without SetupAppend or "
                                                "inside another block"))
        pending = self.partial_owner is not None and self.reassembler.pending
        if pending and (self.partial_owner is not appender
                        or message.connection_offset != appender.cursor):
            raise Violation(c.ProtocolError("", "a split event must continue in its "
                                                "appender's next block"))
        if not pending and message.connection_offset > appender.level:
            raise Violation(c.InvalidEventNumber(
                appender.segment, f"connection offset {message.connection_offset} is past "
                                  f"the stored level {appender.level}"))
        self.block = Block(appender, message.connection_offset)

    def _end_block(self, message: c.EndAppendBlock) -> None:
        block = self.block
        if block is None or block.appender.connection_id != message.connection_id:
            raise Violation(c.ProtocolError("", "EndAppendBlock without its BeginAppendBlock"))
        end = block.start + block.received
        if message.block_length != block.received or message.connection_offset != end:
            raise Violation(c.ProtocolError(
                block.appender.segment, f"block length {message.block_length} at offset "
                f"{message.connection_offset} disagrees with {block.received} bytes received"))
        block.appender.cursor = end
        self.partial_owner = block.appender if self.reassembler.pending else None
        self.block = None

    def on_event(self, event: c.Event, size: int) -> None:
        """One event of the open block (joined from partial pieces), kept unless it is a
        resend."""
        self.on_events(c.Events([FRAMED_LENGTH.pack(len(event.data)) + event.data], size))

    def on_events(self, events: c.Events) -> None:
        """The hot path: a run of events of the open block; those at or below the stored
        level are resends, dropped."""
        block = self.block
        if block is None:
            raise Violation(c.ProtocolError("", "an Event outside of an append block"))
        start = block.start + block.received
        block.received += events.size
        appender = block.appender
        end = block.start + block.received
        if end <= appender.level:
            return
        if start >= appender.level:
            appender.events += events.framed
        else:  # a resend reaching past the stored level: keep the events past it
            for framed in events.framed:
                start += c.HEADER.size + len(framed) - FRAMED_LENGTH.size
                if start > appender.level:
                    appender.events.append(framed)
        appender.level = end

    def _partial(self, piece: c.Partial, size: int) -> tuple[Action, ...]:
        if self.block is not None:
            self.block.received += len(piece.data)
        try:
            whole = self.reassembler.add(piece)
        except c.FrameError as error:
            raise Violation(c.ProtocolError("", str(error))) from None
        if whole is None:
            return NOTHING
        # a joined event was counted piece by piece above
        return self.receive(whole, 0 if isinstance(whole, c.Event) else size)

    def writes(self) -> list[Write]:
        """What a read batch buffered: each appender's events as one write to the log."""
        out = []
        for appender in self.appenders.values():
            if appender.events:
                out.append(Write(appender, appender.events, appender.level))
                appender.events = []
                appender.flushed = appender.level
        return out

    def ack_due(self, connection_id: uuid.UUID) -> int | None:
        """The level the next DataAppended should confirm once the log settles, if any."""
        appender = self.appenders[connection_id]
        return appender.flushed if appender.acked < appender.flushed else None

    def append_failed(self, connection_id: uuid.UUID, reason: str) -> tuple[Action, ...]:
        """The log could not store a write of this appender: the connection ends, and the
        writer sets up again (learning the stored level) and resends what follows it."""
        self.phase = Phase.CLOSED
        return (Close(c.StorageFailed(self.appenders[connection_id].segment, reason)),)

    def settled(self, connection_id: uuid.UUID, level: int) -> tuple[Action, ...]:
        """The log made everything up to `level` durable."""
        appender = self.appenders[connection_id]
        appender.acked = max(appender.acked, level)
        return (Send(c.DataAppended(connection_id, level)),)
