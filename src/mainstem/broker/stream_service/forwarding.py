"""Appends a replica hands to its partition's leader on another node.

On a replica the Appender writes nothing itself: each append call goes, as it was
made, to whoever leads the partition (a cluster's `Forwarder`), which runs the same
call on its own Appender — deduplication included — and answers once the records are
committed. The protocol that made the call sees an ordinary Receipt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

Entry = bytes | memoryview


@dataclass(frozen=True, slots=True)
class ForwardedAppend:
    """One `Appender.append_records` (entries are bodies) or `append_entries` call."""

    entries: Sequence[Entry]
    encoded: bool  # True: Osiris entries (append_entries); False: bodies (append_records)
    all_simple: bool = True
    writer: str | None = None
    sequence: int | None = None  # append_records
    sequences: list[int] | None = None  # append_entries: one per entry
    filter_values: list[str | None] | None = None
    together: bool = False
    limit_entries: int | None = None
    limit_bytes: int | None = None


class Forwarder(Protocol):
    def forward(self, append: ForwardedAppend) -> asyncio.Future[int]:
        """Run `append` at the leader; the future holds the offset of its first record
        once committed there, or the leader's error."""

    def sequence(self, writer: str) -> asyncio.Future[int | None]:
        """The writer's last sequence at the leader, once all before is committed."""
