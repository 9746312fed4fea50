"""A tiered range read in the executor straight from the object store, not through the broker.

The broker hands out where the tier is and the records of the segments that live only
there (`TieredRecord`: key, offsets, sizes, CRCs, layout version); credentials come from
the source's options (`tier.accessKeyId`, `tier.secretAccessKey`), else obstore reads the
usual AWS_* environment. For each segment the range touches, its `.index` object is fetched
and checked against the record; the chunks the range needs are then fetched from the
`.segment` object in large GETs (`REQUEST_BYTES` of neighbouring chunks each, a few in
flight while the chunks already here are decoded) and decoded by the log's own
`chunk_from`, every CRC checked, in either segment layout.

A failure names the tier and the object: the task fails and Spark retries it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from isal.isal_zlib import crc32

from mainstem.formats.chunk import Chunk, CorruptChunk
from mainstem.log.index import SegmentIndex
from mainstem.log.segment_file import chunk_from
from mainstem.log.tier import Tier
from mainstem.log.tier_upload import TieredRecord
from mainstem.protocols.rabbit_stream.responses import TieredSegmentsResponse

REQUEST_BYTES = 8 * 1024 * 1024  # one GET: S3 serves large ranges at full speed
IN_FLIGHT = 3  # GETs under way while the executor decodes what came
ENVIRONMENT_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


class TierReadError(Exception):
    """What the tier returned is not what the broker recorded (its index, or a chunk)."""


@dataclass(frozen=True)
class TierCredentials:
    access_key_id: str = field(repr=False)  # never in a log line or an error
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True)
class TierAddress:
    """Where a broker's tier is: `s3://bucket/prefix` (at `endpoint`, for stores other than
    AWS S3) or a directory every executor mounts. Record keys are relative to it."""

    url: str
    endpoint: str | None
    region: str

    def open(self, credentials: TierCredentials | None, instance: bool = False) -> Tier:
        directory = None if self.url.startswith("s3://") else Path(self.url.removeprefix(
            "file://"))
        if directory is not None and not directory.is_dir():  # never made here: a read
            raise TierReadError(f"tier {self.url}: no such directory here (the executors "
                                "need it mounted where the broker has it)")
        problem = self.credentials_problem(credentials, instance)
        if problem is not None:
            raise TierReadError(problem)
        if credentials is None:  # obstore reads the AWS_* environment
            return Tier.open(self.url, endpoint=self.endpoint, region=self.region)
        return Tier.open(self.url, endpoint=self.endpoint, region=self.region,
                         access_key_id=credentials.access_key_id,
                         secret_access_key=credentials.secret_access_key)


    def credentials_problem(self, credentials: TierCredentials | None, instance: bool
                            ) -> str | None:
        """Why an S3 tier cannot be read here, in words: no keys in the options or the
        environment. Without them obstore would ask the cloud's instance metadata service
        (a non-loopback address, refused off the cloud), which is asked only when the
        options say so (`tier.instanceCredentials`)."""
        if not self.url.startswith("s3://") or credentials is not None or instance:
            return None
        if all(os.environ.get(name) for name in ENVIRONMENT_KEYS):
            return None
        return (f"the stream's history is in the tier {self.url} and there are no "
                "credentials to read it: give options 'tier.accessKeyId' and "
                "'tier.secretAccessKey', or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "where the query runs; or tier.instanceCredentials=true to use the cloud's "
                "instance metadata, or tier.direct=false to read it through the broker")


@dataclass(frozen=True)
class Tiered:
    """A partition's history in the tier: offsets [first, end) of its `records`."""

    address: TierAddress
    records: tuple[TieredRecord, ...]

    @classmethod
    def of(cls, answer: TieredSegmentsResponse) -> Tiered | None:
        """What the broker's TieredSegments answer says, None when nothing is tiered."""
        if not answer.url or not answer.segments:
            return None
        return cls(TierAddress(answer.url, answer.endpoint, answer.region),
                   tuple(TieredRecord(**dataclasses.asdict(s)) for s in answer.segments))

    @property
    def first(self) -> int:
        return self.records[0].first_chunk_id

    @property
    def end(self) -> int:
        return self.records[-1].next_offset



@dataclass(frozen=True)
class _Window:
    """Neighbouring chunks of one segment, fetched in one GET: their (position, size)."""

    record: TieredRecord
    spans: list[tuple[int, int]]

    @property
    def start(self) -> int:
        return self.spans[0][0]

    @property
    def end(self) -> int:
        position, size = self.spans[-1]
        return position + size


def tiered_chunks(address: TierAddress, records: Sequence[TieredRecord], start: int, end: int,
                  credentials: TierCredentials | None = None, *, instance: bool = False,
                  request_bytes: int = REQUEST_BYTES) -> Iterator[Chunk]:
    """The chunks of `records` (oldest first) that hold offsets in [start, end), read from
    the tier; as `StreamClient.chunks`, a chunk may straddle either bound."""
    tier = address.open(credentials, instance)
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="tier-read") as fetching:
        pending: deque[tuple[_Window, Future[list[memoryview]]]] = deque()
        try:
            for window in _windows(tier, records, start, end, request_bytes, fetching):
                pending.append((window, fetching.submit(_get, tier, window)))
                if len(pending) == IN_FLIGHT:
                    yield from _chunks(tier, *pending.popleft())
            while pending:
                yield from _chunks(tier, *pending.popleft())
        finally:
            for _, future in pending:
                future.cancel()


def covering(records: Sequence[TieredRecord], start: int, end: int
             ) -> tuple[TieredRecord, ...]:
    """The records that hold offsets in [start, end)."""
    return tuple(r for r in records if r.first_chunk_id < end and r.next_offset > start)


def _get(tier: Tier, window: _Window) -> list[memoryview]:
    """One window's bytes. In a worker thread, on a loop of its own: obstore's calls are
    async, and the caller may be inside a loop already."""
    return asyncio.run(tier.get_ranges(window.record.key, [window.start], [window.end]))


def _windows(tier: Tier, records: Sequence[TieredRecord], start: int, end: int,
             limit: int, fetching: ThreadPoolExecutor) -> Iterator[_Window]:
    """The GETs that cover the chunks holding [start, end), in offset order."""
    for record in covering(records, start, end):
        index = fetching.submit(_index, tier, record).result()
        first, last = max(index.find_offset(start), 0), index.find_offset(end - 1)
        spans: list[tuple[int, int]] = []
        for i in range(first, last + 1):
            position, size = index.span(i, record.segment_size)
            if spans and position + size - spans[0][0] > limit:
                yield _Window(record, spans)
                spans = []
            spans.append((position, size))
        if spans:
            yield _Window(record, spans)


def _index(tier: Tier, record: TieredRecord) -> SegmentIndex:
    """A segment's index from the tier, checked against its record (in a worker thread)."""
    raw = asyncio.run(tier.get(record.index_key))
    if len(raw) != record.index_size or crc32(raw) != record.index_crc:
        raise TierReadError(f"tier {tier.name}: {record.index_key} is not the index that was "
                            f"uploaded ({len(raw)} bytes, {record.index_size} recorded)")
    return SegmentIndex.decode(Path(record.index_key), raw)


def _chunks(tier: Tier, window: _Window, fetched: Future[list[memoryview]]
            ) -> Iterator[Chunk]:
    [raw] = fetched.result()
    key = window.record.key
    if len(raw) != window.end - window.start:
        raise TierReadError(f"tier {tier.name}: {key}: {len(raw)} bytes at {window.start}, "
                            f"{window.end - window.start} asked for")
    for position, size in window.spans:
        at = position - window.start
        try:
            chunk = chunk_from(raw[at:at + size], window.record.version)
        except CorruptChunk as error:
            raise TierReadError(f"tier {tier.name}: {key}: chunk at {position}: "
                                f"{error}") from error
        yield chunk
