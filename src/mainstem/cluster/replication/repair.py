"""Repairing a damaged chunk from an in-sync replica (the scrub finds it: broker/scrub.py).

Replicas hold every chunk byte for byte alike (a follower appends its leader's chunks as
they came), so a chunk damaged on one replica's disk can be fetched again from another
that holds it intact. This node asks each other member of the partition's in-sync set in
turn, over its replication listener: REPAIR_HELLO, then REPAIR naming the chunk; the peer
answers REPAIR_CHUNK with its copy, checked before it is sent, or REFUSE. The copy replaces
the damaged bytes only once it proves to be that chunk intact
(`PartitionService.replace_chunk`, which logs the replaced range); otherwise the next
replica is asked, and the scrub tries again on its next pass.
"""

from __future__ import annotations

import asyncio
import json
import logging

from mainstem.broker.stream_service import DataRemoved, PartitionService
from mainstem.cluster.context import Peers
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.follower import MAX_CHUNK_FRAME
from mainstem.cluster.replication.leader import read_frame
from mainstem.cluster.replication.replicated_streams import ReplicatedStreams
from mainstem.formats.chunk import CorruptChunk

log = logging.getLogger("mainstem.cluster")

REPAIR_TIMEOUT_S = 10.0  # one replica's answer; then the next is asked
_FAILURES = (OSError, TimeoutError, asyncio.IncompleteReadError, wire.WireError,
             CorruptChunk, DataRemoved, KeyError)


class ReplicaRepair:
    """The broker's `ChunkRepair` in a cluster."""

    def __init__(self, replicated: ReplicatedStreams, peers: Peers) -> None:
        self._replicated = replicated
        self._peers = peers

    async def repair(self, service: PartitionService, chunk_id: int) -> str | None:
        role = next((role for role in self._replicated.roles.values()
                     if role.service is service), None)
        if role is None:
            return None  # not a replicated partition: nothing to repair it from
        request = json.dumps({"stream": role.storage, "partition": role.index,
                              "chunk_id": chunk_id}).encode()
        for node in role.isr:
            if node == self._peers.me:
                continue
            try:
                async with asyncio.timeout(REPAIR_TIMEOUT_S):
                    raw = await self._fetch(node, request)
                service.replace_chunk(chunk_id, raw, node)
            except _FAILURES as error:
                log.warning("chunk.repair_failed", extra={
                    "stream": role.storage, "partition": role.index, "chunk_id": chunk_id,
                    "source": node, "error": str(error) or type(error).__name__})
                continue
            return node
        return None

    async def _fetch(self, node: str, request: bytes) -> bytes:
        reader, writer = await self._peers.dial(node, wire.FrameType.REPAIR_HELLO)
        try:
            writer.write(wire.frame(wire.FrameType.REPAIR, request))
            kind, body = await read_frame(reader, MAX_CHUNK_FRAME)
        finally:
            writer.close()
        if kind != wire.FrameType.REPAIR_CHUNK:
            raise wire.WireError(f"{node} refused: {body.decode(errors='replace')}")
        return body


def copy_answer(replicated: ReplicatedStreams, request: bytes) -> bytes:
    """The answer to a REPAIR: this node's copy of the chunk, checked, or why not."""
    try:
        fields = json.loads(request)
        storage, index, chunk_id = str(fields["stream"]), int(fields["partition"]), \
            int(fields["chunk_id"])
    except (ValueError, KeyError, TypeError) as error:
        raise wire.WireError(f"bad REPAIR: {error}") from error
    role = replicated.roles.get((storage, index))
    if role is None:
        return wire.frame(wire.FrameType.REFUSE, b"no replica of that partition here")
    try:
        return wire.frame(wire.FrameType.REPAIR_CHUNK, role.service.chunk_copy(chunk_id))
    except (CorruptChunk, DataRemoved, OSError) as error:
        return wire.frame(wire.FrameType.REFUSE, str(error).encode())
