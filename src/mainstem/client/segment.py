"""A small asyncio client for mainstem's segment store protocol.

It authenticates, creates/seals/truncates/deletes segments, reads byte ranges,
and appends events in blocks; an appender keeps every unacked event so that,
after a reconnect, `resend` replays exactly the events past the stored level.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from typing import TypeVar

from mainstem.protocols.segment import codec as c

_M = TypeVar("_M", bound=c.Message)


class SegmentClientError(Exception):
    def __init__(self, reply: c.Message) -> None:
        super().__init__(f"{type(reply).__name__}: {getattr(reply, 'message', '')}")
        self.reply = reply


class SegmentClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = c.Decoder()
        self.reassembler = c.Reassembler(1 << 30)
        self.replies: asyncio.Queue[c.Message] = asyncio.Queue()
        self.acks: dict[uuid.UUID, int] = {}
        self.ack_event = asyncio.Event()
        # Why the connection ended (its last error reply, if any): appenders stop waiting.
        self.ended: c.Message | None = None
        self._last_error: c.Message | None = None
        self._pump = asyncio.get_running_loop().create_task(self._read_loop())
        self._request_id = 0

    @classmethod
    async def connect(cls, host: str, port: int, username: str = "guest",
                      password: str = "guest") -> SegmentClient:
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer)
        client.send(c.Authenticate(username, password))
        await client.expect(c.Authenticated)
        return client

    async def close(self) -> None:
        self._pump.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()

    def send(self, message: c.Message) -> None:
        self.writer.write(message.encode())

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self.reader.read(1 << 20)
            except ConnectionError:
                data = b""
            if not data:
                self.ended = self._last_error or c.ProtocolError("", "connection closed")
                self.ack_event.set()
                await self.replies.put(self.ended)
                return
            for decoded, _ in self.decoder.feed(data):
                message = (self.reassembler.add(decoded) if isinstance(decoded, c.Partial)
                           else decoded)
                if message is None:
                    continue
                if isinstance(message, c.DataAppended):
                    self.acks[message.connection_id] = message.ack_level
                    self.ack_event.set()
                elif not isinstance(message, c.KeepAlive):
                    if isinstance(message, c.SegmentError):
                        self._last_error = message
                    await self.replies.put(message)

    async def expect(self, kind: type[_M], timeout: float = 10) -> _M:
        async with asyncio.timeout(timeout):
            reply = await self.replies.get()
        if not isinstance(reply, kind):
            raise SegmentClientError(reply)
        return reply

    def _next_id(self) -> int:
        self._request_id += 1
        return self._request_id

    async def create(self, segment: str) -> None:
        self.send(c.CreateSegment(self._next_id(), segment))
        await self.expect(c.SegmentCreated)

    async def seal(self, segment: str) -> None:
        self.send(c.SealSegment(self._next_id(), segment))
        await self.expect(c.SegmentSealed)

    async def truncate(self, segment: str, offset: int) -> None:
        self.send(c.TruncateSegment(self._next_id(), segment, offset))
        await self.expect(c.SegmentTruncated)

    async def delete(self, segment: str) -> None:
        self.send(c.DeleteSegment(self._next_id(), segment))
        await self.expect(c.SegmentDeleted)

    async def info(self, segment: str) -> c.StreamSegmentInfo:
        self.send(c.GetStreamSegmentInfo(self._next_id(), segment))
        return await self.expect(c.StreamSegmentInfo)

    async def read(self, segment: str, offset: int, length: int = 1 << 20) -> c.SegmentRead:
        self.send(c.ReadSegment(segment, offset, length))
        return await self.expect(c.SegmentRead, timeout=60)

    async def read_all(self, segment: str, offset: int = 0) -> bytes:
        """Every byte from `offset` to the current tail."""
        parts = []
        while True:
            got = await self.read(segment, offset)
            parts.append(bytes(got.data))
            offset += len(got.data)
            if got.at_tail:
                return b"".join(parts)

    async def read_events(self, segment: str, offset: int = 0) -> list[bytes]:
        """Every event from `offset` to the current tail, unframed."""
        return split_events(await self.read_all(segment, offset))

    async def appender(self, segment: str, connection_id: uuid.UUID | None = None
                       ) -> Appender:
        appender = Appender(self, segment, connection_id or uuid.uuid4())
        await appender.setup()
        return appender


class Appender:
    """Appends events in blocks; remembers unacked events for `resend`."""

    def __init__(self, client: SegmentClient, segment: str, connection_id: uuid.UUID) -> None:
        self.client = client
        self.segment = segment
        self.connection_id = connection_id
        self.offset = 0  # connection offset after the last event sent
        self.unacked: deque[tuple[int, bytes]] = deque()  # (end offset, event data)

    async def setup(self) -> int:
        self.client.send(c.SetupAppend(self.connection_id, self.segment))
        reply = await self.client.expect(c.AppendSetup)
        level = reply.ack_level
        self.client.acks[self.connection_id] = level
        self._forget(level)
        if not self.unacked:
            self.offset = max(self.offset, level)
        return level

    def _forget(self, level: int) -> None:
        while self.unacked and self.unacked[0][0] <= level:
            self.unacked.popleft()

    def append_block(self, events: list[bytes]) -> None:
        """Send one block of events (acks arrive later; see `flush`)."""
        frames, end = c.encode_append_block(self.connection_id, self.offset, events)
        at = self.offset
        for event in events:
            at += c.event_length(event)
            self.unacked.append((at, event))
        self.offset = end
        self.client.writer.write(frames)

    async def resend(self) -> None:
        """After `setup` on a new connection: send every event past the stored level."""
        pending = list(self.unacked)
        if not pending:
            return
        start = pending[0][0] - c.event_length(pending[0][1])
        frames, _ = c.encode_append_block(self.connection_id, start, [e for _, e in pending])
        self.client.writer.write(frames)

    async def flush(self, timeout: float = 30) -> int:
        """Wait until everything sent is acked; return the ack level. SegmentClientError
        when the connection ends first (e.g. StorageFailed): set up on a new connection
        and `resend`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.client.acks.get(self.connection_id, 0) < self.offset:
            if self.client.ended is not None:
                raise SegmentClientError(self.client.ended)
            self.client.ack_event.clear()
            async with asyncio.timeout_at(deadline):
                await self.client.ack_event.wait()
        level = self.client.acks[self.connection_id]
        self._forget(level)
        return level


def split_events(data: bytes) -> list[bytes]:
    """The events in segment bytes: each stored as its Event frame (type, length, body)."""
    events, position = [], 0
    while position < len(data):
        _, length = c.HEADER.unpack_from(data, position)
        events.append(data[position + c.HEADER.size:position + c.HEADER.size + length])
        position += c.HEADER.size + length
    return events
