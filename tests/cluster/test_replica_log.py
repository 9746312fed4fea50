"""The log side of replication, without a network: a follower appends its leader's
chunks byte for byte, checks them, and cuts a divergent tail where the leader's epochs
say it must (Kafka's leader epochs, Raft's log matching)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mainstem.broker.stream_service import PartitionService
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.leader import LeaderLog
from mainstem.formats.chunk import FIRST_EPOCH, CorruptChunk
from mainstem.log import commit_point
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import NotWritable
from mainstem.log.partition import Partition
from mainstem.log.policy import RetentionPolicy
from mainstem.log.reader import PartitionReader
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import segment_key, upload_segment
from mainstem.log.tiered_segment import TieredSegment


def raw_chunks(partition: Partition, start: int = 0) -> list[tuple[bytes, bool]]:
    """Every written chunk from `start`, as a leader sends them."""
    chunks, position = [], start
    while (chunk := partition.written_chunk(position)) is not None:
        raw = os.pread(chunk.segment.fileno(), chunk.size, chunk.file_pos)
        chunks.append((raw, chunk.opens_segment))
        position = chunk.next_offset
    return chunks


def copy_into(follower: Partition, leader: Partition, start: int) -> None:
    for raw, opens in raw_chunks(leader, start):
        follower.append_chunk(memoryview(raw), opens)


def records(partition: Partition) -> list[bytes]:
    partition.flush()
    reader = PartitionReader(partition, partition.first_offset)
    found = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        found += [bytes(entry.body) for entry in chunk.entries()]
    return found


def hello(follower: Partition) -> wire.Hello:
    last = follower.last_chunk()
    return wire.Hello("s", "stream", 0, "f", 2, follower.next_offset,
                      last[0] if last else -1, last[1] if last else 0)


async def test_a_follower_holds_its_leaders_chunks_segments_and_sequences(tmp_path: Path) -> None:
    small = RetentionPolicy(max_segment_bytes=300)  # several segments
    leader = Partition.open(tmp_path / "leader", retention=small)
    follower = Partition.open(tmp_path / "follower", retention=small)
    follower.writable = False
    for i in range(20):
        leader.write_records([f"r{i}".encode() * 10], sequences={"writer": i})
    copy_into(follower, leader, 0)
    assert records(follower) == records(leader)
    assert follower.segment_count == leader.segment_count > 1
    assert follower.sequences == {"writer": 19}
    with pytest.raises(NotWritable):
        follower.write_records([b"local"])
    follower.close()
    reopened = Partition.open(tmp_path / "follower")  # sequences recovered from its segments
    assert reopened.sequences == {"writer": 19}
    reopened.close()
    leader.close()


async def test_a_damaged_or_misplaced_chunk_is_refused(tmp_path: Path) -> None:
    leader = Partition.open(tmp_path / "leader")
    follower = Partition.open(tmp_path / "follower")
    leader.write_records([b"a", b"b"])
    leader.write_records([b"c"])
    (first, _), (second, _) = raw_chunks(leader)
    with pytest.raises(CorruptChunk):
        follower.append_chunk(memoryview(second), False)  # does not continue the log
    damaged = bytearray(first)
    damaged[60] ^= 0xFF
    with pytest.raises(CorruptChunk):
        follower.append_chunk(memoryview(bytes(damaged)), False)
    assert follower.next_offset == 0
    follower.append_chunk(memoryview(first), False)
    assert follower.next_offset == 2
    leader.close()
    follower.close()


async def test_a_returning_leader_cuts_what_it_wrote_in_an_old_epoch(tmp_path: Path) -> None:
    new_leader = Partition.open(tmp_path / "new")
    old_leader = Partition.open(tmp_path / "old")
    for i in range(3):  # both hold the committed history of epoch 1
        old_leader.write_records([f"c{i}".encode()])
    copy_into(new_leader, old_leader, 0)
    old_leader.write_records([b"lost-1"])  # written by the old leader, never replicated
    old_leader.write_records([b"lost-2"])
    new_leader.epochs.current = 2
    new_leader.write_records([b"n1"])
    new_leader.write_records([b"n2"])
    new_leader.flush()
    feeder = LeaderLog(PartitionService(new_leader).lead(2), "new", ["new", "old"], ["new"],
                       _no_isr_change, 5.0)
    answer = await feeder.handshake(hello(old_leader))
    assert answer[4] == wire.FrameType.TRUNCATE
    cut = wire.read_offset(answer[5:])
    assert cut == 3  # where epoch 2 began on the new leader
    old_leader.truncate_from(cut)
    assert (await feeder.handshake(hello(old_leader)))[4] == wire.FrameType.START
    copy_into(old_leader, new_leader, old_leader.next_offset)
    assert records(old_leader) == [b"c0", b"c1", b"c2", b"n1", b"n2"] == records(new_leader)
    feeder.close()
    new_leader.close()
    old_leader.close()


async def _no_isr_change(isr: list[str]) -> bool:
    return False


async def test_a_follower_joins_the_in_sync_set_only_with_all_its_leader_had(
        tmp_path: Path) -> None:
    """A leader restarted with an old commit point must not take a follower that has
    reached that point but lacks chunks committed before: elected, it would lose them."""
    leader = Partition.open(tmp_path / "leader")
    for i in range(20):
        leader.write_records([f"r{i}".encode()])
    leader.flush()
    leader.commits.rewind(5)  # restarted: its saved commit point was 5
    written: list[list[str]] = []

    async def write_isr(isr: list[str]) -> bool:
        written.append(isr)
        return True

    feeder = LeaderLog(PartitionService(leader).lead(FIRST_EPOCH), "a", ["a", "b", "c"],
                       ["a", "b"], write_isr, 5.0)
    feeder.on_ack("c", 10)  # past the commit point, short of the leader's log
    await asyncio.sleep(0)
    assert written == [] and feeder.isr == ["a", "b"]
    feeder.on_ack("b", 20)
    assert leader.committed_offset == 20  # the in-sync set holds it all
    feeder.on_ack("c", 20)
    for _ in range(10):
        await asyncio.sleep(0)
    assert written == [["a", "b", "c"]] and feeder.isr == ["a", "b", "c"]
    feeder.close()
    leader.close()


async def test_a_restarted_replica_serves_only_its_last_known_commit_point(
        tmp_path: Path) -> None:
    """What lies past the saved commit point may be a tail no majority acked: after a
    restart it stays hidden until the replica set commits it again."""
    small = RetentionPolicy(max_segment_bytes=300)  # the point falls in a middle segment
    replica = Partition.open(tmp_path / "replica", retention=small)
    for i in range(20):
        replica.write_records([f"r{i}".encode() * 10])
    replica.flush()
    commit_point.save(replica.directory, 7)
    replica.close()
    reopened = Partition.open(tmp_path / "replica", retention=small)
    assert reopened.segment_count > 2
    reopened.commits.rewind(commit_point.load(reopened.directory))
    assert reopened.committed_offset == 7
    assert records_visible(reopened) == [f"r{i}".encode() * 10 for i in range(7)]
    reopened.commits.set_limit(12)  # the leader's word
    assert reopened.committed_offset == 12
    reopened.commits.set_limit(20)
    assert records_visible(reopened) == [f"r{i}".encode() * 10 for i in range(20)]
    reopened.close()


def test_a_missing_or_damaged_commit_point_reads_as_nothing_committed(tmp_path: Path) -> None:
    assert commit_point.load(tmp_path) == 0
    (tmp_path / commit_point.FILE_NAME).write_bytes(b"\x01")
    assert commit_point.load(tmp_path) == 0
    commit_point.save(tmp_path, 1 << 40)
    assert commit_point.load(tmp_path) == 1 << 40


def records_visible(partition: Partition) -> list[bytes]:
    """What a reader sees now, without flushing (which would commit nothing more here,
    but keeps the test about visibility alone)."""
    reader = PartitionReader(partition, partition.first_offset)
    found = []
    while (chunk := reader.next_chunk_nowait()) is not None:
        found += [bytes(entry.body) for entry in chunk.entries()]
    return found


async def tier_sealed(partition: Partition, tier: Tier, cache: TierCache, name: str) -> None:
    """Upload every sealed local segment and read it from the tier from then on."""
    while (oldest := partition.oldest_sealed()) is not None:
        record = await upload_segment(tier, oldest, segment_key(name, oldest.first_chunk_id,
                                                                 1))
        partition.swap_tiered(await TieredSegment.load(tier, record, cache))


async def test_a_returning_leader_cuts_its_old_epoch_where_the_new_leaders_log_is_tiered(
        tmp_path: Path) -> None:
    """The chaos campaign's stuck replica (issue 39): a returning leader's divergent tail
    lay where the new leader had tiered its own chunks, and the old leader's history was
    tiered too. The new leader knew no epoch in its tier and had it cut one chunk at a
    time, down into the old leader's tiered history, where recovering its writers failed
    (NotFetched) and it never followed again. With epochs in the records it is cut once,
    where epoch 2 began, and follows."""
    small = RetentionPolicy(max_segment_bytes=300)  # a chunk or two a segment
    tier = Tier.directory(tmp_path / "tier")
    caches = [TierCache(tmp_path / f"cache{i}", 1 << 30, DescriptorCache(16)) for i in (0, 1)]
    new_leader = Partition.open(tmp_path / "new", retention=small)
    old_leader = Partition.open(tmp_path / "old", retention=small)
    for i in range(6):  # both hold the committed history of epoch 1
        old_leader.write_records([f"c{i}".encode() * 20], sequences={"w": i})
    copy_into(new_leader, old_leader, 0)
    split = old_leader.next_offset
    for i in range(3):  # the old leader's tail, never replicated
        old_leader.write_records([f"lost-{i}".encode() * 20])
    new_leader.epochs.current = 2
    for i in range(6):
        new_leader.write_records([f"n{i}".encode() * 20], sequences={"w": 10 + i})
    new_leader.flush()
    old_leader.flush()
    await tier_sealed(new_leader, tier, caches[0], "new")
    # the old leader tiered its committed history too
    while (oldest := old_leader.oldest_sealed()) is not None and oldest.next_offset <= split:
        record = await upload_segment(tier, oldest, segment_key("old", oldest.first_chunk_id, 1))
        old_leader.swap_tiered(await TieredSegment.load(tier, record, caches[1]))
    assert new_leader.local_first_offset > split + 1  # its epoch-2 chunks there are tiered

    feeder = LeaderLog(PartitionService(new_leader).lead(2), "new", ["new", "old"], ["new"],
                       _no_isr_change, 5.0)
    answer = await feeder.handshake(hello(old_leader))
    assert answer[4] == wire.FrameType.TRUNCATE
    assert wire.read_offset(answer[5:]) == split  # at once, where epoch 2 began
    following = PartitionService(old_leader).follow()
    await following.truncate_from(split)  # its tail is now in its tiered history
    assert old_leader.last_chunk() == (split - 1, 1) and old_leader.sequences == {"w": 5}
    assert (await feeder.handshake(hello(old_leader)))[4] == wire.FrameType.START
    feeder.close()
