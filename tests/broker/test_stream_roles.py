"""A replicated partition's roles, on real files: standing by (appends go to the leader,
only the saved commit point is shown), leading (writes commit as the replica set acks
them, and wait no longer once this node steps down), following (the leader's chunks
appended as they came, a divergent tail cut)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mainstem.broker.stream_service import Following, Leading, NotWritable, PartitionService
from mainstem.broker.stream_service.forwarding import ForwardedAppend
from mainstem.log import commit_point
from mainstem.log.partition import Partition


class Leader:
    """The forwarder of a replica: what it forwards, answered at offset 100."""

    def __init__(self) -> None:
        self.forwarded: list[ForwardedAppend] = []

    def forward(self, append: ForwardedAppend) -> asyncio.Future[int]:
        self.forwarded.append(append)
        answer = asyncio.get_running_loop().create_future()
        answer.set_result(100)
        return answer

    def sequence(self, writer: str) -> asyncio.Future[int | None]:
        raise AssertionError("not asked")


@pytest.fixture
async def replica(tmp_path: Path) -> AsyncIterator[PartitionService]:
    service = PartitionService(Partition.open(tmp_path / "replica"))
    service.stand_by(Leader())
    yield service
    await service.close()


async def durable_to(role: Leading | Following, offset: int) -> None:
    """Wait until this disk holds every record below `offset`."""
    reached = asyncio.Event()
    role.on_durable(lambda mark: reached.set() if mark >= offset else None)
    if role.durable < offset:
        await asyncio.wait_for(reached.wait(), 5)
    role.on_durable(None)


async def raw_chunks(leading: Leading, start: int) -> list[tuple[bytes, bool]]:
    """Every chunk written from `start`, as a leader sends them to its followers."""
    chunks, position = [], start
    while (chunk := await leading.written_chunk(position)) is not None:
        chunks.append((os.pread(chunk.segment.fileno(), chunk.size, chunk.file_pos),
                       chunk.opens_segment))
        position = chunk.next_offset
    return chunks


async def test_a_restarted_replica_stands_by_at_its_saved_commit_point(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path / "replica")
    for i in range(20):
        partition.write_records([f"r{i}".encode()])
    partition.flush()
    commit_point.save(partition.directory, 7)  # what its replica set had committed
    partition.close()
    service = PartitionService(Partition.open(tmp_path / "replica"))
    leader = Leader()
    service.stand_by(leader)
    assert service.committed_offset == 7 and not service.takes_writes
    receipt = service.appender.append_records([b"new"], writer="w", sequence=1)
    await receipt.durable
    assert receipt.first_offset == 100 and [a.writer for a in leader.forwarded] == ["w"]
    assert service.next_offset == 20  # nothing written here
    service.follow().commit_to(12)  # the leader's word
    assert service.committed_offset == 12
    await service.save_commit_point()
    assert commit_point.load(tmp_path / "replica") == 12
    await service.close()


async def test_a_leader_commits_what_its_replica_set_acked(replica: PartitionService) -> None:
    leading = replica.lead(3)
    assert replica.takes_writes and replica.epoch == 3
    receipt = replica.appender.append_records([b"a", b"b"])
    await durable_to(leading, 2)
    await asyncio.sleep(0.01)
    assert not receipt.durable.done() and replica.committed_offset == 0  # not yet acked
    leading.commit_to(2)
    await asyncio.wait_for(receipt.durable, 5)
    assert replica.committed_offset == 2
    assert await leading.chunk_epoch(0) == 3 and leading.epoch_end(3) == 2


async def test_a_leader_stepping_down_abandons_what_it_had_not_committed(
        replica: PartitionService) -> None:
    leading = replica.lead(2)
    waiting = replica.appender.append_records([b"never acked"])
    await durable_to(leading, 1)
    leading.step_down("another node leads")
    with pytest.raises(NotWritable, match="another node leads"):
        await asyncio.wait_for(waiting.durable, 5)
    assert not replica.takes_writes
    forwarded = replica.appender.append_records([b"to the leader"])
    await forwarded.durable
    assert forwarded.first_offset == 100  # the forwarder is back


async def test_a_follower_takes_its_leaders_chunks_and_cuts_a_divergent_tail(
        tmp_path: Path, replica: PartitionService) -> None:
    leader = PartitionService(Partition.open(tmp_path / "leader"))
    leader.stand_by(Leader())
    leading = leader.lead(2)
    for body in (b"a", b"b", b"c"):
        await leader.appender.write_records([body], durable=False).durable
    following = replica.follow()
    for raw, opens in await raw_chunks(leading, 0):
        following.accept_chunk(memoryview(raw), opens, commit=2)
    assert following.next_offset == 3 and await following.last_chunk() == (2, 2)
    await durable_to(following, 3)
    assert replica.committed_offset == 2  # no further than the leader's point
    await following.truncate_from(2)  # the leader never committed the third
    assert following.next_offset == 2 and await following.last_chunk() == (1, 2)
    location = replica.locate(0)
    assert location is not None and location.read() is not None
    assert replica.committed_offset == 2
    await leader.close()
