"""The leader's in-sync decisions, without a network: a real partition, followers' acks
given by hand, the in-sync set "written to etcd" by a function the test holds.

Kafka's rule (replica.lag.time.max.ms): a follower is out of sync once it has not caught
up, for `lag_timeout`, with what the leader had written as of its previous check; so a
follower that keeps up under steady writes (always a chunk or two behind) stays in, and
every one that stopped leaves, all in one change, so the commit point moves on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mainstem.broker.stream_service import Leading, PartitionService
from mainstem.cluster.replication.leader import LeaderLog
from mainstem.cluster.replication.replica import successor_isr
from mainstem.formats.chunk import FIRST_EPOCH
from mainstem.log.partition import Partition

LAG_S = 0.3


class IsrStore:
    """What etcd would hold; `gate`, when set, holds every write until released."""

    def __init__(self) -> None:
        self.written: list[list[str]] = []
        self.gate: asyncio.Event | None = None

    async def write(self, isr: list[str]) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        self.written.append(list(isr))
        return True


def open_leader(tmp_path: Path) -> Partition:
    partition = Partition.open(tmp_path / "leader")
    partition.write_records([b"first"])
    partition.flush()
    return partition


def lead(partition: Partition) -> Leading:
    return PartitionService(partition).lead(FIRST_EPOCH)


async def write_and_ack(leader: LeaderLog, partition: Partition, keeping_up: list[str],
                        seconds: float) -> None:
    """Write a chunk every 20 ms for `seconds`; each follower in `keeping_up` acks, a
    chunk behind, what the leader had before it (the usual state under steady writes)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = partition.next_offset
        partition.write_records([b"x"])
        partition.flush()
        for follower in keeping_up:
            leader.on_ack(follower, before)
        await asyncio.sleep(0.02)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_followers_keeping_up_under_steady_writes_stay_in_sync(tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    leader = LeaderLog(lead(partition), "a", ["a", "b", "c"], ["a", "b", "c"], store.write, LAG_S)
    await write_and_ack(leader, partition, ["b", "c"], 4 * LAG_S)
    assert store.written == [] and leader.isr == ["a", "b", "c"]
    leader.close()
    partition.close()


async def test_every_stopped_follower_leaves_in_one_change(tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    replicas = ["a", "b", "c", "d", "e"]
    leader = LeaderLog(lead(partition), "a", replicas, replicas, store.write, LAG_S)
    for follower in replicas[1:]:
        leader.on_ack(follower, partition.next_offset)
    stopped_at = partition.committed_offset
    await write_and_ack(leader, partition, ["b", "c"], 3 * LAG_S)  # d and e stopped
    assert store.written[0] == ["a", "b", "c"]
    assert leader.isr == ["a", "b", "c"]
    assert partition.committed_offset > stopped_at  # confirms go on without them
    leader.close()
    partition.close()


async def test_confirms_resume_within_the_lag_timeout_of_a_follower_stopping(
        tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    leader = LeaderLog(lead(partition), "a", ["a", "b", "c"], ["a", "b", "c"], store.write, LAG_S)
    await write_and_ack(leader, partition, ["b", "c"], LAG_S)
    stopped_at, stopped = partition.committed_offset, time.monotonic()
    resumed = None
    while time.monotonic() - stopped < 4 * LAG_S:  # c stopped: only b acks
        await write_and_ack(leader, partition, ["b"], 0.02)
        if partition.committed_offset > stopped_at + 1:
            resumed = time.monotonic() - stopped
            break
    assert resumed is not None and resumed < LAG_S * 1.25 + 0.2
    assert leader.isr == ["a", "b"]
    leader.close()
    partition.close()


async def test_a_follower_catching_up_while_a_change_is_written_joins_after_it(
        tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    leader = LeaderLog(lead(partition), "a", ["a", "b", "c", "d", "e"], ["a", "b", "c", "d"],
                       store.write, LAG_S)
    store.gate = asyncio.Event()
    # d stops; once its removal is being written, e (out of the set) catches up, then
    # everything is idle: no further ack would bring e's rejoin back.
    await write_and_ack(leader, partition, ["b", "c"], 1.5 * LAG_S)
    assert leader.isr == ["a", "b", "c", "d"] and store.written == []  # held at the gate
    leader.on_ack("b", partition.next_offset)
    leader.on_ack("c", partition.next_offset)
    leader.on_ack("e", partition.next_offset)
    store.gate.set()
    await settle()
    assert store.written[0] == ["a", "b", "c"]
    assert leader.isr == ["a", "b", "c", "e"]
    assert store.written[-1] == ["a", "b", "c", "e"]
    leader.close()
    partition.close()


async def test_an_idle_follower_that_holds_everything_stays_in_sync(tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    leader = LeaderLog(lead(partition), "a", ["a", "b", "c"], ["a", "b", "c"], store.write, LAG_S)
    leader.on_ack("b", partition.next_offset)
    leader.on_ack("c", partition.next_offset)
    await asyncio.sleep(3 * LAG_S)  # nothing written, so no acks come
    assert store.written == [] and leader.isr == ["a", "b", "c"]
    leader.close()
    partition.close()


async def test_a_leader_missing_from_its_own_set_puts_itself_back(tmp_path: Path) -> None:
    partition, store = open_leader(tmp_path), IsrStore()
    leader = LeaderLog(lead(partition), "a", ["a", "b", "c"], ["b", "c"], store.write, LAG_S)
    await settle()
    assert store.written == [["a", "b", "c"]] and leader.isr == ["a", "b", "c"]
    leader.close()
    partition.close()


def test_a_node_re_elected_after_its_own_lease_lapsed_stays_in_the_set() -> None:
    # The previous leader leaves the set a candidate writes (it may have died with
    # chunks no one else holds), unless the candidate is that leader, back again (its
    # lease lapsed while etcd was away, say): it holds its own log.
    assert successor_isr(["a", "b", "c"], "b", "a") == ["b", "c"]
    assert successor_isr(["a", "b", "c"], "a", "a") == ["a", "b", "c"]
    assert successor_isr(["a"], "b", "a") == ["b"]
