"""Quorum queues in a cluster: each queue's journal is a partition replicated as a
stream's is, and the queue is live on the journal's leader only.

etcd holds a quorum queue as it holds a stream: a `/mainstem/streams/STORAGE` record
(`kind` "quorum", STORAGE the journal's storage name) and the leader, epoch and in-sync
keys of its one partition. Elections, replication, commit points, catch-up and truncation
are the streams' own (`PartitionRole`, `LeaderLog`, `follow`): no second replication
mechanism. What a quorum queue adds is what its leader does: when elected it makes the
queue live (`VirtualHost.go_live`) and replays the journal into it in slices, the event
loop serving others between them (`QuorumQueue.replay`); when it stops leading the queue
goes back to a standby (`VirtualHost.stand_by`), whose consumers are cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from mainstem.broker import layout
from mainstem.broker.amqp.queues.journal import FollowedJournal, QueueJournal
from mainstem.broker.amqp.queues.quorum import REPLICATED_QUEUES, QuorumQueue
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.errors import PreconditionFailed
from mainstem.broker.stream_service import DataRemoved, PartitionClosed, PartitionService
from mainstem.cluster.etcd import EtcdError, KeyValue
from mainstem.cluster.etcd_keys import path
from mainstem.cluster.replication.replica import PartitionRole, ReplicaContext
from mainstem.cluster.replication.replicated_streams import ReplicatedStreams

log = logging.getLogger("mainstem.cluster")

QUORUM = "quorum"  # the kind of a stream record that holds a quorum queue's journal
LEAD_WAIT_S = 10.0  # a declaration waits this long for the queue to be live
FOLLOWER_COMPACTION_S = 1.0  # how often a follower reads what its leader committed


def storage_of(namespace: str, queue: str) -> str:
    return layout.storage_name("queue", namespace, queue)


class QuorumRole(PartitionRole):
    """The replica of a quorum queue's journal on this node."""

    def __init__(self, queues: QuorumQueues, storage: str, service: PartitionService,
                 record: dict[str, Any]) -> None:
        super().__init__(queues.context, storage, 0, service, record)
        self.queues = queues
        self.namespace: str = record["namespace"]
        self.queue: str = record["name"]
        self._compaction: asyncio.Task[None] | None = None

    def start(self) -> None:
        super().start()
        self._compaction = asyncio.get_running_loop().create_task(self._compact_following())

    def stop(self) -> None:
        super().stop()
        if self._compaction is not None:
            self._compaction.cancel()

    async def _compact_following(self) -> None:
        """While following, drop the journal's segments that hold only settled messages
        (while leading, the live queue's journal does), reading in slices."""
        followed: FollowedJournal | None = None
        while True:
            await asyncio.sleep(FOLLOWER_COMPACTION_S)
            if self._leading.is_set():
                followed = None  # once following again, it reads the journal anew
                continue
            followed = followed or FollowedJournal(self.service)
            try:
                for _ in followed.catch_up():
                    await asyncio.sleep(0)
                    if self._leading.is_set():  # its replay reads the journal now
                        followed = None
                        break
            except (OSError, DataRemoved, PartitionClosed) as error:
                log.warning("quorum.compaction_failed", extra={
                    "vhost": self.namespace, "queue": self.queue, "error": str(error)})
                followed = None

    def took_lead(self) -> None:
        self.queues.went_live(self)

    def left_lead(self) -> None:
        self.queues.stood_by(self)


class QuorumQueues:
    """This node's quorum queues; implements `broker.cluster_view.QueueReplication`."""

    def __init__(self, context: ReplicaContext, replicated: ReplicatedStreams) -> None:
        self.context, self.replicated = context, replicated
        # Leaders of partitions this node holds no replica of (it has no role to ask).
        self._leaders: dict[tuple[str, int], str] = {}

    def is_quorum(self, storage: str) -> bool:
        record = self.replicated.records.get(storage)
        return record is not None and record.get("kind") == QUORUM

    # -- what the vhosts ask -------------------------------------------------------

    def create_quorum(self, namespace: str, queue: str,
                      arguments: Mapping[str, Any]) -> Awaitable[None]:
        return asyncio.ensure_future(self._create(namespace, queue, dict(arguments)))

    async def _create(self, namespace: str, queue: str, arguments: dict[str, Any]) -> None:
        storage = storage_of(namespace, queue)
        replicated = self.replicated
        try:
            if storage not in replicated.records:
                record = {**await replicated.place(namespace, queue, 1, arguments, QUORUM),
                          "kind": QUORUM}
                if not await replicated.claim(storage, record):  # declared meanwhile elsewhere
                    found = await self.context.etcd.get(path("streams", storage))
                    record = found.json() if found is not None else record
                self.add(storage, record)
        except EtcdError as error:
            self._vhost(namespace).drop_replicated(queue)
            raise PreconditionFailed(f"quorum queue '{queue}' could not be recorded in the "
                                     f"cluster: {error}") from None
        await self._placed(storage)

    async def _placed(self, storage: str) -> None:
        """Until the queue has a leader, and is live here if that is this node."""
        for _ in range(int(LEAD_WAIT_S / 0.05)):  # bounded: an election is seconds at most
            leader = self.leader(storage)
            role = self.replicated.roles.get((storage, 0))
            if leader == self.context.node_name and role is not None:
                await role.leading(LEAD_WAIT_S)
                return
            if leader is not None:
                return
            await asyncio.sleep(0.05)

    def delete_quorum(self, namespace: str, queue: str) -> None:
        storage = storage_of(namespace, queue)
        record = self.replicated.records.pop(storage, None)
        if record is None:
            return  # the cluster deleted it: drop() is removing it here
        self.context.spawn(self.replicated.unclaim(storage))
        self._retire(storage, namespace, queue)

    def quorum_leader(self, namespace: str, queue: str) -> str | None:
        return self.leader(storage_of(namespace, queue))

    def leader(self, storage: str, index: int = 0) -> str | None:
        """The leader of a partition (a quorum queue's journal has one) as etcd says."""
        role = self.replicated.roles.get((storage, index))
        return role.leader_node if role is not None else self._leaders.get((storage, index))

    # -- what etcd says ----------------------------------------------------------------

    def add(self, storage: str, record: dict[str, Any]) -> None:
        """A quorum queue of the cluster: known in its vhost here, and its journal
        replicated here if this node is one of its replicas."""
        self.replicated.records[storage] = record
        namespace, queue = record["namespace"], record["name"]
        core = self.context.core
        if core.catalog.get_namespace(namespace) is None:
            # Its namespace's own change may come later: the queue's creator made both.
            core.catalog.apply("namespace", (namespace,), {})
        known = self._vhost(namespace).add_standby(queue, dict(record["arguments"]))
        if not isinstance(known, REPLICATED_QUEUES):
            log.error("quorum.name_taken", extra={"vhost": namespace, "queue": queue})
            return  # a queue of this node alone has the name: its journal is not ours
        roles = self.replicated.roles
        if self.context.node_name in record["replicas"] and (storage, 0) not in roles:
            journal = core.queues.open_journal_partition(namespace, queue)
            role = QuorumRole(self, storage, PartitionService(journal), record)
            roles[(storage, 0)] = role
            role.start()

    def drop(self, storage: str) -> None:
        """The cluster deleted a quorum queue."""
        record = self.replicated.records.pop(storage, None)
        if record is not None:
            self._retire(storage, record["namespace"], record["name"])

    def note_leader(self, storage: str, index: int, kv: KeyValue | None) -> None:
        """A leader key of a partition this node holds no replica of."""
        if kv is None:
            self._leaders.pop((storage, index), None)
        else:
            self._leaders[(storage, index)] = str(kv.json()["node"])

    def forget_deleted(self) -> None:
        """Quorum queues deleted while this node was away go (at start, after the read)."""
        for vhost in list(self.context.core.queues.vhosts.values()):
            for name, queue in list(vhost.queues.items()):
                storage = storage_of(vhost.name, name)
                if isinstance(queue, REPLICATED_QUEUES) and storage not in self.replicated.records:
                    self._retire(storage, vhost.name, name)

    def _retire(self, storage: str, namespace: str, queue: str) -> None:
        vhost = self.context.core.queues.vhosts.get(namespace)
        if vhost is not None:
            vhost.drop_replicated(queue)
        role = self.replicated.roles.pop((storage, 0), None)
        directory = self.context.core.queues.journal_directory(namespace, queue)
        self.context.spawn(_remove(role, directory))

    def _vhost(self, namespace: str) -> VirtualHost:
        return self.context.core.queues.vhost(namespace)

    # -- leading ----------------------------------------------------------------------

    def went_live(self, role: QuorumRole) -> None:
        """Elected: the queue is live here, its journal replayed in slices meanwhile (the
        event loop, this node's lease keep-alive and its other elections run on)."""
        vhost = self.context.core.queues.vhosts.get(role.namespace)
        journal = QueueJournal(role.service, self.context.core.counters)
        queue = None if vhost is None else vhost.go_live(role.queue, journal)
        if vhost is not None and queue is not None:
            self.context.spawn(self._replay(role, vhost, queue))

    async def _replay(self, role: QuorumRole, vhost: VirtualHost, queue: QuorumQueue) -> None:
        started = time.monotonic()
        try:
            messages = await queue.replay()
        except (OSError, DataRemoved, PartitionClosed, LookupError, ValueError) as error:
            # It leads but cannot serve: the queue is a standby again, the replicas intact.
            log.error("quorum.replay_failed", extra={"vhost": role.namespace,
                                                     "queue": role.queue, "error": repr(error)})
            vhost.stand_by(role.queue)
            return
        log.info("quorum.live", extra={"vhost": role.namespace, "queue": role.queue,
                                       "epoch": role.service.epoch, "messages": messages,
                                       "replay_s": round(time.monotonic() - started, 3)})

    def stood_by(self, role: QuorumRole) -> None:
        vhost = self.context.core.queues.vhosts.get(role.namespace)
        if vhost is not None:
            vhost.stand_by(role.queue)

    async def close(self) -> None:
        """The node stops (its roles stopped already): close the journals."""
        for role in list(self.replicated.roles.values()):
            if isinstance(role, QuorumRole):
                await role.service.close()


async def _remove(role: PartitionRole | None, directory: Path) -> None:
    """Stop replicating a deleted queue's journal, then remove its files."""
    if role is not None:
        role.stop()
        if role.task is not None:
            await asyncio.gather(role.task, return_exceptions=True)
        await role.service.close()
    await asyncio.to_thread(shutil.rmtree, directory, True)
