"""Worker processes that take CPU-bound, stateless work off the broker's event loop.

One event loop runs one core's worth of Python; the stream protocol's Publish decoding is
most of the broker's CPU for a stream publish and needs only the frame's bytes, so with
`--workers N` it runs in N worker processes (docs/multicore.md). Each connection is given
one worker (by connection id), so its frames come back in the order they went; a worker
answers requests one by one, in order, over a socket pair. Workers hold no state: a
worker that dies is logged and its connections' requests, pending ones included, are
decoded in the main process from then on. A worker exits when its socket closes (the
broker stopped, or was killed), and a clean stop waits for each by pid.

    python -m mainstem.workers FD    # what the broker starts; FD: its end of the pair
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable

from mainstem.protocols.rabbit_stream.offload import decode_publishes
from mainstem.protocols.receiver import Receiver

log = logging.getLogger("mainstem.workers")

LENGTH = struct.Struct(">I")
ANSWER_BUFFER = 1024 * 1024
READY = b"R"  # a worker's first byte: its signal handling is set, requests may come
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class Worker:
    """The broker's end of one worker process: requests out, answers back in order."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.lost = False
        self._pending: deque[tuple[asyncio.Future[bytes], bytes]] = deque()
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mainstem.workers", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._socket = ours
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    async def connect(self) -> None:
        """Wait for the worker's READY, then read its answers."""
        reader, self._writer = await asyncio.open_connection(sock=self._socket)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                ready = await reader.readexactly(len(READY))
        except (asyncio.IncompleteReadError, TimeoutError):
            ready = b""
        if ready != READY:
            raise RuntimeError(f"worker process {self.pid} did not start")
        receiver = Receiver.take_over(reader, self._writer, ANSWER_BUFFER, reused=True)
        self._reading = asyncio.get_running_loop().create_task(self._read_answers(receiver))

    async def run(self, request: bytes) -> bytes:
        """`decode_publishes(request)`, computed by the worker (here, once it is lost)."""
        if self.lost or self._writer is None:
            return decode_publishes(request)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending.append((future, request))
        self._writer.write(LENGTH.pack(len(request)))
        self._writer.write(request)
        return await future

    async def _read_answers(self, receiver: Receiver) -> None:
        """Hand each answer to its request (copied: the Receiver's buffer is reused)."""
        rest = b""  # the start of an answer not all here yet
        try:
            while data := await receiver.read():
                if rest:
                    data = rest + data
                rest = bytes(data[self._answer_all(data):])
        except OSError as error:  # reset, or any other failure of the link
            self._lose(error)
            return
        self._lose(ConnectionError("the worker closed its socket"))

    def _answer_all(self, data: bytes | memoryview) -> int:
        """Settle the requests whose answers `data` holds whole; how much of it that was."""
        pos = 0
        while len(data) - pos >= LENGTH.size:
            (size,) = LENGTH.unpack_from(data, pos)
            end = pos + LENGTH.size + size
            if end > len(data):
                break
            future, _request = self._pending.popleft()
            if not future.done():  # not abandoned by a connection that went away
                future.set_result(bytes(data[pos + LENGTH.size:end]))
            pos = end
        return pos

    def _lose(self, error: BaseException) -> None:
        """The worker went away: finish its pending requests here, and all later ones."""
        self.lost = True
        log.error("worker.lost", extra={"worker": self.index, "pid": self.pid,
                                        "error": repr(error), "pending": len(self._pending)})
        while self._pending:
            future, request = self._pending.popleft()
            if not future.done():
                future.set_result(decode_publishes(request))

    async def stop(self) -> None:
        """Close the socket (the worker exits on its end), then wait for the pid."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        if self._writer is not None:
            self._writer.close()
        else:
            self._socket.close()
        self.lost = True
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self.process.poll() is None:
            log.warning("worker.killed", extra={"worker": self.index, "pid": self.pid})
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait()


class Workers:
    """N worker processes; `lane(conn_id)` is a connection's way to its worker."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._workers: list[Worker] = []

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    async def start(self) -> None:
        try:
            for index in range(self.count):
                self._workers.append(Worker(index))
            for worker in self._workers:  # they start up side by side
                await worker.connect()
        except BaseException:
            await self.stop()
            raise
        log.info("workers.started", extra={"pids": self.pids})

    def lane(self, conn_id: int) -> Callable[[bytes], Awaitable[bytes]]:
        return self._workers[conn_id % len(self._workers)].run

    async def stop(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            await worker.stop()
        if workers:
            log.info("workers.stopped", extra={"pids": [worker.pid for worker in workers]})


def serve(fd: int) -> None:
    """A worker's life: answer each request on the socket until it closes."""
    # Ctrl-C and a service manager's SIGTERM to the whole group are the broker's to handle:
    # it drains its connections, then closes the socket, and the worker ends there.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    with socket.socket(fileno=fd) as channel, contextlib.suppress(ConnectionError):
        # A broker killed mid-exchange resets the socket: the end, as a close is.
        channel.sendall(READY)
        while True:
            head = _receive(channel, LENGTH.size)
            if head is None:
                return
            request = _receive(channel, LENGTH.unpack(head)[0])
            if request is None:
                return
            answer = decode_publishes(request)
            channel.sendall(LENGTH.pack(len(answer)) + answer)


def _receive(channel: socket.socket, size: int) -> bytes | None:
    """Exactly `size` bytes, or None at the end of the stream."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        count = channel.recv_into(view[got:])
        if count == 0:
            return None
        got += count
    return bytes(buffer)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
