"""A partition's leader epochs (Kafka's LeaderEpochFileCache): the epoch its writes carry,
and where each epoch's chunks lie, for a follower to find where its log and its leader's
part.

Each chunk's header records the epoch of the leader that wrote it and epochs never
decrease along a log, so the chunks themselves are the cache: found by their index,
searched by their headers. A tiered segment's epochs come with its record (where each
epoch begins), so the tier is never read for them: a replica whose divergent tail lies
where its leader's log is tiered finds where they part as anywhere else.
"""

from __future__ import annotations

from bisect import bisect_right

from mainstem.log.segment_file import Segment
from mainstem.log.segments import Segments
from mainstem.log.tiered_segment import TieredSegment


def chunk_epoch(segment: Segment, i: int) -> int | None:
    """The epoch of a segment's chunk i: its header's, or a tiered one's record's (None
    when that record predates epochs)."""
    if isinstance(segment, TieredSegment):
        return segment.record.epoch_of(segment.index.chunk_ids[i])
    return segment.read_header(i).epoch


def known_epoch(segment: Segment, i: int) -> int:
    """The epoch of a segment's chunk i, for certain: where a tiered segment's record
    predates epochs, its chunk's header read from the tier (NotFetched until it is
    fetched), never a guess. A replica's last chunk and its leader's chunk of that id are
    compared by it: a guess made them differ where they agree, and the leader had the
    replica cut its committed chunks one by one, down into its tier, where no cut is made,
    asking again forever."""
    epoch = chunk_epoch(segment, i)
    return segment.read_header(i).epoch if epoch is None else epoch


class Epochs:
    def __init__(self, segments: Segments, current: int) -> None:
        self._segments = segments
        self.current = current  # the epoch of the chunks written here from now on

    def saw(self, epoch: int) -> None:
        """A chunk of `epoch` came from the leader: later chunks are of that epoch at least."""
        self.current = max(self.current, epoch)

    def of_chunk(self, chunk_id: int) -> int | None:
        """The epoch of the chunk that starts at `chunk_id`; None when none does. NotFetched
        for a tiered chunk whose record predates epochs and whose header is not local."""
        segments = self._segments
        found = segments.find(chunk_id) if segments[0].first_chunk_id <= chunk_id else None
        if found is None or found[0].index.chunk_ids[found[1]] != chunk_id:
            return None
        return known_epoch(*found)

    def end_of(self, epoch: int) -> int:
        """Where the records of epochs up to `epoch` end: the first chunk of a later epoch,
        or the end of the log. Epochs never decrease, so a binary search finds it: over the
        segments by their last chunks, then in the one found (a few headers read, however
        many chunks the log and its tier hold)."""
        segments = [segment for segment in self._segments if segment.num_chunks]
        later = bisect_right(segments, epoch,
                             key=lambda segment: _epoch(segment, segment.num_chunks - 1))
        if later == len(segments):
            return self._segments.active.next_offset
        segment = segments[later]
        i = bisect_right(range(segment.num_chunks), epoch, key=lambda i: _epoch(segment, i))
        return segment.index.chunk_ids[i]


def _epoch(segment: Segment, i: int) -> int:
    """Chunk i's epoch; 0 for a tiered one whose record predates epochs (long committed)."""
    return chunk_epoch(segment, i) or 0
