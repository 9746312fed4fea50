"""Every namespace's AMQP 0-9-1 objects, and their durable metadata.

Durable exchanges, bindings and queue definitions of all virtual hosts are rows of the
catalog (see `amqp_metadata`), rewritten in one transaction on each change (declarations
are rare); each durable queue's messages are in its own journal under
``<data>/queues/<storage name>`` (see `layout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from mainstem.broker import layout
from mainstem.broker.amqp import metadata as amqp_metadata
from mainstem.broker.amqp.queues.journal import QueueJournal, Replay, open_partition
from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.broker.amqp.queues.remote import QueueRelay
from mainstem.broker.amqp.queues.spill import wipe
from mainstem.broker.amqp.queues.virtual_host import Topology, VirtualHost
from mainstem.broker.amqp.routing import ExchangeGraph
from mainstem.broker.catalog import Catalog, transaction
from mainstem.broker.cluster_view import QueueReplication
from mainstem.broker.counters import BrokerCounters
from mainstem.broker.errors import NotFound
from mainstem.broker.limits import Limits
from mainstem.broker.streams import StreamStore
from mainstem.log.commit import FsyncTimings
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy

SPILL_DIRECTORY = "queue-spill"


class QueueManager:
    def __init__(self, data_dir: Path, catalog: Catalog, streams: StreamStore,
                 durability: DurabilityPolicy, descriptors: DescriptorCache | None = None,
                 memory: MemoryBound | None = None, fsync_timings: FsyncTimings | None = None,
                 counters: BrokerCounters | None = None, limits: Limits | None = None) -> None:
        self.directory = data_dir / "queues"
        self.spill_directory = data_dir / SPILL_DIRECTORY
        self.descriptors = descriptors
        self.fsync_timings = fsync_timings
        self.counters = counters or BrokerCounters()  # queues declared, created, deleted
        # The vhosts' max-queues, checked before a queue is created (none: no limits)
        self.limits = limits
        self.memory = memory or MemoryBound()
        self.catalog = catalog
        self.streams = streams
        self.durability = durability
        self.vhosts: dict[str, VirtualHost] = {}
        # Set by a node in a cluster: quorum queues' journals and the relay that reaches
        # RemoteQueues' homes. The topology is the core's (it shares only in a cluster).
        self.replication: QueueReplication | None = None
        self.topology: Topology | None = None
        self.relay: QueueRelay | None = None
        self._db = catalog.connect()
        self._stored = amqp_metadata.StoredObjects.read(self._db)  # rows as last written
        self._saves_held = False
        self._save_asked = False
        catalog.policy_watchers.append(self._policies_changed)

    def _policies_changed(self, vhost: str) -> None:
        """A policy of `vhost` was set or cleared (here or on another node): its queues
        run with what now applies, without a redeclare."""
        host = self.vhosts.get(vhost)
        if host is not None:
            host.policies_changed()

    def open(self) -> None:
        """Recover durable exchanges, queues (with their messages) and bindings."""
        wipe(self.spill_directory)
        records = amqp_metadata.read(self._db)
        layout.migrate(self.directory, [  # the old layout joined the escaped names
            ((quote(vhost, safe=""), quote(queue["name"], safe="")),
             self.journal_directory(vhost, queue["name"]))
            for vhost, record in records.items() for queue in record["queues"]])
        for name, record in records.items():
            if self.catalog.get_namespace(name) is None:
                continue
            vhost = VirtualHost(name, self)
            for queue in record["queues"]:
                vhost.restore_queue(queue)
            streams = [s.name for s in self.streams.list(name)]
            vhost.graph = ExchangeGraph.from_records(
                record, namespace=name, durable_queues=[*vhost.queues, *streams])
            self.vhosts[name] = vhost

    def queue_count(self, vhost: str) -> int:
        """The queues and streams of a vhost, as its max-queues counts them."""
        host = self.vhosts.get(vhost)
        return (0 if host is None else len(host.queues)) + len(self.streams.list(vhost))

    def vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            if self.catalog.get_namespace(name) is None:
                raise NotFound(f"no vhost '{name}'")
            vhost = self.vhosts[name] = VirtualHost(name, self)
            for stream in self.streams.list(name):
                vhost.graph.add_queue(stream.name)
        return vhost

    def open_journal(self, vhost: str, queue: str) -> tuple[QueueJournal, Replay]:
        return QueueJournal.open(self.journal_directory(vhost, queue), self.durability,
                                 self.descriptors, self.fsync_timings, self.counters)

    def open_journal_partition(self, vhost: str, queue: str) -> Partition:
        """A replicated quorum queue's journal partition (fsynced as written)."""
        return open_partition(self.journal_directory(vhost, queue), self.durability,
                              self.descriptors, self.fsync_timings, fsync_on_demand=False)

    def journal_directory(self, vhost: str, queue: str) -> Path:
        return self.directory / layout.storage_name("queue", vhost, queue)

    def save(self) -> None:
        """Store the durable AMQP objects as they are now (only the rows that changed)."""
        if self._saves_held:
            self._save_asked = True
            return
        records = {name: vhost.records() for name, vhost in self.vhosts.items()}
        with transaction(self._db):
            stored = self._stored.write(self._db, records)
        self._stored = stored

    @contextmanager
    def one_save(self) -> Iterator[None]:
        """The saves asked for inside, made once at the end (one commit, not one a
        declaration): for a block of declarations with no await, whose answer waits for
        its end (a definitions import), so nothing is answered before it is stored."""
        self._saves_held = True
        try:
            yield
        finally:
            self._saves_held = False
            if self._save_asked:
                self._save_asked = False
                self.save()

    async def close(self) -> None:
        for vhost in self.vhosts.values():
            for queue in vhost.queues.values():
                await queue.close()
        self._db.close()
