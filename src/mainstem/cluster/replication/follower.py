"""A partition this node follows: it pulls the leader's chunks into its own log.

The follower says where its log ends; the leader has it cut a divergent tail first (a
tail an old leader wrote but never committed), then streams every chunk it writes. Each
chunk is checked (both CRCs, and that it continues the log) before it is appended as it
came; the follower acks what its disk holds durably, and commits — shows consumers —
no further than the leader's commit point.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from mainstem.broker.stream_service import Following
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.leader import read_frame

log = logging.getLogger("mainstem.cluster")

MAX_CHUNK_FRAME = 1 << 30  # a chunk is at most a few MiB; refuse anything absurd


class Refused(Exception):
    """The leader would not feed this follower (not the leader, or a wrong secret)."""


async def follow(following: Following, hello: wire.Hello, host: str, port: int) -> None:
    """Replicate from the leader at host:port until the connection ends."""
    reader, writer = await asyncio.open_connection(host, port)
    acks: asyncio.Task[None] | None = None
    try:
        await _agree(following, hello, reader, writer)
        durable = asyncio.Event()
        following.on_durable(lambda _mark: durable.set())
        acks = asyncio.get_running_loop().create_task(_send_acks(following, durable, writer))
        durable.set()  # say at once where this replica stands
        while True:
            kind, body = await read_frame(reader, MAX_CHUNK_FRAME)
            if kind == wire.FrameType.CHUNK:
                opens, commit = wire.CHUNK_PREFIX.unpack_from(body)
                following.accept_chunk(memoryview(body)[wire.CHUNK_PREFIX.size:], bool(opens),
                                       commit)
            elif kind == wire.FrameType.COMMIT:
                following.commit_to(wire.read_offset(body))
            else:
                raise wire.WireError(f"unexpected frame {kind} from the leader")
    finally:
        following.on_durable(None)
        if acks is not None:
            acks.cancel()
        writer.close()


async def _agree(following: Following, hello: wire.Hello, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    """HELLO until the leader says START, cutting the log where it says TRUNCATE."""
    for _ in range(10_000):  # each TRUNCATE drops at least one chunk
        last = await following.last_chunk()
        writer.write(dataclasses.replace(
            hello, next_offset=following.next_offset, last_chunk_id=last[0] if last else -1,
            last_epoch=last[1] if last else 0).encode())
        kind, body = await read_frame(reader, wire.MAX_CONTROL_FRAME)
        if kind == wire.FrameType.START:
            return
        if kind == wire.FrameType.TRUNCATE:
            cut = wire.read_offset(body)
            log.info("replica.truncated", extra={
                "partition": following.name, "from": cut, "dropped":
                following.next_offset - cut})
            await following.truncate_from(cut)
            continue
        raise Refused(body.decode(errors="replace"))
    raise wire.WireError("the leader kept asking to truncate")


async def _send_acks(following: Following, durable: asyncio.Event,
                     writer: asyncio.StreamWriter) -> None:
    while True:
        await durable.wait()
        durable.clear()
        writer.write(wire.offset_frame(wire.FrameType.ACK, following.durable))
        await writer.drain()
