"""Crash tests: SIGKILL a writer mid-publish and check every acknowledged batch
after recovery; damage the tail byte by byte and check nothing bad is served."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mainstem.log.partition import Partition
from mainstem.log.reader import PartitionReader
from tests.log.crash_writer import batch_records

HERE = Path(__file__).parent


def parse_ack(line: str) -> tuple[int, int, int]:
    fields = line.split()
    assert len(fields) == 3, f"malformed acknowledgement line {line!r}"
    batch, chunk_id, count = map(int, fields)
    return batch, chunk_id, count


def run_writer_until(directory: Path, acks_wanted: int) -> list[tuple[int, int, int]]:
    """Start the writer, SIGKILL it after `acks_wanted` acknowledgements (plus whatever
    it printed before dying), and return every acknowledged (batch, chunk_id, count)."""
    child = subprocess.Popen([sys.executable, str(HERE / "crash_writer.py"), str(directory)],
                             stdout=subprocess.PIPE, text=True)
    acks: list[tuple[int, int, int]] = []
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while len(acks) < acks_wanted and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acks.append(parse_ack(line))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        # Read on through child.stdout: what its buffer holds is the start of the next line
        # (communicate() reads the pipe past that buffer, and would cut the line's head).
        remaining = child.stdout.read()
    # A line cut short by the kill has no newline yet: that ack was never given.
    acks.extend(parse_ack(line) for line in remaining.splitlines(keepends=True)
                if line.endswith("\n"))
    assert len(acks) >= acks_wanted, "the writer died or stalled before the kill"
    return acks


def stored_records(partition: Partition) -> dict[int, bytes]:
    reader = PartitionReader(partition, 0)
    held = {}
    while (chunk := reader.next_chunk_nowait()) is not None:  # CRC-checked reads
        held.update((offset, bytes(body)) for offset, body in chunk.records())
    return held


@pytest.mark.parametrize("acks_wanted", [50, 400])
def test_sigkill_mid_publish_loses_no_acknowledged_batch(tmp_path: Path, acks_wanted: int) -> None:
    directory = tmp_path / "p"
    acks = run_writer_until(directory, acks_wanted)
    partition = Partition.open(directory)
    held = stored_records(partition)
    for batch, chunk_id, count in acks:
        expected = batch_records(batch)
        assert count == len(expected)
        assert [held.get(chunk_id + i) for i in range(count)] == expected, f"batch {batch}"
    # Beyond the acknowledged batches there may be more, but only whole ones.
    assert sorted(held) == list(range(partition.first_offset, partition.next_offset))
    writers_last = {}
    for batch, _, _ in acks:
        writers_last[f"w{batch % 4}"] = max(batch, writers_last.get(f"w{batch % 4}", -1))
    for writer, batch in writers_last.items():
        assert partition.sequences[writer] >= batch
    partition.close()


def test_restart_after_sigkill_appends_after_the_recovered_tail(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    run_writer_until(directory, 30)
    first_run = Partition.open(directory)
    next_offset = first_run.next_offset
    first_run.close()
    run_writer_until(directory, 30)
    partition = Partition.open(directory)
    held = stored_records(partition)
    assert partition.next_offset > next_offset
    assert sorted(held) == list(range(partition.next_offset))
    partition.close()


async def test_every_damaged_byte_in_the_tail_chunk_is_caught(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    partition = Partition.open(directory)
    await partition.append([b"kept-1", b"kept-2"])
    await partition.append([b"tail-record"], sequences={"w": 9})
    location = partition.locate(2)
    tail_start, segment_path = location.file_pos, location.segment.path
    partition.close()
    pristine = segment_path.read_bytes()
    for position in range(tail_start, len(pristine)):
        damaged = bytearray(pristine)
        damaged[position] ^= 0x5A
        segment_path.write_bytes(damaged)
        (directory / segment_path.name.replace(".segment", ".index")).unlink(missing_ok=True)
        reopened = Partition.open(directory)
        held = stored_records(reopened)
        # The damaged chunk is cut away whole; the one before it survives intact.
        assert held == {0: b"kept-1", 1: b"kept-2"}, f"byte {position}"
        assert reopened.next_offset == 2
        reopened.close()
        segment_path.write_bytes(pristine)


async def test_damage_inside_the_log_is_never_served(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    partition = Partition.open(directory)
    for batch in range(5):
        await partition.append([f"batch-{batch}".encode()])
    location = partition.locate(2)
    partition.close()
    with open(location.segment.path, "r+b") as segment:
        segment.seek(location.file_pos + 50)
        segment.write(b"\xff")
    reopened = Partition.open(directory)
    reader = PartitionReader(reopened, 0)
    assert reader.next_chunk_nowait() is not None
    assert reader.next_chunk_nowait() is not None
    with pytest.raises(Exception, match="CRC"):
        reader.next_chunk_nowait()
    reopened.close()
