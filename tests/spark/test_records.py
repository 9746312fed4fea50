"""The vectorised chunk decoder of the Spark source against the record-by-record one, on
random chunks: entries of one size or of mixed sizes, messages that are only a data section
(vbin8, vbin32, vbin32 holding a short body), messages with properties, application
properties, a routing key or an amqp-value body, records that are not AMQP 1.0 at all, and
compressed sub-batch entries; every offset range, cutting chunks or not. Messages with
annotations, properties and application properties of every simple type (and some not
simple), encoded by mainstem's encoder and by rstream's, and corrupted at a random byte,
hold the vectorised section decoder (``shapes``) to the per-record one."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rstream import AMQPMessage
from rstream._pyamqp.message import Header as RHeader
from rstream._pyamqp.message import Properties as RProperties

from mainstem.formats.amqp10 import (
    BodyKind,
    Header,
    Long,
    Message,
    Properties,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    encode_message,
)
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


simple_values = st.one_of(
    st.none(), st.booleans(), texts, st.binary(max_size=8),
    st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1),
    st.integers(0, 255).map(UByte), st.integers(0, 2**32 - 1).map(UInt),
    st.integers(0, 2**64 - 1).map(ULong), st.integers(-2**63, 2**63 - 1).map(Long),
    st.integers(-2**40, 2**50).map(Timestamp))
odd_values = st.one_of(st.floats(allow_nan=False), st.uuids(), st.lists(st.integers(0, 3),
                                                                         max_size=2))
header_keys = st.sampled_from(["key", "n", "type", "x"]) | texts
ms = st.integers(0, 2**45) | st.integers(-2**62, 2**62)


@st.composite
def sectioned(draw: st.DrawFn) -> bytes:
    """A message with any of the non-body sections, by mainstem's encoder."""
    values = simple_values | odd_values if draw(st.booleans()) else simple_values
    annotations = draw(st.none() | st.dictionaries(
        st.sampled_from(["x-routing-key", "x-other"]).map(Symbol) | st.integers(0, 9).map(ULong),
        values, max_size=3))
    properties = draw(st.none() | st.builds(
        Properties, message_id=st.none() | texts | st.binary(max_size=6) | st.integers(0, 2**64
                                                                                 - 1) | st.uuids(),
        user_id=st.none() | st.binary(max_size=6), subject=st.none() | texts,
        content_type=st.none() | st.just("application/json"),
        creation_time=st.none() | ms, absolute_expiry_time=st.none() | ms,
        group_sequence=st.none() | st.integers(0, 9), reply_to_group_id=st.none() | texts))
    application = draw(st.none() | st.dictionaries(header_keys, values, max_size=4))
    header = draw(st.none() | st.builds(Header, durable=st.none() | st.booleans(),
                                        priority=st.none() | st.integers(0, 9)))
    delivery = draw(st.none() | st.dictionaries(st.just(Symbol("x-d")), values, max_size=1))
    return encode_message(Message(
        body=draw(bodies), header=header, delivery_annotations=delivery,
        message_annotations=annotations, properties=properties,
        application_properties=application))


@st.composite
def by_rstream(draw: st.DrawFn) -> bytes:
    """A message as rstream encodes it (other constructors: map32, str32, ...)."""
    values = st.none() | st.booleans() | texts | st.integers(-2**31, 2**31 - 1)
    return bytes(AMQPMessage(
        body=draw(bodies),
        header=draw(st.none() | st.just(RHeader(durable=True))),
        message_annotations=draw(st.none() | st.dictionaries(
            st.sampled_from(["x-routing-key", "x-opt"]), texts, min_size=1, max_size=2)),
        properties=draw(st.none() | st.builds(
            RProperties, message_id=st.none() | texts, content_type=st.none() | texts,
            creation_time=st.none() | st.integers(0, 2**41))),
        application_properties=draw(st.none() | st.dictionaries(header_keys, values,
                                                                min_size=1, max_size=3))))


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """A message with one byte changed: malformed, or decoded otherwise."""
    message = bytearray(draw(sectioned() | by_rstream()))
    if not message:
        return b""
    at = draw(st.integers(0, len(message) - 1))
    message[at] = draw(st.sampled_from([0x00, 0x40, 0x45, 0xA1, 0xB1, 0xC1, 0xD1, 0xFF,
                                        message[at] ^ 0x01, message[at] ^ 0x80]))
    return bytes(message)


entries = st.one_of(
    sectioned().map(simple),
    by_rstream().map(simple),
    corrupted().map(simple),
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
    assert [row["timestampType"] for row in rows] == [1, 1, 0, 1, 1, 1]  # 2: creation-time
    assert rows[2]["timestamp"].timestamp() == 1_700_000_000.0


def test_key_comes_from_what_publishers_set() -> None:
    """Annotation x-routing-key, else application property ``key``, else message-id; both
    decoders; integers (a uint) in decimal."""
    made = [
        Message(body=b"1", message_annotations={Symbol(KEY_ANNOTATION): "r"},
                application_properties={"key": "a"}, properties=Properties(message_id="m")),
        Message(body=b"2", application_properties={"key": "a", "n": UInt(5)},
                properties=Properties(message_id="m")),
        Message(body=b"3", properties=Properties(message_id=ULong(7),
                                                 creation_time=1_600_000_000_123)),
        Message(body=b"4", application_properties={"other": True}),
    ]
    data = b"".join(simple(encode_message(message))[0] for message in made)
    header = parse_header(encode_header(chunk_id=0, data=data, num_entries=4, num_records=4,
                                        timestamp=1_700_000_000_000))
    chunk = [Chunk(header, memoryview(data), memoryview(b""))]
    for per_record in (True, False):
        rows = table(chunk, 0, 4, True, per_record).to_pylist()
        assert [row["key"] for row in rows] == [b"r", b"a", b"7", None]
        assert rows[1]["headers"] == [{"key": "key", "value": b"a"}, {"key": "n", "value": b"5"}]
        assert rows[3]["headers"] == [{"key": "other", "value": b"true"}]
        assert [row["timestampType"] for row in rows] == [1, 1, 0, 1]
        assert rows[2]["timestamp"].timestamp() == 1_600_000_000.123
        assert ("creation_time", "2020-09-13T12:26:40.123000+00:00") in rows[2]["properties"]


def test_message_shapes_decode_alike() -> None:
    """Chunks of only messages with sections (none of them a bare data section), so that
    the vectorised section decoder takes most of them."""
    # (hypothesis below draws them; this checks that most really are taken, not all
    # left to the per-record decoder)
    from mainstem.spark import shapes

    made = [encode_message(Message(body=b"x" * n, message_annotations={
        Symbol(KEY_ANNOTATION): f"k{n}"}, properties=Properties(message_id=str(n)),
        application_properties={"n": n})) for n in range(50)]
    data = b"".join(made)
    starts, at = [], 0
    for message in made:
        starts.append(at)
        at += len(message)
    shaped = shapes.decode(data, pa.array(starts, pa.int64()),
                           pa.array([s + len(m) for s, m in zip(starts, made, strict=True)],
                                    pa.int64()))
    assert shaped is not None and shaped.taken.to_pylist() == [True] * 50
    assert shaped.keys.to_pylist() == [f"k{n}".encode() for n in range(50)]
    assert shaped.values.to_pylist() == [b"x" * n for n in range(50)]
