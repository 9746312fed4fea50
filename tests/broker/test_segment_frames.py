"""A segment's bytes read from its partition: each record as an Event frame, whatever
wrote it, cut to any byte range."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.broker.segment_store import _read_frames, _RecentChunks
from mainstem.broker.stream_service import PartitionService
from mainstem.formats.chunk import encode_simple_entries
from mainstem.formats.osiris import SUB_BATCH_ENTRY
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
        assert bytes(_read_frames(service, 0, 1 << 20, _RecentChunks())) == whole
        recent = _RecentChunks(size=1)  # reads served from chunks walked before, or not
        for start in range(len(whole)):
            for size in (1, 5, 13, len(whole)):
                expected = whole[start:start + size]
                assert bytes(_read_frames(service, start, size, recent)) == expected
                assert bytes(_read_frames(service, start, size, _RecentChunks())) == expected
    finally:
        await service.close()


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.binary(max_size=30), min_size=1, max_size=6), min_size=1,
                        max_size=4),
       reads=st.lists(st.tuples(st.integers(0, 500), st.integers(1, 300)), max_size=12))
def test_reads_in_any_order_over_several_chunks_return_the_frames_bytes(
        batches: list[list[bytes]], reads: list[tuple[int, int]]) -> None:
    """Whichever chunks the recent ones are, a read returns exactly its byte range."""
    whole = b"".join(frame(body) for batch in batches for body in batch)

    async def run(directory: Path) -> None:
        service = PartitionService(Partition.open(directory))
        try:
            for batch in batches:  # a chunk each
                await service.appender.append_records(batch, together=True).durable
            recent = _RecentChunks(size=2)
            for start, size in reads:
                got = _read_frames(service, start, size, recent)
                assert bytes(got) == whole[start:start + size]
        finally:
            await service.close()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(Path(directory)))
