"""The ``mainstem`` data source on PySpark's Python Data Source API: batch and streaming,
read and write. Every task talks to the broker over the stream protocol, so executors on
other machines work unchanged; except that offsets whose segments live only in the broker's
tier (an object store) are read by the tasks straight from there (``tiered``), the broker
only naming the segments, so a year of history does not pass through it.

Reads yield Arrow batches (see ``records``). Writes publish with deduplication: the
publisher reference is derived from the sink (the checkpoint location of a streaming query,
a per-job id of a batch write) and the task's partition, and the publishing id from the
micro-batch id and the row's index, so a retried task or a replayed micro-batch is not
stored twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mmh3
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from mainstem.client.stream import Endpoint, StreamClient, StreamClientError
from mainstem.formats.chunk import Chunk
from mainstem.log.tier_upload import TieredRecord
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.spark.options import (
    EARLIEST,
    LATEST,
    OffsetMap,
    SourceError,
    SourceOptions,
    TopicPartition,
    from_offset_map,
    resolve,
    to_offset_map,
    topic_partitions,
)
from mainstem.spark.records import encode_row, record_batches, schema_ddl
from mainstem.spark.tiered import TierAddress, Tiered, covering, tiered_chunks

ROWS_PER_PUBLISH = 2000
ROW_BITS = 32  # publishing id = batch id << 32 | row index + 1
ROUTING_SEED = 104729  # the seed of RabbitMQ's stream clients' hash routing


@dataclass
class OffsetRange(InputPartition):
    stream: str
    index: int
    physical: str
    start: int
    end: int  # exclusive
    endpoint: Endpoint
    include_headers: bool


@dataclass
class TieredRange(InputPartition):
    """Offsets [start, end) of a partition read from the tier: the segments that hold them."""

    stream: str
    index: int
    physical: str
    start: int
    end: int  # exclusive
    address: TierAddress
    records: tuple[TieredRecord, ...]
    include_headers: bool


class MainstemDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mainstem"

    def schema(self) -> str:
        # Called by load(): the first moment options can be refused.
        options = SourceOptions.parse(self.options)
        typed = options.body_schema
        ddl = schema_ddl(options.include_headers)
        return ddl if typed is None else f"{ddl}, {typed.spark_ddl()}"

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options)
        given = options.ending.given()
        if given:  # as Kafka: a stream has no end
            return RefusedStreamReader(SourceError(
                f"option {given[0]!r}: ending offset not valid in streaming queries (a stream "
                "has no end; read a range with spark.read)"))
        return StreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:  # as Kafka's sink
            raise SourceError('save mode "overwrite" is not allowed: a stream is only ever '
                              'appended to; use mode("append")')
        options = _write_options(self.options)
        return BatchWriter(options, f"spark-batch-{uuid.uuid4().hex}")

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        options = _write_options(self.options)
        checkpoint = self.options.get("checkpointLocation")  # options ignore case
        if not checkpoint:
            raise SourceError("a streaming write needs a checkpointLocation")
        digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
        return StreamWriter(options, f"spark-sink-{digest}")


def _write_options(raw: Mapping[str, str]) -> SourceOptions:
    """A write's options; with createStream, the named streams are created now, so that
    bad retention arguments fail before any task runs."""
    options = SourceOptions.parse_write(raw)
    if options.create_stream and options.streams:
        with options.connect() as client:
            for stream in options.streams:
                _create(client, stream, options)
    return options


def _create(client: StreamClient, stream: str, options: SourceOptions) -> None:
    try:
        client.create_stream(stream, dict(options.stream_arguments))
    except StreamClientError as exc:
        raise SourceError(f"createStream: {exc}") from None


# -- reading ------------------------------------------------------------------------------


def partition_bounds(client: StreamClient, partitions: list[TopicPartition]
          ) -> dict[TopicPartition, tuple[int, int]]:
    """(first, end) offsets of each partition now."""
    result = {}
    for tp in partitions:
        offsets = client.offsets(tp.physical)
        result[tp] = (offsets.first, offsets.end)
    return result


def _checked_start(tp: TopicPartition, start: int, first: int, fail_on_data_loss: bool) -> int:
    """Where reading really starts when retention removed offsets below `first`."""
    if start >= first:
        return start
    if fail_on_data_loss:
        raise SourceError(
            f"offsets {start}..{first - 1} of stream {tp.stream!r} partition {tp.index} were "
            "removed by retention; set failOnDataLoss=false to continue from the first "
            "offset still stored")
    return first


Span = tuple[TopicPartition, int, int]  # a partition's offsets [start, end)
Piece = tuple[TopicPartition, int, int, Tiered | None]  # a span's part, and its tier if read there


def _readers(client: StreamClient, endpoint: Endpoint, tps: Iterable[TopicPartition]
             ) -> dict[str, list[Endpoint]]:
    """Where each partition is read: in a cluster, its replicas (as Metadata names them,
    so the leader keeps its CPU for writers); alone, the node of the source's URL."""
    located = client.replicas(sorted({tp.physical for tp in tps}))
    return {physical: [dataclasses.replace(endpoint, host=host, port=port)
                       for host, port in nodes]
            for physical, nodes in located.items() if len(nodes) > 1}


def _tiers(client: StreamClient, tps: Iterable[TopicPartition], options: SourceOptions
           ) -> dict[str, Tiered]:
    """Each partition's tiered segments, as its broker lists them (with tier.direct)."""
    if not options.tier_direct:
        return {}
    found = {tp.physical: Tiered.of(client.tiered_segments(tp.physical)) for tp in tps}
    tiers = {physical: tiered for physical, tiered in found.items() if tiered is not None}
    for tiered in tiers.values():  # said now, not by every task failing on the way
        problem = tiered.address.credentials_problem(options.tier_credentials,
                                                     options.tier_instance_credentials)
        if problem is not None:
            raise SourceError(problem)
    return tiers


def _split(span: Span, tiered: Tiered | None) -> list[Piece]:
    """A span cut where its tiered offsets begin and end: those are read from the tier,
    the rest (newer, or older than the tier says it holds) through the broker."""
    tp, start, end = span
    if tiered is None:
        return [(tp, start, end, None)]
    lo, hi = min(max(start, tiered.first), end), max(min(end, tiered.end), start)
    pieces: list[Piece] = [(tp, start, lo, None), (tp, lo, hi, tiered), (tp, hi, end, None)]
    return [piece for piece in pieces if piece[2] > piece[1]]


def _plan(spans: list[Span], options: SourceOptions, readers: Mapping[str, list[Endpoint]],
          tiers: Mapping[str, Tiered]) -> list[OffsetRange | TieredRange]:
    """Input partitions as Kafka's source cuts them: at most maxRecordsPerPartition records
    each and, while that gives fewer than minPartitions, every span split in proportion to
    its share of all records. Tiered offsets are pieces of their own; a partition's other
    ranges take turns among its `readers`."""
    pieces = [piece for span in spans if span[2] > span[1]
              for piece in _split(span, tiers.get(span[0].physical))]
    total = sum(end - start for _, start, end, _ in pieces)
    cap = options.max_records_per_partition
    count = sum(-(-(end - start) // cap) if cap else 1 for _, start, end, _ in pieces)
    wanted = options.min_partitions if (options.min_partitions or 0) > count else None
    ranges: list[OffsetRange | TieredRange] = []
    for tp, start, end, tiered in pieces:
        size = end - start
        step = size if wanted is None else -(-size // max(round(size * wanted / total), 1))
        step = min(step, cap) if cap else step
        endpoints = readers.get(tp.physical) or [options.endpoint]
        for k, lo in enumerate(range(start, end, step)):
            hi = min(lo + step, end)
            ranges.append(
                OffsetRange(tp.stream, tp.index, tp.physical, lo, hi,
                            endpoints[k % len(endpoints)], options.include_headers)
                if tiered is None else
                TieredRange(tp.stream, tp.index, tp.physical, lo, hi, tiered.address,
                            covering(tiered.records, lo, hi), options.include_headers))
    return ranges


def _read(part: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    if isinstance(part, TieredRange):
        chunks = tiered_chunks(part.address, part.records, part.start, part.end,
                               options.tier_credentials,
                               instance=options.tier_instance_credentials)
    elif isinstance(part, OffsetRange):
        client = StreamClient(part.endpoint)
        chunks = _closing(client, client.chunks(part.physical, part.start, part.end))
    else:
        return  # Spark's placeholder partition when there is nothing to read
    batches = record_batches(chunks, part.stream, part.index, part.start, part.end,
                             part.include_headers)
    typed = options.body_schema
    if typed is None:
        yield from batches
        return
    names = [field.name for field in typed.arrow_fields()]
    for batch in batches:  # the typed columns made from the bodies, as a table's are
        yield pa.RecordBatch.from_arrays([*batch.columns, *typed.columns(batch.column("value"))],
                                         names=[*batch.schema.names, *names])


def _closing(client: StreamClient, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    with client:
        yield from chunks


def _past_the_end(tp: TopicPartition, start: int, end: int) -> str:
    return (f"startingOffsets for stream {tp.stream!r} partition {tp.index} is {start}, "
            f"past its end {end}")


def batch_spans(client: StreamClient, opts: SourceOptions) -> list[Span]:
    """The offsets [start, end) a batch read takes of each partition, its options checked
    against what the partitions hold now."""
    tps = topic_partitions(client, opts.current_streams())
    bounds = partition_bounds(client, tps)
    ends_now = {tp: end for tp, (_, end) in bounds.items()}
    starts = resolve(client, opts.starting, EARLIEST, tps, ends_now)
    ends = resolve(client, opts.ending, LATEST, tps, ends_now)
    spans = []
    for tp in tps:
        first, end_now = bounds[tp]
        if starts[tp] == LATEST or ends[tp] == EARLIEST:  # as Kafka refuses them
            raise SourceError(f"stream {tp.stream!r} partition {tp.index}: a batch query "
                              "cannot start at latest (-1) or end at earliest (-2)")
        start = first if starts[tp] == EARLIEST else starts[tp]
        end = end_now if ends[tp] == LATEST else min(ends[tp], end_now)
        if start > end_now:
            raise SourceError(_past_the_end(tp, start, end_now))
        if start > end:
            raise SourceError(f"stream {tp.stream!r} partition {tp.index}: starting "
                              f"offset {start} is after the ending offset {end}")
        spans.append((tp, _checked_start(tp, start, first, opts.fail_on_data_loss), end))
    return spans


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[OffsetRange | TieredRange]:
        opts = self.options
        with opts.connect() as client:
            spans = batch_spans(client, opts)
            tps = [tp for tp, _, _ in spans]
            readers = _readers(client, opts.endpoint, tps)
            tiers = _tiers(client, tps, opts)
        return _plan(spans, opts, readers, tiers)

    # Spark hands back the partitions this reader planned.
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are checkpointed by Spark. ``maxOffsetsPerTrigger`` is admission control
    (``ReadMaxRows``), spread over partitions by their lag; ``minOffsetsPerTrigger`` holds a
    micro-batch back until that many records arrived or ``maxTriggerDelay`` passed."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: StreamClient | None = None
        self._target: OffsetMap | None = None  # availableNow: what existed at the start
        self._last_trigger = time.monotonic()
        self._latest: OffsetMap | None = None  # the ends the last latestOffset saw

    @property
    def client(self) -> StreamClient:
        if self._client is None:
            self._client = self.options.connect()  # one long-lived process per query
        return self._client

    def _partitions(self) -> list[TopicPartition]:
        return topic_partitions(self.client, self.options.current_streams())

    def _now(self) -> OffsetMap:
        return to_offset_map({tp: end for tp, (_, end) in
                              partition_bounds(self.client, self._partitions()).items()})

    def initialOffset(self) -> OffsetMap:
        tps = self._partitions()
        bounds = partition_bounds(self.client, tps)
        starts = resolve(self.client, self.options.starting, LATEST, tps,
                         {tp: end for tp, (_, end) in bounds.items()})
        return to_offset_map({tp: self._initial(tp, v, *bounds[tp]) for tp, v in starts.items()})

    def _initial(self, tp: TopicPartition, wanted: int, first: int, end: int) -> int:
        """As Kafka: a start past the end is data loss (the stream was recreated or the
        offset is wrong), an error unless failOnDataLoss=false, which starts at the end."""
        start = first if wanted == EARLIEST else end if wanted == LATEST else wanted
        if start <= end:
            return start
        if self.options.fail_on_data_loss:
            raise SourceError(_past_the_end(tp, start, end) + "; set failOnDataLoss=false to "
                              "start at the end")
        return end

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._now()

    def latestOffset(self, start: OffsetMap, limit: ReadLimit) -> OffsetMap:
        latest = self._target or self._now()
        for stream, parts in start.items():  # a partition never goes backwards
            for key, offset in parts.items():
                latest.setdefault(stream, {})[key] = max(latest.get(stream, {}).get(key, 0),
                                                         offset)
        self._latest = {stream: dict(parts) for stream, parts in latest.items()}
        if not self._admitted(start, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            latest = _spread(start, latest, limit.max_rows)
        self._last_trigger = time.monotonic()
        return latest

    def reportLatestOffset(self) -> OffsetMap | None:
        """As Kafka's source: the ends of the partitions when the micro-batch was planned
        (``latestOffset`` of the query's progress), whatever the read limit admitted.
        PySpark gives Python sources no hook for custom metrics (Kafka's
        minOffsetsBehindLatest and the like: ReportsSourceMetrics is not implemented by
        PythonMicroBatchStream), so the lag is endOffset against this."""
        return self._latest

    def _admitted(self, start: OffsetMap, latest: OffsetMap) -> bool:
        """minOffsetsPerTrigger: enough new records, or waited maxTriggerDelay (availableNow
        reads what there is)."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None or self._target is not None:
            return True
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        return _lag(start, latest) >= wanted or waited_ms >= self.options.max_trigger_delay_ms

    def partitions(self, start: OffsetMap, end: OffsetMap) -> list[OffsetRange | TieredRange]:
        tps = self._partitions()
        bounds = partition_bounds(self.client, tps)
        starts = from_offset_map(start, tps)
        spans = []
        for tp, end_offset in from_offset_map(end, tps).items():
            first = bounds[tp][0]
            spans.append((tp, _checked_start(tp, starts.get(tp, first), first,
                                             self.options.fail_on_data_loss), end_offset))
        return _plan(spans, self.options, _readers(self.client, self.options.endpoint, tps),
                     _tiers(self.client, tps, self.options))

    # Spark hands back the partitions this reader planned.
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: OffsetMap) -> None:
        """Spark's checkpoint is the source of truth; nothing to do on the broker."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RefusedStreamReader(DataSourceStreamReader):
    """A streaming read whose options were refused. PySpark cannot report an error raised
    while it creates the reader (it fails on the reader it never got: UnboundLocalError), so
    the error is raised by the first call the query makes."""

    def __init__(self, error: SourceError) -> None:
        self.error = error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def initialOffset(self) -> OffsetMap:
        raise self.error

    def latestOffset(self, start: OffsetMap, limit: ReadLimit) -> OffsetMap:
        raise self.error

    def partitions(self, start: OffsetMap, end: OffsetMap) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error


def _lags(start: OffsetMap, latest: OffsetMap) -> dict[tuple[str, str], int]:
    return {(s, k): max(e - start.get(s, {}).get(k, e), 0)
            for s, parts in latest.items() for k, e in parts.items()}


def _lag(start: OffsetMap, latest: OffsetMap) -> int:
    return sum(_lags(start, latest).values())


def _spread(start: OffsetMap, latest: OffsetMap, budget: int) -> OffsetMap:
    """Cap a micro-batch at `budget` records, shared by partitions in proportion to lag."""
    lags = _lags(start, latest)
    total = sum(lags.values())
    if total <= budget:
        return latest
    capped: OffsetMap = {}
    given = 0
    for (stream, key), lag in sorted(lags.items()):
        share = min(lag, budget * lag // total)
        given += share
        capped.setdefault(stream, {})[key] = start.get(stream, {}).get(key, 0) + share
    for (stream, key), lag in sorted(lags.items()):  # rounding leftovers, in order
        extra = min(budget - given, lag - (capped[stream][key] - start.get(stream, {}).get(
            key, 0)))
        if extra > 0:
            capped[stream][key] += extra
            given += extra
    return capped


# -- writing ------------------------------------------------------------------------------


@dataclass
class Written(WriterCommitMessage):
    rows: int
    skipped: int  # rows a retried task found already stored


def publish_rows(options: SourceOptions, reference: str, batch_id: int,
             batches: Iterator[pa.RecordBatch]) -> Written:
    """Publish the rows of one task with publishing ids (batch id, row index)."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    writer = f"{reference}-{task}"
    default_stream = options.streams[0] if options.streams else None
    publishers: dict[str, tuple[int, int]] = {}  # stream -> (publisher id, last stored id)
    pending: dict[str, list[tuple[int, bytes]]] = {}
    rows = skipped = 0
    with options.connect() as client:
        router = _Router(client)
        for batch in batches:
            columns = batch.to_pydict()
            values = columns.get("value") or [None] * batch.num_rows
            keys = columns.get("key") or [None] * batch.num_rows
            headers = columns.get("headers") or [None] * batch.num_rows
            targets = _targets(columns, default_stream, batch.num_rows)
            indexes = columns.get("partition") or [None] * batch.num_rows
            for value, key, header, named, index in zip(values, keys, headers, targets, indexes,
                                                        strict=True):
                rows += 1
                if named is None:
                    raise SourceError("no target stream: give option 'stream' (or 'topic') "
                                      "or a 'topic' (or 'stream') column")
                stream = router.target(named, _bytes(key), index)
                if stream not in publishers:
                    last = _declare(client, len(publishers), writer, stream, options)
                    publishers[stream] = (len(publishers), last)
                publishing_id = (batch_id << ROW_BITS) | rows
                if publishing_id <= publishers[stream][1]:
                    skipped += 1  # stored by an earlier attempt of this task
                    continue
                queue = pending.setdefault(stream, [])
                queue.append((publishing_id, encode_row(_bytes(value), _bytes(key), header)))
                if len(queue) >= ROWS_PER_PUBLISH:
                    _flush(client, publishers, stream, queue)
            for stream, queue in pending.items():  # each Arrow batch is stored as it comes
                _flush(client, publishers, stream, queue)
    return Written(rows, skipped)


def _targets(columns: dict[str, list[Any]], option: str | None, rows: int) -> list[str | None]:
    """Each row's stream, as Kafka's sink picks a topic: the option overrides the row's
    ``topic`` column (``stream`` is the same column under this source's name)."""
    if option is not None:
        return [option] * rows
    streams, topics = columns.get("stream"), columns.get("topic")
    if streams is None or topics is None:
        return streams or topics or [None] * rows
    for stream, topic in zip(streams, topics, strict=True):
        if stream is not None and topic is not None and stream != topic:
            raise SourceError(f"a row names stream {stream!r} in column 'stream' and "
                              f"{topic!r} in column 'topic': drop one of them")
    return [topic if stream is None else stream
            for stream, topic in zip(streams, topics, strict=True)]


class _Router:
    """Rows addressed to a super stream go to one of its partition streams: the one their
    ``partition`` column names, else the one their key hashes to, as RabbitMQ's Java stream
    client routes: murmur3 x86 32-bit of the key's UTF-8 bytes, seed 104729, its unsigned
    remainder by the partition count (``Integer.remainderUnsigned``), partitions in the
    order the broker lists them."""

    def __init__(self, client: StreamClient) -> None:
        self._client = client
        self._members: dict[str, list[str] | None] = {}  # None: a plain stream

    def target(self, stream: str, key: bytes | None, index: int | None) -> str:
        if stream not in self._members:
            self._members[stream] = self._client.partitions(stream)
        members = self._members[stream]
        if not members or members == [stream]:  # the broker answers a plain stream with itself
            return stream
        if index is not None:
            if not 0 <= index < len(members):
                raise SourceError(f"partition {index} of super stream {stream!r} does not "
                                  f"exist: it has {len(members)}")
            return members[index]
        if key is None:
            raise SourceError(f"a row for super stream {stream!r} needs a key or a partition")
        return members[mmh3.hash(key, ROUTING_SEED, signed=False) % len(members)]


def _declare(client: StreamClient, publisher_id: int, writer: str, stream: str,
             options: SourceOptions) -> int:
    """Declare the task's publisher on a stream; a missing stream named by a row is created
    with createStream, or the error says how to get it created."""
    try:
        return client.declare_publisher(publisher_id, writer, stream)
    except StreamClientError as exc:
        if exc.code != ResponseCode.STREAM_DOES_NOT_EXIST:
            raise
        if not options.create_stream:
            raise SourceError(f"{exc}; set option createStream=true (with maxAge/maxBytes "
                              "for its retention) to create it") from None
    _create(client, stream, options)
    return client.declare_publisher(publisher_id, writer, stream)


def _flush(client: StreamClient, publishers: dict[str, tuple[int, int]], stream: str,
           queue: list[tuple[int, bytes]]) -> None:
    if queue:
        client.publish(publishers[stream][0], queue)
        queue.clear()


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SourceOptions, reference: str) -> None:
        self.options = options
        self.reference = reference  # made on the driver: the same for every task attempt

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return publish_rows(self.options, self.reference, 0, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SourceOptions, reference: str) -> None:
        self.options = options
        self.reference = reference

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        context = TaskContext.get()
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0) \
            if context is not None else 0
        return publish_rows(self.options, self.reference, batch_id + 1, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are stored (and deduplicated) by the tasks themselves."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A failed micro-batch is replayed with the same ids, so nothing to undo."""
