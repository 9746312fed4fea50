"""A data directory written by mainstem before segment version 2 (its own trailer layout,
no guards: tests/log/fixtures/partition-v1, made by that version) opens, serves its
chunks and writer sequences, takes new chunks in current segments and feeds a follower."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mainstem.formats.chunk import BloomMatcher, decode_sequences, parse_header
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log import chunk_stream
from mainstem.log.partition import Partition
from mainstem.log.reader import PartitionReader
from mainstem.log.segment_file import (
    FILE_HEADER,
    FILE_MAGIC,
    LEGACY_VERSION,
    SEGMENT_VERSION,
    segment_name,
)
from tests.log.fixtures.make_partition_v1 import RECORDS as V1_RECORDS
from tests.log.fixtures.make_partition_v1 import SEQUENCES as V1_SEQUENCES

V1_DATA = Path(__file__).parent / "fixtures" / "partition-v1"


@pytest.fixture
def v1_directory(tmp_path: Path) -> Path:
    directory = tmp_path / "p"
    shutil.copytree(V1_DATA, directory)
    return directory


def read_all(partition: Partition) -> list[tuple[int, bytes]]:
    reader = PartitionReader(partition, 0)
    out = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        out.extend((offset, bytes(body)) for offset, body in chunk.records())
    return out


def versions(directory: Path) -> list[int]:
    return [FILE_HEADER.unpack(path.read_bytes()[:FILE_HEADER.size])[1]
            for path in sorted(directory.glob("*.segment"))]


async def test_a_version_1_directory_opens_and_continues_in_a_current_segment(
        v1_directory: Path) -> None:
    assert set(versions(v1_directory)) == {LEGACY_VERSION}
    partition = Partition.open(v1_directory)
    assert read_all(partition) == list(enumerate(V1_RECORDS))
    assert partition.sequences == V1_SEQUENCES
    filtered = partition.locate(3)  # the chunk with a bloom filter kept it
    assert filtered is not None
    raw = os.pread(filtered.segment.fileno(), filtered.send_size, filtered.file_pos)
    header = parse_header(raw)
    assert filtered.send_size == HEADER_SIZE + header.bloom_size + header.data_length
    assert BloomMatcher(["red"], False).matches(raw[HEADER_SIZE:header.data_start])
    await partition.append([b"new"], sequences={"alpha": 3, "delta": 1})
    partition.close()
    assert versions(v1_directory)[-1] == SEGMENT_VERSION  # a legacy segment takes no more

    reopened = Partition.open(v1_directory)
    assert read_all(reopened) == [*enumerate(V1_RECORDS), (len(V1_RECORDS), b"new")]
    assert reopened.sequences == {**V1_SEQUENCES, "alpha": 3, "delta": 1}
    location = reopened.locate(len(V1_RECORDS))
    assert location is not None
    head = parse_header(os.pread(location.segment.fileno(), HEADER_SIZE, location.file_pos))
    # A segment's first chunk restates every writer, each as Osiris's 2 + id + 8 bytes
    assert head.trailer_length == sum(2 + len(writer) + 8 for writer in reopened.sequences)
    reopened.close()


async def test_an_empty_version_1_tail_segment_is_made_again_in_the_current_version(
        v1_directory: Path) -> None:
    partition = Partition.open(v1_directory)
    next_offset, next_byte = partition.next_offset, partition.next_byte
    partition.close()
    empty = v1_directory / segment_name(next_offset)
    empty.write_bytes(FILE_HEADER.pack(FILE_MAGIC, LEGACY_VERSION, next_byte))  # a roll
    partition = Partition.open(v1_directory)
    await partition.append([b"after the roll"])
    partition.close()
    assert versions(v1_directory)[-1] == SEGMENT_VERSION
    reopened = Partition.open(v1_directory)
    assert read_all(reopened)[-1] == (next_offset, b"after the roll")
    reopened.close()


async def test_a_follower_gets_version_1_chunks_in_the_current_layout(
        v1_directory: Path, tmp_path: Path) -> None:
    leader = Partition.open(v1_directory)
    follower = Partition.open(tmp_path / "follower")
    follower.writable = False
    offset = 0
    while (chunk := leader.written_chunk(offset)) is not None:
        assert chunk.rewritten is not None
        follower.append_chunk(memoryview(chunk.rewritten), chunk.opens_segment)
        offset = chunk.next_offset
    follower.flush()
    assert read_all(follower) == list(enumerate(V1_RECORDS))
    assert follower.sequences == V1_SEQUENCES
    first = follower.written_chunk(0)
    assert first is not None and first.rewritten is None
    raw = os.pread(first.segment.fileno(), first.size, first.file_pos)
    header = parse_header(raw)
    trailer = raw[header.size - header.trailer_length:header.size]
    assert decode_sequences(trailer) == {"alpha": 1}
    leader.close()
    follower.close()


def test_version_1_chunks_streamed_a_few_bytes_at_a_time(
        v1_directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 8 bytes: every version-1 chunk is streamed, and checked by its trailer."""
    monkeypatch.setattr(chunk_stream, "WINDOW", 8)
    partition = Partition.open(v1_directory)
    reader = PartitionReader(partition, 0)
    streamed = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        assert isinstance(chunk, chunk_stream.StreamedChunk)
        streamed.extend((offset, bytes(body)) for offset, body in chunk.records())
    assert streamed == list(enumerate(V1_RECORDS))
    partition.close()
