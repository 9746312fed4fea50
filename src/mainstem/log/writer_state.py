"""Writer sequences: the last sequence each writer (publisher reference) got stored.

Deduplication state lives in the chunk trailers, written with the data it covers, so
it can never get ahead of or fall behind the log. This module keeps the in-memory
view of it, as Kafka's ProducerStateManager does: it recovers the view from the
trailers, says which tracking entries the next chunk must carry (every sequence again
in a segment's first chunk, so retention can delete older segments), and forgets the
least recently used writers past a bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from mainstem.formats.chunk import encode_sequences

if TYPE_CHECKING:
    from mainstem.log.segment_file import Segment

MAX_WRITERS = 4096  # writers remembered per partition; the least recently used go first


class WriterState:
    def __init__(self, last: dict[str, int]) -> None:
        self.last = last  # writer -> last stored sequence; dict order is recency
        self._snapshot_due = True  # the next chunk restates every sequence

    @classmethod
    def recover(cls, segments: Sequence[Segment]) -> WriterState:
        """Sequences as of the tail: the first chunk of a segment restates all of them,
        later chunks add their own."""
        for k in range(len(segments) - 1, -1, -1):
            if segments[k].num_chunks:
                break
        else:
            return cls({})
        state = cls({})
        for segment in segments[k:]:
            for i in range(segment.num_chunks):
                state._remember(segment.read_sequences(i))
        return state

    def restate(self) -> None:
        """A new segment began: its first chunk carries every sequence."""
        self._snapshot_due = True

    def tracking(self, sequences: Mapping[str, int] | None) -> bytes:
        """Tracking entries for the next chunk, which stores `sequences`."""
        if self._snapshot_due and self.last:
            return encode_sequences({**self.last, **(sequences or {})})
        return encode_sequences(sequences) if sequences else b""

    def written(self, sequences: Mapping[str, int] | None) -> None:
        """The chunk carrying `sequences` was appended."""
        if sequences:
            self._remember(sequences)
        self._snapshot_due = False

    def _remember(self, sequences: Mapping[str, int]) -> None:
        last = self.last
        for writer, sequence in sequences.items():
            last.pop(writer, None)  # re-insert: dict order is recency
            last[writer] = sequence
        while len(last) > MAX_WRITERS:
            del last[next(iter(last))]
