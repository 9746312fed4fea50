"""A partition's leader epochs: where an epoch's records end, found by a binary search over
the segments and then one segment's chunks, is where a scan of every chunk finds it."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.log.partition import Partition
from mainstem.log.policy import RetentionPolicy


@settings(max_examples=40, deadline=None)
@given(rises=st.lists(st.integers(0, 2), min_size=1, max_size=12),
       per_segment=st.integers(1, 4))
def test_where_an_epoch_ends_is_the_first_chunk_of_a_later_one(rises: list[int],
                                                              per_segment: int) -> None:
    asyncio.run(ends_as_a_scan_finds(rises, per_segment))


async def ends_as_a_scan_finds(rises: list[int], per_segment: int) -> None:
    """Chunks whose epochs rise by `rises`, `per_segment` to a segment."""
    with tempfile.TemporaryDirectory() as directory:
        partition = Partition.open(Path(directory) / "p",
                                   retention=RetentionPolicy(max_segment_chunks=per_segment))
        written: list[tuple[int, int]] = []  # (first offset, epoch) of each chunk
        epoch = 1
        for i, rise in enumerate(rises):
            epoch += rise
            partition.epochs.current = epoch
            written.append((partition.next_offset, epoch))
            partition.write_records([b"%d" % i, b"more"])
        assert partition.segment_count >= len(rises) // per_segment
        for asked in range(epoch + 2):
            later = [first for first, of in written if of > asked]
            expected = later[0] if later else partition.next_offset
            assert partition.epochs.end_of(asked) == expected
        await partition.aclose()
