"""A table-enabled stream read by Spark's own Parquet scan (its history) and the
``mainstem`` source (only the tail past the table): ``read_stream_table``.

PySpark's Python data source cannot hand a scan to another source: its reader can only
yield rows or Arrow batches from Python, which is the ceiling the table is there to lift.
So the hand-off is made in the driver, before the plan: the stream's committed table
(the Iceberg metadata of its head version, as ``GET /api/tiering`` names it) gives each
partition's data files and where they end (``end``: one past the highest offset they
hold); the history is ``spark.read.parquet`` over those files and the offsets wanted below
``end``, the tail the source from ``end`` on. The two meet at ``end``: no offset twice, none
missing. The Iceberg metadata may be a round behind the catalog's records; the tail then
reads a little more through the broker, never less. A table with a body schema
(`x-table-schema`) has typed columns: the history reads them from the files, the tail has
the source make them from its bodies (option ``bodySchema``), by the code the broker writes
them with.

A streaming read pins what it takes from the table in its checkpoint
(``{checkpointLocation}/mainstem-history``, written at the first start): a restarted query
reads the same files (Spark's file source remembers which it read) and the source goes on
from its checkpointed offsets, so the files committed since are not read twice.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any, cast

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from mainstem.client.stream import StreamClient
from mainstem.formats.table_schema import BodySchema, parse_schema
from mainstem.spark.options import (
    EARLIEST,
    LATEST,
    SourceError,
    SourceOptions,
    TopicPartition,
    _flag,
    resolve,
    to_offset_map,
    topic_partitions,
)
from mainstem.spark.records import ARROW_SCHEMA, HEADERS_COLUMN, schema_ddl
from mainstem.spark.source import batch_spans, partition_bounds

TABLE_OPTION = "table"  # false: everything through the source
PINNED = "mainstem-history"  # under a streaming query's checkpoint
# the source's options that say where a read starts and ends: the tail is given offsets
RANGE_OPTIONS = ("startingoffsets", "endingoffsets", "startingoffsetsbytimestamp",
                 "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
                 "startingtimestamp", "endingtimestamp", "stream", "subscribe",
                 "streampattern", "subscribepattern")


@dataclass(frozen=True)
class History:
    """What a partition's table holds: its data files, each with the offsets it holds
    (first, last), and the offsets [first, end) of them all."""

    files: tuple[tuple[str, int, int], ...]
    first: int
    end: int

    def covering(self, start: int, end: int) -> tuple[str, ...]:
        """The files holding offsets in [start, end)."""
        return tuple(path for path, low, high in self.files if low < end and high >= start)


@dataclass(frozen=True)
class Part:
    """A partition of the read: offsets [start, history_end) from the table, the rest
    from ``tail`` on (up to ``end``, a batch's) through the source."""

    tp: TopicPartition
    start: int
    history_end: int
    end: int  # LATEST: a stream's
    files: tuple[str, ...]

    @property
    def tail(self) -> int:
        return max(self.start, self.history_end)


def read_stream_table(spark: SparkSession, options: Mapping[str, str], *,
                      streaming: bool = False, checkpoint_location: str | None = None
                      ) -> DataFrame:
    """The rows ``spark.read.format("mainstem").options(**options).load()`` gives (or
    ``spark.readStream``'s, with ``streaming``), the history of table-enabled streams read
    by Spark's Parquet scan. Option ``table=false`` reads everything through the source. A
    streaming read needs its query's ``checkpoint_location`` (see the module)."""
    given = {name: value for name, value in options.items() if name.lower() != TABLE_OPTION}
    use_table = _flag({k.lower(): v for k, v in options.items()}.get, TABLE_OPTION, True)
    reader = spark.readStream if streaming else spark.read
    if not use_table:
        return reader.format("mainstem").options(**given).load()
    parsed = SourceOptions.parse(given)
    if streaming:
        if not checkpoint_location:
            raise SourceError("a streaming read of a stream's table needs the query's "
                              "checkpoint_location: it pins the table's files there")
        parts = _pinned(spark, checkpoint_location, parsed)
    else:
        parts = batch_parts(parsed)
    declared = declared_schema(parsed, parts)
    if parsed.body_schema is not None and parsed.body_schema != declared:
        raise SourceError("option 'bodySchema' must be the tables' declared schema (or "
                          "left out: they give it); read with table=false for another")
    history = [_history(spark, part, parsed.include_headers, streaming, declared)
               for part in parts if part.history_end > part.start]
    tail = reader.format("mainstem").options(**_tail_options(given, parts, streaming, declared)
                                             ).load()
    return reduce(DataFrame.unionByName, history, tail)


def batch_parts(options: SourceOptions) -> list[Part]:
    with options.connect() as client:
        spans = batch_spans(client, options)
        tables = _tables(client, options, [tp for tp, _, _ in spans])
    return [_part(tp, start, end, tables.get(tp.physical)) for tp, start, end in spans]


def declared_schema(options: SourceOptions, parts: list[Part]) -> BodySchema | None:
    """The body schema the read streams' tables declare (`x-table-schema`): their rows have
    its typed columns and `schema_error`, the tail's made from `value` as the broker makes
    the table's. None when none declares one; streams declaring different ones are not
    read together."""
    physical = {part.tp.physical for part in parts}
    found = {json.dumps(row["schema"]) for row in _table_rows(options)
             if row["stream"] in physical and row.get("schema")}
    if len(found) > 1:
        raise SourceError("the streams' tables declare different body schemas "
                          f"({'; '.join(sorted(found))}): read them one schema at a time")
    return parse_schema(found.pop()) if found else None


def _part(tp: TopicPartition, start: int, end: int, history: History | None) -> Part:
    """The table's share of [start, end): none when the table does not hold `start`."""
    if history is None or not history.first <= start < history.end:
        return Part(tp, start, start, end, ())
    history_end = min(end, history.end)
    return Part(tp, start, history_end, end, history.covering(start, history_end))


def _streaming_parts(options: SourceOptions) -> list[Part]:
    """As the source's streaming start (latest by default, as Kafka's)."""
    with options.connect() as client:
        tps = topic_partitions(client, options.current_streams())
        bounds = partition_bounds(client, tps)
        starts = resolve(client, options.starting, LATEST, tps,
                         {tp: end for tp, (_, end) in bounds.items()})
        tables = _tables(client, options, tps)
    parts = []
    for tp in tps:
        first, end = bounds[tp]
        start = {EARLIEST: first, LATEST: end}.get(starts[tp], starts[tp])
        part = _part(tp, max(start, first), end, tables.get(tp.physical))
        parts.append(dataclasses.replace(part, end=LATEST))
    return parts


def _pinned(spark: SparkSession, checkpoint: str, options: SourceOptions) -> list[Part]:
    """The parts pinned in the checkpoint; at the first start, pinned now."""
    where = f"{checkpoint.rstrip('/')}/{PINNED}"
    try:
        text = "".join(row.value for row in spark.read.text(where).collect())
    except AnalysisException:  # not there: the query's first start
        parts = _streaming_parts(options)
        spark.createDataFrame([(json.dumps([_to_json(p) for p in parts]),)], "value STRING") \
            .coalesce(1).write.mode("errorifexists").text(where)
        return parts
    return [_from_json(part) for part in json.loads(text)]


def _to_json(part: Part) -> dict[str, Any]:
    return {**dataclasses.asdict(part), "tp": dataclasses.asdict(part.tp)}


def _from_json(found: dict[str, Any]) -> Part:
    return Part(TopicPartition(**found["tp"]), found["start"], found["history_end"],
                found["end"], tuple(found["files"]))


def _table_rows(options: SourceOptions) -> list[dict[str, Any]]:
    """The vhost's tables, as the management API shows them."""
    vhost = urllib.parse.quote(options.endpoint.vhost, safe="")
    try:
        rows: list[dict[str, Any]] = options.admin().call(
            "GET", f"/api/tiering/{vhost}")["tables"]
    except Exception as exc:
        raise SourceError(f"cannot ask the management API for the streams' tables: {exc}; "
                          "give its address with option 'adminUrl', or option table=false "
                          "to read through the broker") from None
    return rows


def _tables(client: StreamClient, options: SourceOptions, tps: list[TopicPartition]
            ) -> dict[str, History]:
    """Each read stream's table as its committed head version holds it, by stream."""
    physical = {tp.physical for tp in tps}
    found = {}
    for row in _table_rows(options):
        if row["stream"] in physical and row["metadata_location"]:
            history = _history_of(row["metadata_location"], _properties(client, options,
                                                                        row["stream"]))
            if history is not None:
                found[row["stream"]] = history
    return found


def _properties(client: StreamClient, options: SourceOptions, stream: str) -> dict[str, str]:
    """pyiceberg's properties to read an S3 tier's metadata: the tier's endpoint and
    region as the broker names them, the keys from the tier.* options (else the AWS_*
    environment)."""
    answer = client.tiered_segments(stream)
    properties = {}
    if answer.url.startswith("s3://"):
        properties["s3.region"] = answer.region
        if answer.endpoint:
            properties["s3.endpoint"] = answer.endpoint
        keys = options.tier_credentials
        if keys is not None:
            properties["s3.access-key-id"] = keys.access_key_id
            properties["s3.secret-access-key"] = keys.secret_access_key
    return properties


def _history_of(metadata_location: str, properties: dict[str, str]) -> History | None:
    """Partition 0's data files of the table and their offsets, from the Iceberg metadata
    (each file's bounds of the offset column); None when it has none."""
    from pyiceberg.conversions import from_bytes  # pyiceberg loads slowly: when used
    from pyiceberg.table import StaticTable
    from pyiceberg.types import IntegerType, LongType

    table = StaticTable.from_metadata(metadata_location, properties)
    schema = table.schema()
    offset_id = schema.find_field("offset").field_id
    partition_id = schema.find_field("partition").field_id
    files, first, last = [], None, None
    for task in table.scan().plan_files():
        data = task.file
        if cast(int, from_bytes(IntegerType(), data.lower_bounds[partition_id])) != 0:
            continue  # a stream read over the stream protocol is one partition
        low = from_bytes(LongType(), data.lower_bounds[offset_id])
        high = from_bytes(LongType(), data.upper_bounds[offset_id])
        files.append((_spark_path(data.file_path), int(low), int(high)))
        first = low if first is None else min(first, low)
        last = high if last is None else max(last, high)
    if first is None or last is None:
        return None
    return History(tuple(sorted(files, key=lambda file: file[1])), int(first), int(last) + 1)


def _spark_path(path: str) -> str:
    """Where Spark's Hadoop file systems find a file: S3 through s3a."""
    return "s3a://" + path.removeprefix("s3://") if path.startswith("s3://") else path


def _history(spark: SparkSession, part: Part, include_headers: bool, streaming: bool,
             declared: BodySchema | None) -> DataFrame:
    """The part's rows from its table files, as the source names them (a super stream's
    partition is its own stream's table, named here as the source names the partition),
    with the declared schema's columns (files written before a policy gave a field read
    it as null)."""
    ddl = schema_ddl(True) if declared is None else f"{schema_ddl(True)}, {declared.spark_ddl()}"
    if streaming:  # a fixed set of files: a glob of their names in their directory
        directory = part.files[0].rsplit("/", 1)[0]
        names = ",".join(path.rsplit("/", 1)[1] for path in part.files)
        frame = spark.readStream.schema(ddl).option("basePath", directory) \
            .parquet(f"{directory}/{{{names}}}")
    else:
        frame = spark.read.schema(ddl).parquet(*part.files)
    offset = F.col("offset")
    frame = frame.where((offset >= part.start) & (offset < part.history_end))
    named: dict[str, Column] = {"stream": F.lit(part.tp.stream), "topic": F.lit(part.tp.stream),
                                "partition": F.lit(part.tp.index).cast("int")}
    typed = [] if declared is None else [F.col(field.name) for field in declared.arrow_fields()]
    return frame.select(*[named.get(field.name, F.col(field.name)).alias(field.name)
                          for field in ARROW_SCHEMA
                          if include_headers or field.name != HEADERS_COLUMN], *typed)


def _tail_options(given: Mapping[str, str], parts: list[Part], streaming: bool,
                  declared: BodySchema | None) -> dict[str, str]:
    """The source's options for the tail: the same, with the streams and offsets of the
    parts (a pattern resolved now, as the parts were), and the tables' body schema (the
    source makes the typed columns as the broker makes the table's)."""
    kept = {name: value for name, value in given.items() if name.lower() not in RANGE_OPTIONS}
    if declared is not None:
        kept["bodySchema"] = json.dumps(declared.as_json())
    kept["stream"] = ",".join(sorted({part.tp.stream for part in parts}))
    kept["startingOffsets"] = json.dumps(to_offset_map({part.tp: part.tail for part in parts}))
    if not streaming:
        kept["endingOffsets"] = json.dumps(to_offset_map({part.tp: part.end for part in parts}))
    return kept
