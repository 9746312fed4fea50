"""The one writer of a partition: every record a protocol stores goes through here.

As Osiris's writer does, an Appender batches what its writers hand it during one
event-loop turn into chunks, writes them, and reports each write once it is durable
under the partition's fsync policy. It cuts chunks at the bounds the writer asks for
(the chunk header's 65,535 entries at most), drops what a writer's sequence shows it
stored already, and holds everything while the write gate is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from mainstem.broker.stream_service.forwarding import ForwardedAppend, Forwarder
from mainstem.broker.stream_service.gate import WriteGate
from mainstem.formats.chunk import UNFILTERED, bloom_filter
from mainstem.formats.osiris import MAX_CHUNK_ENTRIES, SIMPLE_ENTRY, SUB_BATCH_ENTRY, SUB_BATCH_FLAG
from mainstem.log.errors import PartitionClosed
from mainstem.log.partition import Appended, Partition
from mainstem.logging_setup import describe_error

log = logging.getLogger("mainstem.broker")

Entry = bytes | memoryview
# Staged parts go to the file as they are (one pwritev: the kernel takes at most 1,024
# buffers) when they are few and large; many or small, one copy costs less than the work
# per part (its CRC, its buffer): joined.
MAX_WRITE_PARTS = 64
MIN_WRITE_PART = 1024  # bytes, on average


@dataclass(frozen=True, slots=True)
class ChunkLimits:
    entries: int = MAX_CHUNK_ENTRIES
    bytes: int | None = None  # None: no bound on a chunk's data bytes

    def admit(self, count: int, size: int) -> bool:
        """Whether a chunk of `count` entries and `size` data bytes is within bounds."""
        return count <= self.entries and (self.bytes is None or size <= self.bytes)


WHOLE_CHUNKS = ChunkLimits()


@dataclass(slots=True, eq=False)
class _Chunk:
    """Entries staged for one chunk, and the future of its durability."""

    done: asyncio.Future[None]
    # The staged entries' bytes, in order: an entry is one part, or two when the appender
    # framed a record (its length, then the record as the protocol read it, uncopied).
    parts: list[Entry] = field(default_factory=list)
    count: int = 0  # entries staged
    size: int = 0  # bytes of the staged entries
    records: int = 0
    all_simple: bool = True
    filter_values: set[str] = field(default_factory=set)
    sequences: dict[str, int] = field(default_factory=dict)
    chunk_id: int = -1  # once written
    # Whether an append in it waits for durability; else it is settled once written.
    durable: bool = False

    def room(self, entries: Sequence[Entry], limits: ChunkLimits) -> int:
        """How many of `entries` (framed), taken in order, still fit in this chunk's
        bounds."""
        fits = min(len(entries), limits.entries - self.count)
        if limits.bytes is None or self.size + sum(map(len, entries[:fits])) <= limits.bytes:
            return max(fits, 0)
        budget, taken = limits.bytes - self.size, 0
        while taken < fits and len(entries[taken]) <= budget:
            budget -= len(entries[taken])
            taken += 1
        return taken if taken or self.count else 1  # an entry alone always fits

    def holds(self, count: int, size: int, limits: ChunkLimits) -> bool:
        """Whether `count` more entries of `size` bytes in all fit this chunk's bounds."""
        return limits.admit(self.count + count, self.size + size)

    def add_block(self, block: bytes, count: int, records: int) -> None:
        """Stage `count` framed entries joined in one block, holding `records` records."""
        self.parts.append(block)
        self.count += count
        self.size += len(block)
        self.records += records
        self.all_simple = self.all_simple and records == count

    def add_filters(self, filter_values: Sequence[str | None] | None) -> None:
        if filter_values is None:
            self.filter_values.add(UNFILTERED)
        else:
            self.filter_values.update(v or UNFILTERED for v in filter_values)

    def add(self, entries: Sequence[Entry], framed: bool) -> None:
        """Stage entries; unless `framed`, they are records this frames as simple entries."""
        self.count += len(entries)
        if framed:
            self.parts += entries
            self.size += sum(map(len, entries))
            return
        lengths = list(map(len, entries))
        pairs: list[Entry] = [b""] * (2 * len(entries))  # length, record, length, ...
        pairs[::2] = list(map(SIMPLE_ENTRY.pack, lengths))
        pairs[1::2] = entries
        self.parts += pairs
        self.size += sum(lengths) + SIMPLE_ENTRY.size * len(entries)

    def write(self, partition: Partition) -> Appended | None:
        """Append the staged entries as one chunk, then let go of them: they hold the
        protocol's read buffers, which must not wait for the fsync."""
        parts, count = self.parts, self.count
        self.parts, self.count = [], 0
        if not count:
            return None
        # Sub-batches inside: the partition counts the records' bytes in the joined data.
        simple = self.all_simple
        as_they_are = simple and MIN_WRITE_PART * len(parts) <= self.size and \
            len(parts) <= MAX_WRITE_PARTS
        data = parts if as_they_are else b"".join(parts)
        payload = self.size - SIMPLE_ENTRY.size * count if simple else None
        return partition.write(data, count, self.records, payload_bytes=payload,
                               sequences=self.sequences or None,
                               bloom=bloom_filter(self.filter_values))


@dataclass(slots=True)
class Receipt:
    """What an append gets back: `durable` is done once its records are durable (or
    fails with the write's error); `first_offset` is known once the chunk is written."""

    durable: asyncio.Future[None]
    _chunk: _Chunk  # the chunk of the append's first record
    _skip: int  # records of that chunk before it

    @property
    def first_offset(self) -> int:
        return self._chunk.chunk_id + self._skip


class Appender:
    def __init__(self, partition: Partition, gate: WriteGate | None = None) -> None:
        self.partition = partition
        self._gate = gate
        self._chunks: list[_Chunk] = []
        self._staged: dict[str, int] = {}  # writer -> highest sequence staged
        self._flushing = False
        self._settling: set[asyncio.Task[None]] = set()
        # Set on a replica whose leader is elsewhere: appends go there instead.
        self.forwarder: Forwarder | None = None
        self._last: asyncio.Future[None] | None = None  # the last chunk's, for settled()
        # Writers one of whose appends failed, with the error: their later appends fail
        # alike until they resume from what is stored. Were a later append stored, its
        # sequence would cover, and a resend skip, records that never were.
        self._failed: dict[str, BaseException] = {}

    def sequence(self, writer: str) -> int | None:
        """The writer's last sequence, staged or stored; None for an unknown writer."""
        staged = self._staged.get(writer)
        return staged if staged is not None else self.partition.sequences.get(writer)

    def append_records(self, records: Sequence[Entry], *, writer: str | None = None,
                       sequence: int | None = None, together: bool = False,
                       durable: bool = True) -> Receipt:
        """Stage records (bodies). With `writer`, `sequence` is stored with them, and the
        whole append is dropped when the writer stored that sequence already. Records
        appended `together` (at most a chunk's worth) share one chunk: after a crash,
        all of them are there or none. Not `durable`: the receipt completes once they
        are written (they outlive the process, not the machine), and on a partition that
        fsyncs on demand they ask for no fsync (a queue's unconfirmed publishes)."""
        if self.forwarder is not None:
            return self._forward(ForwardedAppend(records, False, writer=writer,
                                                 sequence=sequence, together=together))
        return self._append_simple(records, False, writer, sequence, together, durable)

    def write_records(self, records: Sequence[Entry], *, durable: bool = True) -> Receipt:
        """`append_records`, written now rather than at the end of the turn, so that the
        receipt's `first_offset` is known on return (a queue's journal, a spill). Not
        `durable`: the receipt is done on return unless the write failed."""
        scheduled, self._flushing = self._flushing, True  # no flush to schedule for these
        receipt = self.append_records(records, durable=durable)
        self._flushing = scheduled
        self.write_staged()
        return receipt

    def append_simple_entries(self, entries: Sequence[Entry], *, writer: str | None = None,
                              sequence: int | None = None) -> Receipt:
        """`append_records` of records a protocol framed as simple Osiris entries itself
        (a 4-byte length, then the body), often slices of what it received: no copy and
        no per-record work here."""
        if self.forwarder is not None:
            bodies = [entry[SIMPLE_ENTRY.size:] for entry in entries]
            return self._forward(ForwardedAppend(bodies, False, writer=writer,
                                                 sequence=sequence))
        return self._append_simple(entries, True, writer, sequence, False, True)

    def _append_simple(self, records: Sequence[Entry], framed: bool, writer: str | None,
                       sequence: int | None, together: bool, durable: bool) -> Receipt:
        stored = None if writer is None or sequence is None else (writer, sequence)
        if stored is not None and stored[0] in self._failed:
            return self._refused(stored[0])
        if stored is not None and stored[1] <= _or_below(self.sequence(stored[0])):
            return self._nothing()
        if not records:
            return self._nothing()
        first, skip, last = self._stage(records, framed, True, None, None, WHOLE_CHUNKS,
                                        together, durable)
        if stored is not None:  # kept in the chunk that holds the append's last record
            name, value = stored
            last.sequences[name] = self._staged[name] = value
        return Receipt(last.done, first, skip)

    def append_entries(self, entries: Sequence[Entry], *, all_simple: bool,
                       writer: str | None = None, sequences: list[int] | None = None,
                       filter_values: list[str | None] | None = None,
                       limits: ChunkLimits = WHOLE_CHUNKS) -> Receipt:
        """Stage encoded Osiris entries (a stream Publish's own). With `writer`, one
        sequence per entry: those at or below the writer's last are dropped, as Osiris
        drops them. `filter_values` (one per entry) go into the chunk's bloom filter."""
        if self.forwarder is not None:
            return self._forward(ForwardedAppend(
                entries, True, all_simple, writer, sequences=sequences,
                filter_values=filter_values, limit_entries=limits.entries,
                limit_bytes=limits.bytes))
        tracked = None
        if writer is not None and sequences is not None:
            if writer in self._failed:
                return self._refused(writer)
            kept = _kept(_or_below(self.sequence(writer)), sequences)
            if kept is not None:
                entries = [entries[i] for i in kept]
                sequences = [sequences[i] for i in kept]
                if filter_values is not None:
                    filter_values = [filter_values[i] for i in kept]
            tracked = writer, sequences
        if not entries:
            return self._nothing()
        first, skip, last = self._stage(entries, True, all_simple, filter_values, tracked,
                                        limits, False, True)
        return Receipt(last.done, first, skip)

    def append_block(self, block: bytes, count: int, records: int, *, writer: str | None,
                     first: int, last: int, filter_values: list[str | None] | None = None,
                     limits: ChunkLimits = WHOLE_CHUNKS) -> Receipt | None:
        """`append_entries` of `count` entries joined in one block, whose sequences rise
        from `first` to `last`: staged whole, with no work per entry. None, staging
        nothing, when it cannot be taken whole (a replica forwards, the writer stored
        `first` already, the block alone exceeds a chunk): then append its entries."""
        if (self.forwarder is not None or not count
                or not limits.admit(count, len(block))
                or (writer is not None and (writer in self._failed
                                            or first <= _or_below(self.sequence(writer))))):
            return None
        chunk = self._chunks[-1] if self._chunks else self._open_chunk()
        if not chunk.holds(count, len(block), limits):
            chunk = self._open_chunk()
        skip = chunk.records
        chunk.durable = True
        chunk.add_block(block, count, records)
        chunk.add_filters(filter_values)
        if writer is not None:
            chunk.sequences[writer] = self._staged[writer] = last
        return Receipt(chunk.done, chunk, skip)

    async def settled(self) -> None:
        """Return once everything appended so far is settled: durable, or failed (each
        append's receipt tells which). On a replica: once the leader answered what this
        forwarded."""
        if self._last is not None:
            await asyncio.wait([self._last])  # the error is the receipt holders' to see
        if self.forwarder is None:
            await self.partition.durable_point()

    async def committed_sequence(self, writer: str) -> int | None:
        """The writer's last sequence once everything appended so far is settled: what
        is stored, from which a writer resuming after a reconnect or a failed append
        resends; its later appends are taken again. A replica asks the leader: what it
        holds itself may include chunks its leader never committed."""
        if self.forwarder is not None:
            return await self.forwarder.sequence(writer)
        await self.settled()
        self._failed.pop(writer, None)
        return self.sequence(writer)

    def resume(self, writer: str) -> None:
        """Take the writer's appends again after one failed: it starts over (a publisher
        declared anew) and knows what its receipts said."""
        self._failed.pop(writer, None)

    def write_staged(self) -> None:
        """Write what is staged now rather than at the end of the turn: for a writer that
        cuts its own batches (one per socket read), or a partition about to close. While
        writers are held it stays staged (and fails if the partition closes meanwhile)."""
        if self._chunks:
            self._flush()

    def _forward(self, append: ForwardedAppend) -> Receipt:
        assert self.forwarder is not None
        chunk = _Chunk(asyncio.get_running_loop().create_future())
        answer = self.forwarder.forward(append)

        def settle(answer: asyncio.Future[int]) -> None:
            error = (PartitionClosed("the forward was cancelled") if answer.cancelled()
                     else answer.exception())
            if error is not None:
                chunk.done.set_exception(error)
            else:
                chunk.chunk_id = answer.result()
                chunk.done.set_result(None)

        answer.add_done_callback(settle)
        self._last = chunk.done
        return Receipt(chunk.done, chunk, 0)

    def run_forwarded(self, append: ForwardedAppend) -> Receipt:
        """Run an append a replica forwarded (this node leads the partition)."""
        if append.encoded:
            limits = ChunkLimits(append.limit_entries or MAX_CHUNK_ENTRIES, append.limit_bytes)
            return self.append_entries(append.entries, all_simple=append.all_simple,
                                       writer=append.writer, sequences=append.sequences,
                                       filter_values=append.filter_values, limits=limits)
        return self.append_records(append.entries, writer=append.writer,
                                   sequence=append.sequence, together=append.together)

    # -- staging and writing -----------------------------------------------------

    def _open_chunk(self) -> _Chunk:
        chunk = _Chunk(asyncio.get_running_loop().create_future())
        self._chunks.append(chunk)
        self._last = chunk.done
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return chunk

    def _refused(self, writer: str) -> Receipt:
        """A receipt failed at once: the writer's earlier append failed (see resume)."""
        done = asyncio.get_running_loop().create_future()
        done.set_exception(self._failed[writer])
        return Receipt(done, _Chunk(done), 0)

    def _nothing(self) -> Receipt:
        """A receipt for an append that stores nothing: done once what came before is."""
        chunk = self._chunks[-1] if self._chunks else self._open_chunk()
        chunk.durable = True
        return Receipt(chunk.done, chunk, chunk.records)

    def _stage(self, entries: Sequence[Entry], framed: bool, all_simple: bool,
               filter_values: list[str | None] | None,
               tracked: tuple[str, list[int]] | None, limits: ChunkLimits,
               together: bool, durable: bool) -> tuple[_Chunk, int, _Chunk]:
        """Add entries to the open chunk, cutting new ones at `limits` (records, unless
        `framed`: then entry and chunk bounds). Returns the chunk of the first entry, the
        records before it there, and the chunk of the last."""
        chunk = self._chunks[-1] if self._chunks else self._open_chunk()
        if together and chunk.room(entries, limits) < len(entries):
            assert len(entries) <= limits.entries, "records appended together fill one chunk"
            chunk = self._open_chunk()
        first: tuple[_Chunk, int] | None = None
        start = 0
        while start < len(entries):
            taken = chunk.room(entries[start:], limits)
            if not taken:
                chunk = self._open_chunk()
                continue
            end = start + taken
            if first is None:
                first = chunk, chunk.records
            piece = entries[start:end]
            chunk.add(piece, framed)
            chunk.durable = chunk.durable or durable
            chunk.records += taken if all_simple else _record_count(piece)
            chunk.all_simple = chunk.all_simple and all_simple
            chunk.add_filters(None if filter_values is None else filter_values[start:end])
            if tracked is not None:
                writer, sequences = tracked
                chunk.sequences[writer] = self._staged[writer] = max(sequences[start:end])
            start = end
        assert first is not None
        return first[0], first[1], chunk

    def _flush(self) -> None:
        if self._gate is not None and self._gate.held:
            self._spawn(self._flush_when_open())
            return
        self._flushing = False
        chunks, self._chunks, self._staged = self._chunks, [], {}
        written: list[tuple[int, _Chunk]] = []
        for k, chunk in enumerate(chunks):
            try:
                appended = chunk.write(self.partition)
            except (PartitionClosed, OSError) as error:  # these records, not the writer
                # The chunks staged after it are not written: their writers' records
                # would be stored past a gap.
                self._fail(chunks[k:], error)
                break
            chunk.chunk_id = self.partition.next_offset if appended is None else appended.chunk_id
            if chunk.durable:
                written.append((self.partition.next_offset, chunk))
            elif not chunk.done.done():
                chunk.done.set_result(None)  # written is all it asked for
        if written:
            self._spawn(self._settle(written))

    def _fail(self, chunks: list[_Chunk], error: BaseException) -> None:
        """Fail these chunks' appends and refuse their writers' next ones (see resume)."""
        if not isinstance(error, PartitionClosed):
            log.error("partition.write_failed", extra={"partition": str(self.partition.directory),
                                                       "error": describe_error(error)})
        for chunk in chunks:
            for writer in chunk.sequences:
                self._failed[writer] = error
            if not chunk.done.done():
                chunk.done.set_exception(error)
                chunk.done.exception()  # logged above; each receipt holder sees it too

    async def _flush_when_open(self) -> None:
        assert self._gate is not None
        await self._gate.opened()
        self._flush()

    async def _settle(self, written: list[tuple[int, _Chunk]]) -> None:
        """Complete each written chunk's future once it is durable, in order."""
        for k, (mark, chunk) in enumerate(written):
            try:
                await self.partition.commit(Appended(chunk.chunk_id, mark))
            except Exception as error:  # a failed fsync fails every write it covered
                self._fail([failed for _, failed in written[k:]], error)
                return
            if not chunk.done.done():
                chunk.done.set_result(None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)


def _or_below(sequence: int | None) -> int:
    return -1 if sequence is None else sequence


def _kept(last: int, ids: list[int]) -> list[int] | None:
    """Positions of the entries whose sequence is above every one accepted before it:
    `last` (stored or staged) and those earlier in this append; None when that is all
    of them."""
    if not ids or (ids[0] > last and ids == sorted(set(ids))):
        return None  # the common case: rising ids, nothing seen before
    kept = []
    for position, pid in enumerate(ids):
        if pid > last:
            kept.append(position)
            last = pid
    return kept


def _record_count(entries: Sequence[Entry]) -> int:
    """Records in a list of Osiris entries: one per simple entry, a sub-batch's own count."""
    unpack = SUB_BATCH_ENTRY.unpack_from
    return sum(unpack(entry)[1] if entry[0] & SUB_BATCH_FLAG else 1 for entry in entries)
