"""A tiered segment, once `ensure`d, serves every reader of the log as its local segment
does: `Partition.location` and `ChunkLocation.read`, a large chunk streamed a window at a
time (`chunk_stream`), and a chunk sent by sendfile from its descriptor (`transfer`) to a
real TCP socket on loopback, pinned across the send."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

from mainstem.log.chunk_stream import WINDOW, read_records
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.transfer import peek, transfer

from .tiering import tier_all, written_partition


async def sent_bytes(partition: Partition, segment: Segment, i: int) -> bytes:
    """Chunk i as a subscriber receives it after a frame header: by sendfile over TCP."""
    view = peek(partition.location(segment, i))
    sending = transfer(view, b"FRAME")
    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.set_result(await reader.readexactly(sending.size))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    socket_fd = writer.get_extra_info("socket").fileno()
    while not sending.send_now(socket_fd):  # a large chunk waits for the socket, pinned
        await asyncio.sleep(0.001)
    sending.release()
    got = await asyncio.wait_for(received, 5)
    writer.close()
    server.close()
    await server.wait_closed()
    return got


async def test_every_reader_of_the_log_reads_a_tiered_chunk_as_a_local_one(
        tmp_path: Path) -> None:
    sizes = [100, 3 * WINDOW, 2_000, 5 * WINDOW, 50, 2 * WINDOW, 700]
    partition = written_partition(tmp_path / "p", [[os.urandom(n), b"tail"] for n in sizes],
                                  4 * WINDOW)
    cache = TierCache(tmp_path / "cache", 2 << 20, DescriptorCache(16), block_size=64 * 1024)
    tiered = await tier_all(Tier.directory(tmp_path / "tier"), partition, cache)
    assert len(tiered) >= 2
    streamed = 0
    for t in tiered:
        for i in range(t.local.num_chunks):
            await t.segment.ensure(i)
            location = partition.location(t.segment, i)
            assert location == replace(partition.location(t.local, i), segment=t.segment)
            read = location.read()
            assert read is not None and read.data == t.local.read_chunk(i).data
            stream = read_records(t.segment, i)
            if stream is not None:
                streamed += 1
                assert [bytes(b) for _, b in stream.records()] == [
                    bytes(b) for _, b in t.local.read_chunk(i).records()]
            assert (await sent_bytes(partition, t.segment, i)
                    == await sent_bytes(partition, t.local, i))
    assert streamed >= 2
    for t in tiered:
        t.segment.close()
    await partition.aclose()

