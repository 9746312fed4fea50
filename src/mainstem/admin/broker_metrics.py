"""mainstem's own Prometheus series, for what RabbitMQ has no name for: stream lag,
replication, tiering, binders, projections, segments, Iggy groups, alarms, publishes nacked
with their outcome unknown.

Series labelled by object (vhost, stream, binder, ...) follow the scrape's `Scope` as
RabbitMQ's do: one sample per object on /metrics/per-object, summed into one sample
without labels on /metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mainstem.admin.api import consumer_offsets, projection_rows
from mainstem.admin.rabbit_metrics import Kind, Row, Scope
from mainstem.admin.state import AdminState
from mainstem.broker.alarms import DISK, MEMORY
from mainstem.broker.segment_store import SegmentName

if TYPE_CHECKING:
    from mainstem.broker.streams import Stream


# Per stream: its family, name, help text and value.
_STREAM_SERIES: tuple[tuple[Kind, str, str, Callable[[Stream], int]], ...] = (
    (CounterMetricFamily, "mainstem_stream_messages_in", "Messages appended to the stream",
     lambda s: sum(p.committed_offset for p in s.partitions)),
    (CounterMetricFamily, "mainstem_stream_bytes_in", "Bytes appended to the stream's log",
     lambda s: sum(p.committed_byte for p in s.partitions)),
    (GaugeMetricFamily, "mainstem_stream_size_bytes", "Size of the stream on disk",
     lambda s: sum(p.size_bytes for p in s.partitions)),
    (GaugeMetricFamily, "mainstem_stream_segments", "Segment files of the stream",
     lambda s: sum(p.segment_count for p in s.partitions)),
)
# Per stream, with a tier only.
_TIER_STREAM_SERIES: tuple[tuple[str, str, Callable[[Stream], int]], ...] = (
    ("mainstem_tier_local_bytes", "Bytes of the stream on local disk",
     lambda s: sum(p.size_bytes - p.tiered_bytes for p in s.partitions)),
    ("mainstem_tier_tiered_bytes", "Bytes of the stream in the tier",
     lambda s: sum(p.tiered_bytes for p in s.partitions)),
)


class BrokerCollector:
    """mainstem's own series: streams, lag, binders, projections, Iggy consumer groups,
    segments, alarms."""

    def __init__(self, state: AdminState, scope: Scope) -> None:
        self._state = state
        self._scope = scope

    def describe(self) -> list[Metric]:
        return []  # computed per scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._connections()
        yield from self._streams()
        yield from self._replication()
        yield CounterMetricFamily(
            "mainstem_amqp_nacks_outcome_unknown",
            "Confirming publishes to durable queues nacked after their journal write was "
            "made (its leader stepped down before it committed, or an fsync failed): "
            "they may be stored. Refusals before the write are not counted",
            value=self._state.core.counters.nacks_outcome_unknown)
        yield CounterMetricFamily(
            "mainstem_chunks_damaged",
            "Stream chunks found failing their CRCs (on local disk or fetched from the tier), "
            "each counted once: none is served, each reader gets its protocol's error",
            value=self._state.core.streams.damage.found)
        yield CounterMetricFamily(
            "mainstem_chunks_repaired",
            "Damaged chunks replaced by an in-sync replica's intact copy",
            value=self._state.core.counters.chunks_repaired)
        yield from self._tiering()
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
        streams = core.streams.list()
        labels = ["vhost", "stream"]
        for kind, name, documentation, value_of in _STREAM_SERIES:
            yield self._scope.family(kind, name, documentation, labels, [
                ([s.namespace, s.name], value_of(s)) for s in streams])
        yield self._scope.family(
            GaugeMetricFamily, "mainstem_consumer_lag",
            "Committed messages after a consumer's stored offset",
            ["vhost", "stream", "partition", "reference"],
            [([s.namespace, s.name, str(row["partition"]), row["reference"]], row["lag"])
             for s in streams for row in consumer_offsets(core, s)])
        yield from self._deliveries()

    def _deliveries(self) -> Iterator[Metric]:
        """Only for streams and queues that still exist: a deleted one's series go."""
        core = self._state.core
        live = {(s.namespace, s.name) for s in core.streams.list()} | {
            (host.name, name) for host in core.queues.vhosts.values() for name in host.queues}
        delivered = [([namespace, name], counts)
                     for (namespace, name), counts in sorted(core.delivery_stats.snapshot().items())
                     if (namespace, name) in live]
        labels = ["vhost", "queue"]
        yield self._scope.family(CounterMetricFamily, "mainstem_messages_out",
                                 "Messages delivered to consumers", labels,
                                 [(key, count) for key, (count, _) in delivered])
        yield self._scope.family(CounterMetricFamily, "mainstem_bytes_out",
                                 "Message bytes delivered to consumers", labels,
                                 [(key, size) for key, (_, size) in delivered])

    def _replication(self) -> Iterator[Metric]:
        """In a cluster, on each partition's leader: how many records each follower
        lacks, and how many replicas are in sync."""
        cluster = self._state.core.cluster
        if cluster is None:
            return
        lag: list[Row] = []
        in_sync: list[Row] = []
        for stream in self._state.core.streams.list():
            for index in range(len(stream.partitions)):
                status = cluster.status(stream.namespace, stream.name, index)
                if status is None or status.leader != cluster.node_name:
                    continue
                key = [stream.namespace, stream.name, str(index)]
                in_sync.append((key, len(status.in_sync)))
                lag.extend(([*key, replica], behind)
                           for replica, behind in sorted(status.lag.items()))
        labels = ["vhost", "stream", "partition"]
        yield self._scope.family(GaugeMetricFamily, "mainstem_replication_lag",
                                 "Records a follower lacks of what its leader wrote",
                                 [*labels, "replica"], lag)
        yield self._scope.family(GaugeMetricFamily, "mainstem_replicas_in_sync",
                                 "Replicas in a led partition's in-sync set", labels, in_sync)

    def _tiering(self) -> Iterator[Metric]:
        """With a tier: each stream's bytes local and tiered, and the uploader's counters
        (this node's: only a partition's leader uploads)."""
        tiering = self._state.core.tiering
        if tiering is None:
            return
        streams = self._state.core.streams.list()
        for name, documentation, value_of in _TIER_STREAM_SERIES:
            yield self._scope.family(GaugeMetricFamily, name, documentation, ["vhost", "stream"],
                                     [([s.namespace, s.name], value_of(s)) for s in streams])
        stats = tiering.stats
        yield CounterMetricFamily("mainstem_tier_uploads",
                                  "Segments uploaded, verified and recorded", value=stats.uploads)
        yield CounterMetricFamily("mainstem_tier_uploaded_bytes",
                                  "Bytes of segments and indexes uploaded",
                                  value=stats.uploaded_bytes)
        yield GaugeMetricFamily("mainstem_tier_upload_lag_bytes",
                                "Bytes of local segments past their bounds, waiting for upload",
                                value=tiering.upload_lag_bytes())
        yield CounterMetricFamily("mainstem_tier_errors", "Failed tier uploads and deletes",
                                  value=stats.errors)
        yield GaugeMetricFamily("mainstem_tier_deletes_pending",
                                "Tier objects waiting to be deleted",
                                value=stats.deletes_pending)
        yield CounterMetricFamily("mainstem_tier_deleted", "Tier objects deleted (each logged)",
                                  value=stats.deleted)
        yield CounterMetricFamily("mainstem_tier_fenced",
                                  "Tier records refused: another node led the partition",
                                  value=stats.fenced)
        yield from self._tables()

    def _tables(self) -> Iterator[Metric]:
        """Streams written as tables: each one's lag, and the writer's counters."""
        tables = self._state.core.tables
        if tables is None:
            return
        yield self._scope.family(
            GaugeMetricFamily, "mainstem_table_lag_records",
            "Records committed in the stream and not yet in its table", ["vhost", "stream"],
            [([s.namespace, s.name], tables.lag(s)) for s in tables.table_streams()])
        summaries = [([s.namespace, s.name], tables.summary(s)) for s in tables.table_streams()]
        for name, field, text in (
                ("mainstem_table_data_files", "files", "Data files the table holds"),
                ("mainstem_table_data_bytes", "bytes", "Bytes of the data files the table holds"),
                ("mainstem_table_data_rows", "rows", "Rows the table holds"),
                ("mainstem_table_stream_errors", "errors",
                 "Failed rounds of the table on this node")):
            yield self._scope.family(GaugeMetricFamily, name, text, ["vhost", "stream"],
                                     [(labels, row[field]) for labels, row in summaries])
        stats = tables.stats
        yield CounterMetricFamily("mainstem_table_expired", "Table data files expired by "
                                  "retention or a rebuild", value=stats.expired)
        yield CounterMetricFamily("mainstem_table_files", "Table data files committed",
                                  value=stats.files)
        yield CounterMetricFamily("mainstem_table_rows", "Rows written to tables",
                                  value=stats.rows)
        yield CounterMetricFamily("mainstem_table_bytes", "Bytes of table data files",
                                  value=stats.bytes)
        yield CounterMetricFamily("mainstem_table_errors", "Failed table write rounds",
                                  value=stats.errors)

    def _binders(self) -> Iterator[Metric]:
        core = self._state.core
        yield self._scope.family(
            GaugeMetricFamily, "mainstem_binder_documents", "Documents in the binder",
            ["vhost", "binder"],
            [([namespace, binder], count) for namespace, binder, count in core.binders.counts()])
        yield self._scope.family(
            GaugeMetricFamily, "mainstem_projection_lag",
            "Channel events the projection has not folded yet", ["vhost", "projection"],
            [([row["vhost"], row["name"]], row["lag"]) for row in projection_rows(core)])

    def _iggy_and_segments(self) -> Iterator[Metric]:
        core = self._state.core
        members: list[Row] = []
        written: list[Row] = []
        start: list[Row] = []
        for stream in core.streams.list():
            members.extend(([stream.namespace, stream.name, group.name], len(group.members))
                           for group in core.iggy.list_groups(stream.namespace, stream.name))
            for number in range(len(stream.partitions)):
                name = SegmentName(stream.namespace, stream.name, number)
                key = [stream.namespace, stream.name, str(name)]
                written.append((key, core.segments.write_offset(name)))
                start.append((key, core.segments.start_offset(name)))
        yield self._scope.family(GaugeMetricFamily, "mainstem_iggy_consumer_group_members",
                                 "Clients in an Iggy consumer group",
                                 ["vhost", "topic", "group"], members)
        segment_labels = ["vhost", "stream", "segment"]
        yield self._scope.family(GaugeMetricFamily, "mainstem_segment_write_offset_bytes",
                                 "Byte offset after a segment's last event", segment_labels,
                                 written)
        yield self._scope.family(GaugeMetricFamily, "mainstem_segment_start_offset_bytes",
                                 "Byte offset a segment is truncated at", segment_labels, start)

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
