"""Streams as tables (issue 42): a stream declared with `x-table: parquet` is also written,
in the background, as Parquet data files with Iceberg v2 metadata in the tier, under
`tables/{stream directory}/` (see docs/tables.md).

Each round, for every partition this node leads (`Tiering.leads_here`, as uploads are
fenced), the committed records past the table's end are read through the stream service,
turned into the Spark source's rows (`rows`: `spark.records.record_batches`, handed in by
the server so the broker does not import the Spark floor), with typed columns when the
stream declares its JSON bodies' schema (`table_schema`), and written as one Parquet file
(up to where the day of `timestamp` changes: the table is partitioned by stream partition
and that day, and a file is in one partition):
- under a key no other write makes (`{first offset:020}-{epoch}-{random}.parquet`), noted
  before the put begins (`Catalog.begin_upload`: what a crash leaves of it is deleted at the
  next start by the tiering's recovery), the put itself atomic (`Tier.put`);
- committed by its record in the catalog (`Catalog.record_table_file`, in a cluster under
  the leader's fence): the record is the table's commit point, and the table's end for
  the partition is the last record's `next_offset`, so no record is written twice;
- then added to the Iceberg table (pyiceberg's `add_files`) by the node leading
  partition 0, whose new metadata location is recorded as the table's next head version
  (`Catalog.record_table_head`, under partition 0's fence). The Iceberg metadata is rolled
  forward from the records: a record whose file is not in it yet (a crash between the
  two) is added in the next round.

A file not committed (a failed put, a fenced record) goes through the tier's durable
garbage queue, as an unrecorded upload does; so do the files retention expires, a rebuild
drops or a removed partition leaves, and the metadata objects no head names any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mainstem.broker.catalog import Catalog, TableFile, TableHead
from mainstem.broker.errors import PreconditionFailed
from mainstem.broker.fence import FencedOut
from mainstem.broker.stream_service import PartitionService
from mainstem.broker.streams import Stream, StreamStore
from mainstem.broker.table_mode import table_format
from mainstem.broker.tiering import TIER_ERRORS, Tiering
from mainstem.formats.chunk import Chunk
from mainstem.formats.table_schema import BodySchema, body_schema

if TYPE_CHECKING:  # pyiceberg's catalog takes half a second to import: on first use only
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

log = logging.getLogger("mainstem.tables")


def _not_a_missing_statistic(record: logging.LogRecord) -> bool:
    """pyiceberg warns of every column without statistics in every file it adds: those
    are left out on purpose (STATISTICS_COLUMNS)."""
    return not record.getMessage().startswith("PyArrow statistics missing")


logging.getLogger("pyiceberg.io.pyarrow").addFilter(_not_a_missing_statistic)

# The rows of chunks in [start, end) as the Spark source maps them: (chunks, stream,
# partition, start, end) -> Arrow batches.
RowMapping = Callable[[Iterable[Chunk], str, int, int, int], Iterator[pa.RecordBatch]]
PREFIX = "tables"
NAMESPACE = "mainstem"
FILE_BYTES = 64 << 20  # chunk bytes per data file at most (bounds a write's memory)
ROW_GROUP_ROWS = 1 << 20  # large row groups: scans read few, skip by statistics
# Columns with few distinct values; a dictionary for bodies costs CPU and rarely pays
# (measured: a third of the Parquet encoding's time with it on every column)
DICTIONARY_COLUMNS = ["stream", "topic", "key", "partition", "timestampType"]
# Statistics where readers prune by them; a body's min and max cost and never prune
STATISTICS_COLUMNS = ["partition", "offset", "timestamp"]
# Iceberg table properties: the metadata log bounded, and appends merging manifests, so
# the metadata a head reaches stays bounded with snapshot expiry
TABLE_PROPERTIES = {"write.metadata.previous-versions-max": "8",
                    "commit.manifest-merge.enabled": "true"}
DAY_US = 86_400_000_000  # the spec's time partition: the day of `timestamp`
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TableRows:
    """How records become a table's rows: the Spark source's mapping and its schema."""

    batches: RowMapping
    schema: pa.Schema


@dataclass(slots=True)
class TableStats:
    files: int = 0  # data files committed by this node
    rows: int = 0
    bytes: int = 0
    errors: int = 0  # failed rounds of a table
    fenced: int = 0  # files, expiries or head versions not committed: another node led
    expired: int = 0  # data files retention or a rebuild took out of a table
    last_error: str | None = None


@dataclass(slots=True)
class _Errors:
    """One table's failed rounds, for the API and metrics."""

    count: int = 0
    last: str | None = None


class Tables:
    def __init__(self, tiering: Tiering, streams: StreamStore, catalog: Catalog,
                 rows: TableRows) -> None:
        self.stats = TableStats()
        self._tiering = tiering
        self._streams = streams
        self._catalog = catalog
        self._rows = rows.batches
        self._source_schema = rows.schema
        self._root, self._properties = _warehouse(tiering)
        # pyiceberg is blocking: one thread of its own, in which its catalog is made (in
        # memory: the head versions are in ours), so that the thread's is the one
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tables")
        self._iceberg: SqlCatalog | None = None
        self._io_token: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # the Iceberg tables as last read or committed, by directory, with their files
        self._heads: dict[str, tuple[Table, set[str]]] = {}
        self._manifests: dict[str, tuple[str, ...]] = {}  # by manifest list (immutable)
        self._written: list[str] = []  # metadata objects put by the commit in progress
        self._errors: dict[tuple[str, str], _Errors] = {}
        self._task: asyncio.Task[None] | None = None
        self._forgetting: set[asyncio.Task[None]] = set()
        # a deleted stream's objects are listed between rounds, never during one (which
        # may still be making its metadata); a rebuild waits for the round too
        self._round_lock = asyncio.Lock()
        streams.watch(self._stream_deleted)
        streams.watch_shrinks(self._partitions_removed)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run())

    async def close(self) -> None:
        tasks = [task for task in (self._task, *self._forgetting) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # waited for off the loop: the thread's work may be putting through it
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown)
        if self._io_token is not None:
            from mainstem.broker import table_io  # see TYPE_CHECKING above
            table_io.unregister(self._io_token)

    def _stream_deleted(self, stream: Stream) -> None:
        """A deleted stream's table goes with it, after the grace period: its records
        went with the stream's, so its objects are those under its prefix now (a stream
        made again under its name writes there anew, under new keys)."""
        if not self.is_table(stream):
            return
        self._errors.pop((stream.namespace, stream.name), None)
        task = asyncio.get_running_loop().create_task(self._forget(stream))
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    def _partitions_removed(self, stream: Stream, removed: Sequence[PartitionService]) -> None:
        """Partitions removed from a stream: their data files leave the table as expired
        ones do, on every node (a delete of a gone key is done): their records go (in a
        cluster they left etcd with the partitions' keys), their objects after the grace
        period; the next Iceberg commit takes them out of the metadata."""
        files = self._catalog.drop_table_files(stream.namespace, stream.name,
                                               len(stream.services), self._tiering.due_ms(),
                                               "partition removed")
        self._tiering.pending_changed()
        self.stats.expired += len(files)
        for file in files:
            log.info("table.expired", extra={"key": file.key, "reason": "partition removed"})

    async def _forget(self, stream: Stream) -> None:
        async with self._round_lock:
            self._heads.pop(stream.directory.name, None)
            try:
                keys = await self._tiering.tier.list(self._prefix(stream))
            except TIER_ERRORS as error:
                self._failed(error)
                return
            self._tiering.delete_later(keys, "stream deleted")

    def table_streams(self) -> list[Stream]:
        return [stream for stream in self._streams.list() if self.is_table(stream)]

    @staticmethod
    def is_table(stream: Stream) -> bool:
        return table_format(stream.record.arguments, stream.applied.definition) is not None

    @staticmethod
    def body_schema(stream: Stream) -> BodySchema | None:
        """The stream's declared schema of its JSON bodies, if any."""
        return body_schema(stream.record.arguments, stream.applied.definition)

    def schema(self, stream: Stream) -> pa.Schema:
        """The table's columns: the source's, then the declared body fields' and
        `schema_error`."""
        declared = self.body_schema(stream)
        if declared is None:
            return self._source_schema
        return pa.schema([*self._source_schema, *declared.arrow_fields()])

    # -- what the API and metrics show -------------------------------------------------

    def table_end(self, stream: Stream, index: int) -> int:
        """The offset the partition's table holds records up to (not including)."""
        end = self._catalog.table_end(stream.namespace, stream.name, index)
        return stream.services[index].first_offset if end is None else end

    def lag(self, stream: Stream) -> int:
        """Records committed in the stream and not yet in its table."""
        return sum(max(0, service.committed_offset - self.table_end(stream, index))
                   for index, service in enumerate(stream.services))

    def location(self, stream: Stream) -> str:
        return f"{self._root}/{self._prefix(stream)}"

    def metadata_location(self, stream: Stream) -> str | None:
        head = self._catalog.table_head(stream.namespace, stream.name)
        return None if head is None else head[1]

    def summary(self, stream: Stream) -> dict[str, Any]:
        """The table's committed data files, rows and bytes, its metadata objects, and
        its failed rounds on this node."""
        files = [file for partition in
                 self._catalog.table_files(stream.namespace, stream.name).values()
                 for file in partition]
        heads = self._catalog.table_heads(stream.namespace, stream.name)
        errors = self._errors.get((stream.namespace, stream.name), _Errors())
        return {"files": len(files), "rows": sum(file.rows for file in files),
                "bytes": sum(file.size for file in files),
                "metadata_objects": len(heads[max(heads)].objects) if heads else 0,
                "errors": errors.count, "last_error": errors.last}

    # -- the rounds ------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if self._tiering.owner is not None:  # started: a crash's uploads are swept
                try:
                    if await self.round() is not None:
                        self.stats.last_error = None
                except Exception as error:  # whatever failed, the next round tries again
                    self._failed(error)
            await asyncio.sleep(self._tiering.settings.check_interval_s)

    async def round(self) -> int | None:
        """Expire, then write every table partition this node leads up to its committed
        end, then bring each table's Iceberg metadata up to its records; how many files
        (None: a table's round failed, counted as its error, the others went on)."""
        async with self._round_lock:
            written: int | None = 0
            for stream in self.table_streams():
                if self._streams.find(stream.namespace, stream.name) is not stream:
                    continue  # deleted during this round
                try:
                    count = await self._table_round(stream)
                except Exception as error:  # this table's; the next round tries again
                    self._failed(error, stream)
                    written = None
                else:
                    written = None if written is None else written + count
            return written

    async def _table_round(self, stream: Stream) -> int:
        written = 0
        for index, service in enumerate(stream.services):
            if self._tiering.leads_here(service):
                await self._expire(stream, index, service, "retention")
                written += await self._catch_up(stream, index, service)
        if self._tiering.leads_here(stream.services[0]):
            await self._commit_metadata(stream)
        return written

    async def _expire(self, stream: Stream, index: int, service: PartitionService,
                      reason: str, everything: bool = False) -> int:
        """The partition's data files that hold no record the stream keeps (all of them
        for a rebuild) go: their records under the fence, their objects after the grace
        period; the next Iceberg commit takes them out of the table."""
        files = self._catalog.table_files(stream.namespace, stream.name).get(index, [])
        first = service.first_offset
        expired = [file for file in files if everything or file.next_offset <= first]
        if not expired:
            return 0
        try:
            await self._catalog.expire_table_files(stream.namespace, stream.name, index,
                                                   expired, service.fence,
                                                   self._tiering.due_ms(), reason)
        except FencedOut as error:
            self.stats.fenced += 1
            log.warning("table.expire_fenced", extra={"stream": stream.name,
                                                      "error": str(error)})
            return 0
        finally:
            self._tiering.pending_changed()
        self.stats.expired += len(expired)
        for file in expired:
            log.info("table.expired", extra={"key": file.key, "reason": reason})
        return len(expired)

    async def rebuild(self, stream: Stream) -> int:
        """Write the table again from the stream's start: every data file's record and
        every head version go (under the fences; the objects after the grace period, so
        readers of the old metadata finish), and the next round writes a new table from
        the stream's first offset. Only on the node leading every partition. How many
        data files were dropped."""
        async with self._round_lock:
            if not all(self._tiering.leads_here(service) for service in stream.services):
                raise PreconditionFailed(f"stream '{stream.name}': this node does not lead "
                                         "every partition; rebuild it on the leader")
            dropped = 0
            for index, service in enumerate(stream.services):
                dropped += await self._expire(stream, index, service, "table rebuilt",
                                              everything=True)
            await self._catalog.drop_table_heads(
                stream.namespace, stream.name,
                await self._named(self._catalog.table_heads(stream.namespace, stream.name)),
                set(), stream.services[0].fence, self._tiering.due_ms(), "table rebuilt")
            self._tiering.pending_changed()
            self._heads.pop(stream.directory.name, None)
            self._errors.pop((stream.namespace, stream.name), None)
            log.info("table.rebuilding", extra={"stream": stream.name, "files": dropped})
            return dropped

    async def _catch_up(self, stream: Stream, index: int, service: PartitionService) -> int:
        """Write files until the table holds what was committed when the round began."""
        target = service.committed_offset
        written = 0
        while self.table_end(stream, index) < target:
            if not await self._write(stream, index, service):
                break
            written += 1
        return written

    async def _write(self, stream: Stream, index: int, service: PartitionService) -> int:
        start = self.table_end(stream, index)
        if service.committed_offset <= start:
            return 0
        chunks = await _committed_chunks(service, start, FILE_BYTES)
        if not chunks:
            return 0
        data = await asyncio.to_thread(self._parquet, chunks, stream, index, start,
                                       chunks[-1].next_offset)
        if data is None:  # no rows (a chunk of filtered-out entries): nothing to commit
            return 0
        end = data[2]
        await self._tiering.check_marker()
        fence = service.fence
        key = (f"{self._prefix(stream)}/data/partition={index}/"
               f"{start:020d}-{service.epoch}-{uuid.uuid4().hex}.parquet")
        self._catalog.begin_upload(key)
        try:
            await self._tiering.tier.put(key, data[0])
        except BaseException:
            self._catalog.discard_upload(key, (key,), "a table write that failed")
            raise
        if self._streams.find(stream.namespace, stream.name) is not stream:
            self._catalog.discard_upload(key, (key,), "the stream was deleted meanwhile")
            return 0
        file = TableFile(key, start, end, data[1], len(data[0]))
        try:
            await self._catalog.record_table_file(stream.namespace, stream.name, index, file,
                                                  fence)
        except FencedOut as error:
            self.stats.fenced += 1
            log.warning("table.write_fenced", extra={"key": key, "error": str(error)})
            self._catalog.discard_upload(key, (key,), "not committed: another node leads")
            return 0
        self.stats.files += 1
        self.stats.rows += file.rows
        self.stats.bytes += file.size
        log.info("table.written", extra={"key": key, "rows": file.rows, "bytes": file.size})
        return 1

    def _parquet(self, chunks: list[Chunk], stream: Stream, index: int, start: int, end: int
                 ) -> tuple[bytes, int, int] | None:
        """(In a thread.) The Parquet file of the records from `start` up to `end` or the
        first whose day (of `timestamp`) is not the first's, its rows and where it ends:
        a file is in one partition of the table's spec."""
        table = pa.Table.from_batches(
            list(self._rows(chunks, stream.name, index, start, end)), self._source_schema)
        if not table.num_rows:
            return None
        table, end = _one_day(table, end)
        declared = self.body_schema(stream)
        if declared is not None:
            for field, column in zip(declared.arrow_fields(),
                                     declared.columns(table.column("value").combine_chunks()),
                                     strict=True):
                table = table.append_column(field, column)
        out = io.BytesIO()
        pq.write_table(table, out, row_group_size=ROW_GROUP_ROWS, compression="zstd",
                       use_dictionary=DICTIONARY_COLUMNS, write_statistics=STATISTICS_COLUMNS)
        return out.getvalue(), table.num_rows, end

    async def _commit_metadata(self, stream: Stream) -> None:
        """Bring the Iceberg table up to the records: add every committed file it does
        not hold, take out those whose records went (retention), expire snapshots older
        than the grace period; record the new head, naming the metadata objects it
        reaches, and drop the older heads (their objects no longer reached go after the
        grace period). Every metadata object is put through the tier (`table_io`)."""
        keep = {f"{self._root}/{file.key}" for partition in
                self._catalog.table_files(stream.namespace, stream.name).values()
                for file in partition}
        head = self._catalog.table_head(stream.namespace, stream.name)
        if not keep and head is None:
            return  # the metadata is made with the first file, on an owned tier
        await self._tiering.check_marker()
        fence = stream.services[0].fence
        self._written = []
        try:
            made = await self._in_thread(self._update, stream, keep)
        except BaseException:
            self._discard_written("a table commit that failed")
            raise
        if made is None:
            self._discard_written("a table commit that changed nothing")
            return
        if self._streams.find(stream.namespace, stream.name) is not stream:
            self._discard_written("the stream was deleted meanwhile")
            return  # its objects go with it
        version = 0 if head is None else head[0] + 1
        try:
            await self._catalog.record_table_head(stream.namespace, stream.name, version,
                                                  made, self._written, fence)
        except FencedOut as error:  # another node leads: its head holds, read it again
            self.stats.fenced += 1
            self._heads.pop(stream.directory.name, None)
            self._discard_written("not committed: another node leads")
            log.warning("table.commit_fenced", extra={"stream": stream.name,
                                                      "error": str(error)})
            return
        older = {v: h for v, h in self._catalog.table_heads(stream.namespace, stream.name)
                 .items() if v < version}
        if not older:
            return
        try:
            await self._catalog.drop_table_heads(
                stream.namespace, stream.name, await self._named(older), set(made.objects),
                fence, self._tiering.due_ms(), "table metadata expired")
        except FencedOut as error:  # the new leader drops them with its next head
            self.stats.fenced += 1
            log.warning("table.expire_fenced", extra={"stream": stream.name,
                                                      "error": str(error)})
        self._tiering.pending_changed()

    def _discard_written(self, reason: str) -> None:
        for key in self._written:
            self._catalog.discard_upload(key, (key,), reason)
        if self._written:
            self._tiering.pending_changed()
        self._written = []

    def _update(self, stream: Stream, keep: set[str]) -> TableHead | None:
        """(In the thread.) Commit what changed to the stream's Iceberg table; the new
        head, or None when nothing changed."""
        table, held = self._head(stream)
        missing = sorted(keep - held)
        gone = held - keep
        expiring = _expiring(table, time.time() - self._tiering.settings.delete_grace_s)
        if not (missing or gone or expiring or _unset(table)):
            return None
        if _unset(table):
            with table.transaction() as setting:
                setting.set_properties(TABLE_PROPERTIES)
        if gone:
            with table.transaction() as taking, taking.update_snapshot().overwrite() as rewrite:
                for task in table.scan().plan_files():
                    if task.file.file_path in gone:
                        rewrite.delete_data_file(task.file)
            held -= gone
        if missing:
            _widen(table, self.schema(stream))
            table.add_files(missing)
            held.update(missing)
        expiring = _expiring(table, time.time() - self._tiering.settings.delete_grace_s)
        if expiring:
            table.maintenance.expire_snapshots().by_ids(expiring).commit()
        return TableHead(table.metadata_location, self._reachable(table))

    def _reachable(self, table: Table) -> tuple[str, ...]:
        """The tier keys of the metadata objects `table`'s metadata reaches: itself, the
        older files its log names, each snapshot's manifest list and manifests."""
        found, self._manifests = _reached(table, self._manifests, self._root)
        return found  # the manifests known are only the live snapshots' lists

    async def _named(self, heads: dict[int, TableHead]) -> dict[int, TableHead]:
        """`heads`, each naming the objects it reaches: a head recorded before migration
        15 names none (its column's default), so what its metadata reaches is read, for
        its objects to go with it rather than stay in the tier forever."""
        return {version: head if head.objects else await self._in_thread(self._read_head, head)
                for version, head in heads.items()}

    def _read_head(self, head: TableHead) -> TableHead:
        """(In the thread.) `head` with the objects its metadata reaches; as it is (its
        objects left in the tier, and said) if its metadata cannot be read."""
        from pyiceberg.table import StaticTable  # see TYPE_CHECKING above
        try:
            table = StaticTable.from_metadata(head.metadata_location, self._properties)
            found, _ = _reached(table, {}, self._root)
        except Exception as error:  # whatever pyiceberg raises of a missing or bad object
            log.warning("table.head_unread", extra={"metadata": head.metadata_location,
                                                    "error": repr(error)})
            return head
        return TableHead(head.metadata_location, found)

    def _head(self, stream: Stream) -> tuple[Table, set[str]]:
        """The stream's Iceberg table as this node last committed it (made, without
        files, when there is none yet), and the data files it holds."""
        name = stream.directory.name
        found = self._heads.get(name)
        if found is not None and found[0].metadata_location == self.metadata_location(stream):
            return found
        identifier = (NAMESPACE, name)
        iceberg = self._catalog_here()
        from pyiceberg.exceptions import NoSuchTableError  # see TYPE_CHECKING above
        with contextlib.suppress(NoSuchTableError):
            iceberg.drop_table(identifier)  # another metadata location: read it again
        head = self.metadata_location(stream)
        if head is None:
            table = iceberg.create_table(identifier, schema=self.schema(stream),
                                         location=self.location(stream),
                                         properties=TABLE_PROPERTIES)
            from pyiceberg.transforms import DayTransform  # see TYPE_CHECKING above
            with table.update_spec() as spec:
                spec.add_identity("partition")
                spec.add_field("timestamp", DayTransform(), "timestamp_day")
        else:
            table = iceberg.register_table(identifier, head)
        held = {task.file.file_path for task in table.scan().plan_files()}
        self._heads[name] = (table, held)
        return table, held

    def _catalog_here(self) -> SqlCatalog:
        if self._iceberg is None:
            from pyiceberg.catalog.sql import SqlCatalog  # see TYPE_CHECKING above

            from mainstem.broker import table_io
            self._io_token = table_io.register(self._put_metadata)
            self._iceberg = SqlCatalog(NAMESPACE, uri="sqlite:///:memory:",
                                       warehouse=f"{self._root}/{PREFIX}",
                                       **{**self._properties, "py-io-impl": table_io.IMPL,
                                          table_io.PUT_PROPERTY: self._io_token})
            self._iceberg.create_namespace(NAMESPACE)
        return self._iceberg

    def _put_metadata(self, location: str, data: bytes) -> None:
        """(In the thread.) Put a metadata object pyiceberg wrote, on the loop: noted as an
        upload first, create-only and durable (`Tier.put`)."""
        key = location.removeprefix(f"{self._root}/")
        assert self._loop is not None and key != location, location

        async def put() -> None:
            self._catalog.begin_upload(key)
            self._written.append(key)
            await self._tiering.tier.put(key, data)
        asyncio.run_coroutine_threadsafe(put(), self._loop).result(
            self._tiering.tier.timeout * 2)  # a put is bounded by the tier's timeout

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    def _prefix(self, stream: Stream) -> str:
        return f"{PREFIX}/{stream.directory.name}"

    def _failed(self, error: Exception, stream: Stream | None = None) -> None:
        self.stats.errors += 1
        repeated = self.stats.last_error == str(error)
        self.stats.last_error = str(error)
        if stream is not None:
            errors = self._errors.setdefault((stream.namespace, stream.name), _Errors())
            errors.count += 1
            errors.last = str(error)
        log.log(logging.DEBUG if repeated else logging.WARNING, "table.round_failed",
                extra={"error": str(error), "stream": None if stream is None else stream.name})


def _reached(table: Table, known: dict[str, tuple[str, ...]], root: str
             ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The tier keys (below `root`) of the metadata objects `table`'s metadata reaches:
    itself, the older files its log names, each snapshot's manifest list and manifests;
    and the manifests of each of its snapshots' lists (`known`: some already read)."""
    found = {table.metadata_location,
             *(entry.metadata_file for entry in table.metadata.metadata_log)}
    manifests: dict[str, tuple[str, ...]] = {}
    for snapshot in table.metadata.snapshots:
        listed = known.get(snapshot.manifest_list)
        if listed is None:
            listed = tuple(manifest.manifest_path for manifest in snapshot.manifests(table.io))
        manifests[snapshot.manifest_list] = listed
        found.update((snapshot.manifest_list, *listed))
    prefix = f"{root}/"
    return tuple(sorted(location.removeprefix(prefix) for location in found
                        if location.startswith(prefix))), manifests


def _expiring(table: Table, before_s: float) -> list[int]:
    """Snapshots older than `before_s` (Unix seconds), the current one kept."""
    current = table.metadata.current_snapshot_id
    return [snapshot.snapshot_id for snapshot in table.metadata.snapshots
            if snapshot.timestamp_ms < before_s * 1000 and snapshot.snapshot_id != current]


def _widen(table: Table, schema: pa.Schema) -> None:
    """Add the columns of `schema` the table lacks (a policy's body schema that gained a
    field): files written since hold them, older ones read as null."""
    if set(schema.names) - set(table.schema().column_names):
        with table.update_schema() as update:
            update.union_by_name(schema)


def _one_day(table: pa.Table, end: int) -> tuple[pa.Table, int]:
    """`table`'s rows up to the first whose day (UTC, of `timestamp`) is not the first
    row's, and the offset they end at (`end` when all are of one day)."""
    days = pc.divide(table.column("timestamp").cast(pa.int64()), DAY_US)
    other = pc.index(pc.not_equal(days, days[0]), True).as_py()
    if other < 0:
        return table, end
    return table.slice(0, other), table.column("offset")[other].as_py()


def _unset(table: Table) -> bool:
    """Whether the table lacks the writer's properties (made before they were set)."""
    return any(table.properties.get(name) != value for name, value in TABLE_PROPERTIES.items())


async def _committed_chunks(service: PartitionService, start: int, max_bytes: int
                            ) -> list[Chunk]:
    """Committed chunks from the one holding `start`, up to about `max_bytes`."""
    reader = service.subscribe(start)
    chunks: list[Chunk] = []
    size = 0
    while size < max_bytes:
        chunk = await reader.next_whole_chunk()
        if chunk is None:
            break
        chunks.append(chunk)
        size += len(chunk.data)
    return chunks


def _warehouse(tiering: Tiering) -> tuple[str, dict[str, str]]:
    """The tier's root as Iceberg names files, and pyiceberg's properties to reach it."""
    settings = tiering.settings
    if not settings.url.startswith("s3://"):
        return Path(settings.url.removeprefix("file://")).resolve().as_uri(), {}
    properties = {"s3.region": settings.region}
    for name, value in (("s3.endpoint", settings.endpoint),
                        ("s3.access-key-id", settings.access_key_id),
                        ("s3.secret-access-key", settings.secret_access_key)):
        if value is not None:
            properties[name] = value
    return settings.url.rstrip("/"), properties
