"""What protocols may ask of the cluster, when the broker runs in one.

The broker does not know etcd or replication (they sit above it, in `mainstem.cluster`);
it knows this interface, which the cluster node implements. Without a cluster,
`BrokerCore.cluster` is None and every stream lives here alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mainstem.broker.streams import Stream


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


class ClusterView(Protocol):
    node_name: str

    async def create_stream(self, namespace: str, name: str, partitions: int,
                            arguments: Mapping[str, Any]) -> None:
        """Create a replicated stream; returns once this node knows its leaders.
        Raises AlreadyExists / InvalidArgument as `StreamStore.create` does."""

    async def delete_stream(self, namespace: str, name: str) -> None:
        """Delete a stream on every node; NotFound when there is none."""

    def placement(self, namespace: str, name: str, index: int) -> Placement | None:
        """Where partition `index` of a stream lives; None for a stream it does not know."""


class StreamReplication(Protocol):
    """What the stream store tells the cluster, whichever protocol made the change."""

    def adopt(self, stream: Stream) -> None:
        """A stream was created on this node: replicate it."""

    def forget(self, stream: Stream) -> None:
        """A stream was deleted on this node: delete it everywhere."""
