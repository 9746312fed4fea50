"""What the log raises to those who wait on it or read it."""

from __future__ import annotations

from mainstem.formats.chunk import CorruptChunk


class PartitionClosed(Exception):
    """The partition was closed while a caller waited on it."""


class NotWritable(PartitionClosed):
    """This replica of the partition takes no writes: its leader is on another node."""


class DataRemoved(Exception):
    """The requested position was deleted by retention or truncation."""

    def __init__(self, message: str, first_available: int) -> None:
        super().__init__(message)
        self.first_available = first_available


class TierUnavailable(Exception):
    """The object store holding tiered segments did not answer in time, or failed: reads
    of its segments fail (and uploads wait) until it is back."""

    def __init__(self, tier: str, key: str, cause: str) -> None:
        super().__init__(f"tier {tier}: {key}: {cause}")
        self.tier = tier
        self.key = key


class ObjectExists(Exception):
    """A put named a key the tier holds already: objects are never replaced."""

    def __init__(self, tier: str, key: str, cause: str) -> None:
        super().__init__(f"tier {tier}: {key}: {cause}")
        self.tier = tier
        self.key = key


class ChunkDamaged(CorruptChunk):
    """A committed chunk failed its CRCs when read, on local disk or as fetched from the
    tier: nothing of it is served. `cause` may name a file: for the broker's log only."""

    def __init__(self, chunk_id: int, tiered: bool, cause: str) -> None:
        super().__init__(f"chunk {chunk_id} ({'tiered' if tiered else 'local'}): {cause}")
        self.chunk_id = chunk_id
        self.tiered = tiered
        self.cause = cause

    @property
    def where(self) -> str:
        return "tiered" if self.tiered else "local"
