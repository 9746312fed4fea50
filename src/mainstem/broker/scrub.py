"""The scrub: every stream's committed local chunks read back and checked in the
background, at a bounded rate, so that damage on disk is found before a reader meets it.

A pass walks each partition from its first local offset to its commit point, reading a
run of chunks at a time in a worker thread (`PartitionService.check_chunks`, checks in
`log/verify.py`), and sleeps as the rate (bytes a second) asks. What it finds goes in the
partition's `Integrity` (the management API reports it): a chunk found damaged is reported
as readers report one (`PartitionService.damage`: logged as `chunk.damaged` and counted
once, the partition marked damaged), and, in a cluster, replaced by an in-sync replica's
intact copy (`ChunkRepair`, set by the node) — tried again each pass until one has it; a
repaired chunk's mark goes. A chunk found intact is marked sound, so a reader sends it
without checking it again (`PartitionService.mark_verified`). A single node's damaged
chunk cannot be repaired: it stays reported. Tiered segments are not scrubbed: their
objects were verified when uploaded, and each block is checked as it is fetched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from mainstem.broker.counters import BrokerCounters
from mainstem.broker.stream_service import PartitionService
from mainstem.broker.streams import Stream, StreamStore
from mainstem.log.errors import ChunkDamaged
from mainstem.log.verify import ChunkCheck

log = logging.getLogger("mainstem.broker")

RUN_BYTES = 1 << 20  # read in one go: a chunk bigger than this is read alone
IDLE_S = 1.0  # the least time between passes, however little there is to check
PACE_S = 0.1  # sleep once this much reading is due, not after every run


class ChunkRepair(Protocol):
    """How a damaged chunk gets another replica's intact copy (a cluster's node has one)."""

    async def repair(self, service: PartitionService, chunk_id: int) -> str | None:
        """Replace the damaged chunk at `chunk_id` (`PartitionService.replace_chunk`) with
        an in-sync replica's copy; the node it came from, None when none could give one."""


class Scrubber:
    def __init__(self, streams: StreamStore, rate: int, counters: BrokerCounters) -> None:
        self.rate = rate  # bytes a second; 0: no background scrub
        self.repair: ChunkRepair | None = None
        self._streams = streams
        self._counters = counters
        self._task: asyncio.Task[None] | None = None
        self._due = 0  # bytes read since the last sleep

    def start(self) -> None:
        if self.rate > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def verify(self, stream: Stream) -> None:
        """A pass over the stream's partitions now, at full speed (an operator asked)."""
        for name, service in _partitions(stream):
            await self.scrub(name, service, paced=False)

    async def _run(self) -> None:
        while True:
            began = time.monotonic()
            for stream in self._streams.list():
                for name, service in _partitions(stream):
                    try:
                        await self.scrub(name, service, paced=True)
                    except OSError as error:  # its segment went (retention, deletion)
                        log.debug("scrub.skipped", extra={"partition": name,
                                                          "error": str(error)})
            await asyncio.sleep(max(0.0, IDLE_S - (time.monotonic() - began)))

    async def scrub(self, name: str, service: PartitionService, *, paced: bool) -> None:
        """Check the partition's committed local chunks once; `paced`: at the rate."""
        offset, end = service.local_first_offset, service.committed_offset
        while offset < end:
            checks = await service.check_chunks(offset, RUN_BYTES)
            if not checks:
                return  # tiered or cut meanwhile: not a full pass
            for check in checks:
                await self._checked(name, service, check)
            offset = checks[-1].next_offset
            if paced:
                await self._pace(sum(check.size for check in checks))
        service.integrity.pass_done(offset)

    async def _checked(self, name: str, service: PartitionService, check: ChunkCheck) -> None:
        service.integrity.checked(check)
        if check.damage is None:
            service.mark_verified(check.chunk_id)
            return
        service.damage.report(ChunkDamaged(
            check.chunk_id, False, f"{check.segment} at {check.file_pos} ({check.size} "
            f"bytes): {check.damage}"))
        if (self.repair is not None
                and await self.repair.repair(service, check.chunk_id) is not None):
            self._counters.chunks_repaired += 1
            service.damage.repaired(check.chunk_id)

    async def _pace(self, size: int) -> None:
        self._due += size
        if self._due >= self.rate * PACE_S:
            await asyncio.sleep(self._due / self.rate)
            self._due = 0


def _partitions(stream: Stream) -> list[tuple[str, PartitionService]]:
    """Each partition's name and service, as the stream has them now: taken at once, since
    partitions added or removed while a pass awaits change the list of services in place."""
    return list(zip(stream.partition_names, stream.services, strict=True))
