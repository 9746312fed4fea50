"""The hooks every protocol handler can use: identify, consumers, polite close, alarms.

A small line protocol stands in for a protocol handler, as in test_server.py; it runs in a
real server over real sockets, and the API is called by a real HTTP client."""

from __future__ import annotations

import asyncio

import aiohttp

from mainstem import Broker
from mainstem.protocols.base import ConnectionContext, ProtocolSpec

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
TIMEOUT_S = 10


async def login_handler(ctx: ConnectionContext) -> None:
    """"login USER" identifies, "sub TAG QUEUE" records a consumer, "pub" waits for no alarm;
    an operator's close is answered with a goodbye line."""
    closed = asyncio.Event()  # this connection only: ctx.closing is the whole server's

    async def polite_close(reason: str) -> None:
        ctx.writer.write(f"closed: {reason}\n".encode())
        await ctx.writer.drain()
        closed.set()

    ctx.on_close_request = polite_close
    while not closed.is_set():
        read = asyncio.ensure_future(ctx.reader.readline())
        closing = asyncio.ensure_future(closed.wait())
        done, _ = await asyncio.wait({read, closing}, return_when=asyncio.FIRST_COMPLETED)
        closing.cancel()
        if read not in done:
            read.cancel()
            return
        words = read.result().decode().split()
        if not words:
            return
        if words[0] == "login":
            ctx.identify(words[1], "/", client="line-client")
        elif words[0] == "sub":
            ctx.add_consumer(words[1], words[2], prefetch_count=10)
        elif words[0] == "pub":
            await ctx.core.alarms.wait_clear()
        elif words[0] == "deliver":  # as a handler does once per chunk sent
            ctx.core.delivery_stats.delivered("/", words[1], int(words[2]), int(words[3]))
        ctx.writer.write(b"ok\n")
        await ctx.writer.drain()


LINES = ProtocolSpec("lines", 0, login_handler)


async def test_identify_consumers_and_polite_close(tmp_path):
    async with Broker(tmp_path, protocols=[LINES], admin=True) as broker, \
            aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}",
                                  headers=ADMIN) as http:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["lines"])
        for line in (b"login alice\n", b"sub ctag-1 orders\n"):
            writer.write(line)
            assert await asyncio.wait_for(reader.readline(), TIMEOUT_S) == b"ok\n"
        async with http.get("/api/connections") as response:
            [row] = await response.json()
        assert (row["user"], row["vhost"], row["protocol"]) == ("alice", "/", "lines")
        assert row["client_properties"] == {"client": "line-client"}
        async with http.get("/api/consumers/%2F") as response:
            [consumer] = await response.json()
        assert consumer["consumer_tag"] == "ctag-1" and consumer["queue"] == {
            "name": "orders", "vhost": "/"}
        assert consumer["prefetch_count"] == 10
        async with http.get("/api/overview") as response:
            assert (await response.json())["object_totals"]["consumers"] == 1
        broker.core.streams.create("/", "orders")  # only a live queue's series are listed
        for line in (b"deliver orders 10 1000\n", b"deliver orders 5 500\n"):
            writer.write(line)
            assert await asyncio.wait_for(reader.readline(), TIMEOUT_S) == b"ok\n"
        async with http.get("/metrics/per-object") as response:
            text = await response.text()
        assert 'mainstem_messages_out_total{queue="orders",vhost="/"} 15.0' in text
        assert 'mainstem_bytes_out_total{queue="orders",vhost="/"} 1500.0' in text
        await broker.core.streams.delete("/", "orders")
        async with http.get("/metrics/per-object") as response:
            assert 'queue="orders"' not in await response.text()

        async with http.delete(f"/api/connections/{row['id']}",
                               headers={"X-Reason": "maintenance"}) as response:
            assert response.status == 204
        assert await asyncio.wait_for(reader.readline(), TIMEOUT_S) == b"closed: maintenance\n"
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
        assert len(broker.connections) == 0
        writer.close()


async def test_alarm_holds_a_publisher_until_it_clears(tmp_path):
    async with Broker(tmp_path, protocols=[LINES]) as broker:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["lines"])
        broker.alarm_monitor.watermarks.memory_high_watermark = 1e-6
        await asyncio.to_thread(broker.alarm_monitor.check)
        writer.write(b"pub\n")
        answer = asyncio.ensure_future(reader.readline())
        await asyncio.sleep(0.3)
        assert not answer.done()  # held back while the alarm holds
        broker.alarm_monitor.watermarks.memory_high_watermark = 1.0
        await asyncio.to_thread(broker.alarm_monitor.check)
        assert await asyncio.wait_for(answer, TIMEOUT_S) == b"ok\n"
        writer.close()
