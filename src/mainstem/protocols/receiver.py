"""A connection's bytes received straight into buffers of its own.

asyncio's StreamReader copies every byte twice on the way in (into its buffer, then out
into the bytes a read returns), and the loop's transport once more before that. A handler
whose reads are large (segment appends) takes its socket over with `Receiver.take_over`:
the transport then receives into the Receiver's buffer, and a read hands out a view of
what arrived since the last one. A buffer is filled front to back and never written
twice, so a view stays valid for as long as it is kept (staged appends keep theirs until
written); a used-up buffer is left to its views and a fresh one started. Memory stays
bounded: reading pauses while a buffer's worth waits to be read. A handler that is done
with what a read returned before it reads again (it copied it) has its buffer `reused`:
received into again from the start, it stays warm in the caches. A connection's first
buffer is anonymous memory mapped for it, whose pages the kernel provides as bytes
arrive, so an idle connection holds the few it touched, not a whole buffer; later ones,
for a busy connection, come from the heap, where freed buffers are taken again warm.

A read is a plain await (no task per read): a handler that must stop between requests
when the server shuts down has the Receiver stopped (`stop`) instead of racing each read
against its closing event.
"""

from __future__ import annotations

import asyncio
import mmap
from collections.abc import Callable
from typing import cast

MIN_SPACE = 64 * 1024  # a buffer with less room left is not received into any more


def _lazy(size: int) -> mmap.mmap:
    """A buffer of `size` bytes whose memory is taken only as it is written (unmapped
    once neither the Receiver nor any view handed out holds it)."""
    return mmap.mmap(-1, size)


class Receiver(asyncio.BufferedProtocol):
    """The transport's protocol after the take-over. Writing stays with the stream
    protocol it replaced: flow control and the connection's end are passed on to it, so
    that the handler's StreamWriter (drain, close) works as before."""

    def __init__(self, stream: asyncio.BaseProtocol, transport: asyncio.Transport,
                 size: int, reused: bool) -> None:
        self._stream = cast(asyncio.Protocol, stream)
        self._transport = transport
        self._size = size
        self._reused = reused
        self._buffer: mmap.mmap | bytearray = _lazy(size)
        self._start = 0  # what lies before it was handed out
        self._filled = 0  # what lies before it arrived
        self._paused = False
        self._eof = False
        self._stopped = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._early = b""  # what the StreamReader held at the take-over
        # The server's check of a connection's first bytes (another protocol's opening
        # is refused), when none had arrived at the take-over.
        self._first_bytes: Callable[[bytes], bool] | None = None

    @classmethod
    def take_over(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  size: int, *, reused: bool = False) -> Receiver:
        """Receive the connection's bytes from now on, starting with what `reader`
        holds; `reader` is not read again. `size`: a buffer's, at least 2 * MIN_SPACE.
        `reused`: the handler is done with what a read returned once it reads again."""
        transport = cast(asyncio.Transport, writer.transport)
        receiver = cls(transport.get_protocol(), transport, size, reused)
        # StreamReader keeps what it received in `_buffer` and gives no other way to take
        # it without waiting.
        held: bytearray = reader._buffer  # type: ignore[attr-defined]
        receiver._early = bytes(held)
        held.clear()
        receiver._eof = reader.at_eof() or reader.exception() is not None
        receiver._first_bytes = getattr(reader, "first_bytes", None)
        receiver._error = reader.exception()
        transport.set_protocol(receiver)
        if not transport.is_reading() and not transport.is_closing():
            transport.resume_reading()  # the StreamReader may have paused it
        return receiver

    def stop(self, *_: object) -> None:
        """Reads return b"" from now on, whatever arrived: the handler stops between
        requests (a done-callback of the server's closing event, hence the arguments)."""
        self._stopped = True
        self._wake()

    async def read(self) -> bytes | memoryview:
        """What arrived since the last read, once something has; b"" at the end or once
        stopped."""
        if self._early and not self._stopped:
            early, self._early = self._early, b""
            return early
        while self._filled == self._start and not self._stopped:
            if self._error is not None:
                raise self._error
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._stopped:
            return b""
        data = memoryview(self._buffer)[self._start:self._filled]
        self._start = self._filled
        if self._paused:
            self._next_buffer()
            self._paused = False
            self._transport.resume_reading()
        return data

    def _next_buffer(self) -> None:
        """Receive from the start of this buffer again, or of a new one."""
        if not self._reused:
            self._buffer = bytearray(self._size)
        self._start = self._filled = 0

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- the transport's side ---------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._start == self._filled and (
                self._reused or len(self._buffer) - self._filled < MIN_SPACE):
            self._next_buffer()
        return memoryview(self._buffer)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        check, self._first_bytes = self._first_bytes, None
        if check is not None and not check(bytes(self._buffer[self._filled:self._filled + nbytes])):
            self._eof = True  # another protocol's opening: the handler sees the end
            self._wake()
            return
        self._filled += nbytes
        if len(self._buffer) - self._filled < MIN_SPACE:  # what waits cannot move: pause
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return self._stream.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        self._stream.connection_lost(exc)

    def pause_writing(self) -> None:
        self._stream.pause_writing()

    def resume_writing(self) -> None:
        self._stream.resume_writing()
