"""One segment store protocol connection over asyncio, driving the broker's segments.

The first frame must be Authenticate. Appenders are set up per (connection id,
segment); the events of a block are appended as one chunk per read batch and
acked with DataAppended once durable. Reads run as tasks so a read waiting at
the tail never blocks the appends sharing the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field

from mainstem.broker.auth import User
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    NotFound,
    PreconditionFailed,
)
from mainstem.broker.segment_store import (
    SegmentName,
    SegmentSealed,
    SegmentTruncated,
    check_found,
)
from mainstem.broker.stream_service import PartitionClosed, PartitionService
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.segment import codec as c

READ_SIZE = 256 * 1024
MAX_READ_BYTES = 8 * 1024 * 1024  # a SegmentRead carries at most this much data
MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # a message joined from partial pieces
MAX_CONCURRENT_READS = 16


class Close(Exception):
    """Reply with `reply`, then drop the connection."""

    def __init__(self, reply: c.Message) -> None:
        super().__init__(getattr(reply, "message", ""))
        self.reply = reply


@dataclass(slots=True)
class Appender:
    name: SegmentName
    connection_id: uuid.UUID
    level: int  # connection offset after the last complete event received
    cursor: int  # connection offset after the last byte received
    events: list[memoryview] = field(default_factory=list)
    ack_task: asyncio.Task[None] | None = None
    flushed: int = 0  # level of the last write to the log


@dataclass(slots=True)
class Block:
    appender: Appender
    start: int
    received: int = 0


class SegmentConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.segments = ctx.core.segments
        self.decoder = c.Decoder(min(ctx.limits.max_frame_size, c.DEFAULT_MAX_FRAME))
        self.reassembler = c.Reassembler(MAX_MESSAGE_SIZE)
        self.user: User | None = None
        self.appenders: dict[uuid.UUID, Appender] = {}
        self.block: Block | None = None
        self.partial_owner: Appender | None = None
        self.reads = asyncio.Semaphore(MAX_CONCURRENT_READS)
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_read = asyncio.get_running_loop().time()
        self.holding = False  # reads paused by a resource alarm

    # -- sending -------------------------------------------------------------

    def send(self, message: c.Message) -> None:
        frame = message.encode()
        for piece in c.split_partial(frame, self.decoder.max_frame_size):
            self.ctx.writer.write(piece)

    def spawn(self, coroutine: object) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)  # type: ignore[arg-type]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- main loop -----------------------------------------------------------

    async def run(self) -> None:
        self.spawn(self._keepalive_loop())
        reader = self.ctx.reader
        closing = asyncio.ensure_future(self.ctx.closing.wait())
        try:
            while True:
                read = asyncio.ensure_future(reader.read(READ_SIZE))
                await asyncio.wait((read, closing), return_when=asyncio.FIRST_COMPLETED)
                if not read.done():  # the server shuts down: stop between requests
                    read.cancel()
                    return
                data = read.result()
                if not data:
                    return
                if self.appenders and self.core.write_gate.held:
                    await self._wait_out_alarm()  # what was read waits with the rest
                self.last_read = asyncio.get_running_loop().time()
                for message, size in self.decoder.feed(data):
                    await self.handle(message, size)
                self.flush()
                await self.ctx.writer.drain()
        except c.FrameError as error:
            self.ctx.log.info("segment protocol error: %s", error)
            self.send(c.ProtocolError("", str(error)))
        except Close as close:
            self.send(close.reply)
        except (ConnectionError, PartitionClosed):
            return
        finally:
            closing.cancel()
            for task in list(self.tasks):
                task.cancel()
            with contextlib.suppress(ConnectionError, OSError):
                await asyncio.wait_for(self.ctx.writer.drain(), 1.0)

    async def _wait_out_alarm(self) -> None:
        """Hold an appending connection back as Pravega does under pressure: read nothing
        (appends wait in TCP buffers) until the alarm clears."""
        self.ctx.log.info("segment appends held: %s", self.core.write_gate.reason)
        self.holding = True  # the peer's keep-alives go unread meanwhile: not idleness
        try:
            await self.core.write_gate.opened()
        finally:
            self.holding = False
            self.last_read = asyncio.get_running_loop().time()

    async def _keepalive_loop(self) -> None:
        idle = self.ctx.limits.heartbeat_s
        if not idle:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(idle / 2)
            if not self.holding and loop.time() - self.last_read > idle:
                self.ctx.log.info("segment peer idle for %ss, dropping it", idle)
                self.ctx.writer.close()
                return
            self.send(c.KeepAlive())

    async def handle(self, message: c.Message, size: int) -> None:
        if self.user is None:
            await self.authenticate(message)
            return
        if isinstance(message, c.Event):
            self.on_event(message, size)
        elif isinstance(message, c.Partial):
            if self.block is not None:
                self.block.received += len(message.data)
            whole = self.reassembler.add(message)
            if whole is not None:
                await self.handle(whole, 0 if isinstance(whole, c.Event) else size)
        elif isinstance(message, c.KeepAlive):
            pass
        else:
            handler = self.HANDLERS.get(type(message))
            if handler is None:
                raise Close(c.ProtocolError("", f"{type(message).__name__} is a reply"))
            try:
                await handler(self, message)
            except BrokerError as error:
                self.send(_error_reply(getattr(message, "segment", ""), error))

    async def authenticate(self, message: c.Message) -> None:
        if not isinstance(message, c.Authenticate):
            raise Close(c.AuthenticationFailed("", "the first frame must be Authenticate"))
        peer = self.ctx.writer.get_extra_info("peername")
        try:
            self.user = await self.core.login(message.username, message.password,
                                              peer[0] if peer else None)
        except AuthenticationFailed as error:
            raise Close(c.AuthenticationFailed("", error.message)) from None
        self.ctx.identify(self.user.name)
        self.send(c.Authenticated())

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
        self.appenders[message.connection_id] = Appender(name, message.connection_id, level,
                                                         level, flushed=level)
        self.send(c.AppendSetup(str(name), message.connection_id, level))

    async def on_begin_block(self, message: c.BeginAppendBlock) -> None:
        appender = self.appenders.get(message.connection_id)
        if appender is None or self.block is not None:
            raise Close(c.ProtocolError("", "BeginAppendBlock without SetupAppend or "
                                            "inside another block"))
        pending = self.partial_owner is not None and self.reassembler.pending
        if pending and (self.partial_owner is not appender
                        or message.connection_offset != appender.cursor):
            raise Close(c.ProtocolError("", "a split event must continue in its appender's "
                                            "next block"))
        if not pending and message.connection_offset > appender.level:
            raise Close(c.InvalidEventNumber(
                str(appender.name), f"connection offset {message.connection_offset} is past "
                                    f"the stored level {appender.level}"))
        self.block = Block(appender, message.connection_offset)

    async def on_end_block(self, message: c.EndAppendBlock) -> None:
        block = self.block
        if block is None or block.appender.connection_id != message.connection_id:
            raise Close(c.ProtocolError("", "EndAppendBlock without its BeginAppendBlock"))
        end = block.start + block.received
        if message.block_length != block.received or message.connection_offset != end:
            raise Close(c.ProtocolError(
                str(block.appender.name), f"block length {message.block_length} at offset "
                f"{message.connection_offset} disagrees with {block.received} bytes received"))
        block.appender.cursor = end
        self.partial_owner = block.appender if self.reassembler.pending else None
        self.block = None

    def on_event(self, event: c.Event, size: int) -> None:
        block = self.block
        if block is None:
            raise Close(c.ProtocolError("", "an Event outside of an append block"))
        block.received += size
        appender = block.appender
        end = block.start + block.received
        if end > appender.level:  # at or below the stored level: a resend, dropped
            appender.events.append(event.data)
            appender.level = end

    def flush(self) -> None:
        """Append each appender's buffered events as one chunk and ack once durable."""
        for appender in self.appenders.values():
            if appender.events:
                self.flush_appender(appender)

    def flush_appender(self, appender: Appender) -> None:
        events, appender.events = appender.events, []
        try:
            service = self.segments.write(appender.name, appender.connection_id, events,
                                          appender.level)
        except BrokerError as error:
            raise Close(_error_reply(str(appender.name), error)) from None
        appender.flushed = appender.level
        if appender.ack_task is None:
            appender.ack_task = self.spawn(self._ack(appender, service))

    async def _ack(self, appender: Appender, service: PartitionService) -> None:
        acked = -1
        try:
            while acked < appender.flushed:
                target = appender.flushed
                await service.appender.settled()
                self.send(c.DataAppended(appender.connection_id, target))
                acked = target
        finally:
            appender.ack_task = None

    # -- reading and segment management ------------------------------------------

    async def on_read(self, message: c.ReadSegment) -> None:
        name = self._segment(message.segment, "read")
        check_found(name, self.core.streams)
        if message.offset < 0 or message.suggested_length < 0:
            raise Close(c.ProtocolError(str(name), "negative offset or length"))
        self.spawn(self._read(name, message))

    async def _read(self, name: SegmentName, message: c.ReadSegment) -> None:
        async with self.reads:
            try:
                got = await self.segments.read(name, message.offset,
                                               min(max(message.suggested_length, 1),
                                                   MAX_READ_BYTES))
            except BrokerError as error:
                self.send(_error_reply(str(name), error))
                return
            except PartitionClosed:
                self.send(c.NoSuchSegment(str(name), "the segment was deleted"))
                return
            self.send(c.SegmentRead(str(name), got.offset, got.at_tail, got.end_of_segment,
                                    got.data))

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
        self.segments.create(name)
        self.send(c.SegmentCreated(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_seal(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        await self.segments.seal(name)
        self.send(c.SegmentSealed(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_truncate(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        self.segments.truncate(name, message.offset)  # type: ignore[attr-defined]
        self.send(c.SegmentTruncated(message.request_id, str(name)))  # type: ignore[attr-defined]

    async def on_delete(self, message: c.Message) -> None:
        name = self._segment(message.segment, "configure")  # type: ignore[attr-defined]
        check_found(name, self.core.streams)
        await self.segments.delete(name)
        self.send(c.SegmentDeleted(message.request_id, str(name)))  # type: ignore[attr-defined]

    HANDLERS = {
        c.SetupAppend: on_setup_append,
        c.BeginAppendBlock: on_begin_block,
        c.EndAppendBlock: on_end_block,
        c.ReadSegment: on_read,
        c.GetStreamSegmentInfo: on_info,
        c.CreateSegment: on_create,
        c.SealSegment: on_seal,
        c.TruncateSegment: on_truncate,
        c.DeleteSegment: on_delete,
    }


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
    if isinstance(error, PreconditionFailed):
        return c.OperationUnsupported(segment, error.message)
    return c.ProtocolError(segment, error.message)


async def handle(ctx: ConnectionContext) -> None:
    await SegmentConnection(ctx).run()
