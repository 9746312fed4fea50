"""The cluster's replicated streams as this node knows them (a quorum queue's journal is
one): each one's record in etcd, this node's replica of each partition it holds, and the
logs of those it leads. New ones are placed here and claimed in etcd in one transaction.

A partition's first epoch is one past the store's revision when it is made, not 1: every
epoch etcd ever held is at most the revision that wrote it (an election adds one to an
epoch written at an earlier revision), so a partition made again under an index (a stream
grown back, or deleted and declared again) never repeats a leader value, and a fence a
stale leader holds from an earlier one never passes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mainstem.broker.policies import STREAM
from mainstem.broker.stream_service import PartitionService
from mainstem.cluster.etcd import Compare, delete, delete_prefix, put
from mainstem.cluster.etcd_keys import path, prefix, segments
from mainstem.cluster.replication.replica import PartitionRole, ReplicaContext

PARTITION_KINDS = ("leaders", "isr", "epochs")
SIZE_ARGUMENTS = ("initial-cluster-size", "x-initial-cluster-size", "x-quorum-initial-group-size")
LOCATOR_ARGUMENTS = ("queue-leader-locator", "x-queue-leader-locator")
# RabbitMQ 4 takes its older locators random and least-leaders as balanced
BALANCED = ("balanced", "random", "least-leaders")
DEFAULT_REPLICAS = 3


def dropped(storage: str, index: int) -> list[dict[str, Any]]:
    """The etcd deletes that remove partition `index` of a stream."""
    return [delete(path(kind, storage, index)) for kind in PARTITION_KINDS]


class ReplicatedStreams:
    def __init__(self, context: ReplicaContext) -> None:
        self.context = context
        self.records: dict[str, dict[str, Any]] = {}  # storage name -> stream record
        self.roles: dict[tuple[str, int], PartitionRole] = {}  # (storage, index) -> replica
        self.leading = context.leading  # what the roles lead

    def add_role(self, storage: str, index: int, service: PartitionService,
                 record: dict[str, Any]) -> PartitionRole:
        """This node's replica of a partition, standing by until started."""
        role = self.roles[(storage, index)] = PartitionRole(self.context, storage, index,
                                                            service, record)
        return role

    def stop_roles(self, storage: str, first: int = 0) -> None:
        """Stop and forget this node's replicas of a stream's partitions from `first` on."""
        for key in [k for k in self.roles if k[0] == storage and k[1] >= first]:
            self.roles.pop(key).stop()

    async def save_commit_points(self) -> None:
        for role in list(self.roles.values()):
            await role.service.save_commit_point()

    def leader_of(self, storage: str, index: int) -> str | None:
        role = self.roles.get((storage, index))
        return None if role is None else role.leader_node

    async def place(self, namespace: str, name: str, partitions: int,
                    arguments: Mapping[str, Any], what: str = STREAM) -> dict[str, Any]:
        """A new record, its replicas placed on the nodes etcd lists (the watch may lag)."""
        live, _ = await self.context.etcd.get_prefix(prefix("nodes"))
        return self.new_record(namespace, name, partitions, arguments,
                               [segments(kv.key)[-1] for kv in live], what)

    def new_record(self, namespace: str, name: str, partitions: int,
                   arguments: Mapping[str, Any], live: list[str],
                   what: str = STREAM) -> dict[str, Any]:
        """A new stream's (or, `what` quorum, a quorum queue's) record, replicas placed."""
        locator = self._locator(namespace, name, what, arguments)
        return {"namespace": namespace, "name": name, "partitions": partitions,
                "arguments": dict(arguments),
                "replicas": self._choose_replicas(arguments, sorted(live), locator)}

    def _locator(self, namespace: str, name: str, what: str,
                 arguments: Mapping[str, Any]) -> str:
        """The argument's queue-leader-locator, else a policy's, else client-local."""
        given = next((arguments[a] for a in LOCATOR_ARGUMENTS if a in arguments), None)
        if given is None:
            given = self.context.core.catalog.policies.applied(namespace, name, what) \
                .definition.get("queue-leader-locator")
        return "client-local" if given is None else str(given)

    def _choose_replicas(self, arguments: Mapping[str, Any], live: list[str],
                         locator: str) -> list[str]:
        """The replica set, leader first: `client-local` puts this node first (RabbitMQ's
        default), `balanced` the node with the fewest replicas."""
        me = self.context.node_name
        live = live or [me]
        wanted = next((arguments[a] for a in SIZE_ARGUMENTS if a in arguments), None)
        size = min(int(wanted) if wanted else DEFAULT_REPLICAS, len(live))
        load = {n: 0 for n in live}
        for record in self.records.values():
            for n in record["replicas"]:
                if n in load:
                    load[n] += 1
        first = min(live, key=lambda n: (load[n], n)) \
            if locator in BALANCED or me not in load else me
        others = sorted((n for n in live if n != first), key=lambda n: (load[n], n))
        return [first, *others[:size - 1]]

    def made(self, storage: str, replicas: list[str], index: int, revision: int
             ) -> list[dict[str, Any]]:
        """The etcd operations that make partition `index` of a stream, `revision` the
        store's as read before: its in-sync set (the whole replica set), its first epoch
        (one past `revision`, see above), and, led by this node when it is the first
        replica, its leader key under this node's lease; else no leader key (one an
        earlier partition of that index may have left goes)."""
        me, epoch = self.context.node_name, revision + 1
        operations = [put(path("isr", storage, index), json.dumps(replicas).encode()),
                      put(path("epochs", storage, index), str(epoch).encode())]
        leader = path("leaders", storage, index)
        if replicas[0] == me:
            value = json.dumps({"node": me, "epoch": epoch}).encode()
            operations.append(put(leader, value, self.context.lease()))
        else:
            operations.append(delete(leader))
        return operations

    async def claim(self, storage: str, record: dict[str, Any]) -> bool:
        """Record a new stream in etcd with its replica sets; False if one of that name
        exists. The leader is the first replica: this node, unless placement said not."""
        key = path("streams", storage)
        held, revision = await self.context.etcd.get_at(key)
        return held is None and await self.context.etcd.txn(
            [Compare(key, "CREATE", 0)],
            [put(key, json.dumps(record).encode()),
             *(operation for index in range(record["partitions"])
               for operation in self.made(storage, record["replicas"], index, revision))])

    async def unclaim(self, storage: str, *also: dict[str, Any]) -> None:
        """Delete a stream's record and every key of its partitions (whatever their
        count), with `also` (etcd operations) in the same transaction."""
        await self.context.etcd.txn([], [delete(path("streams", storage)),
                                         *(delete_prefix(prefix(kind, storage))
                                           for kind in PARTITION_KINDS), *also])
