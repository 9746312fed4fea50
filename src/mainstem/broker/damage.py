"""Damaged chunks this node found: each logged once, counted, its partition marked.

A chunk that fails its CRCs when a reader reaches it (`ChunkDamaged`: on local disk, or as
fetched from the tier) is served to no one: each reader's protocol answers its own error.
The stream service reports it here (`PartitionDamage.report`); anything else that finds
damage (a scrub) reports it the same way, through the partition's `PartitionService.damage`.
`DamageRegister.found` is the node's counter (/metrics); the partitions marked damaged show
in the stream rows of the API and fail `/api/health/checks/stream-damage`.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from mainstem.log.errors import ChunkDamaged

log = logging.getLogger("mainstem.damage")


class PartitionKey(NamedTuple):
    vhost: str
    stream: str
    partition: int


class PartitionDamage:
    """One partition's damaged chunks: chunk id -> where it was found (local, tiered)."""

    def __init__(self, key: PartitionKey, register: DamageRegister | None = None) -> None:
        self.key = key
        self.chunks: dict[int, str] = {}
        self._register = register  # None: a queue's own partition, logged only

    def report(self, error: ChunkDamaged) -> None:
        """Log and count a damaged chunk the first time it is found; the cause, which may
        name a file, goes to the log only."""
        if error.chunk_id in self.chunks:
            return
        self.chunks[error.chunk_id] = error.where
        log.error("chunk.damaged", extra={
            "vhost": self.key.vhost, "stream": self.key.stream,
            "partition": self.key.partition, "chunk_id": error.chunk_id,
            "where": error.where, "error": error.cause})
        if self._register is not None:
            self._register.found += 1

    def repaired(self, chunk_id: int) -> None:
        """The chunk was replaced by an intact copy: the partition is no longer marked for
        it (the counter keeps what was found)."""
        self.chunks.pop(chunk_id, None)


class DamageRegister:
    """Every stream partition's damage on this node, and how many chunks were found
    damaged since start (a counter: it never goes down)."""

    def __init__(self) -> None:
        self.found = 0
        self._partitions: dict[PartitionKey, PartitionDamage] = {}

    def partition(self, key: PartitionKey) -> PartitionDamage:
        """The partition's damage, kept across a reopen of the partition."""
        return self._partitions.setdefault(key, PartitionDamage(key, self))

    def forget(self, vhost: str, stream: str) -> None:
        """The stream was deleted: its damage went with it."""
        for key in [k for k in self._partitions if (k.vhost, k.stream) == (vhost, stream)]:
            del self._partitions[key]

    def damaged(self) -> list[PartitionDamage]:
        """The partitions with a damaged chunk, in key order."""
        return sorted((p for p in self._partitions.values() if p.chunks),
                      key=lambda p: p.key)
