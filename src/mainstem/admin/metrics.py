"""Prometheus metrics at /metrics, read from the broker's own state at scrape time.

Counters that the log already keeps (committed offsets and bytes per partition) are read
when Prometheus scrapes, so the publish path pays nothing for them; only the fsync
latency histogram is observed as it happens, from the log's group commit.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mainstem.admin.api import AdminState, consumer_offsets, projection_rows
from mainstem.broker.alarms import DISK, MEMORY

_FSYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, state: AdminState) -> None:
        self._state = state
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_BrokerCollector(state))
        self.fsync_seconds = Histogram(
            "mainstem_fsync_seconds", "Duration of one fsync round of a partition's log",
            buckets=_FSYNC_BUCKETS, registry=self.registry,
        )

    async def handle(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def lifetime(self, app: web.Application):
        unobserve = self._state.core.fsync_timings.observe(self.fsync_seconds.observe)
        yield
        unobserve()


class _BrokerCollector:
    def __init__(self, state: AdminState) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # computed per scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._connections()
        yield from self._streams()
        yield from self._binders()
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
        labels = ["vhost", "queue"]
        messages = CounterMetricFamily("mainstem_messages_out",
                                       "Messages delivered to consumers", labels=labels)
        sent = CounterMetricFamily("mainstem_bytes_out",
                                   "Message bytes delivered to consumers", labels=labels)
        for (namespace, name), (count, size) in sorted(
                self._state.core.delivery_stats.snapshot().items()):
            messages.add_metric([namespace, name], count)
            sent.add_metric([namespace, name], size)
        yield from (messages, sent)

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

    def _alarms(self) -> Iterator[Metric]:
        active = self._state.core.alarms.active
        alarm = GaugeMetricFamily("mainstem_alarm", "1 while a resource alarm holds publishers",
                                  labels=["resource"])
        for resource in (MEMORY, DISK):
            alarm.add_metric([resource], int(resource in active))
        yield alarm
        monitor = self._state.monitor
        if monitor is not None and monitor.usage is not None:
            yield GaugeMetricFamily("mainstem_memory_used_bytes", "Resident memory",
                                    value=monitor.usage.memory_used)
            yield GaugeMetricFamily("mainstem_disk_free_bytes", "Free disk under the data dir",
                                    value=monitor.usage.disk_free)
