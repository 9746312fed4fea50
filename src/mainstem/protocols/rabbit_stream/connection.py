"""One RabbitMQ Stream protocol connection over asyncio, driving the broker core.

The codec turns bytes into frames; this class runs the connection's state
machine (peer properties, SASL, tune, open, then commands) and maps each
command onto the broker's stream service. A Publish frame goes to its partition's
appender, which batches what arrives together into chunks, and is confirmed once
durable; a subscription ships committed chunks from the segment files to the socket
as they are, paced by credit (one credit = one chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mainstem import __version__
from mainstem.broker.active_consumers import ActiveConsumer
from mainstem.broker.auth import User
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    NotFound,
)
from mainstem.broker.stream_service import ChunkLimits, PartitionClosed, PartitionService
from mainstem.broker.stream_service import Subscription as Reader
from mainstem.broker.streams import BINDING_KEYS, PARTITION_NAMES, Stream
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import StreamCodec, encode, encode_deliver_prefix
from mainstem.protocols.rabbit_stream.constants import Key, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.sasl import MECHANISMS, SaslError, plain_credentials
from mainstem.protocols.rabbit_stream.wire import FrameError

READ_SIZE = 256 * 1024
# Stop shipping chunks to a connection whose socket buffer holds this much.
WRITE_HIGH_WATER = 4 * 1024 * 1024
# A chunk's bounds, whatever a Publish frame holds: Osiris cuts chunks by the batches
# its writer takes (at most 8,192 writes), so a subscription at `last` gets a slice of
# a large frame, never the whole frame.
CHUNK_LIMITS = ChunkLimits(entries=4096, bytes=1 << 20)
# On shutdown, how long confirms of what was already appended may take to go out.
SHUTDOWN_CONFIRM_WAIT_S = 2.0
# Stream-protocol argument names (no "x-" prefix) -> the broker's stream arguments.
STREAM_ARGUMENTS = {
    "max-length-bytes": "x-max-length-bytes",
    "max-age": "x-max-age",
    "stream-max-segment-size-bytes": "x-stream-max-segment-size-bytes",
}
INTEGER_ARGUMENTS = {"x-max-length-bytes", "x-stream-max-segment-size-bytes"}


class State(enum.Enum):
    PEER_PROPERTIES = 1
    AUTHENTICATING = 2
    TUNING = 3
    OPENING = 4
    OPEN = 5
    CLOSED = 6


class CloseConnection(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def response_code(error: BrokerError) -> ResponseCode:
    """The stream protocol's code for a broker error."""
    if isinstance(error, NotFound):
        return ResponseCode.STREAM_DOES_NOT_EXIST
    if isinstance(error, AccessRefused):
        return ResponseCode.ACCESS_REFUSED
    if isinstance(error, AlreadyExists):
        return ResponseCode.STREAM_ALREADY_EXISTS
    return ResponseCode.PRECONDITION_FAILED


def stream_arguments(arguments: dict[str, str]) -> dict[str, Any]:
    """Retention arguments in broker form; others are accepted and ignored, as RabbitMQ does."""
    converted: dict[str, Any] = {}
    for name, value in arguments.items():
        key = STREAM_ARGUMENTS.get(name, name if name.startswith("x-") else None)
        if key is None:
            continue
        if key in INTEGER_ARGUMENTS:
            try:
                converted[key] = int(value)
            except ValueError:
                raise CommandFailed(ResponseCode.PRECONDITION_FAILED) from None
        else:
            converted[key] = value
    return converted


class CommandFailed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(slots=True)
class Publisher:
    publisher_id: int
    name: str
    service: PartitionService
    reference: str


@dataclass(slots=True, eq=False)
class Subscription:
    subscription_id: int
    name: str
    service: PartitionService
    start: f.OffsetSpec
    reader: Reader  # credit, position and the chunks this subscriber wants
    task: asyncio.Task[None] | None = None
    membership: ActiveConsumer | None = None


class StreamConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.log = ctx.log
        self.codec = StreamCodec()
        self.state = State.PEER_PROPERTIES
        self.user: User | None = None
        self.namespace = "/"
        self.frame_max = ctx.limits.max_frame_size
        self.heartbeat = ctx.limits.heartbeat_s
        self.deliver_version = 1
        self.publishers: dict[int, Publisher] = {}
        self.subscriptions: dict[int, Subscription] = {}
        # Each Publish frame's durability, in arrival order, with the confirms it owes.
        self._confirms: deque[tuple[asyncio.Future[None], Publisher, list[int]]] = deque()
        self._confirm_ready = asyncio.Event()
        self._staging: set[PartitionService] = set()  # handed this read's Publish frames
        self._tasks: list[asyncio.Task[None]] = []
        self._correlation = 0
        self._consumer_updates: dict[int, Subscription] = {}
        self._last_read = 0.0
        self._unwatch: Callable[[], None] | None = None
        self._transport = ctx.writer.transport
        self._handlers: dict[type, Callable[[Any], Any]] = {
            f.PeerProperties: self.on_peer_properties,
            f.SaslHandshake: self.on_sasl_handshake,
            f.SaslAuthenticate: self.on_sasl_authenticate,
            f.Tune: self.on_tune,
            f.Open: self.on_open,
            f.Close: self.on_close,
            f.Heartbeat: lambda frame: None,
            f.Response: self.on_response,
            f.UnknownCommand: self.on_unknown,
            f.DeclarePublisher: self.on_declare_publisher,
            f.Publish: self.on_publish,
            f.QueryPublisherSequence: self.on_query_publisher_sequence,
            f.DeletePublisher: self.on_delete_publisher,
            f.Subscribe: self.on_subscribe,
            f.Credit: self.on_credit,
            f.StoreOffset: self.on_store_offset,
            f.QueryOffset: self.on_query_offset,
            f.Unsubscribe: self.on_unsubscribe,
            f.CreateStream: self.on_create_stream,
            f.DeleteStream: self.on_delete_stream,
            f.Metadata: self.on_metadata,
            f.Route: self.on_route,
            f.Partitions: self.on_partitions,
            f.ConsumerUpdateReply: self.on_consumer_update_reply,
            f.ExchangeCommandVersions: self.on_exchange_command_versions,
            f.StreamStats: self.on_stream_stats,
            f.CreateSuperStream: self.on_create_super_stream,
            f.DeleteSuperStream: self.on_delete_super_stream,
            f.ResolveOffsetSpec: self.on_resolve_offset_spec,
        }
        self._handshake = {f.PeerProperties, f.SaslHandshake, f.SaslAuthenticate, f.Tune,
                           f.Open, f.Close, f.Heartbeat, f.Response}

    # -- the connection's life ----------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_read = loop.time()
        self._tasks.append(loop.create_task(self._confirm_loop()))
        self._unwatch = self.core.streams.watch(self._on_stream_deleted)
        reading = loop.create_task(self._read_loop())
        shutdown = loop.create_task(self.ctx.closing.wait())
        try:
            await asyncio.wait({reading, shutdown}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                reading.result()
            else:
                await self._stop_for_shutdown(reading)
        except CloseConnection as close:
            await self._close_from_server(close.code, close.reason)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            shutdown.cancel()
            reading.cancel()
            await self._release()

    async def _stop_for_shutdown(self, reading: asyncio.Task[None]) -> None:
        """The server is stopping: read no more, let pending confirms go out, say Close."""
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, CloseConnection, ConnectionError):
            await reading
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_CONFIRM_WAIT_S
        while self._confirms and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await self._close_from_server(ResponseCode.OK, "broker shutting down")

    async def _read_loop(self) -> None:
        reader = self.ctx.reader
        loop = asyncio.get_running_loop()
        while self.state is not State.CLOSED:
            if self.publishers and self.core.write_gate.held:
                await self.core.write_gate.opened()  # a publisher is held: read nothing
                self._last_read = loop.time()
            data = await reader.read(READ_SIZE)
            if not data:
                return
            self._last_read = loop.time()
            self.codec.receive_data(data)
            try:
                frames = self.codec.next_frames()
            except FrameError as error:
                raise CloseConnection(error.code, error.message) from None
            for frame in frames:
                await self._dispatch(frame)
            self._write_staged()
            if self._transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                await self.ctx.writer.drain()

    async def _dispatch(self, frame: f.Frame) -> None:
        kind = type(frame)
        if self.state is not State.OPEN and kind not in self._handshake:
            raise CloseConnection(ResponseCode.UNKNOWN_FRAME,
                                  f"{kind.__name__} before the connection was opened")
        if self._staging and kind is not f.Publish:
            self._write_staged()  # whatever follows a publish sees it written
        if kind is f.Publish and self.core.write_gate.held:
            await self.core.write_gate.opened()  # held, as RabbitMQ blocks publishers
        result = self._handlers[kind](frame)
        if asyncio.iscoroutine(result):
            await result

    def _write_staged(self) -> None:
        """One chunk per partition for the frames of one read, as Osiris batches its
        pending writes: they share one write, one index entry, one fsync, one Deliver."""
        for service in self._staging:
            service.appender.write_staged()
        self._staging.clear()

    async def _release(self) -> None:
        self.state = State.CLOSED
        if self._unwatch is not None:
            self._unwatch()
        for subscription in list(self.subscriptions.values()):
            self._end_subscription(subscription)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _close_from_server(self, code: int, reason: str) -> None:
        self.log.info("closing stream connection: %s", reason)
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.send(f.Close(self._next_correlation(), code, reason))
            await asyncio.wait_for(self.ctx.writer.drain(), 2)
        self.state = State.CLOSED

    async def _close_requested(self, reason: str) -> None:
        """An operator closed the connection (management API): say Close, hang up."""
        await self._close_from_server(ResponseCode.OK, reason)
        self._transport.close()

    async def _heartbeat_loop(self) -> None:
        """Started once Tune settled a non-zero interval: heartbeat the peer when we
        have been quiet, and drop it when it has been silent for two intervals."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.heartbeat)
            held = self.publishers and self.core.write_gate.held  # we stopped reading it
            if not held and loop.time() - self._last_read > 2 * self.heartbeat:
                self.log.info("stream peer silent for two heartbeats, dropping it")
                self._transport.abort()
                return
            self.send(f.Heartbeat())

    # -- output --------------------------------------------------------------

    def send(self, frame: f.Frame) -> None:
        if not self._transport.is_closing():
            self._transport.write(encode(frame))

    def respond(self, key: int, correlation_id: int, code: int = ResponseCode.OK) -> None:
        self.send(f.Response(key, correlation_id, code))

    def _next_correlation(self) -> int:
        self._correlation = (self._correlation + 1) & 0xFFFF_FFFF
        return self._correlation

    # -- handshake -----------------------------------------------------------

    def on_peer_properties(self, frame: f.PeerProperties) -> None:
        # Shown by the management API (connection_name, product, version, ...), as for AMQP.
        self.ctx.client_properties.update(frame.properties)
        self.send(r.PeerPropertiesResponse(frame.correlation_id, ResponseCode.OK, {
            "product": "mainstem", "version": __version__, "platform": "Python",
            "copyright": "mainstem developers", "information": "https://github.com/mainstem",
        }))
        self.state = State.AUTHENTICATING

    def on_sasl_handshake(self, frame: f.SaslHandshake) -> None:
        self.send(r.SaslHandshakeResponse(frame.correlation_id, ResponseCode.OK, MECHANISMS))

    async def on_sasl_authenticate(self, frame: f.SaslAuthenticate) -> None:
        if frame.mechanism not in MECHANISMS:
            self.send(r.SaslAuthenticateResponse(frame.correlation_id,
                                                 ResponseCode.SASL_MECHANISM_NOT_SUPPORTED))
            return
        try:
            username, password = plain_credentials(frame.data)
            self.user = await self.core.login(username, password, self._peer_host())
        except SaslError:
            self.send(r.SaslAuthenticateResponse(frame.correlation_id, ResponseCode.SASL_ERROR))
            raise CloseConnection(ResponseCode.SASL_ERROR, "malformed SASL response") from None
        except AuthenticationFailed as error:
            code = (ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK
                    if "localhost" in error.message else ResponseCode.AUTHENTICATION_FAILURE)
            self.log.warning("stream authentication failed: %s", error.message)
            self.send(r.SaslAuthenticateResponse(frame.correlation_id, code))
            raise CloseConnection(code, error.message) from None
        self.send(r.SaslAuthenticateResponse(frame.correlation_id, ResponseCode.OK))
        self.state = State.TUNING
        self.send(f.Tune(self.frame_max, self.heartbeat))

    def on_tune(self, frame: f.Tune) -> None:
        if self.state is not State.TUNING:
            raise CloseConnection(ResponseCode.PRECONDITION_FAILED, "Tune out of sequence")
        # The client may lower what the server proposed, never raise it.
        if frame.frame_max:
            self.frame_max = min(self.frame_max, frame.frame_max)
        self.heartbeat = min(self.heartbeat, frame.heartbeat) if frame.heartbeat else 0
        # As RabbitMQ: frame_max bounds a whole frame, size prefix included.
        self.codec.max_frame_size = max(self.frame_max - 4, 0)
        self.state = State.OPENING
        if self.heartbeat:
            self._tasks.append(asyncio.get_running_loop().create_task(self._heartbeat_loop()))

    def on_open(self, frame: f.Open) -> None:
        if self.user is None:
            raise CloseConnection(ResponseCode.AUTHENTICATION_FAILURE, "open before login")
        try:
            self.core.open_namespace(self.user, frame.virtual_host)
        except BrokerError as error:
            self.send(r.OpenResponse(frame.correlation_id,
                                     ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE))
            raise CloseConnection(ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE,
                                  error.message) from None
        self.namespace = frame.virtual_host
        host, port = self._advertised()
        self.send(r.OpenResponse(frame.correlation_id, ResponseCode.OK, {
            "advertised_host": host, "advertised_port": str(port)}))
        self.state = State.OPEN
        self.ctx.identify(self.user.name, self.namespace)
        self.ctx.on_close_request = self._close_requested
        self.ctx.log.info("stream connection opened", extra={
            "user": self.user.name, "namespace": self.namespace})

    def on_close(self, frame: f.Close) -> None:
        self.respond(Key.CLOSE, frame.correlation_id)
        self.state = State.CLOSED

    def on_response(self, frame: f.Response) -> None:
        if frame.key == Key.CLOSE:  # the client acknowledged our Close
            self.state = State.CLOSED

    def on_unknown(self, frame: f.UnknownCommand) -> None:
        if frame.correlation_id is not None:
            self.respond(frame.key, frame.correlation_id, ResponseCode.UNKNOWN_FRAME)
        else:
            raise CloseConnection(ResponseCode.UNKNOWN_FRAME,
                                  f"unknown command 0x{frame.key:04x} v{frame.version}")

    def on_exchange_command_versions(self, frame: f.ExchangeCommandVersions) -> None:
        for version in frame.versions:
            if version.key == Key.DELIVER:
                self.deliver_version = min(2, version.max_version)
        self.send(r.ExchangeCommandVersionsResponse(frame.correlation_id, ResponseCode.OK,
                                                    r.SERVER_COMMAND_VERSIONS))

    # -- streams -------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[Stream, PartitionService]:
        stream, index = self.core.streams.resolve(self.namespace, name)
        return stream, stream.services[index]

    def _check(self, kind: str, name: str) -> None:
        assert self.user is not None
        self.core.auth.check(self.user, self.namespace, kind, name)  # type: ignore[arg-type]

    def on_create_stream(self, frame: f.CreateStream) -> None:
        try:
            self._check("configure", frame.stream)
            self.core.streams.create(self.namespace, frame.stream,
                                     arguments=stream_arguments(frame.arguments))
        except BrokerError as error:
            self.respond(Key.CREATE_STREAM, frame.correlation_id, response_code(error))
        except CommandFailed as failed:
            self.respond(Key.CREATE_STREAM, frame.correlation_id, failed.code)
        else:
            self.respond(Key.CREATE_STREAM, frame.correlation_id)

    async def on_delete_stream(self, frame: f.DeleteStream) -> None:
        code = await self._delete(frame.stream, single_partition=True)
        self.respond(Key.DELETE_STREAM, frame.correlation_id, code)

    async def _delete(self, name: str, *, single_partition: bool) -> int:
        try:
            self._check("configure", name)
            stream = self.core.streams.get(self.namespace, name)
            if (len(stream.services) == 1) != single_partition:
                kind = "stream" if single_partition else "super stream"
                raise NotFound(f"'{name}' is not a {kind}")
            await self.core.streams.delete(self.namespace, name)
        except BrokerError as error:
            return response_code(error)
        return ResponseCode.OK

    def on_create_super_stream(self, frame: f.CreateSuperStream) -> None:
        try:
            self._check("configure", frame.name)
            arguments = stream_arguments(frame.arguments)
            arguments[PARTITION_NAMES] = frame.partitions
            arguments[BINDING_KEYS] = frame.binding_keys
            for partition_name in frame.partitions:
                self._check("configure", partition_name)
            if not frame.partitions:
                raise CommandFailed(ResponseCode.PRECONDITION_FAILED)
            self.core.streams.create(self.namespace, frame.name, len(frame.partitions), arguments)
        except BrokerError as error:
            self.respond(Key.CREATE_SUPER_STREAM, frame.correlation_id, response_code(error))
        except CommandFailed as failed:
            self.respond(Key.CREATE_SUPER_STREAM, frame.correlation_id, failed.code)
        else:
            self.respond(Key.CREATE_SUPER_STREAM, frame.correlation_id)

    async def on_delete_super_stream(self, frame: f.DeleteSuperStream) -> None:
        code = await self._delete(frame.name, single_partition=False)
        self.respond(Key.DELETE_SUPER_STREAM, frame.correlation_id, code)

    def on_metadata(self, frame: f.Metadata) -> None:
        host, port = self._advertised()
        streams = []
        for name in frame.streams:
            try:
                self._resolve(name)
            except NotFound:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST, None))
            else:
                streams.append(r.StreamMetadata(name, ResponseCode.OK, 0))
        self.send(r.MetadataResponse(frame.correlation_id, [r.Broker(0, host, port)], streams))

    def on_route(self, frame: f.Route) -> None:
        stream = self.core.streams.find(self.namespace, frame.super_stream)
        if stream is None:
            self.send(r.RouteResponse(frame.correlation_id, ResponseCode.STREAM_DOES_NOT_EXIST, []))
            return
        routed = [name for name, key in zip(stream.partition_names, stream.binding_keys,
                                            strict=True) if key == frame.routing_key]
        self.send(r.RouteResponse(frame.correlation_id, ResponseCode.OK, routed))

    def on_partitions(self, frame: f.Partitions) -> None:
        stream = self.core.streams.find(self.namespace, frame.super_stream)
        if stream is None:
            self.send(r.PartitionsResponse(frame.correlation_id,
                                           ResponseCode.STREAM_DOES_NOT_EXIST, []))
            return
        self.send(r.PartitionsResponse(frame.correlation_id, ResponseCode.OK,
                                       stream.partition_names))

    def on_stream_stats(self, frame: f.StreamStats) -> None:
        try:
            _, partition = self._resolve(frame.stream)
        except NotFound:
            self.send(r.StreamStatsResponse(frame.correlation_id,
                                            ResponseCode.STREAM_DOES_NOT_EXIST, {}))
            return
        empty = partition.committed_chunk_id < 0
        self.send(r.StreamStatsResponse(frame.correlation_id, ResponseCode.OK, {
            "first_chunk_id": -1 if empty else partition.first_offset,
            "committed_chunk_id": partition.committed_chunk_id,
            # The last committed offset (-1: empty), as osiris names it: readers that want an
            # exact end (Spark's offset ranges) need it, the chunk id alone does not give it.
            "committed_offset": partition.committed_offset - 1,
            "first_offset": partition.first_offset,
        }))

    def _on_stream_deleted(self, stream: Stream) -> None:
        """Tell this connection's publishers and subscribers their stream is gone."""
        if stream.namespace != self.namespace or self.state is not State.OPEN:
            return
        gone = {id(service) for service in stream.services}
        notified: set[str] = set()
        for publisher_id, publisher in list(self.publishers.items()):
            if id(publisher.service) in gone:
                notified.add(publisher.name)
                del self.publishers[publisher_id]
        for subscription in list(self.subscriptions.values()):
            if id(subscription.service) in gone:
                notified.add(subscription.name)
                self._end_subscription(subscription)
        for partition_name in sorted(notified):
            self.send(r.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, partition_name))

    # -- publishing ----------------------------------------------------------

    def on_declare_publisher(self, frame: f.DeclarePublisher) -> None:
        code = ResponseCode.OK
        try:
            self._check("write", frame.stream)
            _, partition = self._resolve(frame.stream)
            if frame.publisher_id in self.publishers:
                code = ResponseCode.PRECONDITION_FAILED
            else:
                self.publishers[frame.publisher_id] = Publisher(
                    frame.publisher_id, frame.stream, partition, frame.reference)
        except BrokerError as error:
            code = response_code(error)
        self.respond(Key.DECLARE_PUBLISHER, frame.correlation_id, code)

    def on_publish(self, frame: f.Publish) -> None:
        """Hand the frame's messages to its partition's appender, which batches what
        arrives together into chunks, and queue the confirms they owe."""
        publisher = self.publishers.get(frame.publisher_id)
        if publisher is None:
            self._publish_error(frame, ResponseCode.PUBLISHER_DOES_NOT_EXIST)
            return
        reference = publisher.reference or None
        receipt = publisher.service.appender.append_entries(
            frame.entries, all_simple=frame.num_records == len(frame.entries),
            writer=reference, sequences=frame.publishing_ids if reference else None,
            filter_values=frame.filter_values, limits=CHUNK_LIMITS)
        self._staging.add(publisher.service)
        # Duplicates are confirmed too, once everything written before them is durable.
        self._confirms.append((receipt.durable, publisher, frame.publishing_ids))
        self._confirm_ready.set()

    def _publish_error(self, frame: f.Publish, code: int) -> None:
        self.send(r.PublishError(frame.publisher_id,
                                 [(pid, code) for pid in frame.publishing_ids]))

    async def _confirm_loop(self) -> None:
        """Confirm publishes in order, each once its chunk is durable; confirms for
        the same publisher that are ready together go out in one frame."""
        while True:
            await self._confirm_ready.wait()
            self._confirm_ready.clear()
            while self._confirms:
                durable, publisher, ids = self._confirms.popleft()
                try:
                    await durable
                except PartitionClosed:  # the stream was deleted before the write
                    self._refuse(publisher, ids, ResponseCode.STREAM_DOES_NOT_EXIST)
                    continue
                except Exception as error:  # disk full, file too big: these, not the link
                    self.log.warning("stream write failed: %s", error)
                    self._refuse(publisher, ids, ResponseCode.STREAM_NOT_AVAILABLE)
                    continue
                while (self._confirms and self._confirms[0][1] is publisher
                       and _succeeded(self._confirms[0][0])):
                    ids = ids + self._confirms.popleft()[2]
                self.send(r.PublishConfirm(publisher.publisher_id, ids))

    def _refuse(self, publisher: Publisher, ids: list[int], code: int) -> None:
        self.send(r.PublishError(publisher.publisher_id, [(pid, code) for pid in ids]))

    def on_query_publisher_sequence(self, frame: f.QueryPublisherSequence) -> None:
        try:
            self._check("read", frame.stream)
            _, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.send(r.QueryPublisherSequenceResponse(frame.correlation_id,
                                                       response_code(error), 0))
            return
        sequence = partition.appender.sequence(frame.reference) or 0
        self.send(r.QueryPublisherSequenceResponse(frame.correlation_id, ResponseCode.OK,
                                                   sequence))

    def on_delete_publisher(self, frame: f.DeletePublisher) -> None:
        code = ResponseCode.OK
        if self.publishers.pop(frame.publisher_id, None) is None:
            code = ResponseCode.PUBLISHER_DOES_NOT_EXIST
        self.respond(Key.DELETE_PUBLISHER, frame.correlation_id, code)

    # -- consuming -----------------------------------------------------------

    def on_subscribe(self, frame: f.Subscribe) -> None:
        code = ResponseCode.OK
        try:
            self._check("read", frame.stream)
            stream, partition = self._resolve(frame.stream)
            if frame.subscription_id in self.subscriptions:
                code = ResponseCode.SUBSCRIPTION_ID_ALREADY_EXISTS
        except BrokerError as error:
            code = response_code(error)
        self.respond(Key.SUBSCRIBE, frame.correlation_id, code)
        if code != ResponseCode.OK:
            return
        values, match_unfiltered = _filter(frame.properties)
        reader = partition.subscribe(partition.committed_offset, credit=frame.credit,
                                     filter_values=values, match_unfiltered=match_unfiltered)
        subscription = Subscription(frame.subscription_id, frame.stream, partition,
                                    frame.offset_spec, reader)
        self.subscriptions[frame.subscription_id] = subscription
        self.ctx.add_consumer(str(frame.subscription_id), frame.stream,
                              prefetch_count=frame.credit, ack_required=False)
        if frame.properties.get("single-active-consumer") == "true":
            self._join_group(subscription, stream, frame.properties)
        else:
            self._start_delivery(subscription, frame.offset_spec)

    def _start_delivery(self, subscription: Subscription, spec: f.OffsetSpec) -> None:
        subscription.reader.seek(self._resolve_offset(subscription.service, spec))
        subscription.task = asyncio.get_running_loop().create_task(
            self._deliver_loop(subscription))
        self._tasks.append(subscription.task)

    def _resolve_offset(self, partition: PartitionService, spec: f.OffsetSpec) -> int:
        kind = spec.type
        if kind == OffsetType.FIRST:
            return partition.first_offset
        if kind == OffsetType.LAST:
            last = partition.committed_chunk_id
            return last if last >= 0 else partition.committed_offset
        if kind == OffsetType.OFFSET:
            return spec.value
        if kind == OffsetType.TIMESTAMP:
            return partition.offset_for_timestamp(spec.value)
        return partition.committed_offset  # NEXT, and NONE as "no preference"

    async def _deliver_loop(self, subscription: Subscription) -> None:
        """Ship committed chunks as Deliver frames, one credit each: the chunk's header
        and data go from the segment file, after the frame's own header."""
        reader, service = subscription.reader, subscription.service
        try:
            while True:
                chunk = await reader.next_view()
                header = encode_deliver_prefix(subscription.subscription_id,
                                               self.deliver_version, chunk.wire_size,
                                               service.committed_chunk_id)
                reader.send(chunk, header, self._transport)
                self.core.delivery_stats.delivered(
                    self.namespace, subscription.name, chunk.num_records, chunk.location.send_size)
                if self._transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                    await self.ctx.writer.drain()  # a slow consumer holds one buffer, not the log
        except (PartitionClosed, ConnectionError):
            return

    def on_credit(self, frame: f.Credit) -> None:
        subscription = self.subscriptions.get(frame.subscription_id)
        if subscription is None:
            self.send(r.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST,
                                       frame.subscription_id))
            return
        subscription.reader.grant(frame.credit)

    def on_unsubscribe(self, frame: f.Unsubscribe) -> None:
        subscription = self.subscriptions.get(frame.subscription_id)
        if subscription is None:
            self.respond(Key.UNSUBSCRIBE, frame.correlation_id,
                         ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST)
            return
        self._end_subscription(subscription)
        self.respond(Key.UNSUBSCRIBE, frame.correlation_id)

    def _end_subscription(self, subscription: Subscription) -> None:
        self.subscriptions.pop(subscription.subscription_id, None)
        self.ctx.remove_consumer(str(subscription.subscription_id))
        if subscription.task is not None:
            subscription.task.cancel()
        if subscription.membership is not None:
            subscription.membership.leave()

    def on_store_offset(self, frame: f.StoreOffset) -> None:
        # StoreOffset has no response: a failure can only be logged.
        try:
            self._check("read", frame.stream)
            stream, index = self.core.streams.resolve(self.namespace, frame.stream)
            self.core.store_offset(self.namespace, stream.name, index, frame.reference,
                                   frame.offset)
        except BrokerError as error:
            self.log.info("store offset refused: %s", error.message)

    def on_query_offset(self, frame: f.QueryOffset) -> None:
        try:
            self._check("read", frame.stream)
            stream, index = self.core.streams.resolve(self.namespace, frame.stream)
            offset = self.core.query_offset(self.namespace, stream.name, index, frame.reference)
        except BrokerError as error:
            self.send(r.QueryOffsetResponse(frame.correlation_id, response_code(error), 0))
            return
        if offset is None:
            self.send(r.QueryOffsetResponse(frame.correlation_id, ResponseCode.NO_OFFSET, 0))
        else:
            self.send(r.QueryOffsetResponse(frame.correlation_id, ResponseCode.OK, offset))

    def on_resolve_offset_spec(self, frame: f.ResolveOffsetSpec) -> None:
        try:
            self._check("read", frame.stream)
            _, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.send(r.ResolveOffsetSpecResponse(frame.correlation_id, response_code(error),
                                                  OffsetType.OFFSET, 0))
            return
        offset = self._resolve_offset(partition, frame.offset_spec)
        self.send(r.ResolveOffsetSpecResponse(frame.correlation_id, ResponseCode.OK,
                                              OffsetType.OFFSET, offset))

    # -- single active consumer ----------------------------------------------

    def _join_group(self, subscription: Subscription, stream: Stream,
                    properties: dict[str, str]) -> None:
        name = properties.get("name", "")
        super_stream = properties.get("super-stream")
        index = stream.partition_names.index(subscription.name)
        group = self.core.active_consumers.group(
            self.namespace, subscription.name, name,
            position=index if super_stream else None)
        subscription.membership = group.join(
            activate=lambda: self._ask_consumer_update(subscription, True),
            deactivate=lambda: self._ask_consumer_update(subscription, False))

    def _ask_consumer_update(self, subscription: Subscription, active: bool) -> None:
        if subscription.subscription_id not in self.subscriptions:
            return
        if not active and subscription.task is not None:
            subscription.task.cancel()
            subscription.task = None
        correlation_id = self._next_correlation()
        self._consumer_updates[correlation_id] = subscription
        self.send(r.ConsumerUpdate(correlation_id, subscription.subscription_id, active))

    def on_consumer_update_reply(self, frame: f.ConsumerUpdateReply) -> None:
        subscription = self._consumer_updates.pop(frame.correlation_id, None)
        if subscription is None or subscription.membership is None:
            return
        if not subscription.membership.is_active or subscription.task is not None:
            return
        spec = frame.offset_spec
        if spec.type == OffsetType.NONE:
            spec = subscription.start
        self._start_delivery(subscription, spec)

    # -- helpers -------------------------------------------------------------

    def _peer_host(self) -> str | None:
        peer = self.ctx.writer.get_extra_info("peername")
        return peer[0] if isinstance(peer, tuple) else None

    def _advertised(self) -> tuple[str, int]:
        """The listener's advertised host and port, else the address the client reached
        (never a wildcard bind address such as 0.0.0.0)."""
        host, port = self.ctx.advertised
        sockname = self.ctx.writer.get_extra_info("sockname")
        return host or str(sockname[0]), port or int(sockname[1])


def _succeeded(durable: asyncio.Future[None]) -> bool:
    return durable.done() and durable.exception() is None


def _filter(properties: dict[str, str]) -> tuple[list[str], bool]:
    """The filter values of a subscription's `filter.N` properties, as RabbitMQ 3.13+
    reads them, and `match-unfiltered` (also chunks of messages without a value)."""
    values = [value for key, value in properties.items() if key.startswith("filter.")]
    return values, properties.get("match-unfiltered") == "true"


async def handle(ctx: ConnectionContext) -> None:
    await StreamConnection(ctx).run()
