"""One RabbitMQ Stream protocol connection over asyncio, driving the broker core.

The codec turns bytes into frames. The connection's rules live in two pure objects:
`state.ConnectionState` (peer properties, SASL, tune, open, heartbeat, close) and
`credit.Subscriptions` (subscription ids, credit, single active consumer); this class
feeds them frames, carries out the actions they answer with (sending, logging in,
opening the namespace) and maps each command onto the broker's stream service. A
Publish frame goes to its partition's appender, which batches what arrives together
into chunks, and is confirmed once durable; a subscription ships committed chunks from
the segment files to the socket as they are, paced by credit (one credit = one chunk)
and by the socket (`PacedOutput`: a chunk goes as the socket takes it, so a consumer
that stops reading holds a piece of one chunk in the broker, not its backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mainstem.broker.active_consumers import ActiveConsumer
from mainstem.broker.auth import User
from mainstem.broker.cluster_view import ClusterView, NodeAddress
from mainstem.broker.errors import AuthenticationFailed, BrokerError, NotFound
from mainstem.broker.stream_service import ChunkLimits, PartitionClosed, PartitionService
from mainstem.broker.stream_service import Subscription as Reader
from mainstem.broker.stream_service.subscription import sendfile_socket
from mainstem.broker.streams import BINDING_KEYS, PARTITION_NAMES, Stream
from mainstem.logging_setup import describe_error
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.paced_output import PacedOutput
from mainstem.protocols.rabbit_stream import credit as c
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream import state as s
from mainstem.protocols.rabbit_stream.codec import (
    StreamCodec,
    Undecoded,
    encode,
    encode_deliver_prefix,
)
from mainstem.protocols.rabbit_stream.commands import (
    CommandFailed,
    resolve_offset,
    response_code,
    stream_arguments,
)
from mainstem.protocols.rabbit_stream.constants import Key, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.frames import PACKED_ID, unpacked
from mainstem.protocols.rabbit_stream.offload import DEFERRED, decoded_frames
from mainstem.protocols.rabbit_stream.publishers import Publisher, Publishers, refusal
from mainstem.protocols.rabbit_stream.state import CONNECTION_FRAMES
from mainstem.protocols.rabbit_stream.wire import FrameError, FrameTooLarge
from mainstem.protocols.receiver import Receiver

RECEIVE_BUFFER = 1024 * 1024
# Stop reading from a connection whose responses wait unsent to this much.
WRITE_HIGH_WATER = 4 * 1024 * 1024
# A chunk's bounds, whatever a Publish frame holds: Osiris cuts chunks by the batches
# its writer takes (at most 8,192 writes), so a subscription at `last` gets a slice of
# a large frame, never the whole frame.
CHUNK_LIMITS = ChunkLimits(entries=4096, bytes=1 << 20)
# On shutdown, how long confirms of what was already appended may take to go out.
SHUTDOWN_CONFIRM_WAIT_S = 2.0
OPEN = s.Phase.OPEN  # a module global: read once per frame
PUBLISH_FRAMES = frozenset({f.PublishBlock})  # decoded here, or by a worker


@dataclass(slots=True, eq=False)
class Subscription:
    """What carries one subscription out: its reader, delivery task and group seat."""

    subscription_id: int
    name: str
    service: PartitionService
    reader: Reader  # credit, position and the chunks this subscriber wants
    task: asyncio.Task[None] | None = None
    membership: ActiveConsumer | None = None
    consumed: int = 0  # messages delivered


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
                                       correlations, ctx.identity)
        self.flows = c.Subscriptions(correlations)
        self.user: User | None = None  # both set when the state says Opened
        self.namespace = "/"
        self.publishers: Publishers[PartitionService] = Publishers()
        self.stats = ctx.core.counters.stream  # message counts for /metrics
        self.subscriptions: dict[int, Subscription] = {}
        # Each Publish frame's durability, in arrival order, with the confirms it owes
        # (its publishing ids packed as a PublishConfirm carries them).
        self._confirms: deque[tuple[asyncio.Future[None], Publisher[PartitionService],
                                    bytes]] = deque()
        self._confirm_ready = asyncio.Event()
        self._staging: set[PartitionService] = set()  # handed this read's Publish frames
        self._tasks: list[asyncio.Task[None]] = []
        self._unwatch: list[Callable[[], None]] = []
        self._reply_timers: dict[int, asyncio.TimerHandle] = {}  # ConsumerUpdates asked
        self._transport = ctx.writer.transport
        self.output = PacedOutput(ctx.writer, sendfile_socket(self._transport))
        self._handlers: dict[type, Callable[[Any], Any]] = {
            f.DeclarePublisher: self.on_declare_publisher,
            f.PublishBlock: self.on_publish,
            f.QueryPublisherSequence: self.on_query_publisher_sequence,
            f.DeletePublisher: self.on_delete_publisher,
            f.Subscribe: self.on_subscribe,
            f.Credit: lambda frame: self._flow(self.flows.credit(frame)),
            f.StoreOffset: self.on_store_offset,
            f.QueryOffset: self.on_query_offset,
            f.Unsubscribe: lambda frame: self._flow(self.flows.unsubscribe(frame)),
            f.CreateStream: self.on_create_stream,
            f.DeleteStream: self.on_delete_stream,
            f.Metadata: self.on_metadata,
            f.Route: self.on_route,
            f.Partitions: self.on_partitions,
            f.ConsumerUpdateReply: lambda frame: self._flow(
                self.flows.consumer_update_reply(frame)),
            f.StreamStats: self.on_stream_stats,
            f.CreateSuperStream: self.on_create_super_stream,
            f.DeleteSuperStream: self.on_delete_super_stream,
            f.ResolveOffsetSpec: self.on_resolve_offset_spec,
        }

    # -- the connection's life ----------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.state.heard_from_peer(loop.time())
        self._tasks.append(loop.create_task(self._confirm_loop()))
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
        while self._confirms and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await self._close_from_server(ResponseCode.OK, "broker shutting down")

    async def _read_loop(self) -> None:
        # Reads land in the Receiver's buffer and are copied once, into the codec's.
        reader = Receiver.take_over(self.ctx.reader, self.ctx.writer, RECEIVE_BUFFER,
                                    reused=True)
        loop = asyncio.get_running_loop()
        while self.state.phase is not s.Phase.CLOSED:
            if self.publishers and self.core.write_gate.held:
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
            self._write_staged()
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
            self._write_staged()  # whatever follows a publish sees it written
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

    def _write_staged(self) -> None:
        """One chunk per partition for the frames of one read, as Osiris batches its
        pending writes: they share one write, one index entry, one fsync, one Deliver."""
        for service in self._staging:
            service.appender.write_staged()
        self._staging.clear()

    async def _release(self) -> None:
        self.state.connection_lost()
        for timer in self._reply_timers.values():
            timer.cancel()
        for unwatch in self._unwatch:
            unwatch()
        for subscription_id in list(self.subscriptions):
            self._flow(self.flows.end(subscription_id))
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.output.close()  # chunks part-sent: their segments unpinned

    async def _close_from_server(self, code: int, reason: str) -> None:
        self.log.info("connection.closing", extra={"code": code, "reason": reason})
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._perform(self.state.close(code, reason))
            await asyncio.wait_for(self.output.drain(), 2)

    async def _close_requested(self, reason: str) -> None:
        """An operator closed the connection (management API): say Close, hang up."""
        await self._close_from_server(ResponseCode.OK, reason)
        self._transport.close()

    async def _heartbeat_loop(self, interval_s: int) -> None:
        """Ask the state, every interval, whether to heartbeat the peer or drop it."""
        loop = asyncio.get_running_loop()
        while not self._transport.is_closing():
            await asyncio.sleep(interval_s)
            held = bool(self.publishers) and self.core.write_gate.held  # we stopped reading
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
                    self._tasks.append(asyncio.get_running_loop().create_task(
                        self._heartbeat_loop(interval_s)))
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
        self.user, self.namespace = action.user, action.namespace
        self.ctx.identify(action.user.name, self.namespace)
        self.ctx.on_close_request = self._close_requested
        self.ctx.stream_publishers = self._publisher_rows
        self.ctx.stream_consumers = self._consumer_rows
        self.ctx.log.info("session.opened", extra={
            "user": action.user.name, "namespace": self.namespace})

    # -- output --------------------------------------------------------------

    def send(self, frame: f.Frame) -> None:
        self.output.write(encode(frame))

    def respond(self, key: int, correlation_id: int, code: int = ResponseCode.OK) -> None:
        self.send(f.Response(key, correlation_id, code))

    # -- streams -------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[Stream, PartitionService]:
        stream, index = self.core.streams.resolve(self.namespace, name)
        return stream, stream.services[index]

    def _check(self, kind: str, name: str) -> None:
        assert self.user is not None
        self.core.auth.check(self.user, self.namespace, kind, name)  # type: ignore[arg-type]

    async def on_create_stream(self, frame: f.CreateStream) -> None:
        try:
            self._check("configure", frame.stream)
            await self._create(frame.stream, 1, stream_arguments(frame.arguments))
        except BrokerError as error:
            self.respond(Key.CREATE_STREAM, frame.correlation_id, response_code(error))
        except CommandFailed as failed:
            self.respond(Key.CREATE_STREAM, frame.correlation_id, failed.code)
        else:
            self.respond(Key.CREATE_STREAM, frame.correlation_id)

    async def _create(self, name: str, partitions: int, arguments: dict[str, Any]) -> None:
        """Create here, or in the cluster, which places the stream's replicas."""
        if self.core.streams.find(self.namespace, name) is None:  # a new one: max-queues
            self.core.limits.check_queue(self.namespace, name)
        if self.core.cluster is None:
            self.core.streams.create(self.namespace, name, partitions, arguments)
        else:
            await self.core.cluster.create_stream(self.namespace, name, partitions, arguments)

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
            if self.core.cluster is None:
                await self.core.streams.delete(self.namespace, name)
            else:
                await self.core.cluster.delete_stream(self.namespace, name)
        except BrokerError as error:
            return response_code(error)
        return ResponseCode.OK

    async def on_create_super_stream(self, frame: f.CreateSuperStream) -> None:
        try:
            self._check("configure", frame.name)
            arguments = stream_arguments(frame.arguments)
            arguments[PARTITION_NAMES] = frame.partitions
            arguments[BINDING_KEYS] = frame.binding_keys
            for partition_name in frame.partitions:
                self._check("configure", partition_name)
            if not frame.partitions:
                raise CommandFailed(ResponseCode.PRECONDITION_FAILED)
            await self._create(frame.name, len(frame.partitions), arguments)
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
        if self.core.cluster is not None:
            self._cluster_metadata(frame, self.core.cluster)
            return
        host, port = self.ctx.advertised_address()
        streams = []
        for name in frame.streams:
            try:
                self._resolve(name)
            except NotFound:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST, None))
            else:
                streams.append(r.StreamMetadata(name, ResponseCode.OK, 0))
        self.send(r.MetadataResponse(frame.correlation_id, [r.Broker(0, host, port)], streams))

    def _cluster_metadata(self, frame: f.Metadata, cluster: ClusterView) -> None:
        """Each stream's leader and replicas with the host and port clients reach them at,
        as RabbitMQ answers: publishers go to the leader, consumers to any of them."""
        brokers: dict[str, r.Broker] = {}

        def reference(node: NodeAddress) -> int:
            if node.name not in brokers:
                if node.name == cluster.node_name:
                    host, port = self.ctx.advertised_address()
                else:
                    host, port = node.host, int(node.ports.get(self.ctx.listener, 0))
                brokers[node.name] = r.Broker(len(brokers), host, port)
            return brokers[node.name].reference

        streams = []
        for name in frame.streams:
            try:
                stream, index = self.core.streams.resolve(self.namespace, name)
                placement = cluster.placement(self.namespace, stream.name, index)
            except NotFound:
                placement = None
            if placement is None:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST, None))
                continue
            if placement.leader is None:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_NOT_AVAILABLE, None))
                continue
            leader = reference(placement.leader)
            replicas = [reference(n) for n in placement.replicas if n != placement.leader]
            streams.append(r.StreamMetadata(name, ResponseCode.OK, leader, replicas))
        self.send(r.MetadataResponse(frame.correlation_id, list(brokers.values()), streams))

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
            self._check("read", frame.stream)  # before the look-up, as RabbitMQ does
            _, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.send(r.StreamStatsResponse(frame.correlation_id, response_code(error), {}))
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
        if stream.namespace != self.namespace or not self.state.is_open:
            return
        gone = {id(service) for service in stream.services}
        notified = self.publishers.drop(lambda service: id(service) in gone)
        for subscription in list(self.subscriptions.values()):
            if id(subscription.service) in gone:
                notified.add(subscription.name)
                self._flow(self.flows.end(subscription.subscription_id))
        self._send_metadata_updates(notified)

    def _on_leader_moved(self, stream: Stream, service: PartitionService) -> None:
        """A partition's leader moved to another node: its publishers here are dropped and
        told, as RabbitMQ does when a stream's writer changes, so clients look the new
        leader up and redeclare there. Subscriptions stay: every replica serves the same
        committed chunks, so a consumer has nothing to move for."""
        if stream.namespace != self.namespace or not self.state.is_open:
            return
        self._send_metadata_updates(self.publishers.drop(lambda target: target is service))

    def _send_metadata_updates(self, partition_names: set[str]) -> None:
        for partition_name in sorted(partition_names):
            self.send(r.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, partition_name))

    # -- publishing ----------------------------------------------------------

    def on_declare_publisher(self, frame: f.DeclarePublisher) -> None:
        try:
            self._check("write", frame.stream)
            _, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.respond(Key.DECLARE_PUBLISHER, frame.correlation_id, response_code(error))
            return
        if frame.reference:  # starting over: publishes refused after a failed write end
            partition.appender.resume(frame.reference)
        self.send(self.publishers.declare(frame, partition))

    def _publisher_rows(self) -> list[dict[str, object]]:
        """As RabbitMQ's /api/stream/publishers shows them, with the last stored sequence
        of a deduplicating publisher."""
        return [{"publisher_id": p.publisher_id, "reference": p.reference,
                 "queue": {"name": p.name, "vhost": self.namespace},
                 "published": p.published,
                 "sequence": p.target.appender.sequence(p.reference) if p.reference else None}
                for p in self.publishers.by_id.values()]

    def _consumer_rows(self) -> list[dict[str, object]]:
        """As RabbitMQ's /api/stream/consumers shows them: the offset read next and the
        committed messages not sent yet."""
        rows: list[dict[str, object]] = []
        for sub in self.subscriptions.values():
            offset = sub.reader.position
            rows.append({"subscription_id": sub.subscription_id,
                         "queue": {"name": sub.name, "vhost": self.namespace},
                         "consumed": sub.consumed, "offset": offset,
                         "offset_lag": max(sub.service.committed_offset - offset, 0),
                         "credits": sub.reader.credit or 0,
                         "active": sub.membership is None or sub.membership.is_active})
        return rows

    def on_publish(self, frame: f.PublishBlock) -> None:
        """Hand the frame's messages to its partition's appender, which batches what
        arrives together into chunks, and queue the confirms they owe. The frame is staged
        whole, with no work per message, unless something in it needs that (ids that do
        not rise, a replica's forward, a block too big for a chunk): then message by
        message, so that duplicates are skipped one by one."""
        publisher = self.publishers.by_id.get(frame.publisher_id)
        if publisher is None:
            self.send(refusal(frame.publisher_id, unpacked(frame.packed_ids),
                              ResponseCode.PUBLISHER_DOES_NOT_EXIST))
            return
        appender, writer = publisher.target.appender, publisher.reference or None
        receipt = appender.append_block(
            frame.entries, frame.count, frame.num_records, writer=writer,
            first=frame.first_id, last=frame.last_id, filter_values=frame.filter_values,
            limits=CHUNK_LIMITS) if frame.rising else None
        if receipt is None:
            each = frame.publish()
            receipt = appender.append_entries(
                each.entries, all_simple=each.num_records == len(each.entries),
                writer=writer, sequences=each.publishing_ids if writer else None,
                filter_values=each.filter_values, limits=CHUNK_LIMITS)
        publisher.published += frame.count
        self.stats.publish += frame.count
        self.stats.publish_confirm += frame.count  # every stream publish is confirmed
        self._staging.add(publisher.target)
        # Duplicates are confirmed too, once everything written before them is durable.
        self._confirms.append((receipt.durable, publisher, frame.packed_ids))
        self._confirm_ready.set()

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
                    self.send(refusal(publisher.publisher_id, unpacked(ids),
                                      ResponseCode.STREAM_DOES_NOT_EXIST))
                    continue
                except Exception as error:  # disk full, file too big: these, not the link
                    self.log.warning("write.failed", extra={"error": describe_error(error)})
                    self.send(refusal(publisher.publisher_id, unpacked(ids),
                                      ResponseCode.STREAM_NOT_AVAILABLE))
                    continue
                if self._confirms and self._confirms[0][1] is publisher:
                    merged = [ids]  # joined once: frames merge in linear time
                    while (self._confirms and self._confirms[0][1] is publisher
                           and _succeeded(self._confirms[0][0])):
                        merged.append(self._confirms.popleft()[2])
                    ids = b"".join(merged)
                self.stats.confirm += len(ids) // PACKED_ID.size
                self.send(r.PublishConfirm(publisher.publisher_id, ids))

    async def on_query_publisher_sequence(self, frame: f.QueryPublisherSequence) -> None:
        try:
            self._check("read", frame.stream)
            _, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.send(r.QueryPublisherSequenceResponse(frame.correlation_id,
                                                       response_code(error), 0))
            return
        appender = partition.appender
        if appender.forwarder is None:  # asking where it stands, it resumes from there
            appender.resume(frame.reference)
        try:  # a replica asks the leader: its own log may hold chunks never committed
            sequence = (appender.sequence(frame.reference) if appender.forwarder is None
                        else await appender.committed_sequence(frame.reference)) or 0
        except PartitionClosed:  # no leader answered
            self.send(r.QueryPublisherSequenceResponse(
                frame.correlation_id, ResponseCode.STREAM_NOT_AVAILABLE, 0))
            return
        self.send(r.QueryPublisherSequenceResponse(frame.correlation_id, ResponseCode.OK,
                                                   sequence))

    def on_delete_publisher(self, frame: f.DeletePublisher) -> None:
        self.send(self.publishers.delete(frame))

    # -- consuming -----------------------------------------------------------

    def on_subscribe(self, frame: f.Subscribe) -> None:
        try:
            self._check("read", frame.stream)
            stream, partition = self._resolve(frame.stream)
        except BrokerError as error:
            self.respond(Key.SUBSCRIBE, frame.correlation_id, response_code(error))
            return
        self._flow(self.flows.subscribe(frame), (stream, partition))

    def _flow(self, actions: list[c.FlowAction],
              resolved: tuple[Stream, PartitionService] | None = None) -> None:
        """Carry out what the subscription rules decided; `resolved` is the stream of
        the Subscribe that asked to start reading."""
        for action in actions:
            match action:
                case s.Send(frame):
                    self.send(frame)
                case c.Grant(subscription_id, credit):
                    self.subscriptions[subscription_id].reader.grant(credit)
                case c.StartReading() if resolved is not None:
                    self._start_reading(action, resolved[1])
                case c.JoinGroup() if resolved is not None:
                    self._join_group(action, resolved[0])
                case c.StartDelivery(subscription_id, spec):
                    self._start_delivery(self.subscriptions[subscription_id], spec)
                case c.StopDelivery(subscription_id):
                    self._stop_delivery(self.subscriptions[subscription_id])
                case c.EndSubscription(subscription_id):
                    self._end_subscription(subscription_id)
                case c.SteppedDown(subscription_id):
                    membership = self.subscriptions[subscription_id].membership
                    if membership is not None:
                        membership.stepped_down()
                case c.AwaitReply(correlation_id):
                    self._reply_timers[correlation_id] = asyncio.get_running_loop().call_later(
                        self.ctx.limits.request_timeout_s, self._reply_overdue, correlation_id)

    def _reply_overdue(self, correlation_id: int) -> None:
        """A ConsumerUpdate unanswered for the request timeout: as RabbitMQ, drop the
        connection; its subscriptions leave their groups, which go on without it."""
        self._reply_timers.pop(correlation_id, None)
        if self.flows.awaiting(correlation_id) and not self._transport.is_closing():
            self.log.warning("consumer_update.timeout", extra={
                "correlation_id": correlation_id,
                "timeout_s": self.ctx.limits.request_timeout_s})
            self._transport.abort()

    def _start_reading(self, action: c.StartReading, partition: PartitionService) -> None:
        reader = partition.subscribe(partition.committed_offset, credit=action.credit,
                                     filter_values=action.filter_values,
                                     match_unfiltered=action.match_unfiltered)
        self.subscriptions[action.subscription_id] = Subscription(
            action.subscription_id, action.stream, partition, reader)
        self.ctx.add_consumer(str(action.subscription_id), action.stream,
                              prefetch_count=action.credit, ack_required=False)

    def _start_delivery(self, subscription: Subscription, spec: f.OffsetSpec) -> None:
        subscription.reader.seek(resolve_offset(subscription.service, spec))
        subscription.task = asyncio.get_running_loop().create_task(
            self._deliver_loop(subscription))
        self._tasks.append(subscription.task)

    def _stop_delivery(self, subscription: Subscription) -> None:
        if subscription.task is not None:
            subscription.task.cancel()
            subscription.task = None

    async def _deliver_loop(self, subscription: Subscription) -> None:
        """Ship committed chunks as Deliver frames, one credit each: the chunk's header
        and data go from the segment file, after the frame's own header, as the socket
        takes them; the next chunk is read once this one has been handed over."""
        reader, service = subscription.reader, subscription.service
        try:
            while True:
                chunk = await reader.next_view()
                header = encode_deliver_prefix(subscription.subscription_id,
                                               self.state.deliver_version, chunk.wire_size,
                                               service.committed_chunk_id)
                sending = self.output.send(reader.transfer(chunk, header))
                subscription.consumed += chunk.num_records
                self.stats.deliver_no_ack += chunk.num_records
                self.core.delivery_stats.delivered(
                    self.namespace, subscription.name, chunk.num_records, chunk.location.send_size)
                del chunk  # a small chunk's bytes, read whole: not held while the socket waits
                if sending is not None:
                    await sending  # a consumer that does not read holds one piece, not the log
        except (PartitionClosed, ConnectionError):
            return

    def _end_subscription(self, subscription_id: int) -> None:
        subscription = self.subscriptions.pop(subscription_id)
        self.ctx.remove_consumer(str(subscription_id))
        self._stop_delivery(subscription)
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
            self.log.info("offset.store_refused", extra={"stream": frame.stream,
                                                         "reason": error.message})

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
        offset = resolve_offset(partition, frame.offset_spec)
        self.send(r.ResolveOffsetSpecResponse(frame.correlation_id, ResponseCode.OK,
                                              OffsetType.OFFSET, offset))

    # -- single active consumer ----------------------------------------------

    def _join_group(self, action: c.JoinGroup, stream: Stream) -> None:
        subscription = self.subscriptions[action.subscription_id]
        index = stream.partition_names.index(subscription.name)
        group = self.core.active_consumers.group(
            self.namespace, subscription.name, action.name,
            position=index if action.super_stream else None)
        subscription_id = action.subscription_id
        subscription.membership = group.join(
            activate=lambda: self._flow(self.flows.activation(subscription_id, True)),
            deactivate=lambda: self._flow(self.flows.activation(subscription_id, False)))


def _succeeded(durable: asyncio.Future[None]) -> bool:
    return durable.done() and durable.exception() is None


async def handle(ctx: ConnectionContext) -> None:
    await StreamConnection(ctx).run()
