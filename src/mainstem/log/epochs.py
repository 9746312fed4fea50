"""A partition's leader epochs (Kafka's LeaderEpochFileCache): the epoch its writes carry,
and where each epoch's chunks lie, for a follower to find where its log and its leader's
part.

Each chunk's header records the epoch of the leader that wrote it and epochs never
decrease along a log, so the chunks themselves are the cache: found by their index,
searched by their headers. Only local chunks are searched: tiered ones are committed on
every replica, so no two logs part there.
"""

from __future__ import annotations

from mainstem.log.segments import Segments


class Epochs:
    def __init__(self, segments: Segments, current: int) -> None:
        self._segments = segments
        self.current = current  # the epoch of the chunks written here from now on

    def saw(self, epoch: int) -> None:
        """A chunk of `epoch` came from the leader: later chunks are of that epoch at least."""
        self.current = max(self.current, epoch)

    def of_chunk(self, chunk_id: int) -> int | None:
        """The epoch of the chunk that starts at `chunk_id`; None when none does."""
        segments = self._segments
        found = segments.find(chunk_id) if segments[0].first_chunk_id <= chunk_id else None
        if found is None or found[0].index.chunk_ids[found[1]] != chunk_id or found[0].tiered:
            return None
        return found[0].read_header(found[1]).epoch

    def end_of(self, epoch: int) -> int:
        """Where the records of epochs up to `epoch` end: the first chunk of a later epoch,
        or the end of the log. Epochs never decrease, so a binary search finds it."""
        chunks = [(segment, i) for segment in self._segments.local
                  for i in range(segment.num_chunks)]
        low, high = 0, len(chunks)
        while low < high:
            middle = (low + high) // 2
            segment, i = chunks[middle]
            if segment.read_header(i).epoch <= epoch:
                low = middle + 1
            else:
                high = middle
        if low == len(chunks):
            return self._segments.active.next_offset
        segment, i = chunks[low]
        return segment.index.chunk_ids[i]
