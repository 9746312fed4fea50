"""A classic queue's ready messages, with everything past an in-memory bound on disk.

Each priority level is, in queue order: a head held in memory (at most the queue's bound,
plus messages requeued into it), then messages paged out, then the ones published since the
pager last ran. A paged-out message costs a few array slots: its position in the queue, its
size, expiry, whether it is persistent, and where it is on disk — its offset in the queue's
journal (a persistent message of a durable queue, already written there) or in the queue's
spill (any other). Messages come back a batch at a time when the head runs dry, as RabbitMQ's
classic queues v2 do.

The pager runs once per event-loop turn, after the journal wrote that turn's messages. While
more than a bound's worth of published messages wait for it, publishers are handed a future
to wait on (credit flow): memory stays bounded whatever the queue's depth.
"""

from __future__ import annotations

import asyncio
import logging
import math
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from mainstem.broker.amqp.queues.journal import QueueJournal, Replay, decode_enqueue
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.spill import SpillStore
from mainstem.logging_setup import describe_error

log = logging.getLogger("mainstem.amqp")

PAGE_OUT_STEP = 4096  # messages paged out per callback, so one queue cannot stall the loop
# Messages paged in at once when a head runs dry: a bound's worth (10,000) read and decoded
# in one call held a loaded node's loop 0.1-0.4 s while a consumer drained a deep queue.
PAGE_IN_STEP = 1024
_NO_EXPIRY = math.nan


@dataclass(frozen=True, slots=True)
class MemoryBound:
    """How much of a classic queue's ready messages stays in memory."""

    messages: int = 10_000
    bytes: int = 32 * 1024 * 1024


class _Block:
    """Up to BLOCK_ENTRIES paged-out messages in five arrays, 29 bytes each. Fixed-size
    blocks, not one growing array: reallocating a large array leaves holes behind it in the
    heap, which would cost as much again."""

    __slots__ = ("expiries", "head", "locations", "persistent", "seqs", "sizes")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.locations = array("q")  # >= 0: a journal offset; < 0: -1 - a spill offset
        self.sizes = array("I")  # body bytes
        self.expiries = array("d")  # NaN: never
        self.persistent = array("B")
        self.head = 0  # entries before it were taken

    def __len__(self) -> int:
        return len(self.seqs) - self.head


BLOCK_ENTRIES = 4096


class PagedRun:
    """One level's paged-out messages, in queue order."""

    __slots__ = ("_blocks", "_count")

    def __init__(self) -> None:
        self._blocks: deque[_Block] = deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _open_block(self) -> _Block:
        """The last block, or a new one if it is full."""
        if not self._blocks or len(self._blocks[-1].seqs) == BLOCK_ENTRIES:
            self._blocks.append(_Block())
        return self._blocks[-1]

    def append(self, seq: int, location: int, size: int, expires_at: float | None,
               persistent: bool) -> None:
        block = self._open_block()
        block.seqs.append(seq)
        block.locations.append(location)
        block.sizes.append(size)
        block.expiries.append(_NO_EXPIRY if expires_at is None else expires_at)
        block.persistent.append(persistent)
        self._count += 1

    def extend(self, first_seq: int, locations: array[int], sizes: array[int],
               expires_at: float | None, persistent: bool) -> None:
        """Append messages at consecutive positions from `first_seq`, a block at a time
        (a replay of a million messages takes milliseconds, not a second)."""
        expiry = array("d", [_NO_EXPIRY if expires_at is None else expires_at])
        flag = array("B", [persistent])
        done = 0
        while done < len(locations):
            block = self._open_block()
            end = done + min(BLOCK_ENTRIES - len(block.seqs), len(locations) - done)
            block.seqs.extend(range(first_seq + done, first_seq + end))
            block.locations.extend(locations[done:end])
            block.sizes.extend(sizes[done:end])
            block.expiries.extend(expiry * (end - done))
            block.persistent.extend(flag * (end - done))
            done = end
        self._count += len(locations)

    def first_expiry(self) -> float | None:
        block = self._blocks[0]
        expiry = block.expiries[block.head]
        return None if math.isnan(expiry) else expiry

    def take(self, count: int, size: int) -> list[tuple[int, int, float, int]]:
        """The first entries, at most `count` and `size` body bytes but at least one, as
        (seq, location, expiry, persistent); removed."""
        taken: list[tuple[int, int, float, int]] = []
        while self._blocks and (not taken or len(taken) < count):
            block = self._blocks[0]
            start = end = block.head
            limit = min(len(block.seqs), start + count - len(taken))
            while end < limit and size >= block.sizes[end]:
                size -= block.sizes[end]
                end += 1
            if not taken and end == start:  # the first goes whatever its size; no more
                end, size = start + 1, -1
            taken += zip(block.seqs[start:end], block.locations[start:end],
                         block.expiries[start:end], block.persistent[start:end], strict=True)
            block.head = end
            if not block:
                self._blocks.popleft()
            elif end < len(block.seqs):
                break  # out of count or bytes
        self._count -= len(taken)
        return taken

    def journal_offsets(self) -> list[int]:
        return [loc for block in self._blocks for loc in block.locations[block.head:]
                if loc >= 0]

    def clear(self) -> None:
        self._blocks.clear()
        self._count = 0


class ReadyMessages:
    """Every level's in-memory head, paged-out run and incoming messages; the pager."""

    def __init__(self, levels: int, bound: MemoryBound, journal: QueueJournal | None,
                 spill_root: Path) -> None:
        self.bound = bound
        self.journal = journal
        self._spill_root = spill_root
        self._spill: SpillStore | None = None  # made on the first page-out that needs one
        self._memory: list[deque[QueueMessage]] = [deque() for _ in range(levels)]
        self._paged = [PagedRun() for _ in range(levels)]
        self._incoming: list[deque[QueueMessage]] = [deque() for _ in range(levels)]
        self.held = 0  # messages in the in-memory heads
        self.held_bytes = 0
        self.incoming = 0
        self._pager_due = False
        self._backlog: asyncio.Future[None] | None = None  # publishers wait on it

    @property
    def in_memory(self) -> int:
        return self.held + self.incoming

    @property
    def levels(self) -> range:
        """The priority levels, lowest first."""
        return range(len(self._memory))

    def level_of(self, message: QueueMessage) -> int:
        return min(message.priority, len(self._memory) - 1)

    def _room(self) -> bool:
        return self.held < self.bound.messages and self.held_bytes < self.bound.bytes

    def _hold(self, level: int, message: QueueMessage) -> None:
        self._memory[level].append(message)
        self.held += 1
        self.held_bytes += len(message.body)

    # -- in --------------------------------------------------------------------

    def push(self, message: QueueMessage) -> None:
        level = self.level_of(message)
        if not self._paged[level] and not self._incoming[level] and self._room():
            self._hold(level, message)
            return
        self._incoming[level].append(message)
        self.incoming += 1
        self._schedule_pager()

    @property
    def backlog(self) -> asyncio.Future[None] | None:
        """While more than a bound's worth of messages wait for the pager: a future done
        once it caught up."""
        if self.incoming <= self.bound.messages:
            return None
        if self._backlog is None:
            self._backlog = asyncio.get_running_loop().create_future()
        return self._backlog

    def requeue(self, message: QueueMessage) -> None:
        """A delivered message goes back by its position: always into the in-memory head,
        as it left from there and everything paged out came after it."""
        memory = self._memory[self.level_of(message)]
        if not memory or message.seq < memory[0].seq:
            memory.appendleft(message)
        else:
            index = next((i for i, m in enumerate(memory) if m.seq > message.seq), len(memory))
            memory.insert(index, message)
        self.held += 1
        self.held_bytes += len(message.body)

    def restore(self, replay: Replay, first_seq: int, expires_at: float | None) -> None:
        """A journal's messages after a restart: all paged out, read in as consumed."""
        self._paged[0].extend(first_seq, replay.offsets, replay.sizes, expires_at, True)

    def withdraw(self, message: QueueMessage) -> bool:
        """Take out a message not yet paged out or delivered; whether it was here."""
        level = self.level_of(message)
        for messages in (self._memory[level], self._incoming[level]):
            where = next((i for i, held in enumerate(messages) if held is message), None)
            if where is not None:
                del messages[where]
                if messages is self._incoming[level]:
                    self.incoming -= 1
                else:
                    self.held -= 1
                    self.held_bytes -= len(message.body)
                return True
        return False

    # -- out -------------------------------------------------------------------

    def top_level(self) -> int | None:
        """The highest priority level holding a message."""
        for level in reversed(self.levels):
            if self._memory[level] or self._paged[level] or self._incoming[level]:
                return level
        return None

    def head(self, level: int) -> QueueMessage | None:
        memory = self._memory[level]
        if not memory:
            self._page_in(level)
        return memory[0] if memory else None

    def first_expiry(self, level: int) -> float | None:
        """When the level's head expires, without reading it in."""
        if self._memory[level]:
            return self._memory[level][0].expires_at
        if self._paged[level]:
            return self._paged[level].first_expiry()
        incoming = self._incoming[level]
        return incoming[0].expires_at if incoming else None

    def popleft(self, level: int) -> QueueMessage:
        message = self.head(level)
        assert message is not None
        self._memory[level].popleft()
        self.held -= 1
        self.held_bytes -= len(message.body)
        return message

    def clear(self, settle: Callable[[QueueMessage], None]) -> None:
        """Drop every ready message (purge), settling each."""
        for messages in (*self._memory, *self._incoming):
            for message in messages:
                settle(message)
            messages.clear()
        for paged in self._paged:
            if self.journal is not None:
                for offset in paged.journal_offsets():
                    self.journal.settle_offset(offset)
            paged.clear()
        self.held = self.held_bytes = self.incoming = 0
        self.close()

    def close(self) -> None:
        """The spill goes (the queue was purged, deleted, or the broker stops)."""
        if self._spill is not None:
            self._spill.delete()
            self._spill = None
        self._release_publishers()

    # -- the pager -------------------------------------------------------------

    def _schedule_pager(self) -> None:
        if not self._pager_due:
            self._pager_due = True
            asyncio.get_running_loop().call_soon(self._page_out)

    def _page_out(self) -> None:
        self._pager_due = False
        budget = PAGE_OUT_STEP
        try:
            for level in self.levels:
                budget -= self._page_out_level(level, budget)
                if budget <= 0:
                    break
        except OSError as exc:  # a full disk: they stay in memory; the next publish retries
            log.warning("queue.page_out_failed", extra={"error": describe_error(exc)})
            self._release_publishers()
            return
        if self.incoming:  # over budget, or waiting for this turn's journal write
            self._schedule_pager()
        if self.incoming <= self.bound.messages:
            self._release_publishers()

    def _page_out_level(self, level: int, budget: int) -> int:
        """Page out up to `budget` of the level's incoming messages (the first ones go to
        the in-memory head if it has room); returns how many were paged out."""
        incoming, paged = self._incoming[level], self._paged[level]
        batch: list[QueueMessage] = []
        while incoming and len(batch) < budget:
            message = incoming[0]
            if not paged and not batch and self._room():
                self._hold(level, incoming.popleft())
                self.incoming -= 1
                continue
            if self._awaits_journal(message):
                break
            batch.append(incoming.popleft())
        if batch:
            try:
                self._write(paged, batch)
            except OSError:
                incoming.extendleft(reversed(batch))
                raise
        self.incoming -= len(batch)
        return len(batch)

    def _awaits_journal(self, message: QueueMessage) -> bool:
        """A persistent message whose journal write is still to come this turn."""
        return (message.persistent and self.journal is not None
                and message.log_offset is None and self.journal.writing)

    def _write(self, paged: PagedRun, batch: list[QueueMessage]) -> None:
        to_spill = [m for m in batch if m.log_offset is None]
        next_spilled = 0
        if to_spill:
            if self._spill is None:
                self._spill = SpillStore(self._spill_root)
            next_spilled = self._spill.write(to_spill)
        for message in batch:
            location = message.log_offset
            if location is None:
                location = -1 - next_spilled
                next_spilled += 1
            paged.append(message.seq, location, len(message.body), message.expires_at,
                         message.persistent)

    def _page_in(self, level: int) -> None:
        paged = self._paged[level]
        if not paged:
            incoming = self._incoming[level]  # the pager has not run yet: take them now
            while incoming:
                self._hold(level, incoming.popleft())
                self.incoming -= 1
            if self.incoming <= self.bound.messages:
                self._release_publishers()
            return
        entries = paged.take(min(PAGE_IN_STEP, self.bound.messages - self.held),
                             self.bound.bytes - self.held_bytes)
        from_journal = iter(self._read_journal([loc for _, loc, _, _ in entries if loc >= 0]))
        spilled = [-1 - loc for _, loc, _, _ in entries if loc < 0]
        from_spill = iter(self._spill.read(spilled) if spilled and self._spill else ())
        for seq, location, expiry, persistent in entries:
            message = next(from_journal) if location >= 0 else next(from_spill)
            message.seq = seq
            message.priority = level
            message.persistent = bool(persistent)
            message.expires_at = None if math.isnan(expiry) else expiry
            if location >= 0:
                message.log_offset = location
            self._hold(level, message)

    def _read_journal(self, offsets: list[int]) -> Iterable[QueueMessage]:
        if not offsets:
            return ()
        assert self.journal is not None
        return [decode_enqueue(record) for record in self.journal.reader.read(offsets)]

    def _release_publishers(self) -> None:
        backlog, self._backlog = self._backlog, None
        if backlog is not None and not backlog.done():
            backlog.set_result(None)
