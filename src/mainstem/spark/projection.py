"""A projection as a Spark job: rebuild a binder from a channel's whole history, then hand
over to the live projection at the position the job reached.

Events are keyed by document id, partitioned by that key and sorted by offset within each
partition, so one task folds each document in channel order with the same ``fold`` the
broker uses. Tasks stage their documents in the broker over the BSON event protocol (a
retried task stages the same documents again, replacing them); the driver then hands over,
which swaps the binder's content and sets the projection's position in one transaction.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument

from mainstem.broker.events.binders import document_key
from mainstem.broker.events.document_matcher import compile_matcher
from mainstem.broker.events.projections import Projection, document_id, fold
from mainstem.client.events import EventsClient
from mainstem.client.stream import Endpoint, StreamClient
from mainstem.spark.progress import Progress, reporting

STAGE_BATCH_BYTES = 1024 * 1024  # one LOADDOCS frame, well under the 4 MiB default limit
DEFAULT_EVENTS_PORT = 7451


class RebuildError(Exception):
    """The rebuild cannot give a faithful binder (say, retention removed early events)."""


@dataclass(frozen=True)
class EventsEndpoint:
    """Where executors and the driver reach the broker's BSON event protocol."""

    host: str
    port: int
    user: str
    password: str
    namespace: str

    async def connect(self) -> EventsClient:
        return await EventsClient.connect(self.host, self.port, self.user, self.password,
                                          namespace=self.namespace)


@dataclass(frozen=True)
class Rebuilt:
    documents: int
    position: int  # the channel offset the live projection goes on from


def fold_documents(records: Any, projection: Projection, partitions: int,
                   read: Any = None) -> Any:
    """An RDD of (document id, document as BSON bytes): `records` (a DataFrame from the
    mainstem source) folded per document in offset order; `read`, a Spark accumulator,
    counts the records read."""
    keyed = records.select("offset", "value").rdd.mapPartitions(
        partial(_keyed_events, projection, read))
    ordered = keyed.repartitionAndSortWithinPartitions(partitions, _document_partition)
    return ordered.mapPartitions(partial(_fold_runs, projection))


def _keyed_events(projection: Projection, read: Any, rows: Iterable[Any]
                  ) -> Iterator[tuple[tuple[str, int], bytes]]:
    """((document key, offset), event) for each event the projection applies; like the
    live projection, records that are not BSON or have no id are skipped."""
    matcher = compile_matcher(projection.matcher)
    count = 0
    for offset, value in rows:
        count += 1
        raw = bytes(value)
        try:
            event = bson.decode(raw)
        except Exception:
            continue
        doc_id = document_id(event, projection.id_field)
        if doc_id is not None and matcher(event):
            yield (document_key(doc_id), offset), raw
    if read is not None:
        read.add(count)  # the driver sees accumulators as tasks finish anyway


def _document_partition(key: tuple[str, int]) -> int:
    return zlib.crc32(key[0].encode())  # stable across Python workers, unlike hash()


def _fold_runs(projection: Projection, events: Iterable[tuple[tuple[str, int], bytes]]
               ) -> Iterator[tuple[Any, bytes]]:
    current_key: str | None = None
    doc_id: Any = None
    document: dict[str, Any] | None = None
    for (key, _offset), raw in events:
        event = bson.decode(raw)
        if key != current_key:
            if document is not None:
                yield doc_id, bson.encode(document)
            current_key, doc_id, document = key, document_id(event, projection.id_field), None
        document = fold(document, event, projection.fold)
    if document is not None:
        yield doc_id, bson.encode(document)


def stage_partition(endpoint: EventsEndpoint, load_id: str,
                    documents: Iterable[tuple[Any, bytes]]) -> None:
    asyncio.run(_stage(endpoint, load_id, documents))


async def _stage(endpoint: EventsEndpoint, load_id: str,
                 documents: Iterable[tuple[Any, bytes]]) -> None:
    async with await endpoint.connect() as client:
        batch: list[tuple[Any, Any]] = []
        size = 0
        for doc_id, raw in documents:
            batch.append((doc_id, RawBSONDocument(raw)))
            size += len(raw)
            if size >= STAGE_BATCH_BYTES:
                await client.load_documents(load_id, batch)
                batch, size = [], 0
        if batch:
            await client.load_documents(load_id, batch)


def rebuild(spark: Any, url: str, projection: Projection, *,
            events_port: int = DEFAULT_EVENTS_PORT, partitions: int | None = None,
            progress: Progress | None = None) -> Rebuilt:
    """Rebuild `projection`'s binder from its channel's history up to the channel's end
    now, and hand over to the live projection there; `progress` follows the records read
    (as their tasks finish)."""
    stream = Endpoint.parse(url)
    endpoint = EventsEndpoint(stream.host, events_port, stream.user, stream.password,
                              stream.vhost)
    with StreamClient(stream) as client:
        offsets = client.offsets(projection.channel)
    if offsets.first > 0:
        raise RebuildError(f"channel {projection.channel!r} starts at offset {offsets.first}: "
                           "retention removed earlier events, a rebuild would miss them")
    load_id = asyncio.run(_begin(endpoint, projection.binder))
    records = (spark.read.format("mainstem").option("url", url)
               .option("stream", projection.channel).option("startingOffsets", "earliest")
               .option("endingOffsets", json.dumps({projection.channel: {"0": offsets.end}}))
               .load())
    read = spark.sparkContext.accumulator(0)
    folded = fold_documents(records, projection,
                            partitions or spark.sparkContext.defaultParallelism, read)
    if progress is not None:
        progress.total = offsets.end
    with reporting(lambda: read.value, progress) if progress else nullcontext():
        folded.foreachPartition(partial(stage_partition, endpoint, load_id))
    documents = asyncio.run(_hand_over(endpoint, load_id, projection, offsets.end))
    return Rebuilt(documents, offsets.end)


async def _begin(endpoint: EventsEndpoint, binder: str) -> str:
    async with await endpoint.connect() as client:
        return await client.begin_load(binder)


async def _hand_over(endpoint: EventsEndpoint, load_id: str, projection: Projection,
                     position: int) -> int:
    async with await endpoint.connect() as client:
        return await client.hand_over(load_id, projection.name, projection.channel,
                                      projection.binder, projection.id_field, projection.fold,
                                      projection.matcher, position)
