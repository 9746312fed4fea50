"""A segment's bytes read from its partition: each record as an Event frame, whatever
wrote it, cut to any byte range."""

from __future__ import annotations

from pathlib import Path

from mainstem.broker.segment_store import _read_frames
from mainstem.broker.stream_service import PartitionService
from mainstem.formats.osiris import SUB_BATCH_ENTRY
from mainstem.log.chunk import encode_simple_entries
from mainstem.log.partition import Partition


def frame(body: bytes) -> bytes:
    return bytes(4) + len(body).to_bytes(4, "big") + body


async def test_records_read_as_event_frames_from_any_byte(tmp_path: Path) -> None:
    service = PartitionService(Partition.open(tmp_path / "p"))
    try:
        appender = service.appender
        await appender.append_simple_entries(
            [encode_simple_entries([b"one"]), encode_simple_entries([b"three"])]).durable
        sub_batch = SUB_BATCH_ENTRY.pack(0x80, 2, 6, 6) + b"opaque"  # a stream publisher's
        await appender.append_entries([encode_simple_entries([b"w"]), sub_batch,
                                       encode_simple_entries([b"x"])], all_simple=False).durable
        whole = frame(b"one") + frame(b"three") + frame(b"w") + frame(b"opaque") + frame(b"x")
        partition = service.partition
        assert bytes(_read_frames(partition, 0, 1 << 20)) == whole
        for start in range(len(whole)):
            for size in (1, 5, 13, len(whole)):
                assert bytes(_read_frames(partition, start, size)) == \
                    whole[start:start + size]
    finally:
        await service.close()
