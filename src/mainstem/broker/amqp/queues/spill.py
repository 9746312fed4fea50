"""Where a queue pages out the messages its journal does not hold: transient messages, and
every message of a non-durable queue.

A spill is a log partition of its own in a directory named at random (never after the queue),
written without fsync: it only has to outlive the messages' time on disk, not a crash, so
the broker wipes every spill when it starts. Whole segments below the oldest message not yet
read back are deleted as the queue drains.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from mainstem.broker.amqp.queues.journal import RecordReader, decode_enqueue, encode_enqueue
from mainstem.broker.amqp.queues.live_offsets import LiveOffsets
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.stream_service import PartitionService
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy

SEGMENT_BYTES = 16 * 1024 * 1024
TRUNCATE_EVERY = 4096  # messages read back between attempts to delete old segments


class SpillStore:
    def __init__(self, root: Path) -> None:
        self.service = PartitionService(Partition.open(
            root / uuid.uuid4().hex, durability=DurabilityPolicy(FsyncMode.NEVER),
            retention=RetentionPolicy(max_segment_bytes=SEGMENT_BYTES)))
        self._appender = self.service.appender
        self._reader = RecordReader(self.service)
        self._live = LiveOffsets()
        self._since_truncation = 0

    def write(self, messages: Sequence[QueueMessage]) -> int:
        """Write the messages in one go; returns the offset of the first (the others follow)."""
        receipt = self._appender.write_records([encode_enqueue(m) for m in messages],
                                               durable=False)
        refused = receipt.durable.exception()
        if refused is not None:  # a full disk
            raise refused
        first = receipt.first_offset
        for offset in range(first, first + len(messages)):
            self._live.add(offset)
        return first

    def read(self, offsets: Sequence[int]) -> list[QueueMessage]:
        """Read messages back (in increasing offset order); their space may then be reused."""
        messages = [decode_enqueue(record) for record in self._reader.read(offsets)]
        for offset in offsets:
            self._live.discard(offset)
        self._since_truncation += len(offsets)
        if self._since_truncation >= TRUNCATE_EVERY:
            self._since_truncation = 0
            floor = self._live.floor()
            self.service.truncate_before(self.service.next_offset if floor is None
                                         else floor)
        return messages

    def delete(self) -> None:
        self.service.delete()


def wipe(root: Path) -> None:
    """Remove the spills a previous run left behind (their messages did not survive it)."""
    shutil.rmtree(root, ignore_errors=True)
