"""One partition's replica on this node: leading it, following its leader, or standing
for election when it has none.

Leadership is a key under the leader's lease, taken by an etcd transaction that also
bumps the partition's epoch, and only by a member of the in-sync set etcd records: every
committed chunk is on each of them, so the new leader lacks none. The old leader leaves
the set; once back it cuts what it wrote past the new leader's log and catches up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from mainstem.broker.fence import Fence
from mainstem.broker.stream_service import PartitionService
from mainstem.cluster.context import NodeContext, Peers
from mainstem.cluster.etcd import Compare, EtcdError, KeyValue, put
from mainstem.cluster.etcd_keys import path
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.follower import Refused, follow
from mainstem.cluster.replication.forward_links import Forwarding, PartitionForwarder
from mainstem.cluster.replication.leader import LeaderLog

log = logging.getLogger("mainstem.cluster")

PREFERRED_HEAD_START_S = 1.0  # others stand only if the preferred leader has not


def successor_isr(isr: list[str], candidate: str, last_leader: str | None) -> list[str]:
    """The in-sync set a candidate writes with its election: without the previous leader
    (it may have died holding chunks no one else acked), unless the candidate is that
    leader back again (its lease lapsed while etcd was away): it holds its own log."""
    kept = [n for n in isr if n != last_leader or n == candidate]
    return kept if candidate in kept else [candidate, *kept]


@dataclass(frozen=True, slots=True)
class ReplicaContext(NodeContext):
    """What a replica needs of its node beyond what every part of it does."""

    peers: Peers
    forwarding: Forwarding  # links to leader nodes, for appends made here
    lease_lost: asyncio.Event  # set while this node's lease has lapsed
    lag_timeout: float  # how long a follower may lag before it leaves the in-sync set
    # (storage, index) -> the log of a partition led here, for the replication listener
    leading: dict[tuple[str, int], LeaderLog] = field(default_factory=dict)


class PartitionRole:
    def __init__(self, context: ReplicaContext, storage: str, index: int,
                 service: PartitionService, record: dict[str, Any]) -> None:
        self.context = context
        self.storage = storage
        self.index = index
        self.service = service
        self.replicas: list[str] = list(record["replicas"])
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # What etcd says, with the revisions a transaction compares.
        self.leader: dict[str, Any] | None = None
        self.leader_lease = 0
        self.leader_value = b""
        self.isr: list[str] = list(self.replicas)
        self.isr_revision = 0
        self.epoch = 0
        self.epoch_revision = 0
        self._last_leader: str | None = None
        self._leading = asyncio.Event()  # set while this node leads the partition
        # Until this node is elected, it writes nothing itself: appends go to the leader.
        # Nor does it serve what its replica set may not have committed before a restart.
        self.forwarder = PartitionForwarder(context.forwarding, self)
        service.stand_by(self.forwarder)

    def _key(self, kind: str) -> str:
        return path(kind, self.storage, self.index)

    @property
    def leader_node(self) -> str | None:
        return None if self.leader is None else str(self.leader["node"])

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def update(self, kind: str, kv: KeyValue | None) -> None:
        """A change of this partition's keys, from the node's watch (or its first read)."""
        if kind == "leaders":
            before = self.leader_node or self._last_leader
            if kv is None:
                self._last_leader = before
                self.leader, self.leader_lease, self.leader_value = None, 0, b""
            else:
                self.leader, self.leader_lease, self.leader_value = kv.json(), kv.lease, kv.value
                if before is not None and self.leader_node != before:
                    self.context.core.streams.leader_moved(self.service)
        elif kind == "isr" and kv is not None:
            self.isr, self.isr_revision = kv.json(), kv.mod_revision
        elif kind == "epochs" and kv is not None:
            self.epoch, self.epoch_revision = int(kv.value), kv.mod_revision
        self.changed.set()

    async def _run(self) -> None:
        await self._read_state()
        while True:
            self.changed.clear()
            try:
                if self.leader is None:
                    await self._stand()
                elif self.leader_node == self.context.node_name and self._holds_lease():
                    await self._lead()
                elif self.leader_node == self.context.node_name:
                    await self.changed.wait()  # a key of a lapsed lease: it will expire
                else:
                    await self._follow()
            except EtcdError as error:
                log.warning("replica.etcd_unreachable", extra={
                    "stream": self.storage, "partition": self.index, "error": str(error)})
                await asyncio.sleep(0.5)
            except Exception as error:  # never a silent end: the replica would stop here
                log.exception("replica.failed", extra={
                    "stream": self.storage, "partition": self.index, "error": repr(error)})
                await asyncio.sleep(1.0)

    async def _read_state(self) -> None:
        for kind in ("leaders", "isr", "epochs"):
            kv = await self.context.etcd.get(self._key(kind))
            if kv is not None:
                self.update(kind, kv)

    async def leading(self, timeout: float) -> bool:
        """Whether this node leads the partition, waiting up to `timeout` for it to."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._leading.wait(), timeout)
        return self._leading.is_set()

    def _holds_lease(self) -> bool:
        return self.leader_lease == self.context.lease() and not self.context.lease_lost.is_set()

    # -- election --------------------------------------------------------------------

    async def _stand(self) -> None:
        """Stand for leader if in sync: the transaction succeeds only if no one else was
        elected and neither the in-sync set nor the epoch changed since read."""
        me = self.context.node_name
        if me not in self.isr or self.context.lease_lost.is_set():
            await self.changed.wait()
            return
        preferred = self.replicas[0]
        if preferred != me and preferred in self.context.peers.nodes and preferred in self.isr:
            await self.wait_changed(PREFERRED_HEAD_START_S)
            if self.leader is not None:
                return
        await asyncio.sleep(random.uniform(0, 0.2))  # spread rivals' transactions
        epoch = self.epoch + 1
        isr = successor_isr(self.isr, me, self._last_leader)
        value = json.dumps({"node": me, "epoch": epoch}).encode()
        won = await self.context.etcd.txn(
            [Compare(self._key("leaders"), "CREATE", 0),
             Compare(self._key("isr"), "MOD", self.isr_revision),
             Compare(self._key("epochs"), "MOD", self.epoch_revision)],
            [put(self._key("leaders"), value, self.context.lease()),
             put(self._key("epochs"), str(epoch).encode()),
             put(self._key("isr"), json.dumps(isr).encode())])
        if won:
            log.info("replica.elected", extra={"stream": self.storage, "partition": self.index,
                                               "epoch": epoch, "isr": isr})
            await self._read_state()
        else:
            await self._read_state()
            if self.leader is None:
                await self.wait_changed(0.2)

    async def wait_changed(self, timeout: float) -> None:
        # wait_for here, unlike elsewhere (docs/house.md): with asyncio.timeout, leader
        # changes failed in 13 cluster tests; why is not yet known
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout)

    # -- leading --------------------------------------------------------------------------

    async def _lead(self) -> None:
        epoch = int(self.leader["epoch"]) if self.leader else self.epoch
        # Shared writes made while leading hold only while etcd's leader key still names
        # this node at this epoch under its lease (see broker.fence).
        leading = self.service.lead(epoch, Fence(((self._key("leaders"), self.leader_value),),
                                                 epoch))
        leader = LeaderLog(leading, self.context.node_name, self.replicas, self.isr,
                           self._write_isr, self.context.lag_timeout)
        self.context.leading[(self.storage, self.index)] = leader
        # Appends that waited for a leader go first, before any made here from now on.
        self.forwarder.answer_staged(self.forwarder.stage_here())
        self.took_lead()
        self._leading.set()
        try:
            # The in-sync set is the leader's own from here on (only it writes the key):
            # what the watch brings back is an echo, maybe of an older change.
            while self.leader_node == self.context.node_name and self._holds_lease():
                self.changed.clear()
                await self.changed.wait()
        finally:
            self._leading.clear()
            leading.step_down(
                f"{self.context.node_name} no longer leads partition {self.index} of this "
                "stream: what it had not committed is the new leader's to keep or drop")
            self.left_lead()
            self.context.core.streams.leader_moved(self.service)
            log.info("replica.stepped_down", extra={
                "stream": self.storage, "partition": self.index, "leader": self.leader_node,
                "lease_lost": self.context.lease_lost.is_set()})
            leader.close()
            self.context.leading.pop((self.storage, self.index), None)

    def took_lead(self) -> None:
        """This node has just been elected and takes writes (a hook: see quorum)."""

    def left_lead(self) -> None:
        """This node no longer leads; writes it had not committed were abandoned."""

    async def _write_isr(self, isr: list[str]) -> bool:
        """Record a new in-sync set, only while this node still leads in its epoch."""
        try:
            return await self.context.etcd.txn(
                [Compare(self._key("leaders"), "VALUE", self.leader_value)],
                [put(self._key("isr"), json.dumps(isr).encode())])
        except EtcdError:
            return False

    # -- following --------------------------------------------------------------------

    async def _follow(self) -> None:
        leader = self.leader_node
        assert leader is not None
        peers = self.context.peers
        address, port = peers.nodes.get(leader), peers.replication_ports.get(leader)
        if address is None or port is None:
            await self.wait_changed(0.5)
            return
        hello = wire.Hello(peers.secret, self.storage, self.index, peers.me,
                           int(self.leader["epoch"]) if self.leader else 0)
        fetching = asyncio.ensure_future(follow(self.service.follow(), hello, address.host,
                                                port))
        changed = asyncio.ensure_future(self.changed.wait())
        done, _ = await asyncio.wait({fetching, changed}, return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()
        if fetching not in done:
            fetching.cancel()
            await asyncio.gather(fetching, return_exceptions=True)
            return
        error = fetching.exception()
        if error is not None and not isinstance(error, (OSError, asyncio.IncompleteReadError,
                                                         wire.WireError, Refused)):
            raise error
        await self.wait_changed(0.3)  # the leader went away or refused: look again soon
