"""The executor's tier reader: segments uploaded with the log's own `upload_segment` to a
directory tier and to each S3 server (moto's emulator, Ceph's gateway) read back, through
`record_batches`, as the same rows as the log read locally, in both segment layouts, over
ranges that cut chunks and segments, with GETs small enough to split a segment; a damaged
object fails naming the tier and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import TierUnavailable
from mainstem.log.partition import Partition
from mainstem.log.segment_file import LEGACY_VERSION, Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_upload import TieredRecord, segment_key, upload_segment
from mainstem.spark.options import SourceOptions, TopicPartition
from mainstem.spark.records import ARROW_SCHEMA, encode_row, record_batches
from mainstem.spark.source import TieredRange, _plan
from mainstem.spark.tiered import (
    TierAddress,
    TierCredentials,
    Tiered,
    TierReadError,
    tiered_chunks,
)
from tests.log.tiering import BUCKET, sealed, written_partition
from tests.support.s3_servers import S3Server

V1_DATA = Path(__file__).parent.parent / "log" / "fixtures" / "partition-v1"
PREFIX = "s/0"


def batches() -> list[list[bytes]]:
    """Chunks of 1 to 7 records: AMQP 1.0 messages with keys and headers, and raw bytes."""
    out = []
    for n in range(60):
        out.append([encode_row(b"v%d-%d" % (n, i) * (n % 5 + 1), b"k%d" % i,
                               [{"key": "n", "value": b"%d" % n}]) if n % 3 else
                    b"raw-%d-%d" % (n, i) for i in range(n % 7 + 1)])
    return out


async def uploaded(tier: Tier, partition: Partition) -> tuple[list[Segment], list[TieredRecord]]:
    segments = sealed(partition)
    return segments, [await upload_segment(tier, s, segment_key(PREFIX, s.first_chunk_id, 1))
                      for s in segments]


def local_rows(segments: list[Segment], start: int, end: int) -> pa.Table:
    chunks = (s.read_chunk(i) for s in segments for i in range(s.num_chunks))
    return pa.Table.from_batches(list(record_batches(chunks, "s", 0, start, end)), ARROW_SCHEMA)


def tier_rows(address: TierAddress, records: list[TieredRecord], start: int, end: int,
              credentials: TierCredentials | None = None, request_bytes: int = 1 << 20
              ) -> pa.Table:
    chunks = tiered_chunks(address, records, start, end, credentials,
                           request_bytes=request_bytes)
    return pa.Table.from_batches(list(record_batches(chunks, "s", 0, start, end)), ARROW_SCHEMA)


def ranges(records: list[TieredRecord]) -> list[tuple[int, int]]:
    """Everything, ranges cutting chunks and segments, one record, and none."""
    end = records[-1].next_offset
    middle = records[len(records) // 2].first_chunk_id
    return [(0, end), (1, end - 1), (middle - 1, middle + 1), (middle, middle + 1),
            (3, 3)]


async def test_a_directory_tier_reads_as_the_local_log(tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", batches(), segment_bytes=2000)
    segments, records = await uploaded(Tier.directory(tmp_path / "tier"), partition)
    assert len(records) >= 4
    address = TierAddress(str(tmp_path / "tier"), None, "us-east-1")
    for start, end in ranges(records):
        local = local_rows(segments, start, end)
        assert local.column("offset").to_pylist() == list(range(start, end))
        for request_bytes in (1, 600, 1 << 20):  # a GET per chunk, a few chunks, a segment
            assert tier_rows(address, records, start, end, None, request_bytes) == local
    await partition.aclose()


async def test_segments_of_the_older_layout_read_from_the_tier(tmp_path: Path) -> None:
    shutil.copytree(V1_DATA, tmp_path / "p")
    partition = Partition.open(tmp_path / "p", descriptors=DescriptorCache(16))
    segments, records = await uploaded(Tier.directory(tmp_path / "tier"), partition)
    assert {r.version for r in records} == {LEGACY_VERSION}
    address = TierAddress(f"file://{tmp_path / 'tier'}", None, "us-east-1")
    end = records[-1].next_offset
    assert tier_rows(address, records, 0, end, request_bytes=100) == local_rows(segments, 0, end)
    await partition.aclose()


async def test_an_s3_tier_reads_as_the_local_log(tmp_path: Path, s3: S3Server) -> None:
    partition = written_partition(tmp_path / "p", batches(), segment_bytes=3000)
    segments, records = await uploaded(s3.tier(), partition)
    address = TierAddress(s3.url("tiered"), s3.endpoint, "us-east-1")
    credentials = TierCredentials(s3.access_key_id, s3.secret_access_key)
    assert s3.secret_access_key not in repr(credentials)
    for start, end in ranges(records)[:3]:
        assert tier_rows(address, records, start, end, credentials) == \
            local_rows(segments, start, end)
    await partition.aclose()


async def test_a_damaged_or_missing_object_fails_naming_the_tier_and_key(
        tmp_path: Path) -> None:
    partition = written_partition(tmp_path / "p", batches(), segment_bytes=2000)
    _, records = await uploaded(Tier.directory(tmp_path / "tier"), partition)
    address = TierAddress(str(tmp_path / "tier"), None, "us-east-1")
    record = records[1]
    path = tmp_path / "tier" / record.key
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF  # in the last chunk's data or trailer
    path.write_bytes(bytes(raw))
    with pytest.raises(TierReadError, match=rf"tier {tmp_path / 'tier'}: {record.key}: "
                                            "chunk at"):
        tier_rows(address, records, record.first_chunk_id, record.next_offset)
    path.with_suffix(".index").write_bytes(b"MSIX")
    with pytest.raises(TierReadError, match=f"{record.index_key} is not the index"):
        tier_rows(address, records, record.first_chunk_id, record.next_offset)
    path.unlink()
    path.with_suffix(".index").unlink()
    with pytest.raises(TierUnavailable, match=f"{record.index_key}"):
        tier_rows(address, records, record.first_chunk_id, record.next_offset)
    nowhere = TierAddress(str(tmp_path / "unmounted"), None, "us-east-1")
    with pytest.raises(TierReadError, match="unmounted: no such directory here"):
        tier_rows(nowhere, records, 0, 1)
    assert not (tmp_path / "unmounted").exists()
    # the other segments still read
    assert tier_rows(address, records, 0, records[0].next_offset).num_rows == \
        records[0].next_offset
    await partition.aclose()


def test_planning_cuts_each_span_at_the_tier_and_each_piece_as_before() -> None:
    """Offsets the tier holds become TieredRanges with the records they need, cut by
    maxRecordsPerPartition as broker ranges are; older and newer offsets stay broker ranges."""
    def record(first: int, end: int) -> TieredRecord:
        return TieredRecord(f"s/0/{first}.segment", first, end, 0, 0, 0, 0, 1, 0, 1, 0, 2)

    tiered = Tiered(TierAddress("/tier", None, "us-east-1"),
                    (record(10, 50), record(50, 90), record(90, 100)))
    tp = TopicPartition("s", 0, "s")
    options = SourceOptions.parse({"stream": "s", "maxRecordsPerPartition": "40"})
    planned = _plan([(tp, 0, 130)], options, {}, {"s": tiered})
    assert [(type(p).__name__, p.start, p.end) for p in planned] == [
        ("OffsetRange", 0, 10), ("TieredRange", 10, 50), ("TieredRange", 50, 90),
        ("TieredRange", 90, 100), ("OffsetRange", 100, 130)]
    assert [[r.first_chunk_id for r in p.records] for p in planned
            if isinstance(p, TieredRange)] == [[10], [50], [90]]
    wide = _plan([(tp, 45, 95)], SourceOptions.parse({"stream": "s", "minPartitions": "2"}),
                 {}, {"s": tiered})
    assert [(p.start, p.end, [r.first_chunk_id for r in p.records]) for p in wide] == [
        (45, 70, [10, 50]), (70, 95, [50, 90])]
    direct_off = SourceOptions.parse({"stream": "s", "tier.direct": "false"})
    assert not direct_off.tier_direct
    assert [type(p).__name__ for p in _plan([(tp, 0, 130)], direct_off, {}, {})] == \
        ["OffsetRange"]


def test_an_s3_tier_without_credentials_is_refused_in_words(monkeypatch) -> None:
    """Without keys in the options or the environment, obstore would ask the cloud's
    instance metadata service (a non-loopback address: a 403 off the cloud); the read is
    refused before any request, saying what to give, unless the options ask for it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    address = TierAddress(f"s3://{BUCKET}/tiered", "http://127.0.0.1:9", "us-east-1")
    with pytest.raises(TierReadError) as refused:
        address.open(None)
    assert "no credentials to read it: give options 'tier.accessKeyId' and " \
        "'tier.secretAccessKey', or set AWS_ACCESS_KEY_ID" in str(refused.value)
    assert address.credentials_problem(None, instance=True) is None
    assert address.credentials_problem(TierCredentials("k", "s"), instance=False) is None
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert address.credentials_problem(None, instance=False) is None
    assert TierAddress("/mnt/tier", None, "us-east-1").credentials_problem(None, False) is None
