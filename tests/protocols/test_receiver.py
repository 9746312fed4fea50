"""Receiver: a connection taken over from its StreamReader receives into its own buffers,
over TCP and TLS, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from mainstem.protocols.receiver import MIN_SPACE, Receiver
from tests.support.tls_certs import make_certificates

SIZE = 4 * MIN_SPACE
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler, tls: tuple[ssl.SSLContext, ssl.SSLContext] | None,
                 client: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                  Awaitable[None]]) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0,
                                        ssl=None if tls is None else tls[0])
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=None if tls is None else tls[1],
        server_hostname=None if tls is None else "localhost")
    try:
        await client(reader, writer)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def _contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    certs = make_certificates(directory)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(certs.server_cert, certs.server_key)
    client = ssl.create_default_context(cafile=str(certs.ca))
    return server, client


async def _echo(payload: bytes, reused: bool = False) -> bytes:
    """The server takes over after a first StreamReader read and sends back every byte
    it received; views handed out earlier must keep their bytes (unless the buffer is
    `reused`: then the handler copies each read, and the buffer is received into again)."""
    kept: list[bytes | memoryview] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        kept.append(await reader.read(10))
        receiver = Receiver.take_over(reader, writer, SIZE, reused=reused)
        while data := await receiver.read():
            kept.append(bytes(data) if reused else data)
            await asyncio.sleep(0)  # let more arrive meanwhile
        writer.write(b"".join(kept))
        await writer.drain()
        writer.close()

    echoed = bytearray()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for start in range(0, len(payload), 100_000):
            writer.write(payload[start:start + 100_000])
            await writer.drain()
        writer.write_eof()
        echoed.extend(await reader.read())

    await _serve(handler, None, client)
    return bytes(echoed)


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_every_byte_arrives_in_order_and_views_stay_valid(run: Callable[..., None]) -> None:
    payload = os.urandom(3 * SIZE + 12_345)
    assert run(_echo(payload)) == payload


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_reused_buffer_delivers_every_byte_in_order(run: Callable[..., None]) -> None:
    payload = os.urandom(5 * SIZE + 777)
    assert run(_echo(payload, reused=True)) == payload


async def _stop_and_tls(directory: Path) -> tuple[bytes, bytes]:
    tls = _contexts(directory)
    received = bytearray()
    stopped = asyncio.Event()
    after_stop: list[bytes | memoryview] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        receiver = Receiver.take_over(reader, writer, SIZE)
        while len(received) < 1_000_000:
            received.extend(await receiver.read())
        receiver.stop()
        after_stop.append(await receiver.read())
        writer.write(b"done")
        await writer.drain()
        stopped.set()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * 1_000_000)
        await writer.drain()
        assert await reader.readexactly(4) == b"done"
        await stopped.wait()

    await _serve(handler, tls, client)
    return bytes(received), bytes(after_stop[0])


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_over_tls_and_stopped_reads_end(run: Callable[..., tuple[bytes, bytes]],
                                        tmp_path: Path) -> None:
    received, after_stop = run(_stop_and_tls(tmp_path))
    assert received == b"x" * 1_000_000
    assert after_stop == b""
