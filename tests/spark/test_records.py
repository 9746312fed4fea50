"""The vectorised chunk decoder of the Spark source against the record-by-record one, on
random chunks: entries of one size or of mixed sizes, messages that are only a data section
(vbin8, vbin32, vbin32 holding a short body), messages with properties, application
properties, a routing key or an amqp-value body, records that are not AMQP 1.0 at all, and
compressed sub-batch entries; every offset range, cutting chunks or not."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mainstem.formats.amqp10 import BodyKind, Message, Properties, Symbol, encode_message
from mainstem.formats.chunk import Chunk, encode_header, parse_header
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_ENTRY, SUB_BATCH_FLAG
from mainstem.spark.records import (
    ARROW_SCHEMA,
    HEADERS_COLUMN,
    KEY_ANNOTATION,
    record_batches,
)

DATA32 = bytes([0x00, 0x53, 0x75, 0xB0])  # a data section with a four-byte length

bodies = st.binary(max_size=400)  # past 255 bytes: vbin32
texts = st.text(max_size=12)


def simple(message: bytes) -> tuple[bytes, int]:
    return SIMPLE_ENTRY.pack(len(message)) + message, 1


def with_sections(body: bytes, subject: str | None, headers: dict[str, str] | None,
                  key: str | None, annotated: bool) -> bytes:
    return encode_message(Message(
        body=body,
        properties=Properties(subject=subject, creation_time=1_700_000_000_000)
        if subject is not None else None,
        application_properties=headers,
        message_annotations={Symbol(KEY_ANNOTATION): key} if key is not None else
        {Symbol("x-other"): 1} if annotated else None))


def sub_batch(records: int, payload: bytes) -> tuple[bytes, int]:
    """A compressed sub-batch: opaque to the log, its records skipped by the source."""
    return SUB_BATCH_ENTRY.pack(SUB_BATCH_FLAG | 0x10, records, len(payload) * 2,
                                len(payload)) + payload, records


entries = st.one_of(
    bodies.map(lambda body: simple(encode_message(Message(body=body)))),
    bodies.map(lambda body: simple(DATA32 + SIMPLE_ENTRY.pack(len(body)) + body)),
    st.builds(with_sections, bodies, st.none() | texts,
              st.none() | st.dictionaries(texts, texts, max_size=3), st.none() | texts,
              st.booleans()).map(simple),
    texts.map(lambda text: simple(encode_message(Message(body=text,
                                                         body_kind=BodyKind.VALUE)))),
    st.binary(max_size=30).map(simple),  # not AMQP 1.0 (a BSON event, a truncated message)
    st.builds(sub_batch, st.integers(1, 5), st.binary(max_size=40)),
)


@st.composite
def chunks(draw: st.DrawFn) -> list[Chunk]:
    """A few consecutive chunks; some repeat one entry (all of one size)."""
    result, offset = [], draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            made = [draw(entries)] * draw(st.integers(1, 40))
        else:
            made = draw(st.lists(entries, min_size=1, max_size=40))
        data = b"".join(entry for entry, _ in made)
        records = sum(count for _, count in made)
        header = parse_header(encode_header(chunk_id=offset, data=data, num_entries=len(made),
                                            num_records=records, timestamp=1_700_000_000_000
                                            + offset))
        result.append(Chunk(header, memoryview(data), memoryview(b"")))
        offset += records
    return result


def table(chunk_list: list[Chunk], start: int, end: int, headers: bool, per_record: bool
          ) -> pa.Table:
    schema = ARROW_SCHEMA if headers else ARROW_SCHEMA.remove(
        ARROW_SCHEMA.get_field_index(HEADERS_COLUMN))
    return pa.Table.from_batches(list(record_batches(
        chunk_list, "s", 3, start, end, headers, per_record=per_record)), schema=schema)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks(), st.data(), st.booleans())
def test_vectorised_decoder_equals_the_per_record_one(chunk_list, data, headers) -> None:
    first = chunk_list[0].chunk_id
    last = chunk_list[-1].next_offset
    start = data.draw(st.integers(first - 2, last + 2), label="start")
    end = data.draw(st.integers(start, last + 2), label="end")
    expected = table(chunk_list, start, end, headers, per_record=True)
    decoded = table(chunk_list, start, end, headers, per_record=False)
    assert decoded.schema == expected.schema
    assert decoded.to_pylist() == expected.to_pylist()


def test_rows_of_mixed_shapes() -> None:
    """The two decoders agreeing could hide a shared mistake: a mixed chunk and a chunk of
    one size after it, checked column by column."""
    mixed = [simple(encode_message(Message(body=b"a" * 3))),
             simple(DATA32 + SIMPLE_ENTRY.pack(300) + b"b" * 300),
             simple(with_sections(b"c", "subj", {"h": "v"}, "k", False)),
             sub_batch(2, b"zz"),
             simple(b"raw")]
    alike = [simple(encode_message(Message(body=b"d")))] * 2
    chunk_list = []
    for first, made, moment in ((10, mixed, 1_700_000_000_000), (16, alike, 1_700_000_001_000)):
        data = b"".join(entry for entry, _ in made)
        header = parse_header(encode_header(
            chunk_id=first, data=data, num_entries=len(made),
            num_records=sum(count for _, count in made), timestamp=moment))
        chunk_list.append(Chunk(header, memoryview(data), memoryview(b"")))
    rows = table(chunk_list, 0, 100, True, per_record=False).to_pylist()
    assert [row["offset"] for row in rows] == [10, 11, 12, 15, 16, 17]
    assert [row["value"] for row in rows] == [b"aaa", b"b" * 300, b"c", b"raw", b"d", b"d"]
    assert [row["timestamp"].timestamp() for row in rows] == [1_700_000_000.0] * 4 + [
        1_700_000_001.0] * 2
    assert rows[2]["key"] == b"k" and rows[2]["headers"] == [{"key": "h", "value": b"v"}]
    assert ("subject", "subj") in rows[2]["properties"]
    assert {row["stream"] for row in rows} == {"s"} and {row["topic"] for row in rows} == {"s"}
    assert {row["partition"] for row in rows} == {3}
    assert rows[0]["key"] is None and rows[0]["headers"] is None
