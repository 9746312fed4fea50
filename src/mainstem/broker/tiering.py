"""Tiering: a stream's sealed segments move to an object store and are read from there.

Each round, every partition this node leads gives its tier candidates (`PartitionService.
tier_candidates`: sealed, committed, past the stream's local bounds, oldest first). Each is
uploaded under a key no other upload makes (`log.tier_upload`: the epoch and a random id),
verified, recorded in the catalog, and only then swapped for its tiered twin, the local
files deleted: the catalog row is the commit point. The tier unreachable: uploads wait for
the next round, local disk grows until the disk alarm holds publishers, and reads of
tiered ranges fail with `TierUnavailable` until it is back.

Shared objects are fenced (Kafka's KIP-405 in spirit): a node acts on the tier only under
proof it owns the write, never from its own view alone.
- In a cluster, only a partition's elected leader uploads, once it has joined and knows
  its role (`start`), and it records an upload under its fence (its leader key at its
  epoch, checked by the same etcd transaction): a node that lost the lead while frozen,
  restarted or cut off cannot record, and deletes its own upload again. A record is
  written once, never replaced.
- Before an upload its key is noted on this node (`Catalog.begin_upload`); what a crash
  leaves of an upload neither recorded nor discarded is deleted at the next start. No
  other object is ever deleted for being unnamed: a node restored from an old backup, or
  a second broker pointed at the tier, cannot sweep what it does not know.
- The tier is marked with its owner (`OWNER`: the cluster's or the single node's
  identity). A node that finds another owner there uploads and deletes nothing, and says
  so (the round's error, in the API and the log).
- Objects are deleted only once their record is gone (retention under the fence, a
  stream or partitions deleted, an upload not recorded), after a grace period for readers
  that planned on them, each deletion logged (`tier.deleted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mainstem.broker.catalog import Catalog
from mainstem.broker.fence import Fence, FencedOut
from mainstem.broker.settings import TieringSettings
from mainstem.broker.stream_service import PartitionService, Segment
from mainstem.broker.streams import Stream, StreamStore
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import ObjectExists, TierUnavailable
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import (
    TieredRecord,
    UploadMismatch,
    segment_key,
    upload_objects,
    upload_segment,
)

log = logging.getLogger("mainstem.tiering")

# What a failed upload or delete may raise; the round stops and the next one tries again.
TIER_ERRORS = (TierUnavailable, UploadMismatch, ObjectExists, OSError)
# An object written when a tier is first used (and a file in the cache directory saying
# so). From then on uploads and deletes check it is there: a directory tier whose mount is
# missing (an empty mount point) would otherwise take segments onto the local disk,
# hidden once the store is mounted again, or look empty to a delete.
MARKER = ".mainstem-tier"
IN_USE = "tier-in-use"
# The tier's owner: the identity of the cluster or single node that uses it, written once.
OWNER = ".mainstem-owner"
NODE_IDENTITY = "node-identity"  # a single node's, in its data directory


def node_identity(data_dir: Path) -> str:
    """This data directory's identity, made on first use (a restored backup keeps it)."""
    path = data_dir / NODE_IDENTITY
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # as every data file
        with os.fdopen(fd, "w") as file:
            file.write(f"node-{uuid.uuid4().hex}\n")
    return path.read_text().strip()


class TierNotOwned(TierUnavailable):
    """The tier is marked as another cluster's or node's: this one leaves it alone."""


@dataclass(frozen=True, slots=True)
class TierLocation:
    """Where the tier is, as readers outside the broker (Spark's executors) open it;
    never its credentials. Record keys are relative to it."""

    url: str
    endpoint: str | None
    region: str


@dataclass(slots=True)
class TieringStats:
    uploads: int = 0  # segments uploaded, verified and recorded
    uploaded_bytes: int = 0
    errors: int = 0  # failed uploads and deletes
    last_error: str | None = None
    deletes_pending: int = 0  # objects waiting to be deleted
    fenced: int = 0  # uploads and expiries refused: another node led
    deleted: int = 0  # objects deleted


class Tiering:
    def __init__(self, settings: TieringSettings, streams: StreamStore, catalog: Catalog,
                 descriptors: DescriptorCache) -> None:
        self.settings = settings
        self.location = TierLocation(settings.url, settings.endpoint, settings.region)
        self.tier = Tier.open(settings.url, endpoint=settings.endpoint, region=settings.region,
                              access_key_id=settings.access_key_id,
                              secret_access_key=settings.secret_access_key,
                              timeout=settings.timeout_s)
        self.cache = TierCache(settings.cache_dir, settings.cache_bytes, descriptors,
                               block_size=settings.block_bytes, read_ahead=settings.read_ahead)
        self.stats = TieringStats(deletes_pending=catalog.garbage_count())
        self.owner: str | None = None  # known once started
        self._streams = streams
        self._catalog = catalog
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._expiries: set[asyncio.Task[None]] = set()
        self._marker_seen = False  # in this round: one look at the store, not one per object
        streams.watch(self._stream_deleted)
        streams.watch_shrinks(self._partitions_removed)

    async def open(self) -> None:
        """Put every partition's tiered segments in its log. Rounds wait for `start`."""
        for stream in self._streams.list():
            for index, service in enumerate(stream.services):
                records = self._catalog.tiered(stream.namespace, stream.name, index)
                await service.attach_tiered(records, self.tier, self.cache)
                self._watch(stream, index, service)

    def start(self, owner: str) -> None:
        """Start the rounds as `owner` (this node's identity, or its cluster's once it has
        joined and holds the cluster's records): first what a crash left of this node's
        own uploads goes."""
        self.owner = owner
        self._recover_uploads()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        for task in (self._task, *self._expiries):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, *self._expiries) if t is not None),
                             return_exceptions=True)

    def _recover_uploads(self) -> None:
        """Uploads a crash cut short: recorded ones are done, the others' objects (this
        node's own, under keys no other upload makes) go, with a put's temporary file."""
        for key in self._catalog.uploads():
            if self._catalog.names_object(key):
                self._catalog.end_upload(key)
            else:
                self._discard(key, "an upload a crash cut short")
                with contextlib.suppress(*TIER_ERRORS):
                    for name in upload_objects(key):
                        self.tier.delete_temporary(name)

    def _watch(self, stream: Stream, index: int, service: PartitionService) -> None:
        def dropped(record: TieredRecord) -> None:
            if self.leads_here(service):  # a follower forgets; its leader deletes
                self._spawn(self._expire(stream, index, service.fence, record, "retention"))

        service.on_tier_dropped(dropped)

    def leads_here(self, service: PartitionService) -> bool:
        """Whether this node uploads the partition's segments: it takes its writes and,
        in a cluster, leads it under a fence."""
        return service.takes_writes and (not self.settings.clustered or
                                         service.fence is not None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._expiries.add(task)
        task.add_done_callback(self._expiries.discard)

    # -- the rounds --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
                self.stats.last_error = None
            except Exception as error:  # whatever failed, the next round tries again
                self._failed("tier.round_failed", error)
            self._wake.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation
            # that meets the event being set, and close() then waited for this forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.check_interval_s):
                    await self._wake.wait()

    async def round(self) -> int:
        """Delete what is due, then tier every candidate of the partitions this node
        leads; how many segments were tiered."""
        self._marker_seen = False
        await self._delete_due()
        tiered = 0
        for stream in self._streams.list():
            for index, service in enumerate(stream.services):
                if not self.leads_here(service):  # a follower: its leader uploads
                    await self._follow(stream, index, service)
                    continue
                for segment in service.tier_candidates():
                    await self.check_marker()
                    tiered += await self._tier(stream, index, service, segment)
        return tiered

    async def check_marker(self) -> None:
        """The tier is the one segments went to (see MARKER), and this node's or cluster's
        own (see OWNER); marked on first use. Looked at once a round, before the round's
        first upload or delete."""
        if self._marker_seen:
            return
        if not await self.tier.exists(MARKER):
            in_use = self.settings.cache_dir / IN_USE
            if in_use.exists() or self._catalog.any_tiered():
                raise TierUnavailable(self.tier.name, MARKER, "the tier's marker is missing: "
                                      "is its store mounted?")
            with contextlib.suppress(ObjectExists):  # another node of the cluster marked it
                await self.tier.put(MARKER, b"mainstem tier\n")
            in_use.write_text(self.location.url + "\n")
        await self._check_owner()
        self._marker_seen = True

    async def _check_owner(self) -> None:
        """Claim the tier if no one has (a tier this node used before owners were
        marked is its own: it holds records of it), else it must be this node's."""
        assert self.owner is not None
        if not await self.tier.exists(OWNER):
            if not self._catalog.any_tiered() and set(await self.tier.list("")) - {MARKER}:
                raise TierNotOwned(self.tier.name, OWNER, "the tier holds objects this "
                                   "node never recorded and no owner: it uploads and "
                                   "deletes nothing there")
            with contextlib.suppress(ObjectExists):  # a rival's claim is read below
                await self.tier.put(OWNER, f"{self.owner}\n".encode())
        owner = (await self.tier.get(OWNER)).decode().strip()
        if owner != self.owner:
            raise TierNotOwned(self.tier.name, OWNER, f"the tier belongs to {owner}, not to "
                               f"{self.owner}: this node uploads and deletes nothing there")

    async def _follow(self, stream: Stream, index: int, service: PartitionService) -> None:
        """Take the leader's records (they come with the cluster's metadata): tiered
        segments it dropped are forgotten, and local copies of those it uploaded go,
        each for its tiered twin, oldest first."""
        records = self._catalog.tiered(stream.namespace, stream.name, index)
        held = service.tiered_records
        if held and (not records or records[0].first_chunk_id > held[0].first_chunk_id):
            service.forget_tiered_before(records[0].first_chunk_id if records
                                         else service.local_first_offset)
        attached = {record.first_chunk_id for record in service.tiered_records}
        for record in records:
            if record.first_chunk_id in attached:
                continue
            oldest = service.oldest_sealed()
            if (oldest is None or oldest.first_chunk_id != record.first_chunk_id
                    or oldest.next_offset != record.next_offset):
                return  # not replicated this far yet (or dropped here by retention)
            self._watch(stream, index, service)
            await service.swap_tiered(oldest, record, self.tier, self.cache)

    async def _tier(self, stream: Stream, index: int, service: PartitionService,
                    segment: Segment) -> int:
        fence = service.fence
        key = segment_key(f"{stream.directory.name}/{index}", segment.first_chunk_id,
                          service.epoch)
        self._catalog.begin_upload(key)
        try:
            record = await upload_segment(self.tier, segment, key)
        except BaseException:
            self._discard(key, "an upload that failed")
            raise
        if segment.deleted or self._streams.find(stream.namespace, stream.name) is not stream:
            self._discard(key, "retention or a delete came first")
            return 0
        try:
            await self._catalog.record_tiered(stream.namespace, stream.name, index, record,
                                              fence)
        except FencedOut as error:
            self.stats.fenced += 1
            log.warning("tier.upload_fenced", extra={"key": key, "error": str(error)})
            self._discard(key, "not recorded: another node leads")
            return 0
        self._catalog.end_upload(key)
        self._watch(stream, index, service)
        if not await service.swap_tiered(segment, record, self.tier, self.cache):
            # retention took the local segment meanwhile: its record and objects go too
            await self._expire(stream, index, fence, record, "retention")
            return 0
        self.stats.uploads += 1
        self.stats.uploaded_bytes += record.segment_size + record.index_size
        log.info("tier.uploaded", extra={"key": record.key, "bytes": record.segment_size})
        return 1

    # -- deleting objects -------------------------------------------------------------

    async def _expire(self, stream: Stream, index: int, fence: Fence | None,
                      record: TieredRecord, reason: str) -> None:
        """Retention dropped a tiered segment: its record goes under the fence, then its
        objects once the grace period is over. Refused (another node leads): both stay."""
        try:
            await self._catalog.expire_tiered(stream.namespace, stream.name, index, record,
                                              fence, self.due_ms(), reason)
        except FencedOut as error:
            self.stats.fenced += 1
            log.warning("tier.expire_fenced", extra={"key": record.key, "error": str(error)})
            return
        self.pending_changed()

    def _stream_deleted(self, stream: Stream) -> None:
        self._forget(stream.services, "stream deleted")

    def _partitions_removed(self, stream: Stream, removed: Sequence[PartitionService]) -> None:
        self._forget(removed, "partition removed")

    def _forget(self, services: Iterable[PartitionService], reason: str) -> None:
        """Partitions that are gone: their tiered objects go after the grace period (on
        every node that held them: a delete of a gone key is done)."""
        self.delete_later([key for service in services for record in service.tiered_records
                           for key in (record.key, record.index_key)], reason)

    def delete_later(self, keys: Sequence[str], reason: str) -> None:
        """Objects no record names any longer: deleted after the grace period."""
        if keys:
            self._catalog.add_garbage(keys, self.due_ms(), reason)
            self.pending_changed()

    def _discard(self, key: str, reason: str) -> None:
        """An upload of this node's that is not recorded: its objects go at once."""
        self._catalog.discard_upload(key, upload_objects(key), reason)
        self.pending_changed()

    def due_ms(self) -> int:
        return int((time.time() + self.settings.delete_grace_s) * 1000)

    def pending_changed(self) -> None:
        self.stats.deletes_pending = self._catalog.garbage_count()
        self._wake.set()

    async def _delete_due(self) -> None:
        """Delete each object due, unless a record names it (then it is kept, and said)."""
        for key, reason in self._catalog.due_garbage(int(time.time() * 1000)):
            await self.check_marker()  # a missing mount lists as empty; an owner's
            if self._catalog.names_object(key):
                log.error("tier.delete_refused", extra={"key": key, "reason": reason,
                                                        "error": "a record names it"})
            else:
                await self.tier.delete(key)
                self.stats.deleted += 1
                log.info("tier.deleted", extra={"key": key, "reason": reason})
            self._catalog.garbage_done(key)
            self.stats.deletes_pending = self._catalog.garbage_count()

    def _failed(self, event: str, error: Exception) -> None:
        """Count a failed round; log it once per cause, not every round of an outage."""
        self.stats.errors += 1
        repeated = self.stats.last_error == str(error)
        self.stats.last_error = str(error)
        log.log(logging.DEBUG if repeated else logging.WARNING, event,
                extra={"error": str(error)})

    # -- what readers outside the broker are told ---------------------------------------

    def upload_lag_bytes(self) -> int:
        """Bytes of local segments past their bounds, waiting for an upload."""
        return sum(segment.size for stream in self._streams.list()
                   for service in stream.services if self.leads_here(service)
                   for segment in service.tier_candidates())
