"""Rows of a stream as Spark sees them (Kafka's shape), built as Arrow columns per chunk, and
rows written by Spark as AMQP 1.0 messages.

key        binary   the first that is set of: message annotation ``x-routing-key`` (what AMQP
                    0-9-1 publishes and Spark writes set), application property ``key``,
                    property message-id (what RabbitMQ's super stream clients route on)
value      binary   the body (data sections; an amqp-value string as UTF-8); a record that is
                    not an AMQP 1.0 message (a BSON event, ...) is its raw bytes
stream     string   the stream (a super stream's name for its partitions)
topic      string   the same as ``stream``, under Kafka's name, so Kafka jobs run unchanged
partition  int      the partition index (0 for a plain stream)
offset     bigint
timestamp  timestamp property creation-time when the publisher set it, else the chunk's
                    timestamp (when the broker appended it); millisecond precision
timestampType int   as Kafka's: 0 (CreateTime) for a creation-time, 1 (LogAppendTime) else
headers    array<struct<key string, value binary>>  the application properties
properties map<string, string>  the AMQP 1.0 properties that are set

``includeHeaders=false`` leaves out the headers column.

Reads are Spark's hot loop: a chunk is decoded by Arrow's kernels over its bytes (see
``_chunk_rows``, and ``shapes`` for messages with annotations and properties); the
record-by-record decoder is kept for chunks with compressed sub-batches, for the messages of
rarer shapes, and as the reference the tests hold the vectorised one to.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mainstem.formats.amqp10 import Amqp10DecodeError, Message, Section, Symbol, decode_message
from mainstem.formats.amqp10 import encode_message as encode_amqp10
from mainstem.formats.chunk import Chunk
from mainstem.formats.osiris import (
    MAX_CHUNK_ENTRIES,
    MAX_ENTRY_LENGTH,
    SIMPLE_ENTRY,
    SUB_BATCH_BIT,
    SUB_BATCH_ENTRY,
)
from mainstem.spark import shapes

HEADERS_COLUMN = "headers"
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("stream", pa.string()),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    (HEADERS_COLUMN, HEADER_TYPE),
    ("properties", PROPERTIES_TYPE),
])
KEY_ANNOTATION = "x-routing-key"
KEY_PROPERTY = "key"
CREATE_TIME, LOG_APPEND_TIME = 0, 1  # Kafka's timestampType
_LAST_MS = 253_402_300_800_000  # 10000-01-01: later creation times are not taken
BATCH_ROWS = 65536  # fewer, larger batches: Spark's cost per Arrow batch is high
BATCH_BYTES = 32 * 1024 * 1024  # ... unless the messages are large
# A message that is only a data section: its described-type constructor (0x00, smallulong
# 0x53, the section's code), then vbin8 (one length byte) or vbin32 (four).
_DATA8, _DATA32 = bytes([0x00, 0x53, Section.DATA, 0xA0]), bytes([0x00, 0x53, Section.DATA, 0xB0])
_TIMESTAMP = ARROW_SCHEMA.field("timestamp").type
_ARANGE = pa.array(range(MAX_CHUNK_ENTRIES + 1), pa.int64())  # entry indexes of a chunk
_PAD = bytes(12)  # read past a short last entry by the header probes: zeros, not an error
_MAX_SLICE = MAX_ENTRY_LENGTH  # binary_slice's "to the end"


def schema_ddl(include_headers: bool) -> str:
    """The Spark schema of the rows, as DDL."""
    return ", ".join(f"{field.name} {_SPARK_TYPES[field.name]}" for field in ARROW_SCHEMA
                     if include_headers or field.name != HEADERS_COLUMN)


_SPARK_TYPES = {"key": "BINARY", "value": "BINARY", "stream": "STRING", "topic": "STRING",
                "partition": "INT", "offset": "BIGINT", "timestamp": "TIMESTAMP",
                "timestampType": "INT",
                HEADERS_COLUMN: "ARRAY<STRUCT<key: STRING, value: BINARY>>",
                "properties": "MAP<STRING, STRING>"}


class _Sparse:
    """Keys, headers and properties of the rows of a piece that were decoded one by one
    (most records have none), by row index within the piece."""

    __slots__ = ("created", "headers", "keys", "properties")

    def __init__(self) -> None:
        self.keys: dict[int, bytes | None] = {}
        self.headers: dict[int, list[dict[str, Any]]] = {}
        self.properties: dict[int, list[tuple[str, str]]] = {}
        self.created: dict[int, int] = {}

    def parts(self, column: str, kind: pa.DataType) -> list[tuple[pa.Array, pa.Array]]:
        found = getattr(self, column)
        if not found:
            return []
        return [(pa.array(list(found), pa.int64()), pa.array(list(found.values()), kind))]


_SPARSE_TYPES = {"keys": pa.binary(), "headers": HEADER_TYPE, "properties": PROPERTIES_TYPE,
                 "created": pa.int64()}


@dataclass(slots=True)
class _Pending:
    """Rows of a piece left to decode with the other pieces of its batch (Arrow's kernels
    cost per call, so the more rows at once the better): where their entries are."""

    data: bytes
    bounds: pa.Array  # int32: where each entry starts in ``data``, and the last ends


@dataclass(slots=True)
class _Rows:
    """The rows one chunk gives in the offset range: its values and offsets as Arrow
    arrays, the chunk's timestamp, and the other columns (None: all null)."""

    values: pa.Array
    offsets: pa.Array
    timestamp_ms: int
    keys: pa.Array | None = None
    headers: pa.Array | None = None
    properties: pa.Array | None = None
    created: pa.Array | None = None
    pending: _Pending | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def fill(self, parts: dict[str, list[tuple[pa.Array, pa.Array]]]) -> _Rows:
        """The columns set where ``parts`` (rows, values) say."""
        for column, found in parts.items():
            setattr(self, column, _scatter(len(self), _SPARSE_TYPES[column], None, found))
        return self


def _scatter(rows: int, kind: pa.DataType, base: pa.Array | None,
             parts: list[tuple[pa.Array, pa.Array]]) -> pa.Array | None:
    """``base`` (or nulls) with the values of each part at its rows (int64, ascending)."""
    parts = [part for part in parts if len(part[0])]
    if not parts:
        return base
    if (base is None or base.null_count == rows) and len(parts) == 1 \
            and len(parts[0][0]) == rows:
        return parts[0][1]  # every row (rows are ascending and distinct)
    arrays = [pa.nulls(1, kind) if base is None else base]
    index = shapes.ramp(rows) if base is not None else pa.repeat(pa.scalar(0, pa.int64()),
                                                                 rows)
    placed = len(arrays[0])
    for where, values in parts:  # each value's place in the arrays laid end to end
        moved = pc.scatter(pc.add(shapes.ramp(len(where)), placed), where, max_index=rows - 1)
        index = pc.coalesce(moved, index)
        arrays.append(values)
        placed += len(values)
    return pc.take(pa.concat_arrays(arrays), index)


def record_batches(chunks: Iterable[Chunk], stream: str, partition: int, start: int, end: int,
                   include_headers: bool = True, *, per_record: bool = False
                   ) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records with offsets in [start, end). ``per_record`` decodes
    every chunk record by record: the reference the vectorised decoder is tested against."""
    decode = _per_record_rows if per_record else _chunk_rows
    pieces: list[_Rows] = []
    rows = size = 0
    for chunk in chunks:
        piece = decode(chunk, start, end)
        if len(piece):
            pieces.append(piece)
            rows += len(piece)
        size += len(chunk.data)
        if pieces and (rows >= BATCH_ROWS or size >= BATCH_BYTES):
            yield _batch(pieces, stream, partition, include_headers)
            pieces, rows, size = [], 0, 0
    if pieces:
        yield _batch(pieces, stream, partition, include_headers)


# -- the vectorised decoder ---------------------------------------------------------------


def _chunk_rows(chunk: Chunk, start: int, end: int) -> _Rows:
    """A chunk's rows with no per-record Python beyond one scan of the entries' size
    prefixes (and none when all entries are the same size): the entries become one Arrow
    binary array over the chunk's bytes, Arrow's kernels tell the common shape (a message
    that is only a data section, vbin8 or vbin32) from the rest and cut its bodies out;
    only the other shapes are decoded one by one. Chunks with sub-batches take the
    per-record decoder."""
    header = chunk.header
    size, count = len(chunk.data), header.num_entries
    data = b"".join((chunk.data, _PAD))  # one copy, padded
    stride = _uniform_stride(data, size, count)
    bounds = _scanned_bounds(data, size, count) if stride is None else _strided_bounds(
        stride, count)
    if bounds is None:
        return _per_record_rows(chunk, start, end)
    lo, hi = max(start - header.chunk_id, 0), max(min(end - header.chunk_id, count), 0)
    lo = min(lo, hi)
    head_size = None if stride is None else _alike_head_size(data, stride, count)
    offsets = pc.add(_ARANGE.slice(0, hi - lo), header.chunk_id + lo)
    if head_size is not None:
        entries = pa.BinaryArray.from_buffers(pa.binary(), count, [
            None, bounds.buffers()[1], pa.py_buffer(data)]).slice(lo, hi - lo)
        return _Rows(pc.binary_slice(entries, head_size, _MAX_SLICE), offsets, header.timestamp)
    # left to decode with the rest of the batch (see ``_decode_pending``)
    return _Rows(pa.nulls(hi - lo, pa.binary()), offsets, header.timestamp,
                 pending=_Pending(data, bounds.slice(lo, hi - lo + 1)))


def _uniform_stride(data: bytes, size: int, count: int) -> int | None:
    """The entries' size when all are simple entries of one size: their size prefixes,
    checked byte by byte for every entry at once by strided slices."""
    if count == 0 or size % count or size // count < SIMPLE_ENTRY.size:
        return None
    stride = size // count
    prefix = SIMPLE_ENTRY.pack(stride - SIMPLE_ENTRY.size)
    if any(data[k:size:stride] != prefix[k:k + 1] * count for k in range(len(prefix))):
        return None
    return stride


def _strided_bounds(stride: int, count: int) -> pa.Array:
    return pc.cast(pc.multiply(_ARANGE.slice(0, count + 1), stride), pa.int32())


def _scanned_bounds(data: bytes, size: int, count: int) -> pa.Array | None:
    """Where each entry starts (and the last ends), from one pass over the size prefixes:
    the only step that must be sequential, as each entry's place follows from the sizes
    before it. None for a chunk with sub-batch entries (their flag bit makes the size
    overshoot the data) or entries that do not fill the data exactly."""
    if size > MAX_ENTRY_LENGTH:
        return None
    bounds = [0]
    append, unpack, pos = bounds.append, SIMPLE_ENTRY.unpack_from, 0
    try:
        for _ in range(count):
            pos += SIMPLE_ENTRY.size + unpack(data, pos)[0]
            append(pos)
    except struct.error:
        return None
    return pa.array(bounds, pa.int32()) if pos == size else None


def _data_head(length: int) -> bytes | None:
    """An entry's first bytes when its message of `length` bytes is only a data section
    (vbin8 when the body fits, as encoders write it); None when too short to be one."""
    body = length - len(_DATA8) - 1
    if body < 0:
        return None
    if body < 256:
        return SIMPLE_ENTRY.pack(length) + _DATA8 + bytes([body])
    return SIMPLE_ENTRY.pack(length) + _DATA32 + SIMPLE_ENTRY.pack(length - len(_DATA32) - 4)


def _alike_head_size(data: bytes, stride: int, count: int) -> int | None:
    """The head size of entries of one size when all are only a data section: every entry
    starts with the same head, checked byte by byte for all entries at once."""
    head = _data_head(stride - SIMPLE_ENTRY.size)
    if head is None:
        return None
    size = stride * count
    if any(data[k:size:stride] != head[k:k + 1] * count
           for k in range(SIMPLE_ENTRY.size, len(head))):
        return None
    return len(head)


Parts = dict[str, list[tuple[pa.Array, pa.Array]]]  # a column's (rows, values) pieces


def _runs(lengths: list[int], values: list[int]) -> pa.Array:
    """Each value repeated its length's times (int64), in one kernel."""
    ends = list(itertools.accumulate(lengths))
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int64()), pa.array(values, pa.int64())))


def _pending_places(pieces: list[_Rows]) -> tuple[bytes, pa.Array, pa.Array, pa.Array]:
    """The pending pieces' data laid end to end, and of their rows: the row in the batch,
    and where the message starts and ends in that data (all int64)."""
    datas, firsts, lasts, rows_, sizes, row_bases, data_bases = [], [], [], [], [], [], []
    row_base = data_base = 0
    for piece in pieces:
        pending = piece.pending
        if pending is not None:
            count = len(pending.bounds) - 1
            datas.append(pending.data)
            firsts.append(pending.bounds.slice(0, count))
            lasts.append(pending.bounds.slice(1))
            rows_.append(shapes.ramp(count))
            sizes.append(count)
            row_bases.append(row_base)
            data_bases.append(data_base + SIMPLE_ENTRY.size)  # past the size prefix
            data_base += len(pending.data)
        row_base += len(piece)
    data = b"".join(datas) if len(datas) > 1 else datas[0]
    rows = pc.add(pa.concat_arrays(rows_), _runs(sizes, row_bases))
    bases = _runs(sizes, data_bases)
    at = pc.add(pc.cast(pa.concat_arrays(firsts), pa.int64()), bases)
    end = pc.add(pc.cast(pa.concat_arrays(lasts), pa.int64()),
                 pc.subtract(bases, SIMPLE_ENTRY.size))
    return data, rows, at, end


def _decode_pending(pieces: list[_Rows], values: pa.Array, columns: dict[str, pa.Array]
                    ) -> pa.Array:
    """Decode the pending rows of all pieces at once, into ``values`` and ``columns``
    (replaced in place): the common shapes by ``shapes``, the others one by one."""
    data, rows, at, end = _pending_places(pieces)
    shaped = shapes.decode(data, at, end)
    parts: Parts = {column: [] for column in _SPARSE_TYPES}
    value_parts: list[tuple[pa.Array, pa.Array]] = []
    if shaped is not None:
        taken = shaped.taken
        every = taken.true_count == len(taken)  # the common case: no filtering
        where = rows if every else pc.filter(rows, taken)
        for column in ("values", *_SPARSE_TYPES):
            found = getattr(shaped, column)
            found = found if every else pc.filter(found, taken)
            (value_parts if column == "values" else parts[column]).append((where, found))
        left = pc.invert(taken)
        rows, at, end = pc.filter(rows, left), pc.filter(at, left), pc.filter(end, left)
    if len(rows):
        sparse = _Sparse()
        view = memoryview(data)
        decoded = [_decode_record(sparse, row, view[start:stop])
                   for row, start, stop in zip(rows.to_pylist(), at.to_pylist(),
                                               end.to_pylist(), strict=True)]
        value_parts.append((rows, pa.array(decoded, pa.binary())))
        for column, kind in _SPARSE_TYPES.items():
            parts[column] += sparse.parts(column, kind)
    for column, kind in _SPARSE_TYPES.items():
        columns[column] = _scatter(len(values), kind, columns[column], parts[column])
    return _scatter(len(values), pa.binary(), values, value_parts)


# -- the per-record decoder ---------------------------------------------------------------


def _per_record_rows(chunk: Chunk, start: int, end: int) -> _Rows:
    """A chunk's rows decoded record by record; compressed sub-batches are skipped (the log
    keeps their records opaque)."""
    raw = bytes(chunk.data)
    unpack = SIMPLE_ENTRY.unpack_from
    values: list[bytes | None] = []
    offsets: list[int] = []
    sparse = _Sparse()
    offset = chunk.header.chunk_id
    pos = 0
    for _ in range(chunk.header.num_entries):
        (length,) = unpack(raw, pos)
        if length & SUB_BATCH_BIT:
            _, count, _, length = SUB_BATCH_ENTRY.unpack_from(raw, pos)
            pos += SUB_BATCH_ENTRY.size + length
            offset += count
            continue
        body = pos + SIMPLE_ENTRY.size
        pos = body + length
        if start <= offset < end:
            head = raw[body:body + 4]
            if head == _DATA8 and length > 4 and raw[body + 4] == length - 5:
                values.append(raw[body + 5:pos])
            elif head == _DATA32 and length > 7 and unpack(raw, body + 4)[0] == length - 8:
                values.append(raw[body + 8:pos])
            else:
                values.append(_decode_record(sparse, len(offsets), memoryview(raw)[body:pos]))
            offsets.append(offset)
        offset += 1
    return _Rows(pa.array(values, pa.binary()), pa.array(offsets, pa.int64()),
                 chunk.header.timestamp).fill({column: sparse.parts(column, kind)
                                               for column, kind in _SPARSE_TYPES.items()})


def _decode_record(sparse: _Sparse, row: int, record: memoryview) -> bytes | None:
    """The value of a record that is not only a data section; its key, headers and
    properties go into `sparse`."""
    try:
        message = decode_message(record)
    except Amqp10DecodeError:
        return bytes(record)  # not AMQP 1.0: a BSON event or other raw record
    application = message.application_properties
    key = _key(message)
    if key is not None:
        sparse.keys[row] = _as_bytes(key)
    if application:
        sparse.headers[row] = [{"key": str(k), "value": _as_bytes(v)}
                               for k, v in application.items()]
    properties = _properties(message)
    if properties:
        sparse.properties[row] = properties
    created = message.properties.creation_time if message.properties else None
    if isinstance(created, int) and not isinstance(created, bool):
        sparse.created[row] = int(created)
    return _body_bytes(message.body)


def _key(message: Message) -> Any:
    """The record's key: the first set of the annotation x-routing-key, the application
    property ``key`` and the message-id."""
    key = (message.message_annotations or {}).get(KEY_ANNOTATION)
    if key is None:
        key = (message.application_properties or {}).get(KEY_PROPERTY)
    if key is None and message.properties is not None:
        key = message.properties.message_id
    return key


def _body_bytes(body: Any) -> bytes | None:
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return None if body is None else str(body).encode()


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _text(value).encode()


def _text(value: Any) -> str:
    """A simple value as text: integers (a uint, a timestamp) in decimal, not as the
    decoder's wrapper types show themselves (``UInt(5)``); booleans as JSON and Java write
    them (``true``: what a Kafka or RabbitMQ stream user's code compares with)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return str(float(value))
    return str(value)


def _properties(message: Message) -> list[tuple[str, str]] | None:
    props = message.properties
    if props is None:
        return None
    found = []
    for name in ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                 "content_type", "content_encoding", "group_id", "reply_to_group_id"):
        value = getattr(props, name)
        if value is not None:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else _text(value)
            found.append((name, text))
    for name in ("creation_time", "absolute_expiry_time"):
        value = getattr(props, name)
        if value is not None:
            moment = isinstance(value, int) and not isinstance(value, bool)
            found.append((name, shapes.isoformat(value) if moment else _text(value)))
    return found or None


def _batch(pieces: list[_Rows], stream: str, partition: int, include_headers: bool
           ) -> pa.RecordBatch:
    rows = sum(len(piece) for piece in pieces)
    names = pa.repeat(pa.scalar(stream, pa.string()), rows)
    values = pa.concat_arrays([piece.values for piece in pieces])
    columns = {column: _sparse(pieces, column, rows, kind)
               for column, kind in _SPARSE_TYPES.items()}
    if any(piece.pending is not None for piece in pieces):
        values = _decode_pending(pieces, values, columns)
    batch = pa.RecordBatch.from_arrays([
        columns["keys"],
        values,
        names,
        names,
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.concat_arrays([piece.offsets for piece in pieces]),
        *_timestamps(pieces, columns["created"]),
        columns["headers"],
        columns["properties"],
    ], schema=ARROW_SCHEMA)
    return batch if include_headers else batch.drop_columns([HEADERS_COLUMN])


def _timestamps(pieces: list[_Rows], created: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The timestamp and timestampType columns: a record's creation time where the
    publisher set one (in years 1970 to 9999), else its chunk's timestamp, a run per piece
    decoded by Arrow."""
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    appended = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int32()), pa.array([piece.timestamp_ms * 1000 for piece in pieces],
                                             pa.int64())))
    rows = len(created)
    if created.null_count == rows:
        return appended.cast(_TIMESTAMP), pa.repeat(pa.scalar(LOG_APPEND_TIME, pa.int32()), rows)
    usable = pc.and_kleene(pc.greater_equal(created, 0), pc.less(created, _LAST_MS))
    usable = pc.fill_null(usable, False)
    moments = pc.if_else(usable, pc.multiply(pc.fill_null(created, 0), 1000), appended)
    kinds = pc.if_else(usable, CREATE_TIME, LOG_APPEND_TIME)
    return moments.cast(_TIMESTAMP), pc.cast(kinds, pa.int32())


def _sparse(pieces: list[_Rows], column: str, rows: int, kind: pa.DataType) -> pa.Array:
    """One of the columns the pieces may leave all null."""
    found = [getattr(piece, column) for piece in pieces]
    if all(array is None for array in found):
        return pa.nulls(rows, kind)
    return pa.concat_arrays([pa.nulls(len(piece), kind) if array is None else array
                             for piece, array in zip(pieces, found, strict=True)])


def encode_row(value: bytes | None, key: bytes | None, headers: Any) -> bytes:
    """A Spark row as the AMQP 1.0 message a stream stores (the inverse of the columns)."""
    application = None
    if headers:
        application = {h["key"]: _header_value(h["value"]) for h in headers}
    annotations = {Symbol(KEY_ANNOTATION): key.decode("utf-8", "replace")} if key else None
    return encode_amqp10(Message(body=bytes(value or b""), message_annotations=annotations,
                                 application_properties=application))


def _header_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value)
    return value
