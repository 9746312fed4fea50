"""The offsets of a queue's live records in its log, 8 bytes each.

Records are added in offset order and mostly settled in that order too (a queue is FIFO), so
the live ones are arrays with a moving head; the few settled out of order wait in a set
until the head reaches them. The head is the oldest live record: segments below it can go.
The arrays are blocks of fixed size, dropped as the head leaves them: one array growing
without end would leave a trail of reallocated copies behind it in the heap.
"""

from __future__ import annotations

import itertools
from array import array
from collections import deque
from collections.abc import Iterator

BLOCK_OFFSETS = 8192


class LiveOffsets:
    def __init__(self) -> None:
        self._blocks: deque[array[int]] = deque()
        self._head = 0  # position in the first block
        self._added = 0  # offsets in the blocks, the ones before the head included
        self._settled: set[int] = set()  # settled, but behind a live offset

    def __len__(self) -> int:
        return self._added - self._head - len(self._settled)

    def __iter__(self) -> Iterator[int]:
        if not self._blocks:
            return iter(())
        settled = self._settled
        blocks = itertools.chain((self._blocks[0][self._head:],),
                                 itertools.islice(self._blocks, 1, None))
        return (o for block in blocks for o in block if o not in settled)

    def add(self, offset: int) -> None:
        """A new record, past every offset added before."""
        if not self._blocks or len(self._blocks[-1]) == BLOCK_OFFSETS:
            self._blocks.append(array("q"))
        self._blocks[-1].append(offset)
        self._added += 1

    def discard(self, offset: int) -> None:
        if self.floor() != offset:
            self._settled.add(offset)
            return
        self._advance()
        settled = self._settled
        while settled and (floor := self.floor()) in settled:
            settled.remove(floor)
            self._advance()

    def _advance(self) -> None:
        self._head += 1
        first = self._blocks[0]
        if self._head == len(first):
            self._blocks.popleft()
            self._added -= len(first)
            self._head = 0

    def floor(self) -> int | None:
        """The oldest live offset; None when none is live."""
        return self._blocks[0][self._head] if self._blocks else None
