"""PacedOutput over a real loopback connection: frames and deliveries arrive whole and in
order however the reader keeps up; a reader that stops holds the sender to one piece in
the transport; closing releases every delivery queued."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mainstem.protocols.paced_output import WAIT_PIECE, PacedOutput


class Delivery:
    """A Paced item over bytes in memory, counting its releases."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.sent = 0
        self.held = False
        self.released = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.sent

    def send_now(self, socket_fd: int) -> bool:
        try:
            while self.remaining:
                self.sent += os.write(socket_fd, memoryview(self.data)[self.sent:])
        except BlockingIOError:
            pass
        return not self.remaining

    def take(self, limit: int) -> bytes:
        piece = self.data[self.sent:self.sent + limit]
        self.sent += len(piece)
        return piece

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.released += 1


@asynccontextmanager
async def connection(buffer: int = 65536) -> AsyncIterator[
        tuple[asyncio.StreamWriter, asyncio.StreamReader]]:
    """A writer whose socket buffers are small (the kernel takes little at once), and
    the reader of its peer."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future())

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, server.sockets[0].getsockname())
    _, writer = await asyncio.open_connection(sock=sock)
    peer_reader, peer_writer = await accepted
    peer_writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    try:
        yield writer, peer_reader
    finally:
        writer.transport.abort()
        peer_writer.transport.abort()
        server.close()
        await server.wait_closed()


def socket_fd(writer: asyncio.StreamWriter, plain: bool) -> int | None:
    return writer.get_extra_info("socket").fileno() if plain else None


async def read_slowly(reader: asyncio.StreamReader, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        got += await reader.read(4096)
        await asyncio.sleep(0)
    return bytes(got)


items = st.lists(st.one_of(st.binary(min_size=1, max_size=64).map(lambda b: ("frame", b)),
                           st.integers(1, 200_000).map(lambda n: ("delivery", n))),
                 min_size=1, max_size=8)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=items, plain=st.booleans())
def test_frames_and_deliveries_arrive_whole_and_in_order(
        items: list[tuple[str, object]], plain: bool) -> None:
    async def run() -> None:
        async with connection() as (writer, reader):
            output = PacedOutput(writer, socket_fd(writer, plain))
            expected, deliveries, waits = bytearray(), [], []
            for i, (kind, value) in enumerate(items):
                if kind == "frame":
                    assert isinstance(value, bytes)
                    output.write(value)
                    expected += value
                else:
                    assert isinstance(value, int)
                    data = bytes([i % 256]) * value
                    delivery = Delivery(data)
                    deliveries.append(delivery)
                    waiting = output.send(delivery)
                    if waiting is not None:
                        waits.append(waiting)
                    expected += data
            got = await asyncio.wait_for(read_slowly(reader, len(expected)), 20)
            await asyncio.gather(*waits)
            assert got == bytes(expected)
            assert all(delivery.released == 1 for delivery in deliveries)

    asyncio.run(run())


@pytest.mark.parametrize("plain", [True, False], ids=["sendfile socket", "through transport"])
async def test_a_reader_that_stops_holds_the_sender_to_one_piece(plain: bool) -> None:
    async with connection() as (writer, reader):
        output = PacedOutput(writer, socket_fd(writer, plain))
        deliveries = [Delivery(b"x" * 4_000_000) for _ in range(3)]
        waits = [output.send(delivery) for delivery in deliveries]
        output.write(b"after")
        held: list[int] = []
        for _ in range(20):
            await asyncio.sleep(0.01)
            held.append(writer.transport.get_write_buffer_size())
        assert max(held) <= WAIT_PIECE
        assert not any(wait is None or wait.done() for wait in waits)
        assert all(delivery.held for delivery in deliveries[1:])  # queued: kept readable
        assert output.buffered <= WAIT_PIECE + len(b"after")
        got = await asyncio.wait_for(read_slowly(reader, 12_000_005), 30)
        assert got == b"x" * 12_000_000 + b"after"
        for wait in waits:
            assert wait is not None
            await wait


async def test_close_releases_every_delivery_queued_and_fails_their_waiters() -> None:
    async with connection() as (writer, _):
        output = PacedOutput(writer, socket_fd(writer, True))
        deliveries = [Delivery(b"y" * 1_000_000) for _ in range(3)]
        waits = [output.send(delivery) for delivery in deliveries]
        await asyncio.sleep(0.01)
        output.close()
        assert [delivery.released for delivery in deliveries] == [1, 1, 1]
        for wait in waits[1:]:
            assert wait is not None
            with pytest.raises(ConnectionResetError):
                await wait
        late = Delivery(b"z")
        with pytest.raises(ConnectionResetError):
            output.send(late)
        assert late.released == 1


async def test_a_delivery_cancelled_while_waiting_is_still_finished() -> None:
    """An unsubscribe cancels the delivery loop: the frame it started still goes whole."""
    async with connection() as (writer, reader):
        output = PacedOutput(writer, socket_fd(writer, True))
        delivery = Delivery(b"w" * 2_000_000)
        waiting = output.send(delivery)
        assert waiting is not None
        await asyncio.sleep(0.01)
        waiting.cancel()  # what cancelling the task awaiting it does
        output.write(b"next")
        got = await asyncio.wait_for(read_slowly(reader, 2_000_004), 20)
        assert got == b"w" * 2_000_000 + b"next"
        assert delivery.released == 1


class Truncated(Delivery):
    """A delivery whose file gives out after the socket took its first bytes."""

    def send_now(self, socket_fd: int) -> bool:
        self.sent += os.write(socket_fd, self.data[:10])
        return False

    def take(self, limit: int) -> bytes:
        raise OSError("segment file ends before its chunk")


async def test_a_delivery_that_cannot_be_finished_ends_the_connection() -> None:
    """Half a frame cannot be followed by anything: the connection is dropped."""
    async with connection() as (writer, reader):
        reading = asyncio.ensure_future(read_slowly(reader, 3_000_010))
        output = PacedOutput(writer, socket_fd(writer, True))
        first = Delivery(b"u" * 3_000_000)
        assert output.send(first) is not None  # queued behind: the pump meets the failure
        queued = Truncated(b"v" * 100)
        waiting = output.send(queued)
        assert waiting is not None
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(waiting, 10)
        assert writer.transport.is_closing()
        assert queued.released == 1 and first.released == 1
        reading.cancel()
        with contextlib.suppress(BaseException):
            await reading  # reset by the abort, or cancelled

    async with connection() as (writer, _):  # sent at once: the failure is raised
        output = PacedOutput(writer, socket_fd(writer, True))
        at_once = Truncated(b"v" * 100)
        with pytest.raises(ConnectionResetError):
            output.send(at_once)
        assert writer.transport.is_closing()
        assert at_once.released == 1
