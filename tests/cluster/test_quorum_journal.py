"""A quorum queue's journal on a follower, without a network: it holds its leader's
chunks byte for byte, replaying it — everything written, committed or not, as a newly
elected leader does — gives the leader's live messages in order, and it drops the
segments that hold only settled messages as its leader does (the leader once they are
durable)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mainstem.broker.amqp.queues import journal as journal_module
from mainstem.broker.amqp.queues.journal import (
    FollowedJournal,
    QueueJournal,
    decode_enqueue,
    open_partition,
)
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.stream_service import PartitionService
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, RetentionPolicy
from tests.cluster.test_replica_log import copy_into


async def test_a_follower_replays_its_leaders_live_messages(tmp_path: Path) -> None:
    durability = DurabilityPolicy()
    leader = QueueJournal(PartitionService(open_partition(tmp_path / "leader", durability,
                                                          fsync_on_demand=False)))
    messages = [QueueMessage("", "q", b"", f"m{i}".encode(), persistent=True)
                for i in range(10)]
    for message in messages:
        await leader.enqueue(message, confirm=True)
    for message in messages[:3] + messages[5:6]:  # acked: the head, and one out of order
        leader.settle(message)
    await leader.enqueue(QueueMessage("", "q", b"", b"m10", persistent=True), confirm=True)

    follower = open_partition(tmp_path / "follower", durability, fsync_on_demand=False)
    follower.writable = False
    copy_into(follower, leader.service.partition, 0)
    follower.commits.set_limit(0)  # nothing known committed: a replay reads it all anyway
    journal = QueueJournal(PartitionService(follower))
    replay = journal.replay()
    bodies = [decode_enqueue(record).body for record in journal.reader.read(replay.offsets)]
    assert bodies == [b"m3", b"m4", b"m6", b"m7", b"m8", b"m9", b"m10"]
    assert list(replay.sizes) == [2] * 6 + [3]
    await leader.close()
    await follower.aclose()


async def test_a_follower_drops_segments_that_hold_only_settled_messages(
        tmp_path: Path) -> None:
    small = RetentionPolicy(max_segment_bytes=400)  # a few records per segment
    leader = QueueJournal(PartitionService(Partition.open(tmp_path / "leader",
                                                          retention=small)))
    messages = [QueueMessage("", "q", b"", f"m{i:02}".encode() * 20, persistent=True)
                for i in range(30)]
    for message in messages:
        await leader.enqueue(message, confirm=True)
    for message in messages[:20]:
        leader.settle(message)
    await leader.enqueue(QueueMessage("", "q", b"", b"last", persistent=True), confirm=True)

    follower = Partition.open(tmp_path / "follower", retention=small)
    follower.writable = False
    copy_into(follower, leader.service.partition, 0)
    follower.commits.set_limit(follower.next_offset)
    follower.flush()  # durable, so committed
    segments = follower.segment_count
    list(FollowedJournal(PartitionService(follower), compact_every=1).catch_up())
    assert follower.segment_count < segments and follower.first_offset > 0
    journal = QueueJournal(PartitionService(follower))
    replay = journal.replay()
    bodies = [decode_enqueue(record).body for record in journal.reader.read(replay.offsets)]
    assert bodies == [m.body for m in messages[20:]] + [b"last"]
    await leader.close()
    await follower.aclose()


async def test_a_leader_drops_segments_of_settled_messages_once_they_are_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its compaction waits for the fsync its deletions need (run in the commit's
    threads): nothing was confirmed, so nothing was durable before it asked."""
    monkeypatch.setattr(journal_module, "COMPACT_EVERY", 1)
    monkeypatch.setattr(journal_module, "SEGMENT_BYTES", 400)  # a few records per segment
    leader = QueueJournal(PartitionService(open_partition(tmp_path / "leader",
                                                          DurabilityPolicy())))
    messages = [QueueMessage("", "q", b"", f"m{i:02}".encode() * 20, persistent=True)
                for i in range(30)]
    for message in messages:
        leader.enqueue(message, confirm=False)
        await asyncio.sleep(0)  # a chunk each
    segments = leader.service.segment_count
    for message in messages[:20]:
        leader.settle(message)
    leader.enqueue(QueueMessage("", "q", b"", b"last", persistent=True), confirm=False)
    for _ in range(500):  # bounded: until the compaction has run
        if leader.service.first_offset > 0:
            break
        await asyncio.sleep(0.01)
    assert leader.service.segment_count < segments
    assert 0 < leader.service.first_offset <= messages[20].log_offset
    await leader.close()
