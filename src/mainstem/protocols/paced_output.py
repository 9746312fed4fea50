"""A connection's output with deliveries paced by its socket, as Osiris sends a chunk only
when the socket takes it.

Frames a handler writes (responses, confirms, heartbeats) go to the transport as they
come. A delivery (`Paced`: a frame whose bulk lies in a segment file) goes by sendfile as
far as the kernel takes it at once; when the socket is not keeping up, the rest goes a
piece (`WAIT_PIECE`) at a time, each handed to the transport only once it has sent the
one before. The transport is told to ask for a wait as soon as it holds anything
(`WRITE_LIMIT`), so its pause/resume callbacks (a StreamWriter's drain) say when the socket
is writable. A consumer that stops reading thus holds one piece in the broker, not its
backlog. A delivery once started is finished by the output itself (a cancelled delivery
loop cannot cut a frame in two); frames written meanwhile wait behind it, in order.
`close` releases whatever is queued.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Protocol

# What the transport may hold before it pauses its protocol: nothing.
WRITE_LIMIT = 0
# Bytes of a delivery handed to the transport at once when the socket is not keeping up.
WAIT_PIECE = 16 * 1024


class Paced(Protocol):
    """Bytes sent as the socket takes them (a `log.transfer.Transfer`)."""

    @property
    def remaining(self) -> int: ...

    def send_now(self, socket_fd: int) -> bool: ...

    def take(self, limit: int) -> bytes: ...

    def hold(self) -> None: ...  # what it reads stays readable until release

    def release(self) -> None: ...


class PacedOutput:
    """`socket_fd`: the plain socket to sendfile into, None where bytes must go through
    the transport (TLS)."""

    def __init__(self, writer: asyncio.StreamWriter, socket_fd: int | None) -> None:
        self._writer = writer
        self._transport = writer.transport
        self._transport.set_write_buffer_limits(high=WRITE_LIMIT, low=0)
        self._socket_fd = socket_fd
        # Behind a delivery part-sent: frames (bytes) and deliveries with their waiters.
        self._queue: deque[bytes | tuple[Paced, asyncio.Future[None]]] = deque()
        self._queued_bytes = 0
        self._pump: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def buffered(self) -> int:
        """Bytes of frames waiting, in the transport or behind a delivery."""
        return self._transport.get_write_buffer_size() + self._queued_bytes

    def write(self, data: bytes) -> None:
        """A frame, after everything written or sent before it."""
        if self._closed or self._transport.is_closing():
            return
        if self._pump is None:
            self._transport.write(data)
        else:
            self._queue.append(data)
            self._queued_bytes += len(data)

    def send(self, item: Paced) -> asyncio.Future[None] | None:
        """Send `item` after everything before it; it is released once sent (or the
        connection ends). None: it went at once; else a future done once it has all been
        handed over (cancelling it does not stop the sending)."""
        if self._closed or self._transport.is_closing():
            item.release()
            raise ConnectionResetError("the connection is closing")
        if self._pump is None:
            try:
                sent = self._push(item)
            except OSError as error:
                item.release()
                raise self._fail(error) from error
            if sent:
                item.release()
                return None
        item.hold()  # sent in later steps
        done = asyncio.get_running_loop().create_future()
        self._queue.append((item, done))
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run())
        return done

    async def drain(self) -> None:
        """Wait until every delivery started has gone and the transport is empty."""
        while self._pump is not None:
            await asyncio.wait({self._pump})  # a waiter cancelled leaves the pump be
        await self._writer.drain()

    def close(self) -> None:
        """The connection ends: stop sending, release every delivery queued."""
        self._closed = True
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        self._drop_queue(ConnectionResetError("the connection closed"))

    def _push(self, item: Paced) -> bool:
        """Send what the socket takes now, then pieces through the transport until one
        stays in it (the socket is full); True once all of `item` has been handed over."""
        empty = self._transport.get_write_buffer_size() == 0
        if self._socket_fd is not None and empty and item.send_now(self._socket_fd):
            return True
        while item.remaining and self._transport.get_write_buffer_size() == 0:
            self._transport.write(item.take(WAIT_PIECE))
        return item.remaining == 0

    async def _run(self) -> None:
        """Send what is queued, in order, each delivery as the socket takes it."""
        try:
            while self._queue:
                entry = self._queue[0]
                if isinstance(entry, bytes):
                    self._queue.popleft()
                    self._queued_bytes -= len(entry)
                    self._transport.write(entry)
                    continue
                item, done = entry
                while not self._push(item):
                    await self._writable()
                self._queue.popleft()
                item.release()
                if not done.done():
                    done.set_result(None)
        except OSError as error:
            self._fail(error)
        finally:
            if self._pump is asyncio.current_task():
                self._pump = None

    async def _writable(self) -> None:
        """Wait until the transport has sent everything it holds."""
        while self._transport.get_write_buffer_size() > 0:
            if self._transport.is_closing():
                raise ConnectionResetError("the connection is closing")
            await self._writer.drain()

    def _fail(self, error: OSError) -> ConnectionResetError:
        """The peer went, or a file gave out mid-frame (nothing can follow half a frame):
        the connection ends. The error for those waiting."""
        self._closed = True
        lost = ConnectionResetError(f"delivery failed: {error}")
        self._drop_queue(lost)
        self._transport.abort()
        return lost

    def _drop_queue(self, error: BaseException) -> None:
        while self._queue:
            entry = self._queue.popleft()
            if isinstance(entry, bytes):
                continue
            item, done = entry
            item.release()
            if not done.done():
                done.set_exception(error)
                with contextlib.suppress(BaseException):
                    done.exception()  # nobody may be waiting any more: retrieved
        self._queued_bytes = 0
