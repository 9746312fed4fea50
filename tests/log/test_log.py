"""The log engine on real files: appends, every read position, indexes, tail
waiting, retention, byte positions, recovery and publisher sequences."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mainstem.formats.chunk import (
    TRACKING_ENTRY,
    CorruptChunk,
    decode_sequences,
    encode_header,
    encode_sequences,
    encode_simple_entries,
    parse_header,
)
from mainstem.formats.osiris import HEADER_SIZE, SUB_BATCH_ENTRY
from mainstem.log.errors import PartitionClosed
from mainstem.log.guard import check_guard, guard
from mainstem.log.index import RECORD
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.log.reader import PartitionReader
from mainstem.log.segment_file import SEGMENT_SUFFIX

NEVER = DurabilityPolicy(FsyncMode.NEVER)


def records(batch: int, count: int = 10) -> list[bytes]:
    return [f"b{batch}-r{i}".encode() for i in range(count)]


def read_all(partition: Partition, start: int = 0) -> list[tuple[int, bytes]]:
    reader = PartitionReader(partition, start)
    out = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        out.extend((offset, bytes(body)) for offset, body in chunk.records())
    return out


@pytest.fixture
def small_segments() -> RetentionPolicy:
    return RetentionPolicy(max_segment_bytes=1_000)


async def test_append_assigns_consecutive_offsets_and_reads_back(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    first = await partition.append(records(0))
    second = await partition.append(records(1, 5))
    assert (first.chunk_id, first.next_offset) == (0, 10)
    assert (second.chunk_id, second.next_offset) == (10, 15)
    assert partition.committed_offset == 15
    assert partition.committed_chunk_id == 10
    assert read_all(partition) == list(enumerate(records(0) + records(1, 5)))
    partition.close()


async def test_chunk_bytes_are_the_osiris_layout(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    await partition.append([b"hello", b"world!"])
    location = partition.locate(0)
    assert location is not None
    raw = os.pread(location.segment.fileno(), location.send_size, location.file_pos)
    assert raw[0] == 0x50 and raw[1] == 0  # magic/version, user chunk
    header = parse_header(raw)
    assert (header.num_entries, header.num_records, header.chunk_id) == (2, 2, 0)
    assert header.data_length == 4 + 5 + 4 + 6
    assert raw[HEADER_SIZE:] == encode_simple_entries([b"hello", b"world!"])
    assert location.send_size == HEADER_SIZE + header.data_length
    partition.close()


async def test_reads_by_every_position_kind(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER)
    for batch, timestamp in enumerate((1_000, 2_000, 3_000)):
        partition.write_records(records(batch), timestamp=timestamp)
    assert partition.first_offset == 0  # "first"
    assert partition.committed_chunk_id == 20  # "last": start of the last chunk
    assert partition.committed_offset == 30  # "next"
    assert partition.offset_for_timestamp(1_500) == 10  # clamps to a chunk boundary
    assert partition.offset_for_timestamp(0) == 0
    assert partition.offset_for_timestamp(9_999) == 30
    # An absolute offset inside a chunk gives the whole chunk holding it.
    chunk = partition.read_chunk(15)
    assert chunk is not None and chunk.chunk_id == 10
    assert read_all(partition, 25)[0] == (20, b"b2-r0")
    assert partition.read_chunk(30) is None
    partition.close()


async def test_index_lookups_across_segments(tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(40):
        partition.write_records(records(batch), timestamp=10 * batch)
    assert partition.segment_count > 5
    for offset in (0, 9, 10, 123, 399):
        chunk = partition.read_chunk(offset)
        assert chunk is not None and chunk.chunk_id == offset - offset % 10
        assert bytes(next(chunk.records())[1]) == f"b{offset // 10}-r0".encode()
    assert partition.offset_for_timestamp(205) == 210
    partition.close()


async def test_index_is_rebuilt_when_missing_or_damaged(tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(20):
        partition.write_records(records(batch))
    expected = read_all(partition)
    partition.close()
    indexes = sorted((tmp_path / "p").glob("*.index"))
    indexes[0].unlink()
    indexes[1].write_bytes(b"garbage")
    indexes[-1].write_bytes(indexes[-1].read_bytes()[:-7])  # torn last record
    reopened = Partition.open(tmp_path / "p")
    assert read_all(reopened) == expected
    assert reopened.offset_for_timestamp(0) == 0
    reopened.close()


@pytest.mark.parametrize("field", ["chunk_id", "timestamp", "byte_pos", "num_records"])
async def test_a_well_formed_but_damaged_index_is_rebuilt_at_start(
        tmp_path: Path, small_segments, field: str) -> None:
    """An index record whose bytes were flipped yet still parses (no torn record, positions
    in order) is caught by the cheap checks at start and rebuilt from the segment."""
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(20):
        partition.write_records(records(batch), timestamp=1_000 + batch)
    expected, from_35 = read_all(partition), read_all(partition, 35)
    partition.close()
    index = sorted((tmp_path / "p").glob("*.index"))[1]
    raw = bytearray(index.read_bytes())
    at = {"chunk_id": 0, "timestamp": 8, "byte_pos": 24, "num_records": 32}[field]
    raw[8 + RECORD.size + at] ^= 0x40  # the second record's field, high bits
    index.write_bytes(bytes(raw))
    reopened = Partition.open(tmp_path / "p")
    assert read_all(reopened) == expected
    assert read_all(reopened, 35) == from_35
    assert reopened.offset_for_timestamp(1_008) == 80
    assert index.read_bytes() != bytes(raw)  # rewritten as the segment says
    reopened.close()


async def test_tail_reader_wakes_on_commit_without_polling(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    reader = PartitionReader(partition, 0)
    waiting = asyncio.create_task(reader.next_chunk())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await partition.append([b"late"])
    chunk = await asyncio.wait_for(waiting, 2)
    assert [bytes(body) for _, body in chunk.records()] == [b"late"]
    partition.close()


async def test_readers_never_see_records_before_the_durability_point(tmp_path: Path) -> None:
    synced = asyncio.Event()
    partition = Partition.open(tmp_path / "p")
    appended = partition.write_records([b"not yet durable"])
    assert partition.read_chunk(0) is None
    assert partition.committed_offset == 0
    await partition.commit(appended)
    synced.set()
    assert partition.read_chunk(0) is not None


async def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    syncs = 0
    original = partition._sync_dirty

    def counting_sync() -> None:
        nonlocal syncs
        syncs += 1
        original()

    partition._commit._sync = counting_sync
    await asyncio.gather(*(partition.append(records(b)) for b in range(50)))
    assert partition.committed_offset == 500
    assert syncs < 50
    partition.close()


async def test_interval_policy_commits_after_the_timer(tmp_path: Path) -> None:
    policy = DurabilityPolicy(FsyncMode.INTERVAL, interval_ms=20)
    partition = Partition.open(tmp_path / "p", durability=policy)
    appended = partition.write_records([b"x"])
    assert partition.committed_offset == 0
    await asyncio.wait_for(partition.commit(appended), 2)
    assert partition.committed_offset == 1
    partition.close()


async def test_closing_fails_tail_waiters(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    waiting = asyncio.create_task(partition.wait_for(0))
    await asyncio.sleep(0)
    partition.close()
    with pytest.raises(PartitionClosed):
        await asyncio.wait_for(waiting, 2)


async def test_retention_by_bytes_keeps_active_segment_and_moves_readers(
        tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(30):
        partition.write_records(records(batch))
    reader = PartitionReader(partition, 0)
    assert reader.next_chunk_nowait() is not None  # positioned in the first segment
    partition.retention = RetentionPolicy(max_bytes=2_500, max_segment_bytes=1_000)
    deleted = partition.apply_retention()
    assert deleted > 0
    assert partition.size_bytes <= 2_500 + 1_000
    assert partition.first_offset > 10
    files = sorted((tmp_path / "p").glob("*" + SEGMENT_SUFFIX))
    assert int(files[0].name.split(".")[0]) == partition.first_offset
    chunk = reader.next_chunk_nowait()
    assert chunk is not None and chunk.chunk_id == partition.first_offset
    assert reader.lost == partition.first_offset - 10
    partition.retention = RetentionPolicy(max_bytes=0, max_segment_bytes=1_000)
    partition.apply_retention()
    assert partition.segment_count == 1  # the active segment always stays
    assert read_all(partition)[-1] == (299, b"b29-r9")
    partition.close()


async def test_retention_by_age(tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(20):
        partition.write_records(records(batch), timestamp=1_000 * batch)
    partition.retention = RetentionPolicy(max_age_ms=5_500, max_segment_bytes=1_000)
    partition.apply_retention(now_ms=20_000)
    # Every segment whose newest chunk is older than 14.5 s is gone, no other.
    first_ts = partition.offset_for_timestamp(0)
    assert partition.first_offset == first_ts
    segment = partition._segments[0]
    assert segment.last_timestamp >= 14_500
    assert partition.read_chunk(partition.first_offset - 1) is not None  # clamps to first
    partition.close()


async def test_retention_waits_for_the_commit_that_replaces_the_oldest_segment(
        tmp_path: Path) -> None:
    # Written in one go before any fsync: at each roll nothing later is durable yet, so the
    # oldest segments may not go then; the commit that makes them replaceable removes them.
    policy = RetentionPolicy(max_bytes=3_000, max_segment_bytes=1_000)
    partition = Partition.open(tmp_path / "p", retention=policy)
    for batch in range(30):
        appended = partition.write_records(records(batch))
    assert partition.first_offset == 0
    await partition.commit(appended)
    assert partition.first_offset > 0
    assert partition.size_bytes <= 3_000 + 1_000
    assert read_all(partition)[-1] == (299, b"b29-r9")
    partition.close()


async def test_segment_roll_applies_retention(tmp_path: Path) -> None:
    policy = RetentionPolicy(max_bytes=3_000, max_segment_bytes=1_000)
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=policy)
    for batch in range(100):
        partition.write_records(records(batch))
    assert partition.size_bytes <= 3_000 + 1_000
    assert read_all(partition)[-1] == (999, b"b99-r9")
    partition.close()


async def test_every_chunk_knows_the_payload_byte_it_starts_at(tmp_path: Path,
                                                                small_segments) -> None:
    # The byte positions the segment protocol addresses data by, kept across reopening
    # and retention.
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    starts = {}
    written = 0
    for batch in range(30):
        batch_records = records(batch)
        appended = partition.write_records(batch_records)
        starts[appended.chunk_id] = written
        written += sum(map(len, batch_records))
    assert partition.committed_byte == written

    def located(partition: Partition) -> dict[int, int]:
        found, offset = {}, partition.first_offset
        while (location := partition.locate(offset)) is not None:
            found[location.chunk_id] = location.first_byte
            offset = location.next_offset
        return found

    assert located(partition) == starts
    partition.close()
    reopened = Partition.open(tmp_path / "p", retention=small_segments)
    assert located(reopened) == starts and reopened.committed_byte == written
    reopened.retention = RetentionPolicy(max_bytes=2_000, max_segment_bytes=1_000)
    reopened.apply_retention()
    kept = located(reopened)
    assert 0 not in kept and kept == {k: v for k, v in starts.items() if k in kept}
    assert reopened.first_byte == starts[reopened.first_offset]
    reopened.close()


async def test_sub_batch_entries_count_records_and_stay_opaque(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    body = b"opaque compressed bytes"
    sub_batch = SUB_BATCH_ENTRY.pack(0x80 | (1 << 4), 3, 99, len(body)) + body
    simple = encode_simple_entries([b"solo"])
    appended = partition.write(sub_batch + simple, num_entries=2, num_records=4)
    await partition.commit(appended)
    assert appended.next_offset == 4
    chunk = partition.read_chunk(0)
    entries = list(chunk.entries())
    assert entries[0].num_records == 3 and entries[0].compression == 1
    assert bytes(entries[0].body) == body
    assert [offset for offset, _ in chunk.records()] == [0, 3]
    assert partition.committed_byte == len(body) + 4
    partition.close()


async def test_publisher_sequences_survive_restart_and_segment_rolls(
        tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    partition.write_records([b"a"], sequences={"alpha": 5})
    for batch in range(30):
        partition.write_records(records(batch), sequences={"beta": batch})
    partition.retention = RetentionPolicy(max_bytes=1, max_segment_bytes=1_000)
    partition.apply_retention()  # the chunk that first stored "alpha" is gone
    partition.close()
    reopened = Partition.open(tmp_path / "p")
    assert reopened.sequences == {"alpha": 5, "beta": 29}
    reopened.close()


def test_trailer_round_trip_and_corruption() -> None:
    tracking = encode_sequences({"w1": 1, "ünï": 2**63 - 1})
    assert decode_sequences(tracking) == {"w1": 1, "ünï": 2**63 - 1}
    # Osiris's tracking entry: type 0, id size, id, sequence u64
    assert tracking[:TRACKING_ENTRY.size + 2 + 8] == b"\x00\x02w1" + (1).to_bytes(8, "big")
    head = encode_header(chunk_id=7, data=b"", num_entries=0, num_records=0, timestamp=5,
                         trailer_length=len(tracking))
    raw = head + tracking + guard(head, tracking)
    assert check_guard(memoryview(raw), parse_header(raw)) == tracking
    for position in range(len(raw)):  # the guard covers every byte the data CRC does not
        damaged = bytearray(raw)
        damaged[position] ^= 1
        with pytest.raises(CorruptChunk):
            check_guard(memoryview(damaged), parse_header(damaged))


async def test_write_rejects_empty_chunks(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p")
    with pytest.raises(ValueError):
        partition.write(b"", 0, 0)
    partition.close()
    with pytest.raises(PartitionClosed):
        partition.write_records([b"x"])


async def test_fsync_on_demand_waits_for_a_committer(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "journal", fsync_on_demand=True)
    appended = partition.write_records([b"a", b"b"])
    await asyncio.sleep(0.05)
    assert partition.committed_offset == 0  # written, no fsync asked for yet
    await partition.commit(appended)
    assert partition.committed_offset == 2
    partition.write_records([b"c"])
    await partition.aclose()  # a clean close makes everything durable
    reopened = Partition.open(tmp_path / "journal")
    assert reopened.committed_offset == 3
    reopened.close()


async def test_truncate_before_drops_only_whole_settled_segments(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "p", retention=RetentionPolicy(max_segment_chunks=2))
    for i in range(6):
        await partition.append([str(i).encode()])
    assert partition.segment_count == 3
    assert partition.truncate_before(3) == 1  # offsets 0-1; offset 2 shares a segment with 3
    assert partition.first_offset == 2
    assert partition.truncate_before(100) == 1  # the active segment always stays
    assert partition.first_offset == 4
    partition.close()


async def test_retention_keeps_sequences_when_a_torn_write_emptied_the_tail(
        tmp_path: Path, small_segments) -> None:
    """A crash can leave the newest segment empty; the segments before it are then the
    only record of the publisher sequences, so retention must not take them all."""
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(12):
        partition.write_records(records(batch), sequences={"alpha": batch})
    tail = partition._segments[-1]
    first_in_tail = tail.first_chunk_id
    partition.close()
    os.truncate(tail.path, 16)  # only the file header survives
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    assert partition.next_offset == first_in_tail
    partition.retention = RetentionPolicy(max_bytes=0, max_segment_bytes=1_000)
    partition.apply_retention()
    assert partition.truncate_before(partition.next_offset) == 0
    assert read_all(partition)[-1][0] == first_in_tail - 1
    partition.close()
    reopened = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    assert reopened.sequences == {"alpha": first_in_tail // 10 - 1}  # ten records a batch
    reopened.write_records([b"next"])  # the new chunk restates the sequences
    reopened.retention = RetentionPolicy(max_bytes=0, max_segment_bytes=1_000)
    reopened.apply_retention()
    reopened.close()
    again = Partition.open(tmp_path / "p")
    assert again.sequences == reopened.sequences
    again.close()


async def test_a_roll_torn_before_its_header_is_dropped_on_open(
        tmp_path: Path, small_segments) -> None:
    partition = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    for batch in range(5):
        partition.write_records(records(batch))
    partition.close()
    torn = tmp_path / "p" / f"{50:020d}{SEGMENT_SUFFIX}"
    torn.write_bytes(b"MSS")  # the crash came between creating the file and its header
    reopened = Partition.open(tmp_path / "p", durability=NEVER, retention=small_segments)
    assert not torn.exists()
    assert reopened.next_offset == 50
    reopened.write_records(records(5))
    assert read_all(reopened)[-1] == (59, b"b5-r9")
    reopened.close()
