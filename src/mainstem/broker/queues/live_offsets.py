"""The offsets of a queue's live records in its log, 8 bytes each.

Records are added in offset order and mostly settled in that order too (a queue is FIFO), so
the live ones are an array with a moving head; the few settled out of order wait in a set
until the head reaches them. The head is the oldest live record: segments below it can go.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

_COMPACT_AT = 4096  # settled slots at the head before the array is shifted


class LiveOffsets:
    def __init__(self) -> None:
        self._offsets = array("q")
        self._head = 0
        self._settled: set[int] = set()  # settled, but behind a live offset

    def __len__(self) -> int:
        return len(self._offsets) - self._head - len(self._settled)

    def __iter__(self) -> Iterator[int]:
        settled = self._settled
        return (o for o in self._offsets[self._head:] if o not in settled)

    def add(self, offset: int) -> None:
        """A new record, past every offset added before."""
        self._offsets.append(offset)

    def discard(self, offset: int) -> None:
        offsets = self._offsets
        head = self._head
        if head >= len(offsets) or offsets[head] != offset:
            self._settled.add(offset)
            return
        head += 1
        settled = self._settled
        while settled and head < len(offsets) and offsets[head] in settled:
            settled.remove(offsets[head])
            head += 1
        if head >= _COMPACT_AT and 2 * head >= len(offsets):
            del offsets[:head]
            head = 0
        self._head = head

    def floor(self) -> int | None:
        """The oldest live offset; None when none is live."""
        return self._offsets[self._head] if self._head < len(self._offsets) else None
