"""Rows of a stream as Spark sees them (Kafka's shape), built as Arrow columns per chunk, and
rows written by Spark as AMQP 1.0 messages.

key        binary   message annotation ``x-routing-key`` (what AMQP 0-9-1 and Spark writes set)
value      binary   the body (data sections; an amqp-value string as UTF-8); a record that is
                    not an AMQP 1.0 message (a BSON event, ...) is its raw bytes
stream     string   the stream (a super stream's name for its partitions)
topic      string   the same as ``stream``, under Kafka's name, so Kafka jobs run unchanged
partition  int      the partition index (0 for a plain stream)
offset     bigint
timestamp  timestamp the chunk's timestamp (millisecond precision)
headers    array<struct<key string, value binary>>  the application properties
properties map<string, string>  the AMQP 1.0 properties that are set

``includeHeaders=false`` leaves out the headers column.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mainstem.formats.amqp10 import Amqp10DecodeError, Message, Symbol, decode_message
from mainstem.formats.amqp10 import encode_message as encode_amqp10
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_BIT, SUB_BATCH_ENTRY
from mainstem.log.chunk import Chunk

HEADERS_COLUMN = "headers"
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("stream", pa.string()),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), (HEADERS_COLUMN, HEADER_TYPE),
    ("properties", PROPERTIES_TYPE),
])
KEY_ANNOTATION = "x-routing-key"
BATCH_ROWS = 65536  # fewer, larger batches: Spark's cost per Arrow batch is high
BATCH_BYTES = 32 * 1024 * 1024  # ... unless the messages are large
# A message that is only a data section: descriptor 0x00 0x53 0x75, then vbin8 or vbin32.
_DATA8, _DATA32 = b"\x00\x53\x75\xa0", b"\x00\x53\x75\xb0"




def schema_ddl(include_headers: bool) -> str:
    """The Spark schema of the rows, as DDL."""
    return ", ".join(f"{field.name} {_SPARK_TYPES[field.name]}" for field in ARROW_SCHEMA
                     if include_headers or field.name != HEADERS_COLUMN)


_SPARK_TYPES = {"key": "BINARY", "value": "BINARY", "stream": "STRING", "topic": "STRING",
                "partition": "INT", "offset": "BIGINT", "timestamp": "TIMESTAMP",
                HEADERS_COLUMN: "ARRAY<STRUCT<key: STRING, value: BINARY>>",
                "properties": "MAP<STRING, STRING>"}


class _Columns:
    """Column lists of one Arrow batch. Values decoded record by record wait in `values`;
    `pieces` holds the ones before them, as Arrow arrays. Keys, headers and properties are
    sparse (most records have none), so they are kept by row index and filled in at the
    end."""

    __slots__ = ("headers", "keys", "offsets", "pieces", "properties", "size", "timestamps",
                 "values")

    def __init__(self) -> None:
        self.size = 0  # bytes of the chunks read into the batch
        self.pieces: list[pa.Array] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: dict[int, bytes | None] = {}
        self.headers: dict[int, list[dict[str, Any]]] = {}
        self.properties: dict[int, list[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self.offsets)

    def add_array(self, values: pa.Array) -> None:
        if self.values:
            self.pieces.append(pa.array(self.values, pa.binary()))
            self.values = []
        self.pieces.append(values)

    def value_array(self) -> pa.Array:
        if not self.pieces:
            return pa.array(self.values, pa.binary())
        return pa.concat_arrays([*self.pieces, pa.array(self.values, pa.binary())])


def record_batches(chunks: Iterable[Chunk], stream: str, partition: int, start: int, end: int,
                   include_headers: bool = True) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records with offsets in [start, end)."""
    columns = _Columns()
    for chunk in chunks:
        _add_chunk(columns, chunk, start, end)
        columns.size += len(chunk.data)
        if len(columns) >= BATCH_ROWS or columns.size >= BATCH_BYTES:
            yield _batch(columns, stream, partition, include_headers)
            columns = _Columns()
    if len(columns):
        yield _batch(columns, stream, partition, include_headers)


def _add_chunk(columns: _Columns, chunk: Chunk, start: int, end: int) -> None:
    """The hot loop of every Spark read: one pass over the chunk's entries; a message that
    is only a data section (what most clients send) costs one slice. A chunk inside the
    range whose entries are all alike takes no per-record Python at all."""
    raw = bytes(chunk.data)
    first, count = chunk.header.chunk_id, chunk.header.num_entries
    if start <= first and first + count <= end:
        uniform = _uniform_bodies(raw, count)
        if uniform is not None:
            columns.add_array(uniform)
            columns.offsets.extend(range(first, first + count))
            columns.timestamps.extend([chunk.header.timestamp * 1000] * count)
            return
    unpack = SIMPLE_ENTRY.unpack_from
    values, offsets = columns.values, columns.offsets
    before = len(offsets)
    offset = chunk.header.chunk_id
    pos = 0
    for _ in range(chunk.header.num_entries):
        (length,) = unpack(raw, pos)
        if length & SUB_BATCH_BIT:  # a compressed sub-batch: records the log keeps opaque
            _, count, _, length = SUB_BATCH_ENTRY.unpack_from(raw, pos)
            pos += SUB_BATCH_ENTRY.size + length
            offset += count
            continue
        body = pos + SIMPLE_ENTRY.size
        pos = body + length
        if start <= offset < end:
            head = raw[body:body + 4]
            if head == _DATA8 and raw[body + 4] == length - 5:
                values.append(raw[body + 5:pos])
            elif head == _DATA32 and unpack(raw, body + 4)[0] == length - 8:
                values.append(raw[body + 8:pos])
            else:
                _add_decoded(columns, len(offsets), memoryview(raw)[body:pos])
            offsets.append(offset)
        offset += 1
    columns.timestamps.extend([chunk.header.timestamp * 1000] * (len(offsets) - before))


def _uniform_bodies(raw: bytes, count: int) -> pa.Array | None:
    """The bodies of a chunk whose entries are all the same size and all one data section
    (a producer's batch of fixed-size messages), cut out by Arrow's kernels: the entries
    become one binary array over the chunk's bytes and a slice drops their headers. None
    for any other chunk."""
    if count == 0 or len(raw) % count:
        return None
    stride = len(raw) // count
    length = stride - SIMPLE_ENTRY.size
    if length - 5 < 0:
        return None
    prefix = SIMPLE_ENTRY.pack(length) + (_DATA8 + bytes([length - 5]) if length - 5 < 256
                                          else _DATA32 + SIMPLE_ENTRY.pack(length - 8))
    # Each header byte, checked for every entry at once by a strided slice.
    if any(raw[k::stride] != prefix[k:k + 1] * count for k in range(len(prefix))):
        return None
    bounds = pa.array(range(0, len(raw) + 1, stride), pa.int32())
    entries = pa.BinaryArray.from_buffers(pa.binary(), count,
                                          [None, bounds.buffers()[1], pa.py_buffer(raw)])
    return pc.binary_slice(entries, len(prefix), stride)


def _add_decoded(columns: _Columns, row: int, record: memoryview) -> None:
    try:
        message = decode_message(record)
    except Amqp10DecodeError:
        columns.values.append(bytes(record))  # not AMQP 1.0: a BSON event or other raw record
        return
    columns.values.append(_body_bytes(message.body))
    key = (message.message_annotations or {}).get(KEY_ANNOTATION)
    if key is not None:
        columns.keys[row] = _as_bytes(key)
    application = message.application_properties
    if application:
        columns.headers[row] = [{"key": str(k), "value": _as_bytes(v)}
                                for k, v in application.items()]
    properties = _properties(message)
    if properties:
        columns.properties[row] = properties


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
    return str(value).encode()


def _properties(message: Message) -> list[tuple[str, str]] | None:
    props = message.properties
    if props is None:
        return None
    found = []
    for name in ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                 "content_type", "content_encoding", "group_id", "reply_to_group_id"):
        value = getattr(props, name)
        if value is not None:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            found.append((name, text))
    for name in ("creation_time", "absolute_expiry_time"):
        value = getattr(props, name)
        if value is not None:
            moment = datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
            found.append((name, moment.isoformat()))
    return found or None


def _batch(columns: _Columns, stream: str, partition: int, include_headers: bool
           ) -> pa.RecordBatch:
    rows = len(columns)
    names = pa.array([stream] * rows, pa.string())
    batch = pa.RecordBatch.from_arrays([
        _sparse(columns.keys, rows, pa.binary()),
        columns.value_array(),
        names,
        names,
        pa.array([partition] * rows, pa.int32()),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps, pa.timestamp("us", tz="UTC")),
        _sparse(columns.headers, rows, HEADER_TYPE),
        _sparse(columns.properties, rows, PROPERTIES_TYPE),
    ], schema=ARROW_SCHEMA)
    return batch if include_headers else batch.drop_columns([HEADERS_COLUMN])


def _sparse(by_row: dict[int, Any], rows: int, kind: pa.DataType) -> pa.Array:
    if not by_row:
        return pa.nulls(rows, kind)
    filled: list[Any] = [None] * rows
    for row, value in by_row.items():
        filled[row] = value
    return pa.array(filled, kind)


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
