"""The broker core: the protocol-neutral model every protocol adapter calls.

It owns the catalog, the users and permissions, and the streams of every
namespace; adapters never touch files. Its lifecycle is `open` then `close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mainstem.broker import replicated
from mainstem.broker.active_consumers import ActiveConsumers
from mainstem.broker.alarms import ResourceAlarms
from mainstem.broker.amqp.queues import QueueManager
from mainstem.broker.amqp.shared_topology import SharedTopology
from mainstem.broker.auth import Auth, User
from mainstem.broker.catalog import Catalog, ChangeListener
from mainstem.broker.cluster_view import ClusterView
from mainstem.broker.counters import BrokerCounters
from mainstem.broker.delivery_stats import DeliveryStats
from mainstem.broker.errors import AuthenticationFailed
from mainstem.broker.events.binders import BinderStore
from mainstem.broker.events.projections import Projections
from mainstem.broker.iggy.model import IggyModel
from mainstem.broker.limits import Limits
from mainstem.broker.login_throttle import LoginThrottle
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.password_checks import PasswordChecks
from mainstem.broker.scrub import Scrubber
from mainstem.broker.segment_store import SegmentStore
from mainstem.broker.settings import CoreSettings
from mainstem.broker.stream_service import WriteGate
from mainstem.broker.streams import Stream, StreamStore
from mainstem.broker.tables import TableRows, Tables
from mainstem.broker.tiering import Tiering, node_identity
from mainstem.log.commit import FsyncTimings
from mainstem.log.descriptors import DescriptorCache

log = logging.getLogger("mainstem.broker")

# Password hashes (scrypt) take at most half the CPUs, however many logins arrive.
KDF_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))


class BrokerCore:
    def __init__(self, data_dir: Path, settings: CoreSettings, catalog: Catalog) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.catalog = catalog
        self.auth = Auth(catalog, settings)
        self.descriptors = DescriptorCache(settings.open_files or None)
        self.fsync_timings = FsyncTimings()  # every partition's fsync rounds, for metrics
        self._password_checks = PasswordChecks(KDF_THREADS, settings.password_checks_per_address)
        self._login_throttle = LoginThrottle(settings.failed_logins_per_minute)
        self.alarms = ResourceAlarms()  # publishers wait while memory or disk alarms hold
        self.write_gate = WriteGate(self.alarms)
        self.streams = StreamStore(
            data_dir / "streams", catalog, settings.durability, settings.retention,
            max_partitions=settings.max_partitions, descriptors=self.descriptors,
            gate=self.write_gate, fsync_timings=self.fsync_timings,
        )
        self.active_consumers = ActiveConsumers()
        self.iggy = IggyModel(catalog.connect())
        self.segments = SegmentStore(self.streams, catalog.connect())
        self.delivery_stats = DeliveryStats()  # handlers count deliveries per chunk/batch
        self.counters = BrokerCounters()  # RabbitMQ's global counters, read by /metrics
        self.closed_channel_stats = MessageStats()  # of channels gone, for overview totals
        self.limits = Limits(catalog, lambda vhost: self.queues.queue_count(vhost))
        self.queues = QueueManager(data_dir, catalog, self.streams, settings.durability,
                                   self.descriptors, settings.queue_memory,
                                   self.fsync_timings, self.counters, self.limits)
        self.binders = BinderStore(catalog.connect())
        self.projections = Projections(self.streams, self.binders)
        self.topology = self.queues.topology = SharedTopology(self.queues)
        self.kinds = replicated.declare(catalog, self.projections, self.segments,
                                        self.topology)
        self.scrubber = Scrubber(self.streams, settings.scrub_rate, self.counters)
        self._retention_task: asyncio.Task[None] | None = None
        self.cluster: ClusterView | None = None  # set by a node that joins a cluster
        self.tiering: Tiering | None = None  # set by open when a tier is configured
        self.tables: Tables | None = None  # with a tier, writes streams' tables

    @classmethod
    async def open(cls, data_dir: Path, settings: CoreSettings,
                   table_rows: TableRows | None = None) -> BrokerCore:
        """Open the broker's state; with a tier and `table_rows`, streams declared as
        tables are written as tables (`broker/tables.py`)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        catalog = Catalog.open(data_dir / "catalog.sqlite")
        try:
            core = cls(data_dir, settings, catalog)
            core.streams.open_all()
            if settings.tiering is not None:
                core.tiering = Tiering(settings.tiering, core.streams, catalog,
                                       core.descriptors)
                await core.tiering.open()
                if not settings.tiering.clustered:  # a cluster's node starts it once joined
                    core.tiering.start(node_identity(data_dir))
                if table_rows is not None:  # its rounds wait for the tiering's start
                    core.tables = Tables(core.tiering, core.streams, catalog, table_rows)
                    core.tables.start()
                    core.streams.writes_tables = True
            core.queues.open()
            core.projections.start_all()
            core.scrubber.start()
        except BaseException:
            catalog.close()
            raise
        core._retention_task = asyncio.get_running_loop().create_task(core._retention_loop())
        return core

    async def close(self) -> None:
        """Finish in-flight appends, fsync every partition, close all files."""
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
        await self.scrubber.close()
        await self.projections.stop()
        if self.tables is not None:
            await self.tables.close()
        if self.tiering is not None:
            await self.tiering.close()
        await self.queues.close()
        await self.streams.close()
        self.iggy.close()
        self.segments.close()
        self.binders.close()
        self.catalog.close()
        self._password_checks.shutdown()

    def tell_changes(self, listener: ChangeListener | None) -> None:
        """Tell `listener` of every change made here to metadata every node holds (a
        cluster shares them, `broker.replicated`); None: no longer."""
        for store in (self.catalog, self.binders, self.segments, self.topology):
            store.on_change = listener

    # -- authentication ------------------------------------------------------

    async def login(self, username: str, password: str, peer_host: str | None,
                    suspect: Callable[[], None] | None = None) -> User:
        """Check credentials. A password verified before is checked at once; otherwise
        the slow KDF runs in the core's own small pool (`PasswordChecks`), never in the
        one that runs fsync, so a storm of wrong passwords delays no one's durable
        publishing, and within its address's share of that pool. A refusal is answered
        after the failed-login delay, longer beyond the (address, user) budget
        (`LoginThrottle`); a right password is never refused. `suspect` is called when
        the login's pair failed lately, or it fails: its connection is then held until
        answered, out of its address's budget of connections not logged in."""
        penalty_factor = 1
        try:
            user = self.auth.authenticate_cached(username, password, peer_host)
            if user is None:
                attempt = self._login_throttle.take(peer_host, username)
                penalty_factor = attempt.penalty_factor
                if not attempt.fresh and suspect is not None:
                    suspect()
                user = await self._password_checks.run(
                    attempt, self.auth.authenticate, username, password, peer_host)
                self._login_throttle.give_back(peer_host, username)
            return user
        except AuthenticationFailed:
            if suspect is not None:
                suspect()
            await asyncio.sleep(self.settings.failed_login_delay_s * penalty_factor)
            raise

    # -- namespaces ----------------------------------------------------------

    async def delete_namespace(self, name: str) -> None:
        """Delete a namespace with its streams, permissions and offsets."""
        if self.catalog.get_namespace(name) is None:
            self.catalog.delete_namespace(name)  # raises the catalog's NotFound
        await self.streams.delete_namespace(name)
        await self.catalog.delete_namespace_everywhere(name)

    # -- streams --------------------------------------------------------------

    def create_stream(self, namespace: str, name: str, partitions: int = 1,
                      arguments: Mapping[str, Any] | None = None) -> Stream:
        """A stream a client asks for, on any protocol: what `StreamStore.create` refuses
        (a name taken: AlreadyExists) first, then the vhost's `max-queues`, then made."""
        self.streams.check_new(namespace, name, partitions, dict(arguments or {}))
        self.limits.check_queue(namespace, name)
        return self.streams.create(namespace, name, partitions, arguments)

    def open_namespace(self, user: User, namespace: str) -> None:
        """Raise unless `user` may connect to `namespace` (a RabbitMQ vhost)."""
        self.auth.check_namespace_access(user, namespace)

    # -- consumer offsets ----------------------------------------------------

    def store_offset(
        self, namespace: str, stream: str, partition: int, reference: str, offset: int
    ) -> None:
        self.catalog.store_offset(namespace, stream, partition, reference, offset)

    def query_offset(
        self, namespace: str, stream: str, partition: int, reference: str
    ) -> int | None:
        self.streams.get(namespace, stream)  # NotFound for a missing stream
        return self.catalog.get_offset(namespace, stream, partition, reference)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_check_interval_s)
            try:
                deleted = self.streams.apply_retention()
            except OSError:
                log.exception("retention.failed")
                continue
            if deleted:
                log.info("retention.deleted", extra={"segments": deleted})
