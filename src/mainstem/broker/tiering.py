"""Tiering: a stream's sealed segments move to an object store and are read from there.

Each round, every partition this node leads gives its tier candidates (`PartitionService.
tier_candidates`: sealed, committed, past the stream's local bounds, oldest first). Each is
uploaded and verified (`log.tier_upload`), recorded in the catalog, and only then swapped
for its tiered twin, the local files deleted: the catalog row is the commit point. So a
crash before the row leaves the local segment in use and perhaps objects nobody names
(swept at the next start); a crash after it leaves a local copy that the next start deletes
(`Segments.attach_tiered`). The tier unreachable: uploads wait for the next round, local
disk grows until the disk alarm holds publishers, and reads of tiered ranges fail with
`TierUnavailable` until it is back.

Retention counts tiered segments too: dropping one deletes its row, then its objects (in
the background, retried). A deleted stream's objects go the same way, by prefix, and so
do those of partitions removed from a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass

from mainstem.broker.catalog import Catalog
from mainstem.broker.settings import TieringSettings
from mainstem.broker.stream_service import PartitionService, Segment
from mainstem.broker.streams import Stream, StreamStore
from mainstem.log.descriptors import DescriptorCache
from mainstem.log.errors import TierUnavailable
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import TieredRecord, UploadMismatch, upload_segment

log = logging.getLogger("mainstem.tiering")

# What a failed upload or delete may raise; the round stops and the next one tries again.
TIER_ERRORS = (TierUnavailable, UploadMismatch, OSError)
# An object written when a tier is first used (and a file in the cache directory saying
# so). From then on uploads and deletes check it is there: a directory tier whose mount is
# missing (an empty mount point) would otherwise take segments onto the local disk,
# hidden once the store is mounted again, or look empty to a delete.
MARKER = ".mainstem-tier"
IN_USE = "tier-in-use"


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
        self.stats = TieringStats()
        self._streams = streams
        self._catalog = catalog
        self._deletes: deque[str] = deque()  # keys, or prefixes ending in "/"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._marker_seen = False  # in this round: one look at the store, not one per object
        streams.watch(self._stream_deleted)
        streams.watch_shrinks(self._partitions_removed)

    async def open(self) -> None:
        """Put every partition's tiered segments in its log, then sweep what no record
        names (uploads a crash cut short), then start the rounds. A cluster's node does not
        sweep: its catalog may lag the cluster's, and another node may be uploading."""
        known: set[str] = set()
        for stream in self._streams.list():
            for index, service in enumerate(stream.services):
                records = self._catalog.tiered(stream.namespace, stream.name, index)
                await service.attach_tiered(records, self.tier, self.cache)
                self._watch(stream, index, service)
                known.update(key for r in records for key in (r.key, r.index_key))
        if self.settings.sweep_at_start:
            with contextlib.suppress(*TIER_ERRORS):  # the tier down: swept at the next start
                self.tier.sweep_temporary()
                self._deletes.extend(key for key in await self.tier.list("")
                                     if key not in known and key != MARKER)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _watch(self, stream: Stream, index: int, service: PartitionService) -> None:
        def dropped(record: TieredRecord) -> None:
            if not service.takes_writes:  # a follower forgets; its leader deletes
                return
            self._catalog.delete_tiered(stream.namespace, stream.name, index,
                                        record.first_chunk_id)
            self._delete(record.key, record.index_key)

        service.on_tier_dropped(dropped)

    # -- the rounds --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
                self.stats.last_error = None
            except Exception as error:  # whatever failed, the next round tries again
                self._failed("tier.round_failed", error)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.check_interval_s)

    async def round(self) -> int:
        """Delete what waits to be deleted, then tier every candidate of the partitions
        this node leads; how many segments were tiered."""
        self._marker_seen = False
        await self._delete_pending()
        tiered = 0
        for stream in self._streams.list():
            for index, service in enumerate(stream.services):
                if not service.takes_writes:  # a follower: its leader uploads
                    await self._follow(stream, index, service)
                    continue
                for segment in service.tier_candidates():
                    await self._check_marker()
                    tiered += await self._tier(stream, index, service, segment)
        return tiered

    async def _check_marker(self) -> None:
        """The tier is the one segments went to (see MARKER); marked on first use. Looked
        at once a round, before the round's first upload or prefix delete."""
        if self._marker_seen or await self.tier.exists(MARKER):
            self._marker_seen = True
            return
        in_use = self.settings.cache_dir / IN_USE
        if in_use.exists() or self._catalog.any_tiered():
            raise TierUnavailable(self.tier.name, MARKER, "the tier's marker is missing: is "
                                  "its store mounted?")
        await self.tier.put(MARKER, b"mainstem tier\n")
        in_use.write_text(self.location.url + "\n")
        self._marker_seen = True

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
        prefix = f"{stream.directory.name}/{index}"
        record = await upload_segment(self.tier, segment, prefix)
        if segment.deleted or self._streams.find(stream.namespace, stream.name) is not stream:
            self._delete(record.key, record.index_key)  # retention or a delete came first
            return 0
        await self._catalog.record_tiered(stream.namespace, stream.name, index, record)
        self._watch(stream, index, service)
        if not await service.swap_tiered(segment, record, self.tier, self.cache):
            # retention took the local segment meanwhile: its row and objects go too
            self._catalog.delete_tiered(stream.namespace, stream.name, index,
                                        record.first_chunk_id)
            self._delete(record.key, record.index_key)
            return 0
        self.stats.uploads += 1
        self.stats.uploaded_bytes += record.segment_size + record.index_size
        log.info("tier.uploaded", extra={"key": record.key, "bytes": record.segment_size})
        return 1

    # -- deleting objects -------------------------------------------------------------

    def _stream_deleted(self, stream: Stream) -> None:
        self._delete(f"{stream.directory.name}/")

    def _partitions_removed(self, stream: Stream, removed: range) -> None:
        self._delete(*(f"{stream.directory.name}/{index}/" for index in removed))

    def _delete(self, *keys: str) -> None:
        self._deletes.extend(keys)
        self.stats.deletes_pending = len(self._deletes)
        self._wake.set()

    async def _delete_pending(self) -> None:
        while self._deletes:
            key = self._deletes[0]
            if key.endswith("/"):
                await self._check_marker()  # a missing mount lists as empty
                self._deletes.extend(await self.tier.list(key.rstrip("/")))
            else:
                await self.tier.delete(key)
            self._deletes.popleft()
            self.stats.deletes_pending = len(self._deletes)

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
                   for service in stream.services if service.takes_writes
                   for segment in service.tier_candidates())
