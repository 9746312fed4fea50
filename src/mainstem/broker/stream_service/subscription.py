"""A reader of a partition's committed chunks: where it is, what it may still receive.

Credit counts the chunks a subscriber may be sent (None: unmetered, for readers that
pace themselves); a subscriber with filter values gets only the chunks whose bloom
filter may hold one of them. Sending goes through the log, which owns the files:
the subscriber's protocol supplies only its frame header and gets a `Transfer` to send
as its socket takes it. Every chunk is checked before it goes (the log's reader does it);
a damaged one is reported to the partition's `PartitionDamage` (logged once, counted) and
raised to the protocol as `ChunkDamaged`, for it to end the subscription its own way.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from mainstem.broker.damage import PartitionDamage
from mainstem.formats.chunk import BloomMatcher, Chunk
from mainstem.log.chunk_stream import ReadChunk
from mainstem.log.errors import ChunkDamaged
from mainstem.log.partition import Partition
from mainstem.log.reader import PartitionReader
from mainstem.log.transfer import ChunkView, Transfer, transfer

T = TypeVar("T")


class Subscription:
    def __init__(self, partition: Partition, offset: int, damage: PartitionDamage, *,
                 credit: int | None = None, filter_values: Sequence[str] = (),
                 match_unfiltered: bool = False) -> None:
        self._partition = partition
        self._damage = damage
        self._reader = PartitionReader(partition, offset)
        self.credit = credit
        self._wake = asyncio.Event()
        self._matcher = (BloomMatcher(filter_values, match_unfiltered) if filter_values
                         else None)

    @property
    def position(self) -> int:
        """The offset the next chunk starts at (or holds)."""
        return self._reader.position

    def seek(self, offset: int) -> None:
        """Read on from `offset` (a single active consumer starts where it is told)."""
        self._reader = PartitionReader(self._partition, max(offset, self._partition.first_offset))

    def grant(self, credit: int) -> None:
        assert self.credit is not None, "an unmetered subscription takes no credit"
        self.credit += credit
        self._wake.set()

    async def next_view(self) -> ChunkView:
        """The next committed chunk this subscriber may be sent, once it has credit;
        waits for new data at the end of the log."""
        while True:
            while self.credit is not None and self.credit <= 0:
                self._wake.clear()
                await self._wake.wait()
            view = await self._reported(self._reader.next_view)
            if self._matcher is None or self._matcher.matches(view.bloom):
                return view
            # nothing this subscriber wants: nothing sent, no credit spent

    def transfer(self, view: ChunkView, frame_header: bytes) -> Transfer:
        """The chunk after `frame_header` (which declares `view.wire_size` bytes of it), to
        send as the socket takes it, spending one credit. The caller releases it."""
        if self.credit is not None:
            self.credit -= 1
        return transfer(view, frame_header)

    async def next_chunk(self) -> ReadChunk:
        """The next committed chunk, read (a large one as its records are taken); waits for
        new data at the end of the log."""
        return await self._reported(self._reader.next_chunk)

    def next_chunk_nowait(self) -> ReadChunk | None:
        try:
            return self._reader.next_chunk_nowait()
        except ChunkDamaged as error:
            self._damage.report(error)
            raise

    async def next_whole_chunk(self) -> Chunk | None:
        """The next committed chunk read at once, for a reader that takes it in one step;
        None at the end of the log (a tiered one is fetched first)."""
        return await self._reported(self._reader.next_whole_chunk)

    async def _reported(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`, a damaged chunk it finds reported before it is raised."""
        try:
            return await read()
        except ChunkDamaged as error:
            self._damage.report(error)
            raise


def sendfile_socket(transport: asyncio.BaseTransport) -> int | None:
    """The raw socket to sendfile into, or None where bytes must go through the
    transport (TLS, or anything that is not a plain TCP socket)."""
    if transport.get_extra_info("sslcontext") is not None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    fileno: int = sock.fileno()
    return fileno
