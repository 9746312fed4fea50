"""Prometheus scrape endpoints, as RabbitMQ's plugin serves them on its port (15692):

- /metrics: every series aggregated (one sample without labels per series), unless
  `prometheus.return_per_object_metrics`; with object counts, build, identity, alarms,
  the process and mainstem's own series;
- /metrics/per-object: the same, one sample per queue, connection, channel, stream ...;
- /metrics/detailed?family=...&vhost=...: only the RabbitMQ families asked for, one sample
  per object, under `rabbitmq_detailed_`; `vhost` narrows the queue families.

Only the fsync latency histogram is observed as it happens, from the log's group commit;
everything else is read when Prometheus scrapes (`rabbit_metrics`, `broker_metrics`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mainstem.admin import scope as access
from mainstem.admin.broker_metrics import BrokerCollector
from mainstem.admin.rabbit_metrics import DETAILED_PREFIX, RabbitFamilies, Scope
from mainstem.admin.state import AdminState

_FSYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PATHS = ("/metrics", "/metrics/per-object", "/metrics/detailed")
# /metrics/detailed adds rabbitmq_detailed_queue_info when one of these is asked for
_QUEUE_FAMILIES = {"queue_coarse_metrics", "queue_consumer_count", "queue_metrics"}


class _Collector:
    """A prometheus_client collector computed by `collect` at each scrape."""

    def __init__(self, collect: Callable[[], Iterator[Metric]]) -> None:
        self.collect = collect

    def describe(self) -> list[Metric]:
        return []  # computed per scrape: nothing to check at registration


class Metrics:
    def __init__(self, state: AdminState, return_per_object_metrics: bool = False) -> None:
        self._state = state
        self.fsync_seconds = Histogram(
            "mainstem_fsync_seconds", "Duration of one fsync round of a partition's log",
            buckets=_FSYNC_BUCKETS, registry=None,
        )
        self.registry = self._registry(Scope(per_object=return_per_object_metrics))
        self.per_object_registry = self._registry(Scope(per_object=True))

    def _registry(self, scope: Scope) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_Collector(lambda: self._whole(scope)))
        registry.register(self.fsync_seconds)
        ProcessCollector(namespace="rabbitmq", registry=registry)
        PlatformCollector(registry=registry)
        return registry

    def _whole(self, scope: Scope) -> Iterator[Metric]:
        """What /metrics and /metrics/per-object serve, but the process's series."""
        rabbit = RabbitFamilies(self._state, scope)
        yield from rabbit.collect(rabbit.families())
        yield from rabbit.totals()
        if scope.per_object:
            yield rabbit.queue_info()
        yield from rabbit.alarms()
        yield from rabbit.global_counters()
        yield from self._io_sync()
        yield from BrokerCollector(self._state, scope).collect()

    def _io_sync(self) -> Iterator[Metric]:
        """RabbitMQ's rabbitmq_io_sync_* from the fsync rounds of every log and journal
        (the histogram's count and sum): the only I/O mainstem times."""
        totals = {sample.name: sample.value for metric in self.fsync_seconds.collect()
                  for sample in metric.samples}
        yield CounterMetricFamily("rabbitmq_io_sync_ops_total",
                                  "Total number of I/O sync operations",
                                  value=totals["mainstem_fsync_seconds_count"])
        yield CounterMetricFamily("rabbitmq_io_sync_time_seconds_total", "Total I/O sync time",
                                  value=totals["mainstem_fsync_seconds_sum"])

    def add_routes(self, app: web.Application) -> None:
        for path, handler in (("/metrics", self.handle),
                              ("/metrics/per-object", self.handle_per_object),
                              ("/metrics/detailed", self.handle_detailed)):
            app.router.add_get(path, _for_monitors(handler))

    async def handle(self, request: web.Request) -> web.Response:
        return _exposition(self.registry)

    async def handle_per_object(self, request: web.Request) -> web.Response:
        return _exposition(self.per_object_registry)

    async def handle_detailed(self, request: web.Request) -> web.Response:
        """The families in `family=` (repeatable; none: no series), per object, the queue
        families only for the vhosts in `vhost=` (repeatable; none: every vhost)."""
        families = request.query.getall("family", [])
        vhosts = frozenset(request.query.getall("vhost")) if "vhost" in request.query else None
        rabbit = RabbitFamilies(self._state, Scope(DETAILED_PREFIX, True, vhosts))

        def collect() -> Iterator[Metric]:
            yield from rabbit.collect(families)
            if _QUEUE_FAMILIES & set(families):
                yield rabbit.queue_info()
            yield rabbit.identity()

        registry = CollectorRegistry(auto_describe=True)
        registry.register(_Collector(collect))
        return _exposition(registry)

    async def lifetime(self, app: web.Application) -> AsyncIterator[None]:
        unobserve = self._state.core.fsync_timings.observe(self.fsync_seconds.observe)
        yield
        unobserve()


def _exposition(registry: CollectorRegistry) -> web.Response:
    """The registry as Prometheus text; gzipped for a scraper that accepts it, as
    RabbitMQ's plugin does (per-object scrapes of many queues are large)."""
    response = web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})
    response.enable_compression()
    return response


def _for_monitors(handler: Callable[[web.Request], Awaitable[web.Response]]
                  ) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Where a login is asked (the management port), monitoring users may scrape too."""
    async def handle(request: web.Request) -> web.Response:
        return await handler(request)
    return access.scoped(access.Scope.MONITOR)(handle)
