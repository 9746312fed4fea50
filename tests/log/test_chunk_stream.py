"""Large chunks read a window at a time (`log/chunk_stream.py`) give exactly the records a
whole read gives, are checked before any record is handed out, and stop cleanly when
retention deletes their segment."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.formats.chunk import CorruptChunk, encode_simple_entries
from mainstem.formats.osiris import SUB_BATCH_ENTRY, SUB_BATCH_FLAG
from mainstem.log import chunk_stream
from mainstem.log.chunk_stream import WINDOW, StreamedChunk
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.log.reader import PartitionReader

NEVER = DurabilityPolicy(FsyncMode.NEVER)

# An entry: a simple record of that many bytes, or (records, bytes) for a sub-batch.
sizes = st.one_of(st.integers(0, 300), st.integers(WINDOW - 20, WINDOW + 20),
                  st.integers(0, 3 * WINDOW))
entries = st.lists(st.one_of(sizes, st.tuples(st.integers(1, 50), sizes)), min_size=1,
                   max_size=40)


def encode(entry: int | tuple[int, int], seed: int) -> tuple[bytes, int]:
    """One entry's bytes and record count; bodies differ so misplaced reads show."""
    if isinstance(entry, int):
        return encode_simple_entries([bytes([seed % 251]) * entry]), 1
    records, size = entry
    body = bytes([(seed + 7) % 251]) * size
    return SUB_BATCH_ENTRY.pack(SUB_BATCH_FLAG, records, size, size) + body, records


def write_chunk(partition: Partition, chunk: list[int | tuple[int, int]]) -> None:
    encoded = [encode(entry, seed) for seed, entry in enumerate(chunk)]
    data = b"".join(body for body, _ in encoded)
    partition.write(data, len(encoded), sum(n for _, n in encoded),
                    payload_bytes=len(data), sequences={"writer": len(chunk)})


def both_reads(partition: Partition) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """Every record as read chunk by chunk (large ones streamed), and as read whole."""
    streamed, whole = [], []
    reader = PartitionReader(partition, 0)
    while (chunk := reader.next_chunk_nowait()) is not None:
        streamed += [(offset, bytes(body)) for offset, body in chunk.records()]
        read = partition.read_chunk(chunk.header.chunk_id)
        assert read is not None and read.header == chunk.header
        whole += [(offset, bytes(body)) for offset, body in read.records()]
    return streamed, whole


@settings(max_examples=40, deadline=None)
@given(st.lists(entries, min_size=1, max_size=4))
def test_streamed_records_are_the_whole_reads_records(chunks: list[list[int | tuple[int, int]]]
                                                      ) -> None:
    check_streamed_reads(chunks)


def check_streamed_reads(chunks: list[list[int | tuple[int, int]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        partition = Partition.open(Path(directory) / "p", durability=NEVER)
        try:
            for chunk in chunks:
                write_chunk(partition, chunk)
            partition.flush()
            streamed, whole = both_reads(partition)
            assert streamed == whole
            assert len(whole) == sum(map(len, chunks))
        finally:
            partition.close()


def large_partition(directory: Path, **options: object) -> Partition:
    partition = Partition.open(directory, durability=NEVER, **options)  # type: ignore[arg-type]
    partition.write_records([b"x" * 1000] * 200)  # 200 KB: streamed
    partition.write_records([b"y" * 1000] * 200)
    partition.flush()
    return partition


def test_large_chunks_are_streamed_small_ones_read_whole(tmp_path: Path) -> None:
    partition = large_partition(tmp_path / "p")
    partition.write_records([b"z"] * 10)
    partition.flush()
    reader = PartitionReader(partition, 0)
    kinds = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        kinds.append(type(chunk).__name__)
    assert kinds == ["StreamedChunk", "StreamedChunk", "Chunk"]
    partition.close()


@pytest.mark.parametrize("where", ["data", "header"])
def test_a_damaged_chunk_hands_out_no_record(tmp_path: Path, where: str) -> None:
    partition = large_partition(tmp_path / "p")
    location = partition.locate(0)
    assert location is not None
    # a byte of the last record (checked by the data CRC) or of the record count (the guard)
    position = (location.file_pos + location.send_size - 1 if where == "data"
                else location.file_pos + 8)
    fd = location.segment.fileno()
    os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0xFF]), position)
    with pytest.raises(CorruptChunk):
        PartitionReader(partition, 0).next_chunk_nowait()
    partition.close()


def test_a_segment_deleted_mid_chunk_ends_its_records(tmp_path: Path) -> None:
    partition = large_partition(tmp_path / "p", retention=RetentionPolicy(max_segment_bytes=1))
    chunk = PartitionReader(partition, 0).next_chunk_nowait()
    assert isinstance(chunk, StreamedChunk)
    records = chunk.records()
    first = [next(records) for _ in range(10)]  # within the first window
    assert [offset for offset, _ in first] == list(range(10))
    assert partition.truncate_before(200) == 1  # retention takes the first segment
    assert len(list(records)) < 190  # what the window held, then the end: none is made up
    assert [o for o, _ in both_reads(partition)[0]] == list(range(200, 400))
    partition.close()


@settings(max_examples=20, deadline=None)
@given(entries, st.integers(1, 64))
def test_any_window_gives_the_same_records(chunk: list[int | tuple[int, int]], window: int
                                           ) -> None:
    """Windows of a few bytes: entry headers and bodies split across every boundary."""
    original = chunk_stream.WINDOW
    chunk_stream.WINDOW = window
    try:
        check_streamed_reads([chunk])
    finally:
        chunk_stream.WINDOW = original
