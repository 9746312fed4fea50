"""What protocols may ask of the cluster, when the broker runs in one.

The broker does not know etcd or replication (they sit above it, in `mainstem.cluster`);
it knows this interface, which the cluster node implements. Without a cluster,
`BrokerCore.cluster` is None and every stream lives here alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class NodeAddress:
    name: str
    host: str
    ports: Mapping[str, int] = field(default_factory=dict)  # listener name -> port


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partition lives: its leader (None between leaders) and its replicas."""

    leader: NodeAddress | None
    replicas: tuple[NodeAddress, ...]


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """This node's replica of a partition, by offset (RabbitMQ's Raft log indexes)."""

    first: int  # the records before it were released (retention, a journal's compaction)
    committed: int  # the in-sync replicas hold everything before it
    written: int  # written here, committed or not


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """A replicated partition as this node knows it, for operators."""

    leader: str | None
    epoch: int
    replicas: tuple[str, ...]
    in_sync: tuple[str, ...]
    # Records each follower lacks of what the leader wrote: known on the leader only.
    lag: Mapping[str, int] = field(default_factory=dict)
    log: ReplicaLog | None = None  # None where this node holds no replica


class ClusterView(Protocol):
    node_name: str

    @property
    def nodes(self) -> Mapping[str, NodeAddress]:
        """The live nodes, this one included."""

    async def create_stream(self, namespace: str, name: str, partitions: int,
                            arguments: Mapping[str, Any]) -> None:
        """Create a replicated stream; returns once this node knows its leaders.
        Raises AlreadyExists / InvalidArgument as `StreamStore.create` does."""

    async def delete_stream(self, namespace: str, name: str) -> None:
        """Delete a stream on every node; NotFound when there is none."""

    def placement(self, namespace: str, name: str, index: int) -> Placement | None:
        """Where partition `index` of a stream lives; None for a stream it does not know."""

    def status(self, namespace: str, name: str, index: int) -> PartitionStatus | None:
        """Leader, epoch, replicas, in-sync set and lag of a partition; None if unknown."""

    def quorum_status(self, namespace: str, queue: str) -> PartitionStatus | None:
        """The same of a quorum queue's journal; None for a queue the cluster lacks."""


class QueueReplication(Protocol):
    """What AMQP virtual hosts ask of the cluster about quorum queues."""

    def create_quorum(self, namespace: str, queue: str,
                      arguments: Mapping[str, Any]) -> Awaitable[None]:
        """Record a new quorum queue in the cluster (or find the one recorded); done once
        its leader is known, and the queue live here if this node leads it."""

    def delete_quorum(self, namespace: str, queue: str) -> None:
        """A quorum queue was deleted on this node: delete it on every node."""

    def quorum_leader(self, namespace: str, queue: str) -> str | None:
        """The node leading a quorum queue's journal (None during an election)."""


class IdRegistry(Protocol):
    """Cluster-wide numbering of the Iggy model: the ids of streams (scope ``()``), topics
    (scope ``(namespace,)``) and consumer groups (scope ``(namespace, topic)``), each id
    and each name unique in its scope."""

    async def claim(self, kind: str, scope: tuple[str, ...], name: str,
                    wanted: int | None) -> int:
        """Give `name` an id: `wanted`, or one above every id of the scope. AlreadyExists
        when `wanted` is taken or `name` has an id already."""

    def claim_later(self, kind: str, scope: tuple[str, ...], name: str, proposed: int) -> None:
        """Give `name` an id in the background (a name first seen here): `proposed` if it
        is free; whatever the cluster decides reaches this node through its watch."""

    async def release(self, kind: str, scope: tuple[str, ...], name: str | None) -> None:
        """Drop `name`'s id on every node (every id of the scope when None); a group's
        members go with it."""

    async def join(self, namespace: str, topic: str, group: str, client_id: int) -> None:
        """A client of this node joined a consumer group: a member on every node."""

    async def leave(self, namespace: str, topic: str, group: str, client_id: int) -> None:
        """A client of this node left a consumer group (or disconnected)."""

