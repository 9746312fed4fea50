"""Where /api/queues, /api/exchanges and /api/bindings get their rows.

Each subsystem that owns such objects contributes a ResourceProvider; the API merges the
rows of every provider. Streams are queues of type "stream" today; the AMQP subsystem adds
its classic queues, exchanges and bindings by registering its own provider:

    from mainstem.admin.resources import register_provider
    register_provider(lambda core: AmqpResources(core))

Rows use the JSON shapes of RabbitMQ's management API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mainstem.admin.tier_extents import stream_extent
from mainstem.broker.amqp.queues.quorum import REPLICATED_QUEUES
from mainstem.broker.amqp.queues.remote import RemoteQueue
from mainstem.broker.cluster_view import ClusterView, PartitionStatus
from mainstem.broker.policies import EXCHANGE
from mainstem.protocols.identity import NODE

if TYPE_CHECKING:
    from mainstem.broker.amqp.queues.virtual_host import VirtualHost
    from mainstem.broker.core import BrokerCore
    from mainstem.broker.streams import Stream

# The RabbitMQ release whose management API this one answers as (tools check it).
RABBITMQ_VERSION = "4.0.0"


class ResourceProvider(Protocol):
    def queues(self, vhost: str | None) -> list[dict[str, Any]]: ...
    def exchanges(self, vhost: str | None) -> list[dict[str, Any]]: ...
    def bindings(self, vhost: str | None) -> list[dict[str, Any]]: ...

    async def delete_queue(self, vhost: str, name: str) -> bool:
        """Delete the queue if this provider owns it; False if it does not."""
        ...


ProviderFactory = Callable[["BrokerCore"], ResourceProvider]
_factories: list[ProviderFactory] = []


def register_provider(factory: ProviderFactory) -> None:
    """Add a provider for every management API created from now on (idempotent)."""
    if factory not in _factories:
        _factories.append(factory)


def providers_for(core: BrokerCore) -> list[ResourceProvider]:
    return [StreamQueues(core), ClassicQueues(core),
            *(factory(core) for factory in _factories)]


def stream_messages(stream: Stream) -> int:
    """What a stream holds, as its queue row's `messages` (all ready)."""
    return sum(p.committed_offset - p.first_offset for p in stream.partitions)


def members(cluster: ClusterView | None, status: PartitionStatus | None) -> dict[str, Any]:
    """A replicated queue's leader, members and the live ones among them, under
    RabbitMQ's names; nothing outside a cluster."""
    if cluster is None or status is None:
        return {}
    return {"node": status.leader, "leader": status.leader,
            "members": list(status.replicas),
            "online": [n for n in status.replicas if n in cluster.nodes]}


def classic_home(cluster: ClusterView | None, queue: Any) -> dict[str, Any]:
    """Where a queue is live, and whether that node is up (RabbitMQ's `down` state)."""
    if cluster is None:
        return {"node": NODE, "state": "running"}
    if isinstance(queue, RemoteQueue) and queue.home_node:
        up = queue.home_node in cluster.nodes
        return {"node": queue.home_node, "state": "running" if up else "down"}
    return {"node": cluster.node_name, "state": "running"}


class StreamQueues:
    """Every stream as a queue of type stream, as RabbitMQ lists stream queues."""

    def __init__(self, core: BrokerCore) -> None:
        self._core = core

    def _members(self, stream: Stream) -> dict[str, Any]:
        """In a cluster, the first partition's leader, replicas and the live ones among
        them, under RabbitMQ's names for a replicated queue."""
        cluster = self._core.cluster
        return members(cluster, None if cluster is None else
                       cluster.status(stream.namespace, stream.name, 0))

    def queues(self, vhost: str | None) -> list[dict[str, Any]]:
        rows = []
        for stream in self._core.streams.list(vhost):
            messages = stream_messages(stream)
            rows.append({
                "name": stream.name,
                "vhost": stream.namespace,
                "type": "stream",
                "durable": True,
                "auto_delete": False,
                "exclusive": False,
                "arguments": {"x-queue-type": "stream", **stream.record.arguments},
                "node": NODE,
                "state": "running",
                "messages": messages,
                "messages_ready": messages,
                "messages_unacknowledged": 0,
                "memory": 0,
                "partitions": len(stream.partitions),
                "size_bytes": sum(p.size_bytes for p in stream.partitions),
                **stream_extent(stream.services),
                **stream.applied.fields(),
                **self._members(stream),
            })
        return rows

    def exchanges(self, vhost: str | None) -> list[dict[str, Any]]:
        return []

    def bindings(self, vhost: str | None) -> list[dict[str, Any]]:
        return []

    async def delete_queue(self, vhost: str, name: str) -> bool:
        if self._core.streams.find(vhost, name) is None:
            return False
        await self._core.streams.delete(vhost, name)
        return True


class ClassicQueues:
    """AMQP 0-9-1 classic queues, every exchange and binding of each virtual host."""

    def __init__(self, core: BrokerCore) -> None:
        self._core = core

    def _vhosts(self, vhost: str | None) -> list[VirtualHost]:
        """Every namespace as a virtual host, with its predeclared amq.* exchanges even
        before an AMQP client used it."""
        names = [vhost] if vhost is not None else [ns.name for ns in self._core.catalog
                                                   .list_namespaces()]
        queues = self._core.queues
        return [queues.vhost(name) for name in names
                if self._core.catalog.get_namespace(name) is not None]

    def queues(self, vhost: str | None) -> list[dict[str, Any]]:
        cluster = self._core.cluster
        return [{
            "name": queue.name,
            "vhost": host.name,
            "type": queue.settings.queue_type,
            "durable": queue.durable,
            "auto_delete": queue.auto_delete,
            "exclusive": queue.owner is not None,
            "arguments": queue.arguments,
            **classic_home(cluster, queue),
            "messages": queue.ready_count + queue.unacked_count,
            "messages_ready": queue.ready_count,
            "messages_unacknowledged": queue.unacked_count,
            "message_bytes_ready": queue.ready_bytes,
            "messages_ram": queue.in_memory,
            "messages_paged_out": queue.ready_count - queue.in_memory,
            "consumers": len(queue.consumers),
            "memory": queue.ready_bytes,
            **queue.applied.fields(),
            **(members(cluster, cluster.quorum_status(host.name, queue.name))
               if cluster is not None and isinstance(queue, REPLICATED_QUEUES) else {}),
        } for host in self._vhosts(vhost) for queue in host.queues.values()]

    def exchanges(self, vhost: str | None) -> list[dict[str, Any]]:
        return [{
            "name": exchange.name,
            "vhost": host.name,
            "type": exchange.type.value,
            "durable": exchange.durable,
            "auto_delete": exchange.auto_delete,
            "internal": exchange.internal,
            "arguments": dict(exchange.arguments),
            **self._core.catalog.policies.applied(host.name, exchange.name, EXCHANGE).fields(),
        } for host in self._vhosts(vhost) for exchange in host.graph.exchanges()]

    def bindings(self, vhost: str | None) -> list[dict[str, Any]]:
        """Each queue's implicit binding from the default exchange first, as RabbitMQ
        lists them, then the declared ones."""
        rows: list[dict[str, Any]] = []
        for host in self._vhosts(vhost):
            rows.extend(_binding_row(host.name, "", name, "queue", name, {})
                        for name in host.queues)
            rows.extend(_binding_row(host.name, b.source, b.destination, b.destination_kind,
                                     b.routing_key, dict(b.arguments))
                        for b in host.graph.bindings())
        return rows

    async def delete_queue(self, vhost: str, name: str) -> bool:
        host = self._core.queues.vhosts.get(vhost)
        queue = None if host is None else host.queues.get(name)
        if host is None or queue is None:
            return False
        host.remove_queue(queue)
        await host.shared()
        return True


def _binding_row(vhost: str, source: str, destination: str, kind: str, routing_key: str,
                 arguments: dict[str, Any]) -> dict[str, Any]:
    return {"source": source, "vhost": vhost, "destination": destination,
            "destination_type": kind, "routing_key": routing_key, "arguments": arguments}
