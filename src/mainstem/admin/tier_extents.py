"""Where a stream's bytes are: on local disk or in the tier (issue 32), and how many of its
chunks were found damaged. The stream rows of /api/queues, /api/streams and /api/tiering
carry these fields; all local without a tier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mainstem.broker.stream_service.service import PartitionService


def partition_extent(partition: PartitionService) -> dict[str, int]:
    """Where a partition's bytes are: on local disk from `local_first_offset` on, in the
    tier below it (all local without a tier)."""
    tiered = partition.tiered_bytes
    return {"local_bytes": partition.size_bytes - tiered, "tiered_bytes": tiered,
            "tiered_segments": len(partition.tiered_records),
            "local_first_offset": partition.local_first_offset,
            "damaged_chunks": len(partition.damage.chunks)}


def stream_extent(partitions: Sequence[PartitionService]) -> dict[str, int]:
    """The partitions' extents summed; of their local first offsets, the lowest (as a
    stream's first offset is shown)."""
    extents = [partition_extent(p) for p in partitions]
    return {key: (min if key == "local_first_offset" else sum)(e[key] for e in extents)
            for key in extents[0]}
