"""One segment store protocol connection over asyncio, driving the broker's segments.

The protocol's rules (handshake, keep-alives, append blocks, ack levels) live in
`state.SegmentState`; this moves bytes, carries out its actions and calls the broker.
The events of a block are appended as one chunk per read batch and acked with
DataAppended once durable. Bytes are received into the connection's own buffers
(`Receiver`) and go to the log from there: large appends are copied once, into the
chunk. Reads run as tasks so a read waiting at the tail never
blocks the appends sharing the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

from mainstem.broker.auth import User
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    StorageFailed,
    storage_failure,
)
from mainstem.broker.segment_store import (
    SegmentName,
    SegmentSealed,
    SegmentTruncated,
    check_found,
)
from mainstem.broker.stream_service import ChunkDamaged, PartitionClosed, TierUnavailable
from mainstem.logging_setup import describe_error
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.receiver import Receiver
from mainstem.protocols.segment import codec as c
from mainstem.protocols.segment.state import (
    Action,
    Close,
    Drop,
    Login,
    Phase,
    SegmentState,
    Send,
    Serve,
    Violation,
)

READ_SIZE = 1024 * 1024  # a receive buffer: a read's events go to the log as one chunk
MAX_READ_BYTES = 8 * 1024 * 1024  # a SegmentRead carries at most this much data
# A read's data is taken once no more than this of the answer before it waits for the
# socket, so the disk works on the next answer while the network sends the last one.
SEND_OVERLAP_BYTES = 1024 * 1024
MAX_CONCURRENT_READS = 16  # reads waiting at a tail at once
MAX_PENDING_READS = 256  # beyond, requests are not read on until reads finish
LINGER_S = 2.0  # after an error reply that ends the connection, for the peer to read it


# A request handler: the connection and one decoded request of its kind.
Handler = Callable[["SegmentConnection", Any], Awaitable[None]]


class SegmentConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.segments = ctx.core.segments
        self.loop = asyncio.get_running_loop()
        self.decoder = c.Decoder(min(ctx.limits.max_frame_size, c.DEFAULT_MAX_FRAME))
        self.state = SegmentState(ctx.limits.heartbeat_s, self.loop.time())
        self.user: User | None = None
        self.names: dict[uuid.UUID, SegmentName] = {}  # each appender's segment
        self.ack_tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        # Each appender's writes not yet acked: done once durable, or failed.
        self.receipts: defaultdict[uuid.UUID, list[asyncio.Future[None]]] = defaultdict(list)
        self.reads = asyncio.Semaphore(MAX_CONCURRENT_READS)
        self.pending_reads = asyncio.Semaphore(MAX_PENDING_READS)
        # A read's data is taken and sent only once the answer before it has (all but
        # SEND_OVERLAP_BYTES) gone to the socket: a client that pipelines reads and stops
        # reading holds one answer in the broker.
        self.sending = asyncio.Lock()
        ctx.writer.transport.set_write_buffer_limits(high=SEND_OVERLAP_BYTES,
                                                     low=SEND_OVERLAP_BYTES // 2)
        self.tasks: set[asyncio.Task[None]] = set()

    # -- sending -------------------------------------------------------------

    def send(self, message: c.Message) -> None:
        parts = message.encode_parts()
        if sum(map(len, parts)) - c.HEADER.size <= self.decoder.max_frame_size:
            self.ctx.writer.writelines(parts)
            return
        for piece in c.split_partial(b"".join(parts), self.decoder.max_frame_size):
            self.ctx.writer.write(piece)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def perform(self, actions: tuple[Action, ...]) -> None:
        """Carry out what the state asked for."""
        for action in actions:
            if isinstance(action, Send):
                self.send(action.message)
            elif isinstance(action, Serve):
                await self.serve(action.request)
            elif isinstance(action, Login):
                await self.perform(await self.login(action))
            elif isinstance(action, Close):
                raise Violation(action.reply)
            elif isinstance(action, Drop):
                self.ctx.log.warning("heartbeat.missed", extra={"reason": action.reason})
                self.ctx.writer.close()

    # -- main loop -----------------------------------------------------------

    async def run(self) -> None:
        self.spawn(self._keepalive_loop())
        receiver = Receiver.take_over(self.ctx.reader, self.ctx.writer, READ_SIZE)
        closing = asyncio.ensure_future(self.ctx.closing.wait())
        closing.add_done_callback(receiver.stop)  # the server shuts down: stop between requests
        try:
            while True:
                data = await receiver.read()
                if not data:
                    return
                if self.state.phase is Phase.CLOSED:
                    continue  # lingering after an error reply: what follows is not read
                if self.state.appending and self.core.write_gate.held:
                    await self._wait_out_alarm()  # what was read waits with the rest
                self.state.heard(self.loop.time())
                receive, on_events = self.state.receive, self.state.on_events
                for item in self.decoder.feed_events(data):
                    if isinstance(item, c.Events):
                        on_events(item)
                    elif actions := receive(*item):
                        await self.perform(actions)
                self.flush()
                await self.ctx.writer.drain()
        except c.FrameError as error:
            self.ctx.log.warning("frame.invalid", extra={"reason": str(error)})
            self.send(c.ProtocolError("", str(error)))
        except Violation as violation:
            self.send(violation.reply)
        except (ConnectionError, PartitionClosed):
            return
        finally:
            closing.cancel()
            for task in list(self.tasks):
                task.cancel()
            with contextlib.suppress(ConnectionError, OSError):
                async with asyncio.timeout(1.0):
                    await self.ctx.writer.drain()

    async def _wait_out_alarm(self) -> None:
        """Hold an appending connection back as Pravega does under pressure: read nothing
        (appends wait in TCP buffers) until the alarm clears."""
        self.ctx.log.info("alarm.appends_held", extra={"reason": self.core.write_gate.reason})
        self.state.hold()
        try:
            await self.core.write_gate.opened()
        finally:
            self.state.release(self.loop.time())

    async def _keepalive_loop(self) -> None:
        interval = self.state.keepalive_interval
        if not interval:
            return
        while self.state.phase is not Phase.CLOSED:
            await asyncio.sleep(interval)
            await self.perform(self.state.tick(self.loop.time()))

    async def login(self, login: Login) -> tuple[Action, ...]:
        try:
            user = await self.ctx.login(login.username, login.password)
            self.ctx.admit(user.name)  # segments have no vhost: the user's limit only
        except (AuthenticationFailed, NotAllowed) as error:
            return self.state.login_refused(error.message)
        self.user = user
        self.ctx.identify(self.user.name)
        return self.state.logged_in(self.user.name)

    async def serve(self, message: c.Message) -> None:
        try:
            await self.HANDLERS[type(message)](self, message)
        except BrokerError as error:
            self.send(_error_reply(getattr(message, "segment", ""), error))

    def _segment(self, text: str, kind: str) -> SegmentName:
        name = SegmentName.parse(text)
        assert self.user is not None
        self.core.auth.check_namespace_access(self.user, name.namespace)
        self.core.auth.check(self.user, name.namespace, kind, name.stream)  # type: ignore[arg-type]
        return name

    # -- appending -------------------------------------------------------------

    async def on_setup_append(self, message: c.SetupAppend) -> None:
        name = self._segment(message.segment, "write")
        check_found(name, self.core.streams)
        if self.segments.is_sealed(name):
            raise SegmentSealed(f"segment {name} is sealed")
        level = await self.segments.ack_level(name, message.connection_id)
        self.names[message.connection_id] = name
        await self.perform(self.state.append_setup(str(name), message.connection_id, level))

    def flush(self) -> None:
        """Append each appender's buffered events as one chunk and ack once durable."""
        for write in self.state.writes():
            connection_id = write.appender.connection_id
            try:
                receipt = self.segments.write(self.names[connection_id], connection_id,
                                              write.events, write.level)
            except BrokerError as error:
                raise Violation(_error_reply(write.appender.segment, error)) from None
            self.receipts[connection_id].append(receipt.durable)
            if connection_id not in self.ack_tasks:
                self.ack_tasks[connection_id] = self.spawn(self._ack(connection_id))

    async def _ack(self, connection_id: uuid.UUID) -> None:
        """Ack each appender's level once every write up to it is durable. A write that
        failed fails the connection instead: nothing past the last ack is acked, and the
        writer resends it after setting up again (its later writes were refused)."""
        receipts = self.receipts[connection_id]
        try:
            while (target := self.state.ack_due(connection_id)) is not None:
                waiting, receipts[:] = receipts[:], []
                await asyncio.wait(waiting)
                failure = next(filter(None, map(_failure, waiting)), None)
                if failure is not None:
                    self._append_failed(connection_id, failure)
                    return
                await self.perform(self.state.settled(connection_id, target))
        finally:
            del self.ack_tasks[connection_id]

    def _append_failed(self, connection_id: uuid.UUID, failure: BaseException) -> None:
        self.ctx.log.warning("append.failed", extra={"error": describe_error(failure)})
        reason = ("the segment cannot be written now (deleted, or no leader answered)"
                  if isinstance(failure, PartitionClosed) else storage_failure(failure))
        for action in self.state.append_failed(connection_id, reason):
            assert isinstance(action, Close)
            self.send(action.reply)
        self._close_after_reply()

    def _close_after_reply(self) -> None:
        """Close once the peer had the reply: a socket closed with unread bytes sends a
        reset, and the peer may lose the reply with it. So stop sending, go on reading
        (and discarding) until the peer closes, or for LINGER_S."""
        writer = self.ctx.writer
        if writer.can_write_eof():
            writer.write_eof()
        self.loop.call_later(LINGER_S, writer.close)

    # -- reading and segment management ------------------------------------------

    async def on_read(self, message: c.ReadSegment) -> None:
        name = self._segment(message.segment, "read")
        check_found(name, self.core.streams)
        if message.offset < 0 or message.suggested_length < 0:
            raise Violation(c.ProtocolError(str(name), "negative offset or length"))
        await self.pending_reads.acquire()
        self.spawn(self._read(name, message)).add_done_callback(
            lambda _: self.pending_reads.release())

    async def _read(self, name: SegmentName, message: c.ReadSegment) -> None:
        async with self.reads:
            try:
                await self.segments.wait_readable(name, message.offset)
                async with self.sending:
                    got = await self.segments.read(name, message.offset,
                                                   min(max(message.suggested_length, 1),
                                                       MAX_READ_BYTES))
                    self.send(c.SegmentRead(str(name), got.offset, got.at_tail,
                                            got.end_of_segment, got.data))
                    await self.ctx.writer.drain()
            except BrokerError as error:
                self.send(_error_reply(str(name), error))
            except PartitionClosed:
                self.send(c.NoSuchSegment(str(name), "the segment was deleted"))
            except TierUnavailable as error:  # the connection stays: the reader tries again
                self.ctx.log.warning("tier.unavailable", extra={"error": str(error)})
                self.send(c.TierUnavailable(str(name), "the tier holding the segment is "
                                            "unavailable; try again later"))
            except ChunkDamaged:  # reported by the segment store: logged and counted
                self.send(c.DataDamaged(str(name), f"the events at offset {message.offset} "
                                        "are damaged"))
            except ConnectionError:
                pass  # the connection ended: its loop stops too

    async def on_info(self, message: c.GetStreamSegmentInfo) -> None:
        name = self._segment(message.segment, "read")
        try:
            check_found(name, self.core.streams)
        except NotFound:
            self.send(c.StreamSegmentInfo(message.request_id, str(name), False, False, 0, 0))
            return
        self.send(c.StreamSegmentInfo(message.request_id, str(name), True,
                                      self.segments.is_sealed(name),
                                      self.segments.start_offset(name),
                                      self.segments.write_offset(name)))

    async def on_create(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        self.core.create_stream(name.namespace, name.stream, name.number + 1)
        self.send(c.SegmentCreated(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_seal(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        await self.segments.seal(name)
        self.send(c.SegmentSealed(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_truncate(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        await self.segments.truncate(name, message.offset)  # type: ignore[attr-defined]
        self.send(c.SegmentTruncated(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_delete(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        await self.segments.delete(name)
        self.send(c.SegmentDeleted(message.request_id, str(name)))  # type: ignore[attr-defined]

    HANDLERS: ClassVar[dict[type[c.Message], Handler]] = {
        c.SetupAppend: on_setup_append,
        c.ReadSegment: on_read,
        c.GetStreamSegmentInfo: on_info,
        c.CreateSegment: on_create,
        c.SealSegment: on_seal,
        c.TruncateSegment: on_truncate,
        c.DeleteSegment: on_delete,
    }


def _failure(durable: asyncio.Future[None]) -> BaseException | None:
    return PartitionClosed("cancelled") if durable.cancelled() else durable.exception()


def _error_reply(segment: str, error: BrokerError) -> c.Message:
    if isinstance(error, SegmentSealed):
        return c.SegmentIsSealed(segment, error.message)
    if isinstance(error, SegmentTruncated):
        return c.SegmentIsTruncated(segment, error.message)
    if isinstance(error, NotFound):
        return c.NoSuchSegment(segment, error.message)
    if isinstance(error, AlreadyExists):
        return c.SegmentAlreadyExists(segment, error.message)
    if isinstance(error, AccessRefused):
        return c.AuthenticationFailed(segment, error.message)
    if isinstance(error, StorageFailed):  # a request's catalog write: the connection stays
        return c.StorageFailed(segment, error.message)
    if isinstance(error, PreconditionFailed):
        return c.OperationUnsupported(segment, error.message)
    return c.ProtocolError(segment, error.message)


async def handle(ctx: ConnectionContext) -> None:
    await SegmentConnection(ctx).run()
