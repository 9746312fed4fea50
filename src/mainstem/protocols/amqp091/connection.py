"""One AMQP 0-9-1 connection over asyncio: handshake, channels, heartbeats, flow.

Every complete frame in a read is handled before the next read (the codec hands them over
as a batch); publishes of a read share their durable writes, and their confirms go out
together once those writes are durable.

A connection never ends on an error without connection.close: the first error in the byte
stream (a method the broker refuses, or what the codec cannot parse after it) is answered
with its code, and anything unexpected with 541. Closing is a handshake, as in RabbitMQ:
after close-ok, or after our close until the client's close-ok, the client's frames are
read and dropped until it hangs up (at most 30 s), so a client still flushing frames never
meets a reset socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import time
from collections import deque
from typing import Any

import mainstem
from mainstem.broker.amqp.queues.credit_flow import CreditFlow
from mainstem.broker.auth import User
from mainstem.broker.errors import AccessRefused, AuthenticationFailed, NotFound
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.channel import Channel, ChannelError
from mainstem.protocols.amqp091.codec import PROTOCOL_HEADER, AmqpCodec
from mainstem.protocols.amqp091.encode import HEARTBEAT_FRAME, encode_method
from mainstem.protocols.amqp091.errors import AmqpCodecError, ProtocolHeaderMismatch
from mainstem.protocols.amqp091.events import ContentMessage, MethodFrame
from mainstem.protocols.amqp091.methods import FRAME_MIN_SIZE, ReplyCode
from mainstem.protocols.amqp091.wire import Method, read_table
from mainstem.protocols.base import ConnectionContext

READ_SIZE = 256 * 1024
CLOSE_OK_TIMEOUT_S = 2.0  # for pending confirms, and for the client's close-ok at shutdown
CLOSING_TIMEOUT_S = 30.0  # RabbitMQ's: how long a closing connection waits for its client
SHUTDOWN_REASON = "broker forced connection closure with reason 'shutdown'"
# Deliveries pause while the socket holds this much unsent data (a slow consumer).
WRITE_BUFFER_LIMIT = 4 * 1024 * 1024
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


class ConnectionClosed(Exception):
    """The peer went away or the connection was closed: stop serving."""


class AmqpConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.codec = AmqpCodec(frame_max=ctx.limits.max_frame_size)
        self.transport = ctx.writer.transport
        self.frame_max = FRAME_MIN_SIZE
        self.channel_max = ctx.limits.channel_max
        self.heartbeat = 0
        self.user: User = None  # type: ignore[assignment]  # set by start-ok
        self.vhost: Any = None
        self.channels: dict[int, Channel] = {}
        self.cancel_notify = False
        self.blocked_capable = False
        self.closed = False
        self._last_read = time.monotonic()
        self._resuming: asyncio.Task[None] | None = None
        self._unsubscribe_alarms = None
        self._handshake_events: deque = deque()
        self._close_request = asyncio.Event()  # an administrator closes us
        self._close_reason = ""
        self.flow = CreditFlow()  # held by queues whose pager is behind

    # -- output --------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def send_method(self, channel: int, method: Method) -> None:
        self.send(encode_method(channel, method))

    def can_write(self) -> bool:
        if self.transport.get_write_buffer_size() < WRITE_BUFFER_LIMIT:
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
        await self.ctx.writer.drain()

    # -- the connection's life -------------------------------------------------

    async def run(self) -> None:
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
        heartbeats = asyncio.ensure_future(self._heartbeats()) if self.heartbeat else None
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
        self.channels.clear()
        if self.vhost is not None:
            self.vhost.connection_closed(self)

    async def _read_events(self) -> list:
        data = await self.ctx.reader.read(READ_SIZE)
        if not data:
            raise ConnectionClosed()
        self._last_read = time.monotonic()
        self.codec.receive_data(data)
        return self.codec.next_frames()

    async def _next_method(self, expected: type[Method]) -> Method:
        """The next handshake method; frames of one read are taken one at a time."""
        while True:
            if not self._handshake_events:
                self._handshake_events.extend(await self._read_events())
                continue
            event = self._handshake_events.popleft()
            if not isinstance(event, MethodFrame):
                continue
            if event.channel != 0 or not isinstance(event.method, expected):
                raise AmqpCodecError(
                    ReplyCode.COMMAND_INVALID,
                    f"expected {expected.NAME}, got {event.method.NAME}",
                    class_id=event.method.CLASS_ID, method_id=event.method.METHOD_ID)
            return event.method

    async def _handshake(self) -> None:
        try:
            while not self._handshake_events:
                self._handshake_events.extend(await self._read_events())
            self._handshake_events.popleft()  # the protocol header
        except ProtocolHeaderMismatch:
            self.transport.write(PROTOCOL_HEADER)
            self.transport.close()
            raise ConnectionClosed() from None
        self.send_method(0, m.ConnectionStart(0, 9, _server_properties(), b"PLAIN AMQPLAIN",
                                              b"en_US"))
        start_ok: m.ConnectionStartOk = await self._next_method(m.ConnectionStartOk)
        await self._authenticate(start_ok)
        self.send_method(0, m.ConnectionTune(self.channel_max, self.ctx.limits.max_frame_size,
                                             self.ctx.limits.heartbeat_s))
        tune_ok: m.ConnectionTuneOk = await self._next_method(m.ConnectionTuneOk)
        self._tune(tune_ok)
        open_: m.ConnectionOpen = await self._next_method(m.ConnectionOpen)
        try:
            self.core.open_namespace(self.user, open_.virtual_host)
            self.vhost = self.core.queues.vhost(open_.virtual_host)
        except (AccessRefused, NotFound) as exc:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED, exc.message, class_id=10,
                                 method_id=40) from None
        self.ctx.identify(self.user.name, open_.virtual_host,
                          **{k: v for k, v in start_ok.client_properties.items()
                             if isinstance(v, str)})
        self.send_method(0, m.ConnectionOpenOk())

    async def _authenticate(self, start_ok: m.ConnectionStartOk) -> None:
        capabilities = start_ok.client_properties.get("capabilities") or {}
        self.cancel_notify = bool(capabilities.get("consumer_cancel_notify"))
        self.blocked_capable = bool(capabilities.get("connection.blocked"))
        username, password = _credentials(start_ok.mechanism, start_ok.response)
        peer = self.ctx.writer.get_extra_info("peername")
        try:
            self.user = await self.core.login(username, password,
                                              peer[0] if isinstance(peer, tuple) else None)
        except AuthenticationFailed:
            self.ctx.log.info("amqp login refused for user %r", username)
            raise AmqpCodecError(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {start_ok.mechanism}. "
                "For details see the broker logfile.") from None

    def _tune(self, tune_ok: m.ConnectionTuneOk) -> None:
        ours = self.ctx.limits.max_frame_size
        frame_max = tune_ok.frame_max or ours
        if frame_max < FRAME_MIN_SIZE or frame_max > ours:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED,
                                 f"frame_max={frame_max} outside {FRAME_MIN_SIZE}..{ours}",
                                 class_id=10, method_id=31)
        self.frame_max = frame_max
        self.codec.frame_max = frame_max
        self.channel_max = min(tune_ok.channel_max or self.channel_max, self.channel_max)
        self.heartbeat = tune_ok.heartbeat

    async def _serve(self) -> None:
        """Handle each read's frames in order until the connection closes; the first error
        in the stream is the one answered."""
        events: list = list(self._handshake_events)  # what came with connection.open
        failure: AmqpCodecError | None = None
        stopping = asyncio.ensure_future(self._stop_requested())
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
                         ) -> tuple[list, AmqpCodecError | None]:
        """The next read's frames, with the codec's error if it refused what followed them;
        a shutdown or a close request comes as connection.close 320."""
        read = asyncio.ensure_future(self._read_events())
        await asyncio.wait((read, stopping), return_when=asyncio.FIRST_COMPLETED)
        if not read.done():
            read.cancel()
            return [], AmqpCodecError(ReplyCode.CONNECTION_FORCED, stopping.result())
        try:
            return read.result(), None
        except AmqpCodecError as exc:
            return exc.events, exc

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
        self.ctx.log.exception("amqp connection failed: %r", exc)
        return AmqpCodecError(ReplyCode.INTERNAL_ERROR, "internal error")

    async def _handle_events(self, events: list) -> bool:
        """Handle a read's frames; True once the connection is closed."""
        touched: set[Channel] = set()
        try:
            for event in events:
                if isinstance(event, ContentMessage):
                    channel = self._channel(event.channel, event.method)
                    if channel is None:
                        continue
                    if self.core.write_gate.held:
                        await self.core.write_gate.opened()
                    if self.flow.blocked:
                        await self.flow.wait()
                    await self._guarded(channel, channel.on_publish, event)
                    touched.add(channel)
                elif isinstance(event, MethodFrame):
                    if event.channel == 0:
                        if await self._connection_method(event.method):
                            return True
                    else:
                        await self._channel_method(event.channel, event.method, touched)
        finally:
            for channel in touched:
                channel.flush_confirms()
        return False

    async def _guarded(self, channel: Channel, handler: Any, argument: Any) -> None:
        try:
            result = handler(argument)
            if asyncio.iscoroutine(result):
                await result
        except ChannelError as exc:
            self._close_channel(channel, exc)

    def _channel(self, number: int, method: Method) -> Channel | None:
        channel = self.channels.get(number)
        if channel is None:
            raise AmqpCodecError(ReplyCode.CHANNEL_ERROR,
                                 f"expected 'channel.open' on channel {number}",
                                 class_id=method.CLASS_ID, method_id=method.METHOD_ID)
        return None if channel.closing else channel

    async def _channel_method(self, number: int, method: Method, touched: set[Channel]) -> None:
        channel = self.channels.get(number)
        if channel is None and isinstance(method, m.ChannelOpen):
            self._open_channel(number)
            return
        if channel is not None and channel.closing:
            # We sent channel.close: only the client's close-ok ends the channel; a close of
            # its own that crossed ours is answered; everything else is dropped (the spec).
            if isinstance(method, m.ChannelCloseOk):
                self._forget(channel)
            elif isinstance(method, m.ChannelClose):
                self.send_method(number, m.ChannelCloseOk())
            return
        if isinstance(method, m.ChannelOpen):
            raise AmqpCodecError(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen",
                                 class_id=20, method_id=10)
        channel = self._channel(number, method)
        assert channel is not None
        if isinstance(method, m.ChannelClose):
            channel.flush_confirms()  # publishes of this read are confirmed before close-ok
            channel.close()
            await channel.confirms_sent()
            self._forget(channel)
            self.send_method(number, m.ChannelCloseOk())
            return
        if isinstance(method, m.ChannelCloseOk):
            return
        await self._guarded(channel, channel.handle, method)
        touched.add(channel)

    def _open_channel(self, number: int) -> None:
        """Any channel number will do; RabbitMQ limits how many are open, not which."""
        if len(self.channels) >= self.channel_max:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED,
                                 f"number of channels opened ({len(self.channels)}) has "
                                 f"reached the negotiated channel_max ({self.channel_max})",
                                 class_id=20, method_id=10)
        self.channels[number] = Channel(self, number)
        self.send_method(number, m.ChannelOpenOk())

    def _forget(self, channel: Channel) -> None:
        """The channel's close handshake is over: nothing more is sent on it."""
        channel.ended = True
        del self.channels[channel.number]

    def _close_channel(self, channel: Channel, error: ChannelError) -> None:
        self.ctx.log.info("amqp channel %d closed: %s", channel.number, error)
        channel.close()
        channel.closing = True
        self.send_method(channel.number, error.close_method())

    async def _connection_method(self, method: Method) -> bool:
        if isinstance(method, m.ConnectionClose):
            await self._send_pending_confirms()
            self._release_all()
            self.transport.write(encode_method(0, m.ConnectionCloseOk()))
            await self._drop_client_frames(until_close_ok=False)
            self.transport.close()
            return True
        if isinstance(method, m.ConnectionCloseOk):
            self.transport.close()
            return True
        if isinstance(method, m.ConnectionUpdateSecret):
            self.send_method(0, m.ConnectionUpdateSecretOk())
            return False
        raise AmqpCodecError(ReplyCode.COMMAND_INVALID,
                             f"method {method.NAME} not allowed on channel 0",
                             class_id=method.CLASS_ID, method_id=method.METHOD_ID)

    async def _close_with(self, error: AmqpCodecError) -> None:
        """Connection.Close with the error; then wait for the client's close-ok."""
        self.ctx.log.info("amqp connection closed: %s", error)
        await self._send_pending_confirms()
        self._release_all()
        self.transport.write(encode_method(0, error.close_method()))
        await self._drop_client_frames(until_close_ok=True)
        self.transport.close()

    async def _send_pending_confirms(self) -> None:
        for channel in list(self.channels.values()):
            channel.flush_confirms()  # those of the read being handled
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.confirms_sent(), CLOSE_OK_TIMEOUT_S)

    async def _drop_client_frames(self, *, until_close_ok: bool) -> None:
        """Read and drop the client's frames until it hangs up, or (after our close) until
        its close-ok, for at most 30 s (2 s once the broker is shutting down)."""
        timeout = CLOSE_OK_TIMEOUT_S if self.ctx.closing.is_set() else CLOSING_TIMEOUT_S
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._read_until_gone(until_close_ok), timeout)

    async def _read_until_gone(self, until_close_ok: bool) -> None:
        codec = self.codec
        if codec.failed:  # what follows the refused bytes is parsed from scratch, if at all
            codec = AmqpCodec(frame_max=self.frame_max, expect_protocol_header=False)
        while data := await self.ctx.reader.read(READ_SIZE):
            if not until_close_ok:
                continue
            codec.receive_data(data)
            with contextlib.suppress(AmqpCodecError):
                if any(isinstance(event, MethodFrame) and event.channel == 0
                       and isinstance(event.method, m.ConnectionCloseOk | m.ConnectionClose)
                       for event in codec.next_frames()):
                    return

    async def _close_requested(self, reason: str) -> None:
        self._close_reason = reason
        self._close_request.set()

    # -- heartbeats and alarms -------------------------------------------------

    async def _heartbeats(self) -> None:
        interval = self.heartbeat
        while not self.closed:
            await asyncio.sleep(interval / 2)
            self.send(HEARTBEAT_FRAME)
            if time.monotonic() - self._last_read > 2 * interval:
                self.ctx.log.info("missed heartbeats from client, timeout: %ds", interval)
                self.closed = True
                self.transport.abort()
                return

    def _alarms_changed(self, active: frozenset[str]) -> None:
        if not self.blocked_capable or self.closed:
            return
        if active:
            reason = ALARM_REASONS.get(next(iter(sorted(active))), "resource alarm")
            self.send_method(0, m.ConnectionBlocked(reason))
        else:
            self.send_method(0, m.ConnectionUnblocked())


def _credentials(mechanism: str, response: bytes) -> tuple[str, str]:
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
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        return _text(login), _text(password)
    raise AmqpCodecError(ReplyCode.ACCESS_REFUSED,
                         f"unsupported authentication mechanism '{mechanism}'")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def _server_properties() -> dict[str, Any]:
    return {
        "product": "mainstem",
        "version": mainstem.__version__,
        "platform": f"Python {platform.python_version()}",
        "capabilities": CAPABILITIES,
        "cluster_name": "mainstem",
        "copyright": "mainstem contributors",
        "information": "A persistent message streaming broker",
    }


async def handle(ctx: ConnectionContext) -> None:
    await AmqpConnection(ctx).run()
