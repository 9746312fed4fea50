"""One AMQP 0-9-1 connection over asyncio: it moves bytes and calls the broker; the
protocol's rules are the pure objects of ``state`` (handshake and closes, channels,
heartbeats), which it feeds the codec's events and whose actions it carries out.

Every complete frame in a read is handled before the next read (the codec hands them over
as a batch); publishes of a read share their durable writes, and their confirms go out
together once those writes are durable.

A connection never ends on an error without connection.close: the first error in the byte
stream (a method the broker refuses, or what the codec cannot parse after it) is answered
with its code, and anything unexpected with 541. After close-ok, or after our close until
the client's close-ok, the client's frames are read and dropped until it hangs up (at most
30 s), so a client still flushing frames never meets a reset socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from mainstem.broker.amqp.queues.credit_flow import CreditFlow
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.auth import User
from mainstem.broker.errors import AccessRefused, AuthenticationFailed, NotAllowed, NotFound
from mainstem.logging_setup import describe_error
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091 import state as s
from mainstem.protocols.amqp091.channel import Channel
from mainstem.protocols.amqp091.codec import PROTOCOL_HEADER, AmqpCodec
from mainstem.protocols.amqp091.encode import HEARTBEAT_FRAME, encode_method
from mainstem.protocols.amqp091.errors import AmqpCodecError, ChannelError
from mainstem.protocols.amqp091.events import ContentMessage, Event, MethodFrame
from mainstem.protocols.amqp091.methods import FRAME_MIN_SIZE, ReplyCode
from mainstem.protocols.amqp091.wire import Method
from mainstem.protocols.base import ConnectionContext

READ_SIZE = 256 * 1024
CLOSE_OK_TIMEOUT_S = 2.0  # for pending confirms, and for the client's close-ok at shutdown
CLOSING_TIMEOUT_S = 30.0  # RabbitMQ's: how long a closing connection waits for its client
SHUTDOWN_REASON = "broker forced connection closure with reason 'shutdown'"
# Deliveries pause while the socket holds this much unsent data (a slow consumer): what a
# consumer that stops reading costs the broker beyond the kernel's socket buffer.
WRITE_BUFFER_LIMIT = 128 * 1024
# What one event-loop turn sends after its first frames is written at its end, or sooner
# past this size.
OUTPUT_FLUSH_BYTES = 256 * 1024


class ConnectionClosed(Exception):
    """The peer went away or the connection was closed: stop serving."""


class AmqpConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        limits = ctx.limits
        self.state = s.ConnectionState(channel_max=limits.channel_max,
                                       frame_max=limits.max_frame_size,
                                       heartbeat=limits.heartbeat_s, identity=ctx.identity)
        self.codec = AmqpCodec(frame_max=limits.max_frame_size)
        self.transport = ctx.writer.transport
        self.frame_max = FRAME_MIN_SIZE
        self.vhost: VirtualHost | None = None
        self.table = s.ChannelTable(limits.channel_max)
        self.channels: dict[int, Channel] = {}
        self.closed = False
        self._clock: s.HeartbeatClock | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._unsubscribe_alarms: Callable[[], None] = lambda: None
        self._pending: deque[Event] = deque()  # frames read with the handshake's, not yet handled
        self._close_request = asyncio.Event()  # an administrator closes us
        self._close_reason = ""
        self.flow = CreditFlow()  # held by queues whose pager is behind
        self._in_turn = False  # something was written in this event-loop turn
        self._serving: asyncio.Task[None] | None = None  # the task serving the channels
        self._reading = False  # it waits for the socket (_next_read)
        self._read_interrupted = False  # a stop request cancelled that wait
        self._output: list[bytes] = []  # the turn's later frames, written together at its end
        self._output_bytes = 0

    @property
    def user(self) -> User:
        user: User = self.state.user  # the state keeps what _login handed it, opaque
        return user

    @property
    def cancel_notify(self) -> bool:
        return self.state.cancel_notify

    # -- output --------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if not self.closed:
            self._write(data)

    def send_method(self, channel: int, method: Method) -> None:
        self.send(encode_method(channel, method))

    def _write(self, data: bytes) -> None:
        """The turn's first frames go out at once (no added latency); what follows them in
        the same event-loop turn is written together at its end, so a burst of deliveries
        or confirms costs two socket writes, not one each. Order is kept."""
        if not self._in_turn:
            self._in_turn = True
            asyncio.get_running_loop().call_soon(self._end_turn)
            if not self.transport.is_closing():
                self.transport.write(data)
            return
        self._output.append(data)
        self._output_bytes += len(data)
        if self._output_bytes >= OUTPUT_FLUSH_BYTES:
            self._flush_output()

    def _end_turn(self) -> None:
        self._in_turn = False
        self._flush_output()

    def _flush_output(self) -> None:
        output = self._output
        if not output:
            return
        self._output = []
        self._output_bytes = 0
        if not self.transport.is_closing():
            self.transport.write(output[0] if len(output) == 1 else b"".join(output))

    def can_write(self) -> bool:
        if self.transport.get_write_buffer_size() + self._output_bytes < WRITE_BUFFER_LIMIT:
            return True
        if self._resuming is None and not self.closed:
            self._resuming = asyncio.ensure_future(self._resume_after_drain())
        return False

    async def _resume_after_drain(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self.ctx.writer.drain()
        self._resuming = None
        for channel in list(self.channels.values()):
            channel.resume()

    async def drain(self) -> None:
        self._flush_output()
        await self.ctx.writer.drain()

    # -- the state's actions ---------------------------------------------------

    async def _perform(self, actions: list[s.Action]) -> bool:
        """Carry out the state's actions in order; True once the connection is over."""
        for action in actions:
            if isinstance(action, s.Send):
                self._write_method(action)
            elif isinstance(action, s.SendProtocolHeader):
                self._write(PROTOCOL_HEADER)
            elif isinstance(action, s.CheckLogin):
                await self._perform(self.state.answer(await self._login(action)))
            elif isinstance(action, s.Tuned):
                self.frame_max = self.codec.frame_max = action.frame_max
                self.table.channel_max = action.channel_max
            elif isinstance(action, s.OpenVirtualHost):
                await self._perform(self.state.answer(self._open_virtual_host(action.name)))
            elif isinstance(action, s.EndChannels):
                await self._send_pending_confirms()
                self._release_all()
            elif isinstance(action, s.DiscardInput):
                await self._drop_client_frames()
            elif isinstance(action, s.HangUp):
                self._flush_output()
                self.transport.close()
        return self.state.phase is s.Phase.CLOSED

    def _write_method(self, send: s.Send) -> None:
        if not self.transport.is_closing():  # written even after _release_all
            self._write(encode_method(send.channel, send.method))

    async def _login(self, check: s.CheckLogin) -> s.LoginAccepted | s.LoginRefused:
        try:
            return s.LoginAccepted(await self.ctx.login(check.username, check.password))
        except AuthenticationFailed:
            return s.LoginRefused()

    def _open_virtual_host(self, name: str) -> s.VirtualHostOpened | s.VirtualHostRefused:
        try:
            self.core.open_namespace(self.user, name)
            self.vhost = self.core.queues.vhost(name)
            self.ctx.admit(self.user.name, name)
        except (AccessRefused, NotFound, NotAllowed) as exc:
            return s.VirtualHostRefused(exc.message)
        self.ctx.identify(self.user.name, name,
                          **{k: v for k, v in self.state.client_properties.items()
                             if isinstance(v, str)})
        return s.VirtualHostOpened()

    # -- the connection's life -------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self._flush_output()  # before the server closes the socket

    async def _run(self) -> None:
        try:
            await self._handshake()  # the server closes it if it takes too long
        except (ConnectionClosed, ConnectionError):
            return
        except AmqpCodecError as exc:
            await self._close_with(exc)
            return
        except Exception as exc:
            await self._close_with(self._internal_error(exc))
            return
        heartbeats = None
        if self.state.heartbeat:
            self._clock = s.HeartbeatClock(self.state.heartbeat, time.monotonic())
            heartbeats = asyncio.ensure_future(self._heartbeats(self._clock))
        self.ctx.on_close_request = self._close_requested
        self._unsubscribe_alarms = self.core.alarms.subscribe(self._alarms_changed)
        if active := self.core.alarms.active:  # say connection.blocked from the start
            self._alarms_changed(active)
        try:
            await self._serve()
        finally:
            if heartbeats is not None:
                heartbeats.cancel()
            self._unsubscribe_alarms()
            self._release_all()

    def _release_all(self) -> None:
        self.closed = True
        for channel in self.channels.values():
            channel.close()
            self._unregister(channel)
        self.channels.clear()
        self.table.clear()
        if self.vhost is not None:
            self.vhost.connection_closed(self)

    async def _read_events(self) -> list[Event]:
        data = await self.ctx.reader.read(READ_SIZE)
        if not data:
            raise ConnectionClosed()
        if self._clock is not None:
            self._clock.received(time.monotonic())
        self.codec.receive_data(data)
        return self.codec.next_frames()

    async def _handshake(self) -> None:
        """Feed the state frame by frame (those of one read too) until the connection is
        open; what came after connection.open stays in ``_pending``."""
        while self.state.phase is not s.Phase.OPEN:
            if not self._pending:
                self._pending.extend(await self._read_events())
                continue
            await self._perform(self.state.receive(self._pending.popleft()))

    async def _serve(self) -> None:
        """Handle each read's frames in order until the connection closes; the first error
        in the stream is the one answered."""
        events: list[Event] = list(self._pending)  # what came with connection.open
        failure: AmqpCodecError | None = None
        self._serving = asyncio.current_task()
        stopping = asyncio.ensure_future(self._stop_requested())
        stopping.add_done_callback(self._interrupt_read)
        try:
            while True:
                try:
                    if await self._handle_events(events):
                        return
                except AmqpCodecError as exc:
                    failure = exc  # it came before anything the codec refused
                except Exception as exc:
                    failure = self._internal_error(exc)
                if failure is not None:
                    await self._close_with(failure)
                    return
                await self.drain()
                try:
                    events, failure = await self._next_read(stopping)
                except (ConnectionClosed, ConnectionError):
                    return
        finally:
            stopping.cancel()

    async def _next_read(self, stopping: asyncio.Future[str]
                         ) -> tuple[list[Event], AmqpCodecError | None]:
        """The next read's frames, with the codec's error if it refused what followed them;
        a shutdown or a close request comes as connection.close 320. The read is awaited
        in place (no task and wait per read); a stop request cancels it
        (``_interrupt_read``), which leaves any bytes that arrived meanwhile buffered."""
        if stopping.done():
            return [], AmqpCodecError(ReplyCode.CONNECTION_FORCED, stopping.result())
        self._reading = True
        try:
            return await self._read_events(), None
        except AmqpCodecError as exc:
            return self.codec.parsed_before_error, exc
        except asyncio.CancelledError:
            if not self._read_interrupted:
                raise
            self._read_interrupted = False
            assert self._serving is not None
            if self._serving.uncancel():  # cancelled by someone else as well
                raise
            return [], AmqpCodecError(ReplyCode.CONNECTION_FORCED, stopping.result())
        finally:
            self._reading = False

    def _interrupt_read(self, stopping: asyncio.Future[str]) -> None:
        if self._reading and not stopping.cancelled() and self._serving is not None:
            self._read_interrupted = True
            self._serving.cancel()

    async def _stop_requested(self) -> str:
        """Why to close, once the broker shuts down or an administrator closes us."""
        shutdown = asyncio.ensure_future(self.ctx.closing.wait())
        request = asyncio.ensure_future(self._close_request.wait())
        try:
            await asyncio.wait((shutdown, request), return_when=asyncio.FIRST_COMPLETED)
        finally:
            shutdown.cancel()
            request.cancel()
        return self._close_reason if self._close_request.is_set() else SHUTDOWN_REASON

    def _internal_error(self, exc: Exception) -> AmqpCodecError:
        self.ctx.log.exception("connection.failed", extra={"error": describe_error(exc)})
        return AmqpCodecError(ReplyCode.INTERNAL_ERROR, "internal error")

    async def _handle_events(self, events: list[Event]) -> bool:
        """Handle a read's frames; True once the connection is closed."""
        touched: set[Channel] = set()
        try:
            for event in events:
                if isinstance(event, ContentMessage):
                    if self.table.content(event) is not s.Verdict.HANDLE:
                        continue
                    channel = self.channels[event.channel]
                    if self.core.write_gate.held:
                        await self.core.write_gate.opened()
                    if self.flow.blocked:
                        await self.flow.wait()
                    try:
                        channel.on_publish(event)  # synchronous: no coroutine per message
                    except ChannelError as exc:
                        self._close_channel(channel, exc)
                    touched.add(channel)
                elif isinstance(event, MethodFrame):
                    if event.channel == 0:
                        if await self._perform(self.state.receive(event)):
                            return True
                    else:
                        await self._channel_method(event.channel, event.method, touched)
        finally:
            for channel in touched:
                channel.flush_confirms()
        return False

    async def _channel_method(self, number: int, method: Method, touched: set[Channel]) -> None:
        verdict = self.table.method(number, method)
        if verdict is s.Verdict.HANDLE:
            channel = self.channels[number]
            try:
                await channel.handle(method)
            except ChannelError as exc:
                self._close_channel(channel, exc)
            touched.add(channel)
        elif verdict is s.Verdict.OPEN:
            self._count_channel()
            self.channels[number] = self.ctx.channels[number] = Channel(self, number)
            self.core.counters.channels_opened += 1
            self.send_method(number, m.ChannelOpenOk())
        elif verdict is s.Verdict.CLOSE:
            channel = self.channels[number]
            channel.flush_confirms()  # publishes of this read are confirmed before close-ok
            channel.close()
            await channel.confirms_sent()
            self._forget(channel)
            self.send_method(number, m.ChannelCloseOk())
        elif verdict is s.Verdict.FORGET:
            self._forget(self.channels[number])
        elif verdict is s.Verdict.ANSWER_CLOSE:
            self.send_method(number, m.ChannelCloseOk())

    def _count_channel(self) -> None:
        """Under the user's max-channels, or the connection closes with NOT_ALLOWED as
        RabbitMQ's does."""
        try:
            self.core.limits.open_channel(self.user.name)
        except NotAllowed as exc:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED, exc.message, class_id=20,
                                 method_id=10) from None

    def _forget(self, channel: Channel) -> None:
        """The channel's close handshake is over: nothing more is sent on it."""
        channel.ended = True
        del self.channels[channel.number]
        self._unregister(channel)

    def _unregister(self, channel: Channel) -> None:
        """The API stops listing the channel; overview totals keep its counters."""
        if self.ctx.channels.pop(channel.number, None) is channel:
            self.core.limits.close_channel(self.user.name)
            self.core.closed_channel_stats.add(channel.stats)
            self.core.counters.channels_closed += 1

    def _close_channel(self, channel: Channel, error: ChannelError) -> None:
        self.ctx.log.info("channel.closed", extra={
            "channel": channel.number, "code": error.code.name, "reason": str(error)})
        channel.close()
        channel.closing = True
        self.table.close_sent(channel.number)
        self.send_method(channel.number, error.close_method())

    async def _close_with(self, error: AmqpCodecError) -> None:
        """Connection.Close with the error; then wait for the client's close-ok."""
        self.ctx.log.info("connection.closing", extra={
            "code": error.reply_code.name, "reason": str(error)})
        await self._perform(self.state.fail(error))

    async def _send_pending_confirms(self) -> None:
        for channel in list(self.channels.values()):
            channel.flush_confirms()  # those of the read being handled
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_OK_TIMEOUT_S):
                    await channel.confirms_sent()

    async def _drop_client_frames(self) -> None:
        """Read and drop the client's frames until it hangs up, or (after our close) until
        its close-ok, for at most 30 s (2 s once the broker is shutting down)."""
        timeout = CLOSE_OK_TIMEOUT_S if self.ctx.closing.is_set() else CLOSING_TIMEOUT_S
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout):
                await self._read_until_gone()

    async def _read_until_gone(self) -> None:
        codec = self.codec
        if codec.failed:  # what follows the refused bytes is parsed from scratch, if at all
            codec = AmqpCodec(frame_max=self.frame_max, expect_protocol_header=False)
        while data := await self.ctx.reader.read(READ_SIZE):
            if not self.state.awaiting_close_ok:
                continue
            codec.receive_data(data)
            with contextlib.suppress(AmqpCodecError):
                for event in codec.next_frames():
                    self.state.receive(event)
            if not self.state.awaiting_close_ok:
                return

    async def _close_requested(self, reason: str) -> None:
        self._close_reason = reason
        self._close_request.set()

    # -- heartbeats and alarms -------------------------------------------------

    async def _heartbeats(self, clock: s.HeartbeatClock) -> None:
        while not self.closed:
            await asyncio.sleep(clock.period)
            for action in clock.tick(time.monotonic()):
                if isinstance(action, s.SendHeartbeat):
                    self.send(HEARTBEAT_FRAME)
                elif isinstance(action, s.PeerDead):
                    self.ctx.log.warning("heartbeat.missed",
                                         extra={"timeout_s": clock.interval})
                    self.closed = True
                    self.transport.abort()
                    return

    def _alarms_changed(self, active: frozenset[str]) -> None:
        if not self.closed:
            for action in self.state.alarms_changed(active):
                self._write_method(action)


async def handle(ctx: ConnectionContext) -> None:
    await AmqpConnection(ctx).run()
