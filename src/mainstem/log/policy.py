"""Durability and retention policies of a partition: plain settings, no behaviour."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FsyncMode(enum.Enum):
    """When appended chunks reach stable storage."""

    BATCH = "batch"  # fsync before an append returns; concurrent appends share one fsync
    INTERVAL = "interval"  # fsync every `interval_ms`; an append waits for the next one
    NEVER = "never"  # the page cache is the durability point (survives a process crash)


@dataclass(frozen=True, slots=True)
class DurabilityPolicy:
    mode: FsyncMode = FsyncMode.BATCH
    interval_ms: int = 200


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Limits after which whole old segments are deleted; None means unlimited. With a
    tier, the `local_` limits say when a sealed segment moves there (None: never by that
    limit); the others count tiered and local segments alike."""

    max_bytes: int | None = None
    max_age_ms: int | None = None
    max_segment_bytes: int = 500_000_000
    max_segment_chunks: int = 256_000
    local_max_bytes: int | None = None
    local_max_age_ms: int | None = None
