"""Appends to a stream queue batched per event-loop turn: one chunk, one fsync per burst."""

from __future__ import annotations

import asyncio

from mainstem.log.partition import Appended, Partition

MAX_CHUNK_RECORDS = 0xFFFF


class StreamAppender:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self._records: list[bytes] = []
        self._batch: asyncio.Future[None] | None = None

    def append(self, record: bytes) -> asyncio.Future[None]:
        """Queue a record for this turn's chunk; the future is done once it is durable."""
        self._records.append(record)
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            loop.call_soon(self._flush)
        return self._batch

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        records, self._records = self._records, []
        assert batch is not None
        try:
            appended = write_in_chunks(self.partition, records)
        except Exception as exc:  # closed partition (stream deleted) or a full disk
            batch.set_exception(exc)
            return
        resolve_when_durable(self.partition, appended, batch)


def write_in_chunks(partition: Partition, records: list[bytes]) -> Appended:
    """Write records as chunks of at most 65,535 (a chunk's entry limit); the last one's
    Appended covers them all, since commits are in order."""
    appended = None
    for start in range(0, len(records), MAX_CHUNK_RECORDS):
        appended = partition.write_records(records[start:start + MAX_CHUNK_RECORDS])
    assert appended is not None
    return appended


_commits: set[asyncio.Task[None]] = set()  # strong references to the running waits


def resolve_when_durable(partition: Partition, appended: Appended,
                         batch: asyncio.Future[None]) -> None:
    """Complete `batch` once `appended` reached the durability point (or failed)."""
    task = asyncio.ensure_future(_settle(partition, appended, batch))
    _commits.add(task)
    task.add_done_callback(_commits.discard)


async def _settle(partition: Partition, appended: Appended, batch: asyncio.Future[None]) -> None:
    try:
        await partition.commit(appended)
    except Exception as exc:
        if not batch.done():
            batch.set_exception(exc)
    else:
        if not batch.done():
            batch.set_result(None)
