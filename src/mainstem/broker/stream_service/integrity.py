"""What is known of a partition's stored chunks: how much the scrub checked, which chunks
it found damaged (and why), which it repaired from another replica, and when it last
checked every local chunk (`broker/scrub.py` fills it in; the management API reads it).

`verified` is the offset below which the last full pass found every local chunk intact
and nothing was found damaged since: readers may send those chunks without checking them
again. It is the hook for a "verified" watermark kept by the readers' side.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mainstem.log.verify import ChunkCheck


@dataclass(frozen=True, slots=True)
class Repair:
    """A damaged chunk replaced by another replica's intact copy."""

    chunk_id: int
    next_offset: int
    segment: str  # its segment file's name
    file_pos: int  # the bytes replaced in that file: [file_pos, file_pos + size)
    size: int
    source: str  # the node the copy came from
    at: float  # wall clock, seconds


@dataclass(slots=True)
class Integrity:
    chunks_checked: int = 0
    bytes_checked: int = 0
    damaged: dict[int, str] = field(default_factory=dict)  # chunk id -> what is wrong
    repaired: list[Repair] = field(default_factory=list)  # the latest few, oldest first
    last_full_pass: float | None = None  # wall clock, seconds
    passes: int = 0
    verified: int = 0

    def checked(self, check: ChunkCheck) -> bool:
        """Count a chunk checked; True when it is damaged and was not known to be."""
        self.chunks_checked += 1
        self.bytes_checked += check.size
        if check.damage is None:
            self.damaged.pop(check.chunk_id, None)
            return False
        self.verified = min(self.verified, check.chunk_id)
        new = check.chunk_id not in self.damaged
        self.damaged[check.chunk_id] = check.damage
        return new

    def pass_done(self, end: int) -> None:
        """A pass checked every local committed chunk below `end`."""
        self.passes += 1
        self.last_full_pass = time.time()
        self.verified = min(self.damaged, default=end)

    def was_repaired(self, repair: Repair, kept: int = 20) -> None:
        self.damaged.pop(repair.chunk_id, None)
        self.repaired = [*self.repaired[-(kept - 1):], repair]
