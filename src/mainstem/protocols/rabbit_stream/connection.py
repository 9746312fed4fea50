"""One RabbitMQ Stream protocol connection over asyncio, driving the broker core.

The codec turns bytes into frames. The connection-level rules live in the pure
`state.ConnectionState` (peer properties, SASL, tune, open, heartbeat, close); this class
reads, feeds it those frames, carries out the actions it answers with (sending, logging
in, opening the namespace) and hands each command to its group, all sharing one `Session`:
`publishing.Publishing` (publishers, Publish, confirms), `consuming.Consuming`
(subscriptions, credit, offsets) and `management.Management` (streams, super streams,
metadata). The frames of one socket read are staged for their partitions and written
together once the read is handled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from mainstem.broker.errors import AuthenticationFailed, BrokerError
from mainstem.broker.stream_service import PartitionService
from mainstem.broker.streams import Stream
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream import state as s
from mainstem.protocols.rabbit_stream.codec import StreamCodec, Undecoded
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.protocols.rabbit_stream.consuming import Consuming
from mainstem.protocols.rabbit_stream.management import Management
from mainstem.protocols.rabbit_stream.offload import DEFERRED, decoded_frames
from mainstem.protocols.rabbit_stream.publishing import Publishing
from mainstem.protocols.rabbit_stream.session import Session
from mainstem.protocols.rabbit_stream.state import CONNECTION_FRAMES
from mainstem.protocols.rabbit_stream.wire import FrameError, FrameTooLarge
from mainstem.protocols.receiver import Receiver

RECEIVE_BUFFER = 1024 * 1024
# Stop reading from a connection whose responses wait unsent to this much.
WRITE_HIGH_WATER = 4 * 1024 * 1024
# On shutdown, how long confirms of what was already appended may take to go out.
SHUTDOWN_CONFIRM_WAIT_S = 2.0
OPEN = s.Phase.OPEN  # a module global: read once per frame
PUBLISH_FRAMES = frozenset({f.PublishBlock})  # decoded here, or by a worker


class StreamConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.log = ctx.log
        self.codec = StreamCodec()
        if ctx.offload is not None:
            self.codec.deferred = DEFERRED
        correlations = s.Correlations()
        self.state = s.ConnectionState(ctx.limits.max_frame_size, ctx.limits.heartbeat_s,
                                       ctx.identity, correlations)
        self.session = Session(ctx)
        self.output = self.session.output
        self.send = self.session.send
        self.publishing = Publishing(self.session)
        self.consuming = Consuming(self.session, self.state, correlations)
        self.management = Management(self.session)
        self._staging = self.publishing.staging  # read per frame: one attribute away
        self._unwatch: list[Callable[[], None]] = []
        self._transport = self.session.transport
        publishing, consuming, management = self.publishing, self.consuming, self.management
        self._handlers: dict[type, Callable[[Any], Any]] = {
            f.DeclarePublisher: publishing.on_declare_publisher,
            f.PublishBlock: publishing.on_publish,
            f.QueryPublisherSequence: publishing.on_query_publisher_sequence,
            f.DeletePublisher: publishing.on_delete_publisher,
            f.Subscribe: consuming.on_subscribe,
            f.Credit: consuming.on_credit,
            f.StoreOffset: consuming.on_store_offset,
            f.QueryOffset: consuming.on_query_offset,
            f.Unsubscribe: consuming.on_unsubscribe,
            f.ConsumerUpdateReply: consuming.on_consumer_update_reply,
            f.ResolveOffsetSpec: consuming.on_resolve_offset_spec,
            f.CreateStream: management.on_create_stream,
            f.DeleteStream: management.on_delete_stream,
            f.Metadata: management.on_metadata,
            f.Route: management.on_route,
            f.Partitions: management.on_partitions,
            f.StreamStats: management.on_stream_stats,
            f.CreateSuperStream: management.on_create_super_stream,
            f.DeleteSuperStream: management.on_delete_super_stream,
            f.TieredSegments: management.on_tiered_segments,
        }

    # -- the connection's life ----------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.state.heard_from_peer(loop.time())
        self.publishing.start()
        self._unwatch = [self.core.streams.watch(self._on_stream_deleted),
                         self.core.streams.watch_leaders(self._on_leader_moved)]
        reading = loop.create_task(self._read_loop())
        shutdown = loop.create_task(self.ctx.closing.wait())
        try:
            await asyncio.wait({reading, shutdown}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                reading.result()
            else:
                await self._stop_for_shutdown(reading)
        except s.ProtocolError as error:
            await self._close_from_server(error.code, error.reason)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            shutdown.cancel()
            reading.cancel()
            await self._release()

    async def _stop_for_shutdown(self, reading: asyncio.Task[None]) -> None:
        """The server is stopping: read no more, let pending confirms go out, say Close."""
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, s.ProtocolError, ConnectionError):
            await reading
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_CONFIRM_WAIT_S
        while self.publishing.confirms and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await self._close_from_server(ResponseCode.OK, "broker shutting down")

    async def _read_loop(self) -> None:
        # Reads land in the Receiver's buffer and are copied once, into the codec's.
        reader = Receiver.take_over(self.ctx.reader, self.ctx.writer, RECEIVE_BUFFER,
                                    reused=True)
        loop = asyncio.get_running_loop()
        while self.state.phase is not s.Phase.CLOSED:
            if self.publishing.publishers and self.core.write_gate.held:
                await self.core.write_gate.opened()  # a publisher is held: read nothing
                self.state.heard_from_peer(loop.time())
            data = await reader.read()
            if not data:
                return
            self.state.heard_from_peer(loop.time())
            self.codec.receive_data(data)
            try:
                frames = self.codec.next_frames()
            except FrameError as error:
                raise self._refuse_frame(error) from None
            frames, malformed = await self._decoded(frames)
            for frame in frames:
                await self._dispatch(frame)
            self.publishing.write_staged()
            if malformed is not None:
                raise self._refuse_frame(malformed)
            if self.output.buffered > WRITE_HIGH_WATER:
                await self.output.drain()

    def _refuse_frame(self, error: FrameError) -> s.ProtocolError:
        event = "frame.too_large" if isinstance(error, FrameTooLarge) else "frame.invalid"
        self.log.warning(event, extra={"reason": error.message})
        return s.ProtocolError(error.code, error.message)

    async def _decoded(self, frames: list[f.Frame]) -> tuple[list[f.Frame], FrameError | None]:
        """The frames with those the codec left undecoded decoded by this connection's
        worker process, in order; cut at the first malformed one, returned with it."""
        undecoded = [frame.wire for frame in frames if type(frame) is Undecoded]
        if not undecoded or self.ctx.offload is None:
            return frames, None
        answers = iter(decoded_frames(await self.ctx.offload(b"".join(undecoded))))
        out: list[f.Frame] = []
        for frame in frames:
            if type(frame) is Undecoded:
                answer = next(answers)
                if isinstance(answer, FrameError):
                    return out, answer
                frame = answer
            out.append(frame)
        return out, None

    async def _dispatch(self, frame: f.Frame) -> None:
        kind = type(frame)
        if self._staging and kind not in PUBLISH_FRAMES:
            self.publishing.write_staged()  # whatever follows a publish sees it written
        if kind in CONNECTION_FRAMES:
            await self._perform(self.state.receive(frame))
            return
        if self.state.phase is not OPEN:  # admit() passes anything once open
            self.state.admit(kind)
        if kind in PUBLISH_FRAMES and self.core.write_gate.held:
            await self.core.write_gate.opened()  # held, as RabbitMQ blocks publishers
        result = self._handlers[kind](frame)
        if asyncio.iscoroutine(result):
            await result

    async def _release(self) -> None:
        self.state.connection_lost()
        for unwatch in self._unwatch:
            unwatch()
        self.consuming.close()
        for task in self.session.tasks:
            task.cancel()
        for task in self.session.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.output.close()  # chunks part-sent: their segments unpinned

    async def _close_from_server(self, code: int, reason: str) -> None:
        self.log.info("connection.closing", extra={"code": code, "reason": reason})
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._perform(self.state.close(code, reason))
            async with asyncio.timeout(2):
                await self.output.drain()

    async def _close_requested(self, reason: str) -> None:
        """An operator closed the connection (management API): say Close, hang up."""
        await self._close_from_server(ResponseCode.OK, reason)
        self._transport.close()

    async def _heartbeat_loop(self, interval_s: int) -> None:
        """Ask the state, every interval, whether to heartbeat the peer or drop it."""
        loop = asyncio.get_running_loop()
        while not self._transport.is_closing():
            await asyncio.sleep(interval_s)
            # Held publishers: this connection stopped reading, the peer is not silent.
            held = bool(self.publishing.publishers) and self.core.write_gate.held
            await self._perform(self.state.heartbeat_tick(loop.time(), reading_paused=held))

    # -- carrying out the state's actions ------------------------------------

    async def _perform(self, actions: list[s.Action]) -> None:
        for action in actions:
            match action:
                case s.Send(frame):
                    self.send(frame)
                case s.ShowClientProperties(properties):
                    self.ctx.client_properties.update(properties)
                case s.Authenticate():
                    await self._perform(await self._login(action))
                case s.OpenNamespace():
                    await self._perform(self._open_namespace(action))
                case s.LimitFrames(max_frame_size):
                    self.codec.max_frame_size = max_frame_size
                case s.StartHeartbeat(interval_s):
                    self.session.start(self._heartbeat_loop(interval_s))
                case s.Opened():
                    self._opened(action)
                case s.Close(code, reason):
                    raise s.ProtocolError(code, reason)
                case s.Drop(reason):
                    self.log.warning("heartbeat.missed", extra={"reason": reason})
                    self._transport.abort()

    async def _login(self, action: s.Authenticate) -> list[s.Action]:
        try:
            user = await self.ctx.login(action.username, action.password)
        except AuthenticationFailed as error:
            return self.state.login_failed(error.message)
        return self.state.login_succeeded(user)

    def _open_namespace(self, action: s.OpenNamespace) -> list[s.Action]:
        try:
            self.core.open_namespace(action.user, action.namespace)
            self.ctx.admit(action.user.name, action.namespace)
        except BrokerError as error:
            return self.state.namespace_refused(error.message)
        return self.state.namespace_opened(*self.ctx.advertised_address())

    def _opened(self, action: s.Opened) -> None:
        self.session.user, self.session.namespace = action.user, action.namespace
        self.ctx.identify(action.user.name, action.namespace)
        self.ctx.on_close_request = self._close_requested
        self.ctx.stream_publishers = self.publishing.rows
        self.ctx.stream_consumers = self.consuming.rows
        self.ctx.log.info("session.opened", extra={
            "user": action.user.name, "namespace": action.namespace})

    # -- streams deleted or moved ----------------------------------------------

    def _on_stream_deleted(self, stream: Stream) -> None:
        """Tell this connection's publishers and subscribers their stream is gone."""
        if stream.namespace != self.session.namespace or not self.state.is_open:
            return
        gone = {id(service) for service in stream.services}
        notified = self.publishing.drop(lambda service: id(service) in gone)
        notified |= self.consuming.end_reading(gone)
        self._send_metadata_updates(notified)

    def _on_leader_moved(self, stream: Stream, service: PartitionService) -> None:
        """A partition's leader moved to another node: its publishers here are dropped and
        told, as RabbitMQ does when a stream's writer changes, so clients look the new
        leader up and redeclare there. Subscriptions stay: every replica serves the same
        committed chunks, so a consumer has nothing to move for."""
        if stream.namespace != self.session.namespace or not self.state.is_open:
            return
        self._send_metadata_updates(self.publishing.drop(lambda target: target is service))

    def _send_metadata_updates(self, partition_names: set[str]) -> None:
        for partition_name in sorted(partition_names):
            self.send(r.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, partition_name))


async def handle(ctx: ConnectionContext) -> None:
    await StreamConnection(ctx).run()
