"""A chunk sent raw from its file (sendfile) is checked first unless it is known sound:
a damaged one raises ChunkDamaged and stays ahead of the reader, so nothing of it is sent.
Chunks written by this process, and chunks checked since open, are known sound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mainstem.log.errors import ChunkDamaged
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode
from mainstem.log.reader import PartitionReader

NEVER = DurabilityPolicy(FsyncMode.NEVER)
SIZES = {"small": 100, "large": 1000}  # bytes a record: 20 of them, or 200 (streamed)


def written(directory: Path, size: int) -> None:
    """Three chunks, written by a process that has gone."""
    partition = Partition.open(directory, durability=NEVER)
    for chunk in range(3):
        count = 200 if size > 100 else 20
        partition.write_records([bytes([chunk]) * size] * count)
    partition.flush()
    partition.close()


def flip(partition: Partition, offset: int, at: int) -> int:
    """Invert a byte of the chunk holding `offset`, `at` bytes into it (negative: from
    its sent end); the chunk's id."""
    location = partition.locate(offset)
    assert location is not None
    position = location.file_pos + (at if at >= 0 else location.send_size + at)
    fd = location.segment.fileno()
    os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0xFF]), position)
    return location.chunk_id


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("at", [-1, 8], ids=["data", "header"])
async def test_a_damaged_chunk_is_found_before_it_is_sent(tmp_path: Path, size: str,
                                                          at: int) -> None:
    written(tmp_path / "p", SIZES[size])
    partition = Partition.open(tmp_path / "p", durability=NEVER)
    try:
        second = partition.locate(0)
        assert second is not None
        damaged = flip(partition, second.next_offset, at)
        reader = PartitionReader(partition, 0)
        assert (await reader.next_view()).location.chunk_id == 0
        for _ in range(2):  # it stays ahead of the reader: found again on each try
            with pytest.raises(ChunkDamaged) as found:
                await reader.next_view()
            assert (found.value.chunk_id, found.value.where) == (damaged, "local")
            assert reader.position == damaged
    finally:
        partition.close()


async def test_chunks_written_or_checked_here_are_known_sound(tmp_path: Path) -> None:
    written(tmp_path / "p", SIZES["small"])
    partition = Partition.open(tmp_path / "p", durability=NEVER)
    try:
        first = partition.locate(0)
        assert first is not None
        segment = first.segment
        assert not any(segment.verified(i) for i in range(3))  # written by another process
        await PartitionReader(partition, 0).next_view()
        assert [segment.verified(i) for i in range(3)] == [True, False, False]
        partition.mark_verified(first.next_offset)  # what a scrub does
        assert [segment.verified(i) for i in range(3)] == [True, True, False]
        partition.write_records([b"new"] * 5)
        assert segment.verified(3)  # its bytes are the ones this process wrote
    finally:
        partition.close()
