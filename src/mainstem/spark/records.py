"""Rows of a stream as Spark sees them (Kafka's shape), built as Arrow columns per chunk, and
rows written by Spark as AMQP 1.0 messages.

key        binary   message annotation ``x-routing-key`` (what AMQP 0-9-1 and Spark writes set)
value      binary   the body (data sections; an amqp-value string as UTF-8); a record that is
                    not an AMQP 1.0 message (a BSON event, ...) is its raw bytes
stream     string   the stream (a super stream's name for its partitions)
partition  int      the partition index (0 for a plain stream)
offset     bigint
timestamp  timestamp the chunk's timestamp (millisecond precision)
headers    array<struct<key string, value binary>>  the application properties
properties map<string, string>  the AMQP 1.0 properties that are set
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from mainstem.formats.amqp10 import Amqp10DecodeError, Message, Symbol, decode_message
from mainstem.formats.amqp10 import encode_message as encode_amqp10
from mainstem.log.chunk import Chunk

SCHEMA_DDL = ("key BINARY, value BINARY, stream STRING, partition INT, offset BIGINT, "
              "timestamp TIMESTAMP, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
              "properties MAP<STRING, STRING>")
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("stream", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("headers", HEADER_TYPE),
    ("properties", PROPERTIES_TYPE),
])
KEY_ANNOTATION = "x-routing-key"
BATCH_ROWS = 8192
# A message that is only a data section: descriptor 0x00 0x53 0x75, then vbin8 or vbin32.
_DATA8, _DATA32 = b"\x00\x53\x75\xa0", b"\x00\x53\x75\xb0"


class _Columns:
    __slots__ = ("headers", "keys", "offsets", "properties", "timestamps", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.properties: list[list[tuple[str, str]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)


def record_batches(chunks: Iterable[Chunk], stream: str, partition: int, start: int, end: int
                   ) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records with offsets in [start, end)."""
    columns = _Columns()
    for chunk in chunks:
        timestamp_us = chunk.header.timestamp * 1000
        for offset, record in chunk.records():
            if offset < start or offset >= end:
                continue
            _add(columns, offset, timestamp_us, record)
            if len(columns) >= BATCH_ROWS:
                yield _batch(columns, stream, partition)
                columns = _Columns()
    if len(columns):
        yield _batch(columns, stream, partition)


def _add(columns: _Columns, offset: int, timestamp_us: int, record: memoryview) -> None:
    columns.offsets.append(offset)
    columns.timestamps.append(timestamp_us)
    head = bytes(record[:4])
    size = len(record)
    if head == _DATA8 and size == 5 + record[4]:
        columns.values.append(bytes(record[5:]))
    elif head == _DATA32 and size == 8 + int.from_bytes(record[4:8], "big"):
        columns.values.append(bytes(record[8:]))
    else:
        _add_decoded(columns, record)
        return
    columns.keys.append(None)
    columns.headers.append(None)
    columns.properties.append(None)


def _add_decoded(columns: _Columns, record: memoryview) -> None:
    try:
        message = decode_message(record)
    except Amqp10DecodeError:
        columns.values.append(bytes(record))  # not AMQP 1.0: a BSON event or other raw record
        columns.keys.append(None)
        columns.headers.append(None)
        columns.properties.append(None)
        return
    columns.values.append(_body_bytes(message.body))
    key = (message.message_annotations or {}).get(KEY_ANNOTATION)
    columns.keys.append(_as_bytes(key) if key is not None else None)
    application = message.application_properties
    columns.headers.append([{"key": str(k), "value": _as_bytes(v)} for k, v in
                            application.items()] if application else None)
    columns.properties.append(_properties(message))


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


def _batch(columns: _Columns, stream: str, partition: int) -> pa.RecordBatch:
    rows = len(columns)
    return pa.RecordBatch.from_arrays([
        pa.array(columns.keys, pa.binary()),
        pa.array(columns.values, pa.binary()),
        pa.array([stream] * rows, pa.string()),
        pa.array([partition] * rows, pa.int32()),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps, pa.timestamp("us", tz="UTC")),
        pa.array(columns.headers, HEADER_TYPE),
        pa.array(columns.properties, PROPERTIES_TYPE),
    ], schema=ARROW_SCHEMA)


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
