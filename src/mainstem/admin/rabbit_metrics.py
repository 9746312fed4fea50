"""The series of RabbitMQ's Prometheus plugin, under its names and grouped in its metric
families (`queue_coarse_metrics`, `channel_metrics`, ...), as /metrics/detailed selects them.

Everything is read from the broker's own state at scrape time: queue depths, connections
and channels from the live objects (a deleted queue or a closed connection simply is not
there any more), message counts from the plain integers the protocol handlers keep
(`mainstem.broker.counters`: also the stream protocol's error codes, dead-lettered
messages and logins), a quorum queue member's Raft series from the cluster's view of its
journal replica. A `Scope` says how a scrape wants them: aggregated (every
per-object series summed into one sample without labels, as RabbitMQ's /metrics) or one
sample per object, under which prefix, for which vhosts' queues. Aggregated, the
`rabbitmq_channel_*` counters also count channels that have closed, so they never go
backwards.
"""

from __future__ import annotations

import gc
import platform
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mainstem import __version__
from mainstem.admin.state import AdminState
from mainstem.broker.alarms import DISK, MEMORY, ResourceUsage, measure
from mainstem.broker.amqp.queues.remote import RemoteQueue
from mainstem.broker.cluster_view import ReplicaLog
from mainstem.broker.message_stats import MessageStats
from mainstem.protocols.base import ChannelView
from mainstem.protocols.identity import NODE
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.protocols.registry import Connection, consumers_per_queue

AMQP091, STREAM = "amqp091", "stream"  # RabbitMQ's values of the `protocol` label
_PROTOCOLS = (AMQP091, STREAM)  # RabbitMQ exports its global counters for each, even at 0
PREFIX, DETAILED_PREFIX = "rabbitmq_", "rabbitmq_detailed_"
# RabbitMQ's queue_type label: its queue modules' names
_QUEUE_TYPES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                "stream": "rabbit_stream_queue"}
Kind = type[GaugeMetricFamily | CounterMetricFamily]
Row = tuple[list[str], float]
# A channel's sample, from the channel and its describe() row.
ChannelValue = Callable[[ChannelView, dict[str, Any]], float]


@dataclass(frozen=True, slots=True)
class Scope:
    prefix: str = PREFIX
    per_object: bool = False
    vhosts: frozenset[str] | None = None  # queue families: only these vhosts' queues

    def family(self, kind: Kind, name: str, documentation: str, labels: list[str],
               rows: Iterable[Row]) -> Metric:
        """One sample per object, or (aggregated) their sum without labels."""
        if not self.per_object:
            return kind(name, documentation, value=sum(value for _, value in rows))
        family = kind(name, documentation, labels=labels)
        for values, value in rows:
            family.add_metric(values, value)
        return family


@dataclass(frozen=True, slots=True)
class _QueueRow:
    vhost: str
    name: str
    kind: str  # classic, quorum or stream
    ready: int
    unacked: int
    consumers: int
    published: int
    ready_bytes: int
    in_memory: int  # ready messages held in memory
    capacity: float  # consumer capacity, 0.0 to 1.0
    membership: str = "leader"  # "follower": its home is another node


QueueValue = Callable[[_QueueRow], float]
# RabbitMQ's queue families: (family, [(kind, name, help, value), ...])
_QUEUE_FAMILIES: dict[str, list[tuple[Kind, str, str, QueueValue]]] = {
    "queue_coarse_metrics": [
        (GaugeMetricFamily, "queue_messages_ready",
         "Messages ready to be delivered to consumers", lambda q: q.ready),
        (GaugeMetricFamily, "queue_messages_unacked",
         "Messages delivered to consumers but not yet acknowledged", lambda q: q.unacked),
        (GaugeMetricFamily, "queue_messages",
         "Sum of ready and unacknowledged messages - total queue depth",
         lambda q: q.ready + q.unacked)],
    "queue_consumer_count": [
        (GaugeMetricFamily, "queue_consumers", "Consumers on a queue", lambda q: q.consumers)],
    "queue_metrics": [
        (GaugeMetricFamily, "queue_consumers", "Consumers on a queue", lambda q: q.consumers),
        (GaugeMetricFamily, "queue_consumer_capacity", "Consumer capacity",
         lambda q: q.capacity),
        (GaugeMetricFamily, "queue_consumer_utilisation", "Same as consumer capacity",
         lambda q: q.capacity),
        (GaugeMetricFamily, "queue_messages_ram",
         "Ready and unacknowledged messages stored in memory",
         lambda q: q.in_memory + q.unacked),
        (GaugeMetricFamily, "queue_messages_ready_ram", "Ready messages stored in memory",
         lambda q: q.in_memory),
        (GaugeMetricFamily, "queue_messages_unacked_ram",
         "Unacknowledged messages stored in memory", lambda q: q.unacked),
        (GaugeMetricFamily, "queue_messages_ready_bytes", "Size in bytes of ready messages",
         lambda q: q.ready_bytes),
        (GaugeMetricFamily, "queue_messages_paged_out", "Messages paged out to disk",
         lambda q: q.ready - q.in_memory)],
    "channel_queue_exchange_metrics": [
        (CounterMetricFamily, "queue_messages_published_total",
         "Total number of messages published to queues", lambda q: q.published)],
}

# rabbitmq_<name> -> the MessageStats field it reads, by channel family
_CHANNEL_COUNTERS = {
    "channel_exchange_metrics": {
        "channel_messages_published_total": "publish",
        "channel_messages_confirmed_total": "confirm",
        "channel_messages_unroutable_returned_total": "return_unroutable",
        "channel_messages_unroutable_dropped_total": "drop_unroutable"},
    "channel_queue_metrics": {
        "channel_get_ack_total": "get",
        "channel_get_total": "get_no_ack",
        "channel_messages_delivered_ack_total": "deliver",
        "channel_messages_delivered_total": "deliver_no_ack",
        "channel_messages_redelivered_total": "redeliver",
        "channel_messages_acked_total": "ack",
        "channel_get_empty_total": "get_empty"},
}

# rabbitmq_<name> -> the key of a channel's describe() row
_CHANNEL_GAUGES = {
    "channel_consumers": ("consumer_count", "Consumers on a channel"),
    "channel_messages_unacked": ("messages_unacknowledged",
                                 "Delivered but not yet acknowledged messages"),
    "channel_messages_unconfirmed": ("messages_unconfirmed",
                                     "Published but not yet confirmed messages"),
    "channel_messages_uncommitted": ("messages_uncommitted",
                                     "Messages received in a transaction but not yet committed"),
    "channel_acks_uncommitted": ("acks_uncommitted",
                                 "Message acknowledgements in a transaction not yet committed"),
    "consumer_prefetch": ("prefetch_count",
                          "Limit of unacknowledged messages for each consumer"),
    "channel_prefetch": ("global_prefetch_count",
                         "Total limit of unacknowledged messages for all consumers on a channel"),
}

# rabbitmq_global_messages_<name>_total (RabbitMQ 3.10+) from MessageStats
_GLOBAL_COUNTERS: dict[str, Callable[[MessageStats], int]] = {
    "received": lambda s: s.publish,
    "received_confirm": lambda s: s.publish_confirm,
    "routed": lambda s: s.publish - s.drop_unroutable - s.return_unroutable,
    "unroutable_dropped": lambda s: s.drop_unroutable,
    "unroutable_returned": lambda s: s.return_unroutable,
    "confirmed": lambda s: s.confirm,
    "delivered": lambda s: s.deliver + s.deliver_no_ack + s.get + s.get_no_ack,
    "delivered_consume_auto_ack": lambda s: s.deliver_no_ack,
    "delivered_consume_manual_ack": lambda s: s.deliver,
    "delivered_get_auto_ack": lambda s: s.get_no_ack,
    "delivered_get_manual_ack": lambda s: s.get,
    "get_empty": lambda s: s.get_empty,
    "acknowledged": lambda s: s.ack,
    "redelivered": lambda s: s.redeliver,
}

# The stream protocol writes to its stream directly: no exchange routes its messages, and
# RabbitMQ counts none of them routed.
_UNROUTED = {(STREAM, "routed")}

# rabbitmq_global_stream_error_<name>_total: RabbitMQ's names of the stream protocol's
# error codes (STREAM_DOES_NOT_EXIST .. PUBLISHER_DOES_NOT_EXIST)
_STREAM_ERRORS = {
    "vhost_access_failure" if code is ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE
    else code.name.lower(): code
    for code in ResponseCode if ResponseCode.OK < code < ResponseCode.NO_OFFSET}

# rabbitmq_global_messages_dead_lettered_<reason>_total, by queue type and strategy
# ("disabled": the queue's dead-letter exchange is unset or missing; mainstem has no
# at_least_once)
_DEAD_LETTER_REASONS = ("expired", "rejected", "maxlen", "delivery_limit")
_DEAD_LETTERING_QUEUES = ("classic", "quorum")
_DEAD_LETTER_STRATEGIES = ("at_most_once", "disabled")

# RabbitMQ's ra_metrics of a quorum queue's member on this node, from this node's replica of
# its journal: a journal record is a Raft log entry (enqueues and settles), the leader
# epoch is the Raft term, offsets count entries as Raft's indexes do.
_RAFT: list[tuple[Kind, str, str, Callable[[int, ReplicaLog], float]]] = [
    (CounterMetricFamily, "raft_term_total", "Current Raft term number",
     lambda epoch, log: epoch),
    (GaugeMetricFamily, "raft_log_snapshot_index",
     "Raft log snapshot index: the entries released before it", lambda epoch, log: log.first),
    (GaugeMetricFamily, "raft_log_commit_index", "Raft log commit index",
     lambda epoch, log: log.committed),
    (GaugeMetricFamily, "raft_log_last_written_index", "Raft log last written index",
     lambda epoch, log: log.written),
]

_CHURN = (
    ("connections_opened", "Total number of connections opened"),
    ("connections_closed", "Total number of connections closed or terminated"),
    ("channels_opened", "Total number of channels opened"),
    ("channels_closed", "Total number of channels closed"),
    ("queues_declared", "Total number of queues declared"),
    ("queues_created", "Total number of queues created"),
    ("queues_deleted", "Total number of queues deleted"),
)


class RabbitFamilies:
    """One scrape's view of the broker: each of RabbitMQ's families that mainstem has."""

    def __init__(self, state: AdminState, scope: Scope) -> None:
        self._state = state
        self._scope = scope
        self._connections = state.connections.list()

    def families(self) -> dict[str, Callable[[], Iterator[Metric]]]:
        """RabbitMQ's family name -> its series, in RabbitMQ's order."""
        return {
            "connection_churn_metrics": self._churn,
            "node_coarse_metrics": self._node_coarse,
            "node_metrics": self._node_limits,
            **{name: self._queue_family(name)
               for name in ("queue_coarse_metrics", "queue_consumer_count", "queue_metrics")},
            "channel_metrics": self._channel_gauges,
            **{name: self._channel_counters(name) for name in _CHANNEL_COUNTERS},
            "connection_coarse_metrics": self._connection_bytes,
            "connection_metrics": self._connection_channels,
            "channel_queue_exchange_metrics":
                self._queue_family("channel_queue_exchange_metrics"),
            "ra_metrics": self._raft,
            "auth_attempt_metrics": self._auth_attempts,
        }

    def _family(self, kind: Kind, name: str, documentation: str, labels: list[str],
                rows: Iterable[Row]) -> Metric:
        return self._scope.family(kind, self._scope.prefix + name, documentation, labels, rows)

    def collect(self, names: Iterable[str]) -> Iterator[Metric]:
        """The named families (unknown names are skipped, as RabbitMQ does);
        queue_consumer_count is a part of queue_metrics, so not repeated beside it."""
        families = self.families()
        wanted = set(names)
        for name, collect in families.items():
            if name in wanted and not (name == "queue_consumer_count"
                                       and "queue_metrics" in wanted):
                yield from collect()

    # -- node ---------------------------------------------------------------------

    def _churn(self) -> Iterator[Metric]:
        counters = self._state.core.counters
        for name, documentation in _CHURN:
            yield CounterMetricFamily(f"{self._scope.prefix}{name}_total", documentation,
                                      value=getattr(counters, name))

    def _node_coarse(self) -> Iterator[Metric]:
        prefix = self._scope.prefix
        yield GaugeMetricFamily(f"{prefix}process_open_tcp_sockets", "Open TCP sockets",
                                value=len(self._connections))
        yield GaugeMetricFamily(f"{prefix}disk_space_available_bytes",
                                "Disk space available in bytes", value=self._usage().disk_free)
        yield CounterMetricFamily(  # the runtime's collector: Python's, not Erlang's
            f"{prefix}erlang_gc_runs_total", "Total number of garbage collector runs",
            value=sum(generation["collections"] for generation in gc.get_stats()))

    def _node_limits(self) -> Iterator[Metric]:
        prefix = self._scope.prefix
        yield GaugeMetricFamily(f"{prefix}process_max_tcp_sockets", "Open TCP sockets limit",
                                value=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        # the Overview's node table: since the broker started serving (there is no Erlang
        # VM; it is the node's uptime all the same)
        yield GaugeMetricFamily(f"{prefix}erlang_uptime_seconds", "Node uptime",
                                value=time.monotonic() - self._state.started)
        monitor = self._state.monitor
        if monitor is None:
            return
        marks = monitor.watermarks
        yield GaugeMetricFamily(
            f"{prefix}resident_memory_limit_bytes", "Memory high watermark in bytes",
            value=int(marks.memory_high_watermark * self._usage().memory_total))
        yield GaugeMetricFamily(f"{prefix}disk_space_available_limit_bytes",
                                "Free disk space low watermark in bytes",
                                value=marks.disk_free_limit)

    def _usage(self) -> ResourceUsage:
        monitor = self._state.monitor
        usage = monitor.usage if monitor is not None else None
        return usage if usage is not None else measure(self._state.core.data_dir)

    # -- queues -------------------------------------------------------------------

    @cached_property
    def queue_rows(self) -> list[_QueueRow]:
        """Every AMQP queue and stream, of the scope's vhosts (read once a scrape)."""
        core, activity = self._state.core, self._state.activity
        rows = [_QueueRow(host.name, queue.name, queue.kind, queue.ready_count,
                          queue.unacked_count, len(queue.consumers), queue.stats.publish,
                          queue.ready_bytes, queue.in_memory,
                          activity.consumer_capacity(("queue", host.name, queue.name)) or 0.0,
                          "follower" if isinstance(queue, RemoteQueue) else "leader")
                for host in core.queues.vhosts.values() for queue in host.queues.values()]
        subscribers = consumers_per_queue(self._connections)
        for stream in core.streams.list():
            partitions = stream.partitions
            stored = sum(p.committed_offset - p.first_offset for p in partitions)
            rows.append(_QueueRow(stream.namespace, stream.name, "stream", stored, 0,
                                  subscribers[stream.namespace, stream.name],
                                  sum(p.committed_offset for p in partitions),
                                  sum(p.size_bytes for p in partitions), 0, 0.0))
        vhosts = self._scope.vhosts
        return [row for row in rows if vhosts is None or row.vhost in vhosts]

    def _queue_family(self, family: str) -> Callable[[], Iterator[Metric]]:
        def collect() -> Iterator[Metric]:
            rows = self.queue_rows
            for kind, name, documentation, value_of in _QUEUE_FAMILIES[family]:
                if not self._scope.per_object:  # the sum alone: no labels to build
                    yield kind(self._scope.prefix + name, documentation,
                               value=sum(value_of(q) for q in rows))
                    continue
                yield self._family(kind, name, documentation, ["vhost", "queue"],
                                   [([q.vhost, q.name], value_of(q)) for q in rows])

        return collect

    def _raft(self) -> Iterator[Metric]:
        """Each quorum queue this node holds a replica of (in a cluster: elsewhere a quorum
        queue has no replicated journal, so no Raft series)."""
        members = self._quorum_members()
        if not members:  # not even a sum of nothing: no member, no Raft log
            return
        for kind, name, documentation, value_of in _RAFT:
            yield self._family(kind, name, documentation, ["vhost", "queue"],
                               [([vhost, queue], value_of(epoch, log))
                                for vhost, queue, epoch, log in members])

    def _quorum_members(self) -> list[tuple[str, str, int, ReplicaLog]]:
        core, vhosts = self._state.core, self._scope.vhosts
        if core.cluster is None:
            return []
        members = []
        for host in core.queues.vhosts.values():
            if vhosts is not None and host.name not in vhosts:
                continue
            for queue in host.queues.values():
                status = (core.cluster.quorum_status(host.name, queue.name)
                          if queue.settings.queue_type == "quorum" else None)
                if status is not None and status.log is not None:
                    members.append((host.name, queue.name, status.epoch, status.log))
        return members

    def queue_info(self) -> Metric:
        """RabbitMQ 4's rabbitmq_queue_info: 1 per queue, with its type and membership."""
        info = GaugeMetricFamily(f"{self._scope.prefix}queue_info", "A metric with a constant"
                                 " '1' value and labels that provide some queue details",
                                 labels=["vhost", "queue", "queue_type", "membership"])
        for row in self.queue_rows:
            queue_type = _QUEUE_TYPES.get(row.kind, row.kind)
            info.add_metric([row.vhost, row.name, queue_type, row.membership], 1)
        return info

    # -- connections and channels -------------------------------------------------

    def _connection_rows(self, value_of: Callable[[Connection], float]) -> list[Row]:
        return [([c.ctx.namespace or "", c.name, c.ctx.listener], value_of(c))
                for c in self._connections]

    def _connection_bytes(self) -> Iterator[Metric]:
        labels = ["vhost", "connection", "protocol"]
        described = {c.conn_id: c.describe() for c in self._connections}
        for name, key, documentation in (
                ("incoming", "recv_oct", "Total number of bytes received on a connection"),
                ("outgoing", "send_oct", "Total number of bytes sent on a connection")):
            yield self._family(
                CounterMetricFamily, f"connection_{name}_bytes_total", documentation, labels,
                self._connection_rows(_traffic(described, key)))

    def _connection_channels(self) -> Iterator[Metric]:
        yield self._family(GaugeMetricFamily, "connection_channels",
                           "Channels on a connection", ["vhost", "connection", "protocol"],
                           self._connection_rows(lambda c: len(c.ctx.channels)))

    def _channel_rows(self, value_of: ChannelValue) -> list[Row]:
        return [([c.ctx.namespace or "", f"{c.name} ({row['number']})"],
                 value_of(channel, row))
                for c in self._connections for channel in c.ctx.channels.values()
                for row in (channel.describe(),)]

    def _channel_gauges(self) -> Iterator[Metric]:
        for name, (key, documentation) in _CHANNEL_GAUGES.items():
            yield self._family(GaugeMetricFamily, name, documentation, ["vhost", "channel"],
                               self._channel_rows(_described(key)))

    def _channel_counters(self, family: str) -> Callable[[], Iterator[Metric]]:
        """Per channel, or (aggregated) the node's AMQP 0-9-1 totals, closed channels too."""
        def collect() -> Iterator[Metric]:
            totals = self.protocol_totals()[AMQP091]
            for name, field in _CHANNEL_COUNTERS[family].items():
                documentation = f"Total number of messages counted as {field} on channels"
                if not self._scope.per_object:
                    yield CounterMetricFamily(self._scope.prefix + name, documentation,
                                              value=getattr(totals, field))
                    continue
                yield self._family(
                    CounterMetricFamily, name, documentation, ["vhost", "channel"],
                    self._channel_rows(_counted(field)))

        return collect

    def protocol_totals(self) -> dict[str, MessageStats]:
        """Each protocol's counts: AMQP's closed channels plus its open ones, and the
        stream protocol's."""
        core = self._state.core
        amqp = MessageStats()
        amqp.add(core.closed_channel_stats)
        for connection in self._connections:
            for channel in connection.ctx.channels.values():
                amqp.add(channel.stats)
        return {AMQP091: amqp, STREAM: core.counters.stream}

    # -- what /metrics and /metrics/per-object add to the families ----------------

    def totals(self) -> Iterator[Metric]:
        """Object counts, build and identity."""
        core = self._state.core
        queues = len(core.streams.list()) + sum(
            len(host.queues) for host in core.queues.vhosts.values())
        for name, documentation, value in (
                ("connections", "Connections currently open", len(self._connections)),
                ("channels", "Channels currently open",
                 sum(len(c.ctx.channels) for c in self._connections)),
                ("consumers", "Consumers currently connected",
                 sum(len(c.ctx.consumers) for c in self._connections)),
                ("queues", "Queues available", queues)):
            yield GaugeMetricFamily(f"rabbitmq_{name}", documentation, value=value)
        build = GaugeMetricFamily(
            "rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version",
                    "prometheus_client_version", "python_version"])
        build.add_metric([__version__, __version__,
                          getattr(prometheus_client, "__version__", ""),
                          platform.python_version()], 1)
        yield build
        yield self.identity()

    def identity(self) -> Metric:
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info", "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"])
        cluster = self._state.identity.cluster_name
        identity.add_metric([NODE, cluster, cluster], 1)
        return identity

    def alarms(self) -> Iterator[Metric]:
        active = self._state.core.alarms.active
        yield GaugeMetricFamily(
            "rabbitmq_alarms_memory_used_watermark",
            "is set to 1 when the memory alarm is in effect", value=int(MEMORY in active))
        yield GaugeMetricFamily(
            "rabbitmq_alarms_free_disk_space_watermark",
            "is set to 1 when the disk alarm is in effect", value=int(DISK in active))

    def global_counters(self) -> Iterator[Metric]:
        """rabbitmq_global_* by protocol (RabbitMQ 3.10+)."""
        totals = self.protocol_totals()
        labels = ["protocol"]
        for name, value_of in _GLOBAL_COUNTERS.items():
            family = CounterMetricFamily(f"rabbitmq_global_messages_{name}_total",
                                         f"Total number of messages {name.replace('_', ' ')}",
                                         labels=labels)
            for label, counted in sorted(totals.items()):
                family.add_metric([label], 0 if (label, name) in _UNROUTED
                                  else value_of(counted))
            yield family
        yield from self._stream_errors()
        yield from self._dead_lettered()
        publishers = dict.fromkeys(_PROTOCOLS, 0)
        consumers = dict.fromkeys(_PROTOCOLS, 0)
        for connection in self._connections:
            protocol = _label(connection.ctx.listener)
            if protocol is None:
                continue
            consumers[protocol] += len(connection.ctx.consumers)
            stream_publishers = connection.ctx.stream_publishers
            publishers[protocol] += (len(stream_publishers()) if stream_publishers else 0) + sum(
                1 for channel in connection.ctx.channels.values() if channel.stats.publish)
        for name, counts in (("publishers", publishers), ("consumers", consumers)):
            gauge = GaugeMetricFamily(f"rabbitmq_global_{name}", f"Current number of {name}",
                                      labels=labels)
            for label, count in sorted(counts.items()):
                gauge.add_metric([label], count)
            yield gauge

    def _stream_errors(self) -> Iterator[Metric]:
        sent = self._state.core.counters.stream_errors
        for name, code in _STREAM_ERRORS.items():
            family = CounterMetricFamily(
                f"rabbitmq_global_stream_error_{name}_total",
                f"Total number of {name.replace('_', ' ')} errors sent to stream clients",
                labels=["protocol"])
            family.add_metric([STREAM], sent[code])
            yield family

    def _dead_lettered(self) -> Iterator[Metric]:
        counted = self._state.core.counters.dead_lettered
        labels = ["queue_type", "dead_letter_strategy"]
        for reason in _DEAD_LETTER_REASONS:
            family = CounterMetricFamily(
                f"rabbitmq_global_messages_dead_lettered_{reason}_total",
                f"Total number of messages dead-lettered due to {reason}", labels=labels)
            for kind in _DEAD_LETTERING_QUEUES:
                for strategy in _DEAD_LETTER_STRATEGIES:
                    family.add_metric([_QUEUE_TYPES[kind], strategy],
                                      counted[kind, reason, strategy])
            yield family

    def _auth_attempts(self) -> Iterator[Metric]:
        """rabbitmq_auth_attempts_*_total by protocol: logins on the listeners (AMQP 0-9-1
        and stream under RabbitMQ's labels, the others under their listener's name)."""
        by_protocol: dict[str, list[int]] = {protocol: [0, 0] for protocol in _PROTOCOLS}
        for (listener, succeeded), count in self._state.core.counters.logins.items():
            protocol = _label(listener) or listener
            by_protocol.setdefault(protocol, [0, 0])[succeeded] += count
        for name, documentation, value_of in (
                ("", "Total number of authentication attempts", sum),
                ("_succeeded", "Total number of successful authentication attempts",
                 lambda counts: counts[True]),
                ("_failed", "Total number of failed authentication attempts",
                 lambda counts: counts[False])):
            family = CounterMetricFamily(f"{self._scope.prefix}auth_attempts{name}_total",
                                         documentation, labels=["protocol"])
            for protocol, counts in sorted(by_protocol.items()):
                family.add_metric([protocol], value_of(counts))
            yield family


def _traffic(described: dict[int, dict[str, Any]], key: str
             ) -> Callable[[Connection], float]:
    """A connection's byte count from its describe() row."""
    return lambda connection: described[connection.conn_id][key]


def _described(key: str) -> ChannelValue:
    """A channel's value from its describe() row."""
    return lambda channel, row: row[key]


def _counted(field: str) -> ChannelValue:
    """A channel's count from its MessageStats."""
    return lambda channel, row: getattr(channel.stats, field)


def _label(listener: str) -> str | None:
    """RabbitMQ's protocol label of a listener ("amqp/tls" counts as amqp091)."""
    return {"amqp": AMQP091, "stream": STREAM}.get(listener.partition("/")[0])
