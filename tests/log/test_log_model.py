"""Property test: random appends, reads, retention and crash-truncations of a
real partition agree with an in-memory model of which records it must hold."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.log.reader import PartitionReader

SEGMENT_BYTES = 600
POLICY = RetentionPolicy(max_segment_bytes=SEGMENT_BYTES)
record_lists = st.lists(st.binary(min_size=0, max_size=80), min_size=1, max_size=12)


class PartitionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.partition = self._open()
        self.records: dict[int, bytes] = {}  # offset -> body of every record held
        self.first = 0
        self.next = 0
        self.sequences: dict[str, int] = {}

    def _open(self) -> Partition:
        return Partition.open(self.root / "p", durability=DurabilityPolicy(FsyncMode.NEVER),
                              retention=POLICY)

    @rule(batch=record_lists, writer=st.sampled_from([None, "a", "b"]))
    def append(self, batch: list[bytes], writer: str | None) -> None:
        sequences = None
        if writer is not None:
            sequences = {writer: self.sequences.get(writer, 0) + 1}
            self.sequences.update(sequences)
        appended = self.partition.write_records(batch, sequences=sequences)
        assert appended.chunk_id == self.next
        for body in batch:
            self.records[self.next] = body
            self.next += 1

    @rule(data=st.data())
    def read_from(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(self.first, max(self.first, self.next)))
        reader = PartitionReader(self.partition, start)
        seen = []
        while (chunk := reader.next_chunk_nowait()) is not None:
            seen.extend((offset, bytes(body)) for offset, body in chunk.records())
        expected = sorted(self.records.items())
        # A read starts at the chunk holding `start`, so it may begin a little before it.
        assert seen == [item for item in expected if item[0] >= seen[0][0]] if seen else \
            start >= self.next
        if seen:
            assert seen[0][0] <= start

    @rule(max_bytes=st.integers(0, 4 * SEGMENT_BYTES))
    def retention(self, max_bytes: int) -> None:
        self.partition.retention = RetentionPolicy(max_bytes=max_bytes,
                                                   max_segment_bytes=SEGMENT_BYTES)
        self.partition.apply_retention()
        self.partition.retention = POLICY  # rolls in later steps must not delete more
        self._forget_below(self.partition.first_offset)

    @precondition(lambda self: self.next > self.first)
    @rule(data=st.data())
    def crash_and_truncate(self, data: st.DataObject) -> None:
        """Simulate a torn write: cut the last segment file anywhere, then reopen."""
        segment = self.partition._segments[-1]
        spans = [segment.chunk_span(i) for i in range(segment.num_chunks)]
        cut = data.draw(st.integers(16, segment.size))
        surviving = [i for i, (pos, size) in enumerate(spans) if pos + size <= cut]
        path = segment.path
        self.partition.close()
        os.truncate(path, cut)
        if surviving:
            new_next = segment.index.chunk_ids[surviving[-1]] + segment.index.record_counts[
                surviving[-1]]
        else:
            new_next = segment.first_chunk_id
        self.partition = self._open()
        for offset in range(new_next, self.next):
            self.records.pop(offset, None)
        self.next = new_next
        self.sequences = dict(self.partition.sequences)

    @rule()
    def clean_restart(self) -> None:
        self.partition.close()
        self.partition = self._open()
        assert self.partition.sequences == self.sequences

    def _forget_below(self, first: int) -> None:
        for offset in range(self.first, first):
            self.records.pop(offset, None)
        self.first = first

    @invariant()
    def offsets_match(self) -> None:
        assert self.partition.first_offset == self.first
        assert self.partition.next_offset == self.next == self.partition.committed_offset

    def teardown(self) -> None:
        self.partition.close()
        shutil.rmtree(self.root)


TestPartitionModel = PartitionModel.TestCase
TestPartitionModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
