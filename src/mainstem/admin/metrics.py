"""Prometheus metrics: RabbitMQ's names at /metrics and /metrics/per-object, beside mainstem's.

Everything is read from the broker's own state when Prometheus scrapes: queue depths,
connections and channels from the live objects (a deleted queue or a closed connection
simply is not there any more), message counts from the plain integers the protocol
handlers keep (`mainstem.broker.counters`). Only the fsync latency histogram is observed
as it happens, from the log's group commit.

As in RabbitMQ's plugin, /metrics sums every per-object series into one sample without
labels, and /metrics/per-object gives one sample per queue, connection and channel. The
`rabbitmq_channel_*` counters of /metrics also count channels that have closed, so they
never go backwards. mainstem's own series (`mainstem_*`) cover what RabbitMQ has no name
for: stream lag, binders, projections, segments, Iggy.
"""

from __future__ import annotations

import platform
import resource
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mainstem import __version__
from mainstem.admin.api import consumer_offsets, projection_rows
from mainstem.admin.state import AdminState
from mainstem.broker.alarms import DISK, MEMORY, measure
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.segment_store import SegmentName
from mainstem.protocols.base import ChannelView
from mainstem.protocols.identity import NODE
from mainstem.protocols.registry import Connection, consumers_per_queue

_FSYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
AMQP091, STREAM = "amqp091", "stream"  # RabbitMQ's values of the `protocol` label
_PROTOCOLS = (AMQP091, STREAM)  # RabbitMQ exports its global counters for each, even at 0
Row = tuple[list[str], float]
# A channel's sample, from the channel and its describe() row.
ChannelValue = Callable[[ChannelView, dict[str, Any]], int]

# rabbitmq_channel_<name>_total -> the MessageStats field it reads
_CHANNEL_COUNTERS = {
    "messages_published": "publish",
    "messages_confirmed": "confirm",
    "messages_unroutable_dropped": "drop_unroutable",
    "messages_unroutable_returned": "return_unroutable",
    "messages_delivered": "deliver_no_ack",
    "messages_delivered_ack": "deliver",
    "get": "get_no_ack",
    "get_ack": "get",
    "get_empty": "get_empty",
    "messages_redelivered": "redeliver",
    "messages_acked": "ack",
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


class Metrics:
    def __init__(self, state: AdminState) -> None:
        self._state = state
        self.fsync_seconds = Histogram(
            "mainstem_fsync_seconds", "Duration of one fsync round of a partition's log",
            buckets=_FSYNC_BUCKETS, registry=None,
        )
        self.registry = self._registry(per_object=False)
        self.per_object_registry = self._registry(per_object=True)

    def _registry(self, per_object: bool) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_RabbitCollector(self._state, per_object))
        registry.register(_BrokerCollector(self._state))
        registry.register(self.fsync_seconds)
        ProcessCollector(namespace="rabbitmq", registry=registry)
        PlatformCollector(registry=registry)
        return registry

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self.handle)
        app.router.add_get("/metrics/per-object", self.handle_per_object)

    async def handle(self, request: web.Request) -> web.Response:
        return _exposition(self.registry)

    async def handle_per_object(self, request: web.Request) -> web.Response:
        return _exposition(self.per_object_registry)

    async def lifetime(self, app: web.Application) -> AsyncIterator[None]:
        unobserve = self._state.core.fsync_timings.observe(self.fsync_seconds.observe)
        yield
        unobserve()


def _exposition(registry: CollectorRegistry) -> web.Response:
    return web.Response(body=generate_latest(registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


def _family(kind: type[GaugeMetricFamily | CounterMetricFamily], name: str,
            documentation: str, labels: list[str], rows: Iterable[Row],
            per_object: bool) -> Metric:
    """One sample per object, or (aggregated) their sum without labels."""
    if not per_object:
        return kind(name, documentation, value=sum(value for _, value in rows))
    family = kind(name, documentation, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


@dataclass(frozen=True, slots=True)
class _QueueRow:
    vhost: str
    name: str
    ready: int
    unacked: int
    consumers: int
    published: int
    ready_bytes: int


# Per series: its family, name, help text and each queue's value.
_QUEUE_SERIES: tuple[tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str,
                           Callable[[_QueueRow], int]], ...] = (
    (GaugeMetricFamily, "rabbitmq_queue_messages_ready",
     "Messages ready to be delivered to consumers", lambda q: q.ready),
    (GaugeMetricFamily, "rabbitmq_queue_messages_unacked",
     "Messages delivered to consumers but not yet acknowledged", lambda q: q.unacked),
    (GaugeMetricFamily, "rabbitmq_queue_messages",
     "Sum of ready and unacknowledged messages", lambda q: q.ready + q.unacked),
    (GaugeMetricFamily, "rabbitmq_queue_messages_ready_bytes",
     "Size in bytes of ready messages", lambda q: q.ready_bytes),
    (GaugeMetricFamily, "rabbitmq_queue_consumers",
     "Consumers on a queue", lambda q: q.consumers),
    (CounterMetricFamily, "rabbitmq_queue_messages_published_total",
     "Total number of messages published to queues", lambda q: q.published),
)


class _RabbitCollector:
    """The series of RabbitMQ's Prometheus plugin, as its Grafana dashboards query them."""

    def __init__(self, state: AdminState, per_object: bool) -> None:
        self._state = state
        self._per_object = per_object

    def describe(self) -> list[Metric]:
        return []  # computed per scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        connections = self._state.connections.list()
        yield from self._node()
        yield from self._totals(connections)
        yield from self._queues(connections)
        yield from self._connections(connections)
        yield from self._channels(connections)
        yield from self._global(connections)

    def _node(self) -> Iterator[Metric]:
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info", "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"])
        cluster = self._state.identity.cluster_name
        identity.add_metric([NODE, cluster, cluster], 1)
        build = GaugeMetricFamily(
            "rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version",
                    "prometheus_client_version", "python_version"])
        build.add_metric([__version__, __version__, _client_version(),
                          platform.python_version()], 1)
        yield from (identity, build)
        monitor = self._state.monitor
        usage = monitor.usage if monitor is not None else None
        if usage is None:
            usage = measure(self._state.core.data_dir)
        if monitor is not None:
            marks = monitor.watermarks
            yield GaugeMetricFamily(
                "rabbitmq_resident_memory_limit_bytes",
                "Memory high watermark in bytes",
                value=int(marks.memory_high_watermark * usage.memory_total))
            yield GaugeMetricFamily(
                "rabbitmq_disk_space_available_limit_bytes",
                "Free disk space low watermark in bytes", value=marks.disk_free_limit)
        yield GaugeMetricFamily("rabbitmq_disk_space_available_bytes",
                                "Disk space available in bytes", value=usage.disk_free)
        active = self._state.core.alarms.active
        yield GaugeMetricFamily(
            "rabbitmq_alarms_memory_used_watermark",
            "is set to 1 when the memory alarm is in effect", value=int(MEMORY in active))
        yield GaugeMetricFamily(
            "rabbitmq_alarms_free_disk_space_watermark",
            "is set to 1 when the disk alarm is in effect", value=int(DISK in active))
        yield GaugeMetricFamily("rabbitmq_process_max_tcp_sockets",
                                "Open TCP sockets limit", value=_open_files_limit())

    def _totals(self, connections: list[Connection]) -> Iterator[Metric]:
        counters = self._state.core.counters
        channels = sum(len(c.ctx.channels) for c in connections)
        consumers = sum(len(c.ctx.consumers) for c in connections)
        queues = len(self._state.core.streams.list()) + sum(
            len(host.queues) for host in self._state.core.queues.vhosts.values())
        for name, documentation, value in (
                ("connections", "Connections currently open", len(connections)),
                ("channels", "Channels currently open", channels),
                ("consumers", "Consumers currently connected", consumers),
                ("queues", "Queues available", queues),
                ("process_open_tcp_sockets", "Open TCP sockets", len(connections))):
            yield GaugeMetricFamily(f"rabbitmq_{name}", documentation, value=value)
        for name, documentation, value in (
                ("connections_opened", "Total number of connections opened",
                 counters.connections_opened),
                ("connections_closed", "Total number of connections closed or terminated",
                 counters.connections_closed),
                ("channels_opened", "Total number of channels opened",
                 counters.channels_opened),
                ("channels_closed", "Total number of channels closed",
                 counters.channels_closed),
                ("queues_declared", "Total number of queues declared",
                 counters.queues_declared),
                ("queues_created", "Total number of queues created",
                 counters.queues_created),
                ("queues_deleted", "Total number of queues deleted",
                 counters.queues_deleted)):
            yield CounterMetricFamily(f"rabbitmq_{name}_total", documentation, value=value)

    def _queue_rows(self, connections: list[Connection]) -> list[_QueueRow]:
        core = self._state.core
        rows = [_QueueRow(host.name, queue.name, queue.ready_count, queue.unacked_count,
                          len(queue.consumers), queue.stats.publish, queue.ready_bytes)
                for host in core.queues.vhosts.values() for queue in host.queues.values()]
        subscribers = consumers_per_queue(connections)
        for stream in core.streams.list():
            partitions = stream.partitions
            stored = sum(p.committed_offset - p.first_offset for p in partitions)
            rows.append(_QueueRow(stream.namespace, stream.name, stored, 0,
                                  subscribers[stream.namespace, stream.name],
                                  sum(p.committed_offset for p in partitions),
                                  sum(p.size_bytes for p in partitions)))
        return rows

    def _queues(self, connections: list[Connection]) -> Iterator[Metric]:
        rows = self._queue_rows(connections)
        labels = ["vhost", "queue"]
        for kind, name, documentation, value_of in _QUEUE_SERIES:
            yield _family(kind, name, documentation, labels,
                          [([q.vhost, q.name], value_of(q)) for q in rows], self._per_object)

    def _connections(self, connections: list[Connection]) -> Iterator[Metric]:
        described = [(c, c.describe()) for c in connections]
        labels = ["vhost", "connection", "protocol"]

        def rows(value_of: Callable[[Connection, dict[str, Any]], int]) -> list[Row]:
            return [([c.ctx.namespace or "", c.name, c.ctx.listener], value_of(c, row))
                    for c, row in described]

        yield _family(CounterMetricFamily, "rabbitmq_connection_incoming_bytes_total",
                      "Total number of bytes received on a connection", labels,
                      rows(lambda c, row: row["recv_oct"]), self._per_object)
        yield _family(CounterMetricFamily, "rabbitmq_connection_outgoing_bytes_total",
                      "Total number of bytes sent on a connection", labels,
                      rows(lambda c, row: row["send_oct"]), self._per_object)
        yield _family(GaugeMetricFamily, "rabbitmq_connection_channels",
                      "Channels on a connection", labels,
                      rows(lambda c, row: len(c.ctx.channels)), self._per_object)

    def _channels(self, connections: list[Connection]) -> Iterator[Metric]:
        """Per channel, or (aggregated) the node's AMQP 0-9-1 totals, closed channels too."""
        live = [(c, channel, channel.describe()) for c in connections
                for channel in c.ctx.channels.values()]
        labels = ["vhost", "channel"]

        def rows(value_of: ChannelValue) -> list[Row]:
            return [([c.ctx.namespace or "", f"{c.name} ({row['number']})"],
                     value_of(channel, row)) for c, channel, row in live]

        for name, key, documentation in (
                ("consumers", "consumer_count", "Consumers on a channel"),
                ("messages_unacked", "messages_unacknowledged",
                 "Delivered but not yet acknowledged messages"),
                ("messages_unconfirmed", "messages_unconfirmed",
                 "Published but not yet confirmed messages")):
            yield _family(GaugeMetricFamily, f"rabbitmq_channel_{name}", documentation, labels,
                          rows(_described(key)), self._per_object)
        totals = self._protocol_totals(connections)[AMQP091]
        for suffix, field in _CHANNEL_COUNTERS.items():
            name = f"rabbitmq_channel_{suffix}_total"
            documentation = f"Total number of messages counted as {field} on channels"
            if self._per_object:
                yield _family(CounterMetricFamily, name, documentation, labels,
                              rows(_counted(field)), True)
            else:
                yield CounterMetricFamily(name, documentation, value=getattr(totals, field))

    def _protocol_totals(self, connections: list[Connection]) -> dict[str, MessageStats]:
        """Each protocol's counts: AMQP's closed channels plus its open ones, and the
        stream protocol's."""
        core = self._state.core
        amqp = MessageStats()
        amqp.add(core.closed_channel_stats)
        for connection in connections:
            for channel in connection.ctx.channels.values():
                amqp.add(channel.stats)
        return {AMQP091: amqp, STREAM: core.counters.stream}

    def _global(self, connections: list[Connection]) -> Iterator[Metric]:
        totals = self._protocol_totals(connections)
        labels = ["protocol"]
        for name, value_of in _GLOBAL_COUNTERS.items():
            family = CounterMetricFamily(f"rabbitmq_global_messages_{name}_total",
                                         f"Total number of messages {name.replace('_', ' ')}",
                                         labels=labels)
            for label, counted in sorted(totals.items()):
                family.add_metric([label], value_of(counted))
            yield family
        publishers = dict.fromkeys(_PROTOCOLS, 0)
        consumers = dict.fromkeys(_PROTOCOLS, 0)
        for connection in connections:
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


def _described(key: str) -> ChannelValue:
    """A channel's value from its describe() row."""
    return lambda channel, row: row[key]


def _counted(field: str) -> ChannelValue:
    """A channel's count from its MessageStats."""
    return lambda channel, row: getattr(channel.stats, field)


def _label(listener: str) -> str | None:
    """RabbitMQ's protocol label of a listener ("amqp/tls" counts as amqp091)."""
    return {"amqp": AMQP091, "stream": STREAM}.get(listener.partition("/")[0])


def _client_version() -> str:
    return getattr(prometheus_client, "__version__", "")


def _open_files_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class _BrokerCollector:
    """mainstem's own series: streams, lag, binders, projections, Iggy consumer groups,
    segments, alarms."""

    def __init__(self, state: AdminState) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # computed per scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._connections()
        yield from self._streams()
        yield from self._replication()
        yield from self._binders()
        yield from self._iggy_and_segments()
        yield from self._alarms()

    def _connections(self) -> Iterator[Metric]:
        registry = self._state.connections
        count = GaugeMetricFamily("mainstem_connections", "Open client connections",
                                  labels=["protocol"])
        for protocol, number in sorted(registry.per_protocol().items()):
            count.add_metric([protocol], number)
        yield count
        traffic = {"in": GaugeMetricFamily(
            "mainstem_connection_received_bytes", "Bytes received by open connections",
            labels=["protocol"]), "out": GaugeMetricFamily(
            "mainstem_connection_sent_bytes", "Bytes sent by open connections",
            labels=["protocol"])}
        totals: dict[tuple[str, str], int] = {}
        for connection in registry.list():
            row = connection.describe()
            for direction, key in (("in", "recv_oct"), ("out", "send_oct")):
                slot = (direction, connection.ctx.listener)
                totals[slot] = totals.get(slot, 0) + int(row[key])
        for (direction, protocol), value in sorted(totals.items()):
            traffic[direction].add_metric([protocol], value)
        yield from traffic.values()

    def _streams(self) -> Iterator[Metric]:
        core = self._state.core
        labels = ["vhost", "stream"]
        messages = CounterMetricFamily("mainstem_stream_messages_in",
                                       "Messages appended to the stream", labels=labels)
        written = CounterMetricFamily("mainstem_stream_bytes_in",
                                      "Bytes appended to the stream's log", labels=labels)
        size = GaugeMetricFamily("mainstem_stream_size_bytes", "Size of the stream on disk",
                                 labels=labels)
        segments = GaugeMetricFamily("mainstem_stream_segments", "Segment files of the stream",
                                     labels=labels)
        lag = GaugeMetricFamily("mainstem_consumer_lag",
                                "Committed messages after a consumer's stored offset",
                                labels=["vhost", "stream", "partition", "reference"])
        for stream in core.streams.list():
            key = [stream.namespace, stream.name]
            messages.add_metric(key, sum(p.committed_offset for p in stream.partitions))
            written.add_metric(key, sum(p.committed_byte for p in stream.partitions))
            size.add_metric(key, sum(p.size_bytes for p in stream.partitions))
            segments.add_metric(key, sum(p.segment_count for p in stream.partitions))
            for row in consumer_offsets(core, stream):
                lag.add_metric([*key, str(row["partition"]), row["reference"]], row["lag"])
        yield from (messages, written, size, segments, lag)
        yield from self._deliveries()

    def _deliveries(self) -> Iterator[Metric]:
        """Only for streams and queues that still exist: a deleted one's series go."""
        core = self._state.core
        live = {(s.namespace, s.name) for s in core.streams.list()} | {
            (host.name, name) for host in core.queues.vhosts.values() for name in host.queues}
        labels = ["vhost", "queue"]
        messages = CounterMetricFamily("mainstem_messages_out",
                                       "Messages delivered to consumers", labels=labels)
        sent = CounterMetricFamily("mainstem_bytes_out",
                                   "Message bytes delivered to consumers", labels=labels)
        for (namespace, name), (count, size) in sorted(core.delivery_stats.snapshot().items()):
            if (namespace, name) in live:
                messages.add_metric([namespace, name], count)
                sent.add_metric([namespace, name], size)
        yield from (messages, sent)

    def _replication(self) -> Iterator[Metric]:
        """In a cluster, on each partition's leader: how many records each follower
        lacks, and how many replicas are in sync."""
        cluster = self._state.core.cluster
        if cluster is None:
            return
        labels = ["vhost", "stream", "partition"]
        lag = GaugeMetricFamily("mainstem_replication_lag",
                                "Records a follower lacks of what its leader wrote",
                                labels=[*labels, "replica"])
        in_sync = GaugeMetricFamily("mainstem_replicas_in_sync",
                                    "Replicas in a led partition's in-sync set", labels=labels)
        for stream in self._state.core.streams.list():
            for index in range(len(stream.partitions)):
                status = cluster.status(stream.namespace, stream.name, index)
                if status is None or status.leader != cluster.node_name:
                    continue
                key = [stream.namespace, stream.name, str(index)]
                in_sync.add_metric(key, len(status.in_sync))
                for replica, behind in sorted(status.lag.items()):
                    lag.add_metric([*key, replica], behind)
        yield from (lag, in_sync)

    def _binders(self) -> Iterator[Metric]:
        core = self._state.core
        documents = GaugeMetricFamily("mainstem_binder_documents", "Documents in the binder",
                                      labels=["vhost", "binder"])
        for namespace, binder, count in core.binders.counts():
            documents.add_metric([namespace, binder], count)
        lag = GaugeMetricFamily("mainstem_projection_lag",
                                "Channel events the projection has not folded yet",
                                labels=["vhost", "projection"])
        for row in projection_rows(core):
            lag.add_metric([row["vhost"], row["name"]], row["lag"])
        yield from (documents, lag)

    def _iggy_and_segments(self) -> Iterator[Metric]:
        core = self._state.core
        members = GaugeMetricFamily("mainstem_iggy_consumer_group_members",
                                    "Clients in an Iggy consumer group",
                                    labels=["vhost", "topic", "group"])
        segment_labels = ["vhost", "stream", "segment"]
        written = GaugeMetricFamily("mainstem_segment_write_offset_bytes",
                                    "Byte offset after a segment's last event",
                                    labels=segment_labels)
        start = GaugeMetricFamily("mainstem_segment_start_offset_bytes",
                                  "Byte offset a segment is truncated at", labels=segment_labels)
        for stream in core.streams.list():
            for group in core.iggy.list_groups(stream.namespace, stream.name):
                members.add_metric([stream.namespace, stream.name, group.name],
                                   len(group.members))
            for number in range(len(stream.partitions)):
                name = SegmentName(stream.namespace, stream.name, number)
                key = [stream.namespace, stream.name, str(name)]
                written.add_metric(key, core.segments.write_offset(name))
                start.add_metric(key, core.segments.start_offset(name))
        yield from (members, written, start)

    def _alarms(self) -> Iterator[Metric]:
        active = self._state.core.alarms.active
        alarm = GaugeMetricFamily("mainstem_alarm", "1 while a resource alarm holds publishers",
                                  labels=["resource"])
        for resource_name in (MEMORY, DISK):
            alarm.add_metric([resource_name], int(resource_name in active))
        yield alarm
        monitor = self._state.monitor
        if monitor is not None and monitor.usage is not None:
            yield GaugeMetricFamily("mainstem_memory_used_bytes", "Resident memory",
                                    value=monitor.usage.memory_used)
            yield GaugeMetricFamily("mainstem_disk_free_bytes", "Free disk under the data dir",
                                    value=monitor.usage.disk_free)
