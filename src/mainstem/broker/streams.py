"""The streams of every namespace, each open as partitions of the log engine.

The catalog says which streams exist; this store opens their partitions under
`<data>/streams/<storage name>/<partition>` (see `layout`) and keeps them open, so a
stream written by one protocol is read by every other through the same objects.
Every protocol creates and grows streams here, so the cap on partitions per stream
is checked here, before anything is allocated.

A stream of N > 1 partitions is what RabbitMQ calls a super stream: each
partition also answers to a name of its own (`<stream>-<i>` unless the stream
was created with explicit names) and has a binding key for routing. Stream
names and partition names share one name space per namespace.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from mainstem.broker import layout
from mainstem.broker.catalog import Catalog, StreamRecord
from mainstem.broker.damage import DamageRegister, PartitionKey
from mainstem.broker.errors import AlreadyExists, InvalidArgument, NotFound
from mainstem.broker.policies import NONE_APPLIED, STREAM, Applied
from mainstem.broker.retention import retention_from_arguments, with_policy
from mainstem.broker.stream_service import PartitionService, WriteGate
from mainstem.broker.table_mode import check_table_argument
from mainstem.log.commit import FsyncTimings
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, RetentionPolicy

# Iggy refuses more than 1000 partitions in one request; Kafka has no per-topic cap but
# advises a few thousand per broker. Every partition costs files and memory for good.
DEFAULT_MAX_PARTITIONS = 1000
_TRASH = ".deleted"
# Arguments recording a super stream's partition names and binding keys.
PARTITION_NAMES = "x-partition-names"
BINDING_KEYS = "x-binding-keys"

DeletionWatcher = Callable[["Stream"], None]
# Called with the stream and the services of the partitions removed from its end.
ShrinkWatcher = Callable[["Stream", Sequence[PartitionService]], None]
# Called with the stream and the partition whose leader moved to another node.
LeaderWatcher = Callable[["Stream", PartitionService], None]


class TooManyPartitions(InvalidArgument):
    """A stream would have more partitions than the configured cap."""


def _legacy_directory_name(name: str) -> str:
    """How the layout before storage names turned a name into a directory name."""
    quoted = quote(name, safe="-_").replace(".", "%2E")
    if len(quoted) <= 120:
        return quoted
    return f"{quoted[:95]}~{hashlib.sha256(name.encode()).hexdigest()[:24]}"


@dataclass(slots=True)
class Stream:
    record: StreamRecord
    directory: Path
    retention: RetentionPolicy
    services: list[PartitionService]  # what protocols write and read through
    applied: Applied = NONE_APPLIED  # the policies its retention follows

    @property
    def partitions(self) -> list[Partition]:
        """The log partitions, for the broker's own bookkeeping (sizes, retention)."""
        return [service.partition for service in self.services]

    @property
    def namespace(self) -> str:
        return self.record.namespace

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def partition_names(self) -> list[str]:
        """The name each partition answers to: the stream's own for a single one."""
        names = self.record.arguments.get(PARTITION_NAMES)
        if names:
            return list(names)
        if len(self.services) == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(len(self.services))]

    @property
    def binding_keys(self) -> list[str]:
        keys = self.record.arguments.get(BINDING_KEYS)
        return list(keys) if keys else [str(i) for i in range(len(self.services))]


class StreamReplication(Protocol):
    """What the stream store tells the cluster, whichever protocol made the change."""

    def adopt(self, stream: Stream) -> None:
        """A stream was created on this node: replicate it."""

    def forget(self, stream: Stream) -> None:
        """A stream was deleted on this node: delete it everywhere."""

    def resized(self, stream: Stream, before: int) -> None:
        """A stream's partition count changed on this node (it had `before`): change it
        everywhere."""


class StreamStore:
    def __init__(self, root: Path, catalog: Catalog, durability: DurabilityPolicy,
                 retention: RetentionPolicy, *, max_partitions: int = DEFAULT_MAX_PARTITIONS,
                 descriptors: DescriptorCache | None = None, gate: WriteGate | None = None,
                 fsync_timings: FsyncTimings | None = None) -> None:
        self.root = root
        self._gate = gate  # holds every partition's writers while an alarm is set
        self.max_partitions = max_partitions
        self._descriptors = descriptors
        self._fsync_timings = fsync_timings
        self._catalog = catalog
        self._durability = durability
        self._default_retention = retention
        self._open: dict[tuple[str, str], Stream] = {}
        # (namespace, partition name) -> (stream, partition index), for super streams.
        self._partition_names: dict[tuple[str, str], tuple[Stream, int]] = {}
        self._watchers: set[DeletionWatcher] = set()
        self._shrink_watchers: set[ShrinkWatcher] = set()
        self._leader_watchers: set[LeaderWatcher] = set()
        self.replication: StreamReplication | None = None  # set by a node in a cluster
        self.damage = DamageRegister()  # chunks found damaged, by partition
        self.writes_tables = False  # set once a tier is there to write tables into
        catalog.policy_watchers.append(self._policies_changed)

    def open_all(self) -> None:
        """Open every stream of the catalog, once moved out of an old layout, and clear out
        leftovers of deletions."""
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.root / _TRASH, ignore_errors=True)
        records = self._catalog.list_streams()
        layout.migrate(self.root, [
            ((_legacy_directory_name(r.namespace), _legacy_directory_name(r.name)),
             self._directory(r)) for r in records])
        for record in records:
            self._open_stream(record)

    async def close(self) -> None:
        streams, self._open = list(self._open.values()), {}
        for stream in streams:
            for service in stream.services:
                await service.close()

    # -- lookups -------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Stream:
        stream = self._open.get((namespace, name))
        if stream is None:
            raise NotFound(f"stream '{name}' not found in namespace '{namespace}'")
        return stream

    def find(self, namespace: str, name: str) -> Stream | None:
        return self._open.get((namespace, name))

    def resolve(self, namespace: str, name: str) -> tuple[Stream, int]:
        """The stream and partition a name denotes: a single-partition stream by its
        own name, or one partition of a super stream by its partition name."""
        found = self._partition_names.get((namespace, name))
        if found is None:
            raise NotFound(f"stream '{name}' not found in namespace '{namespace}'")
        return found

    def watch(self, watcher: DeletionWatcher) -> Callable[[], None]:
        """Call `watcher` whenever a stream is deleted; returns the unwatch function."""
        self._watchers.add(watcher)
        return lambda: self._watchers.discard(watcher)

    def watch_shrinks(self, watcher: ShrinkWatcher) -> Callable[[], None]:
        """Call `watcher` whenever partitions are removed from a stream, with the removed
        partitions' services (before they close); returns the unwatch function."""
        self._shrink_watchers.add(watcher)
        return lambda: self._shrink_watchers.discard(watcher)

    def watch_leaders(self, watcher: LeaderWatcher) -> Callable[[], None]:
        """Call `watcher` whenever a partition's leader moves to another node (in a
        cluster); returns the unwatch function."""
        self._leader_watchers.add(watcher)
        return lambda: self._leader_watchers.discard(watcher)

    def leader_moved(self, service: PartitionService) -> None:
        """A cluster elected another leader for this partition, or this node stepped down:
        its publishers must look the leader up again."""
        stream = next((s for s in self._open.values() if service in s.services), None)
        if stream is None:
            return
        for watcher in list(self._leader_watchers):
            watcher(stream, service)

    def partition(self, namespace: str, name: str, index: int = 0) -> Partition:
        return self.service(namespace, name, index).partition

    def service(self, namespace: str, name: str, index: int = 0) -> PartitionService:
        stream = self.get(namespace, name)
        if not 0 <= index < len(stream.services):
            raise NotFound(
                f"stream '{name}' in namespace '{namespace}' has no partition "
                f"{index} (it has {len(stream.services)})"
            )
        return stream.services[index]

    def list(self, namespace: str | None = None) -> list[Stream]:
        return [
            stream
            for (ns, _), stream in sorted(self._open.items())
            if namespace is None or ns == namespace
        ]

    # -- changes -------------------------------------------------------------

    def create(self, namespace: str, name: str, partitions: int = 1,
               arguments: Mapping[str, Any] | None = None) -> Stream:
        """Create a stream; AlreadyExists if the name is taken (callers that
        declare idempotently compare the existing stream's arguments)."""
        arguments = dict(arguments or {})
        self.check_new(namespace, name, partitions, arguments)
        record = self._catalog.add_stream(namespace, name, partitions, arguments)
        # A crash during an earlier delete of this name may have left its files.
        self._discard(self._directory(record))
        stream = self._open_stream(record)
        if self.replication is not None:
            self.replication.adopt(stream)
        return stream

    def check_new(self, namespace: str, name: str, partitions: int,
                  arguments: Mapping[str, Any]) -> None:
        """Raise what `create` would for this stream, creating nothing."""
        self._check_partition_count(partitions)
        retention_from_arguments(arguments, self._default_retention)
        check_table_argument(arguments, self.writes_tables)
        self._check_names_free(namespace, name, partitions, arguments)

    def add_partitions(self, namespace: str, name: str, partitions: int) -> Stream:
        """Grow a stream to `partitions` partitions (named `<stream>-<i>`)."""
        self._check_partition_count(partitions)
        stream = self.get(namespace, name)
        if PARTITION_NAMES in stream.record.arguments:
            raise InvalidArgument(f"stream '{name}' has named partitions and cannot grow")
        for index in range(len(stream.services), partitions):
            if (namespace, f"{name}-{index}") in self._partition_names:
                raise AlreadyExists(f"a stream named '{name}-{index}' already exists")
        self._forget_names(stream)
        stream.record = self._catalog.set_partitions(namespace, name, partitions)
        before = len(stream.services)
        for index in range(before, partitions):
            stream.services.append(self._open_partition(stream, index))
        self._remember_names(stream)
        if self.replication is not None:
            self.replication.resized(stream, before)
        return stream

    async def remove_partitions(self, namespace: str, name: str, partitions: int) -> Stream:
        """Shrink a stream to its first `partitions` partitions; the others' data goes."""
        stream = self.get(namespace, name)
        if PARTITION_NAMES in stream.record.arguments:
            raise InvalidArgument(f"stream '{name}' has named partitions and cannot shrink")
        record = self._catalog.remove_partitions(namespace, name, partitions)
        self._forget_names(stream)
        stream.record = record
        doomed, stream.services = stream.services[partitions:], stream.services[:partitions]
        self._remember_names(stream)
        if self.replication is not None:
            self.replication.resized(stream, partitions + len(doomed))
        for watcher in list(self._shrink_watchers):
            watcher(stream, doomed)
        for index, service in enumerate(doomed, start=partitions):
            await service.close()
            await self._remove(stream.directory / str(index))
        return stream

    async def delete(self, namespace: str, name: str) -> None:
        """Delete a stream's catalog entry, then its files. Readers waiting on it
        are woken with PartitionClosed."""
        stream = self.get(namespace, name)
        self._catalog.delete_stream(namespace, name)
        del self._open[(namespace, name)]
        self._forget_names(stream)
        self.damage.forget(namespace, name)
        if self.replication is not None:
            self.replication.forget(stream)
        for watcher in list(self._watchers):
            watcher(stream)
        for service in stream.services:
            await service.close()
        await self._remove(stream.directory)

    async def delete_namespace(self, namespace: str) -> None:
        for stream in self.list(namespace):
            await self.delete(namespace, stream.name)

    def apply_retention(self) -> int:
        """Run retention over every partition; return how many segments went."""
        return sum(
            partition.apply_retention()
            for stream in self._open.values()
            for partition in stream.partitions
        )

    async def _remove(self, directory: Path) -> None:
        trash = self._discard(directory)
        if trash is not None:
            await asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, trash, True)

    def _discard(self, directory: Path) -> Path | None:
        """Move a directory into the trash (emptied on open): a rename is atomic, so
        no half-deleted stream is ever found under a name that can be reused."""
        if not directory.exists():
            return None
        trash = self.root / _TRASH / uuid.uuid4().hex
        trash.parent.mkdir(parents=True, exist_ok=True)
        directory.rename(trash)
        return trash

    def _directory(self, record: StreamRecord) -> Path:
        return self.root / layout.storage_name("stream", record.namespace, record.name)

    def _check_partition_count(self, partitions: int) -> None:
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidArgument(f"partitions must be a positive integer, got {partitions!r}")
        if partitions > self.max_partitions:
            raise TooManyPartitions(f"a stream has at most {self.max_partitions} partitions,"
                                    f" {partitions} were asked for")

    def _policies_changed(self, namespace: str) -> None:
        """A policy of the namespace changed: each stream's retention follows at once
        (a partition checks it on its next segment roll and retention run)."""
        for stream in self.list(namespace):
            stream.retention, stream.applied = self._retention(stream.record)
            for partition in stream.partitions:
                partition.retention = stream.retention

    def _retention(self, record: StreamRecord) -> tuple[RetentionPolicy, Applied]:
        applied = self._catalog.policies.applied(record.namespace, record.name, STREAM)
        arguments = with_policy(record.arguments, applied.definition)
        return retention_from_arguments(arguments, self._default_retention), applied

    def _open_stream(self, record: StreamRecord) -> Stream:
        directory = self._directory(record)
        retention, applied = self._retention(record)
        stream = Stream(record, directory, retention, [], applied)
        stream.services = [self._open_partition(stream, i) for i in range(record.partitions)]
        self._open[(record.namespace, record.name)] = stream
        self._remember_names(stream)
        return stream

    def _check_names_free(self, namespace: str, name: str, partitions: int,
                          arguments: Mapping[str, Any]) -> None:
        names = arguments.get(PARTITION_NAMES)
        keys = arguments.get(BINDING_KEYS)
        for given, what in ((names, "partition names"), (keys, "binding keys")):
            if given is not None and (len(given) != partitions or len(set(given)) != partitions):
                raise InvalidArgument(f"{what} must be {partitions} distinct names")
        if partitions == 1 and not names:
            wanted = [name]
        else:
            wanted = [name, *(names or (f"{name}-{i}" for i in range(partitions)))]
        for wanted_name in wanted:
            if (namespace, wanted_name) in self._partition_names:
                raise AlreadyExists(
                    f"stream '{wanted_name}' already exists in namespace '{namespace}'")

    def _remember_names(self, stream: Stream) -> None:
        for index, partition_name in enumerate(stream.partition_names):
            self._partition_names[(stream.namespace, partition_name)] = (stream, index)

    def _forget_names(self, stream: Stream) -> None:
        for partition_name in stream.partition_names:
            self._partition_names.pop((stream.namespace, partition_name), None)

    def _open_partition(self, stream: Stream, index: int) -> PartitionService:
        partition = Partition.open(stream.directory / str(index), durability=self._durability,
                                   retention=stream.retention, descriptors=self._descriptors,
                                   fsync_timings=self._fsync_timings)
        damage = self.damage.partition(PartitionKey(stream.namespace, stream.name, index))
        return PartitionService(partition, self._gate, damage)
