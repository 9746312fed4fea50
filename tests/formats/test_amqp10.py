"""AMQP 1.0 message format and its AMQP 0-9-1 mapping.

rstream (a real stream client) provides reference bytes and a reference decoder: its encoder
is what stream publishers send, and its decoder is what stream consumers read our bytes with.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import uuid
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rstream._pyamqp.message import Header as RHeader
from rstream._pyamqp.message import Properties as RProperties
from rstream.amqp import AMQPMessage, amqp_decoder

from mainstem.formats.amqp091_mapping import from_amqp091, to_amqp091
from mainstem.formats.amqp10 import (
    MAX_DEPTH,
    Amqp10DecodeError,
    Amqp10EncodeError,
    Array,
    BodyKind,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float32,
    Header,
    Long,
    Message,
    Properties,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    decode_message,
    decode_value,
    encode_message,
    encode_value,
    message_body,
)
from mainstem.protocols.amqp091 import BasicProperties


def typed(value: Any) -> Any:
    """A comparable form that keeps AMQP types (``==`` alone treats UInt(1) == 1 == True)."""
    if isinstance(value, Array):
        return ("array", [typed(v) for v in value])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, dict):
        return ("map", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, Described):
        return ("described", typed(value.descriptor), typed(value.value))
    if isinstance(value, float):  # by its bits: a NaN is not equal to itself
        return (type(value).__name__, float.hex(value))
    return (type(value).__name__, value)


def roundtrip(value: Any) -> Any:
    return decode_value(encode_value(value))


# --- primitives -------------------------------------------------------------------------------

UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")

# (value, exact encoding): the constructor choices follow the spec's smallest encodings.
PRIMITIVES = [
    (None, "40"),
    (True, "41"),
    (False, "42"),
    (UByte(255), "50ff"),
    (UShort(65535), "60ffff"),
    (UInt(0), "43"),
    (UInt(7), "5207"),
    (UInt(2**32 - 1), "70ffffffff"),
    (ULong(0), "44"),
    (ULong(200), "53c8"),
    (ULong(2**64 - 1), "80ffffffffffffffff"),
    (Byte(-1), "51ff"),
    (Short(-2), "61fffe"),
    (-5, "54fb"),
    (2**31 - 1, "717fffffff"),
    (Long(-3), "55fd"),
    (Long(2**63 - 1), "817fffffffffffffff"),
    (Float32(1.5), "723fc00000"),
    (1.5, "823ff8000000000000"),
    (Decimal32(b"\x01\x02\x03\x04"), "7401020304"),
    (Decimal64(bytes(range(8))), "840001020304050607"),
    (Decimal128(bytes(range(16))), "94" + bytes(range(16)).hex()),
    (Char("€"), "73000020ac"),
    (Timestamp(1_700_000_000_000), "830000018bcfe56800"),
    (UUID, "98" + UUID.hex),
    (b"ab", "a0026162"),
    (b"x" * 256, "b000000100" + "78" * 256),
    ("hé", "a10368c3a9"),
    ("s" * 300, "b10000012c" + "73" * 300),
    (Symbol("sym"), "a30373796d"),
    (Symbol("y" * 256), "b300000100" + "79" * 256),
    ([], "45"),
    ([UInt(1), "a"], "c0060252" + "01a10161"),
    ({Symbol("k"): None}, "c10502a3016b40"),
    (Array([UInt(1), UInt(2)]), "e00a0270" + "00000001" + "00000002"),
    (Array([True, False]), "e004025601" + "00"),
    (Array([Symbol("a"), Symbol("bc")]), "e00702a3" + "0161" + "026263"),
    (Array([Described(Symbol("d"), UInt(1))]), "e00a0100a30164" + "70" + "00000001"),
    (Array(code=0xA3), "e00200a3"),
    (Described(ULong(0x70), [True]), "005370c00201" + "41"),
]


@pytest.mark.parametrize(("value", "encoded"), PRIMITIVES, ids=lambda v: repr(v)[:40])
def test_primitive_encoding_and_round_trip(value: Any, encoded: str) -> None:
    assert encode_value(value).hex() == encoded
    assert typed(decode_value(bytes.fromhex(encoded))) == typed(value)


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        ("5601", True),  # the one-octet boolean form
        ("5600", False),
        ("5200", UInt(0)),
        ("7000000005", UInt(5)),
        ("8000000000000000ff", ULong(255)),
        ("7100000005", 5),
        ("8100000000000000ff", Long(255)),
        ("d000000006000000024041", [None, True]),  # list32
        ("d10000000700000002540140", {1: None}),  # map32
        ("f00000000900000001" + "70" + "00000009", Array([UInt(9)])),  # array32
        ("e00402531e1e", Array([ULong(0x1E), ULong(0x1E)])),  # smallulong elements
        ("e0060100a30161" + "41", Array([Described(Symbol("a"), True)])),
        ("e0020241", Array([True, True])),  # zero-width elements
        ("e00100", Array()),  # empty array without an element constructor
    ],
)
def test_decodes_alternative_encodings(encoded: str, expected: Any) -> None:
    assert typed(decode_value(bytes.fromhex(encoded))) == typed(expected)


def test_datetime_and_tuple_encode_as_timestamp_and_list() -> None:
    moment = datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    assert decode_value(encode_value(moment)) == int(moment.timestamp() * 1000)
    assert decode_value(encode_value((1, "a"))) == [1, "a"]
    assert typed(roundtrip(Array([moment]))) == typed(Array([Timestamp(1704164645678)]))


@pytest.mark.parametrize(
    "value",
    [
        2**64,
        UByte(256),
        Decimal32(b"\x00"),
        object(),
        Array([1, "a"]),
        Array([Described(Symbol("a"), 1), Described(Symbol("b"), 1)]),
        {1: decimal.Decimal(1)},
    ],
    ids=lambda value: "object()" if type(value) is object else repr(value),  # no address
)
def test_unencodable_values_raise_encode_error(value: Any) -> None:
    with pytest.raises(Amqp10EncodeError):
        encode_value(value)


# --- hypothesis: nested values round-trip -----------------------------------------------------

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
symbols = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20).map(Symbol)
int64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = {
    "null": st.none(),
    "bool": st.booleans(),
    "ubyte": st.integers(0, 255).map(UByte),
    "ushort": st.integers(0, 2**16 - 1).map(UShort),
    "uint": st.integers(0, 2**32 - 1).map(UInt),
    "ulong": st.integers(0, 2**64 - 1).map(ULong),
    "byte": st.integers(-128, 127).map(Byte),
    "short": st.integers(-(2**15), 2**15 - 1).map(Short),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": int64.map(Long),
    "float": st.floats(width=32, allow_nan=False).map(Float32),
    "double": st.floats(allow_nan=False),
    "decimal32": st.binary(min_size=4, max_size=4).map(Decimal32),
    "decimal64": st.binary(min_size=8, max_size=8).map(Decimal64),
    "decimal128": st.binary(min_size=16, max_size=16).map(Decimal128),
    "char": st.characters().map(Char),
    "timestamp": int64.map(Timestamp),
    "uuid": st.uuids(),
    "binary": st.binary(max_size=300),
    "string": texts,
    "symbol": symbols,
}
# rstream's decoder knows neither char nor decimals.
RSTREAM_SCALARS = {
    k: v for k, v in SCALARS.items() if k not in ("char", "decimal32", "decimal64", "decimal128")
}


def amqp_values(scalars: dict[str, Any], *, rstream_safe: bool = False) -> Any:
    """Nested values; ``rstream_safe`` leaves out what rstream's decoder gets wrong (empty
    arrays, described values)."""
    leaf = st.one_of(*scalars.values())
    hashable = leaf

    def arrays(children: Any) -> Any:
        element_kinds = [*scalars.values(), st.lists(children, max_size=3)]
        non_empty = [st.lists(kind, min_size=1, max_size=4).map(Array) for kind in element_kinds]
        empty = st.sampled_from([0xA1, 0x70, 0xD0]).map(lambda code: Array(code=code))
        return st.one_of(*non_empty) | (st.nothing() if rstream_safe else empty)

    def compound(children: Any) -> Any:
        descriptors = st.integers(0, 2**64 - 1).map(ULong) | symbols
        described = st.nothing() if rstream_safe else st.builds(Described, descriptors, children)
        return (
            st.lists(children, max_size=5)
            | st.dictionaries(hashable, children, max_size=4)
            | arrays(children)
            | described
        )

    return st.recursive(leaf, compound, max_leaves=20)


@given(amqp_values(SCALARS))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_any_value_round_trips(value: Any) -> None:
    assert typed(roundtrip(value)) == typed(value)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=5))
def test_plain_int_arrays_widen_to_long_when_needed(values: list[int]) -> None:
    decoded = roundtrip(Array(values))
    assert decoded == values
    fits_int = all(-(2**31) <= v < 2**31 for v in values)
    assert all(type(v) is (int if fits_int else Long) for v in decoded)


# --- messages against rstream's encoder and decoder -------------------------------------------


def test_decodes_rstream_body_only_message() -> None:
    raw = bytes(AMQPMessage(body=b"hello"))
    message = decode_message(raw)
    assert message == Message(body=b"hello")
    assert bytes(message_body(raw)) == b"hello"


def test_decodes_rstream_properties_and_header() -> None:
    properties = RProperties(
        message_id="mid",
        user_id=b"guest",
        to="/queues/q",
        subject="subj",
        reply_to="/queues/reply",
        correlation_id=UUID,
        content_type="application/json",
        content_encoding="gzip",
        absolute_expiry_time=1_700_000_100_000,
        creation_time=1_700_000_000_000,
        group_id="g",
        group_sequence=7,
        reply_to_group_id="rg",
    )
    header = RHeader(durable=True, priority=9, ttl=60_000, first_acquirer=False, delivery_count=3)
    raw = bytes(AMQPMessage(body=b"x", properties=properties, header=header))
    message = decode_message(raw)
    assert message.header == Header(True, 9, 60_000, False, 3)
    assert message.properties == Properties(*properties)
    assert type(message.properties.content_type) is Symbol
    assert type(message.properties.creation_time) is Timestamp
    assert message.body == b"x"


@pytest.mark.parametrize("message_id", [ULong(12), 12, b"\x00bin", UUID, "s"], ids=repr)
def test_decodes_rstream_message_ids(message_id: Any) -> None:
    raw = bytes(AMQPMessage(body=b"", properties=RProperties(message_id=message_id)))
    assert typed(decode_message(raw).properties.message_id) == typed(
        ULong(message_id) if isinstance(message_id, int) else message_id
    )


def test_decodes_rstream_application_properties_and_annotations() -> None:
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    app = {
        "int": 42,
        "neg": -100_000,
        "long": 2**40,
        "double": 2.5,
        "bool": True,
        "str": "héllo",
        "long-str": "z" * 300,
        "bytes": b"\x00\xff",
        "uuid": UUID,
        "null": None,
        "ts": moment,
    }
    annotations = {"x-opt-key": "v", "x-list": [1, "a"], "x-map": {"k": 1}, 5: "ulong key"}
    raw = bytes(
        AMQPMessage(
            body=b"payload",
            application_properties=app,
            message_annotations=annotations,
            delivery_annotations={"x-da": 1},  # rstream sends these last
            footer={"x-foot": b"sig"},
        )
    )
    message = decode_message(raw)
    assert typed(message.application_properties) == typed(
        {**app, "long": Long(2**40), "ts": Timestamp(int(moment.timestamp() * 1000))}
    )
    assert typed(message.message_annotations) == typed(
        {
            Symbol("x-opt-key"): "v",
            Symbol("x-list"): [1, "a"],
            Symbol("x-map"): {"k": 1},
            ULong(5): "ulong key",
        }
    )
    assert message.delivery_annotations == {"x-da": 1}
    assert message.footer == {"x-foot": b"sig"}
    assert bytes(message_body(raw)) == b"payload"


def test_decodes_rstream_value_and_sequence_bodies() -> None:
    value_raw = bytes(AMQPMessage(value={"k": [1, 2]}))
    decoded = decode_message(value_raw)
    assert (decoded.body_kind, decoded.body) == (BodyKind.VALUE, {"k": [1, 2]})
    sequence_raw = bytes(AMQPMessage(sequence=[[1, "a"], [True]]))
    decoded = decode_message(sequence_raw)
    assert (decoded.body_kind, decoded.body) == (BodyKind.SEQUENCE, [[1, "a"], [True]])


def rstream_form(value: Any) -> Any:
    """What rstream's decoder yields for our value: strings and symbols come back as bytes,
    described values as their bare value, typed ints/floats as plain numbers."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [rstream_form(v) for v in value]
    if isinstance(value, dict):
        return {rstream_form(k): rstream_form(v) for k, v in value.items()}
    if isinstance(value, Described):
        return rstream_form(value.value)
    if isinstance(value, bool | None | bytes | uuid.UUID):
        return value
    return float(value) if isinstance(value, float) else int(value)


def test_rstream_decodes_our_full_message() -> None:
    message = Message(
        body=b"body",
        header=Header(durable=True, priority=4, ttl=1000),
        message_annotations={"x-basic-type": "t", "x-n": Long(5)},
        properties=Properties(
            message_id="m",
            user_id=b"u",
            to="t",
            subject="s",
            reply_to="r",
            correlation_id=9,
            content_type="text/plain",
            content_encoding="utf-8",
            absolute_expiry_time=2,
            creation_time=1,
            group_id="g",
            group_sequence=3,
            reply_to_group_id="rg",
        ),
        application_properties={"a": 1, "b": "two", "c": 3.0, "d": False, "e": b"\x01"},
        footer={"x-f": 1},
    )
    theirs = amqp_decoder(encode_message(message))
    assert theirs.body == b"body"
    assert tuple(theirs.header) == (True, 4, 1000, None, None)
    assert tuple(theirs.properties) == (
        b"m",
        b"u",
        b"t",
        b"s",
        b"r",
        9,
        b"text/plain",
        b"utf-8",
        2,
        1,
        b"g",
        3,
        b"rg",
    )
    assert theirs.message_annotations == {b"x-basic-type": b"t", b"x-n": 5}
    assert theirs.application_properties == {
        b"a": 1,
        b"b": b"two",
        b"c": 3.0,
        b"d": False,
        b"e": b"\x01",
    }
    assert theirs.footer == {b"x-f": 1}


@given(amqp_values(RSTREAM_SCALARS, rstream_safe=True))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_rstream_decodes_our_values(value: Any) -> None:
    theirs = amqp_decoder(encode_message(Message(body=value, body_kind=BodyKind.VALUE)))
    assert theirs.value == rstream_form(value)


# What rstream's encoder accepts as application property values: plain Python values.
plain_values = st.recursive(
    st.none()
    | st.booleans()
    | int64
    | st.floats(allow_nan=False)
    | texts
    | st.binary()
    | st.uuids(),
    lambda children: st.lists(children, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(texts, plain_values, max_size=5))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_rstream_application_properties_decode_like_ours(app: dict[str, Any]) -> None:
    raw = bytes(AMQPMessage(body=b"b", application_properties=app or None))
    ours = decode_message(raw).application_properties or {}
    assert rstream_form(ours) == rstream_form(app)


# --- message encoding round trips -------------------------------------------------------------


@st.composite
def messages(draw: Any) -> Message:
    values = amqp_values(SCALARS)
    kind = draw(st.sampled_from(list(BodyKind)))
    body = {
        BodyKind.DATA: st.binary(max_size=400),
        BodyKind.VALUE: values,
        BodyKind.SEQUENCE: st.lists(st.lists(values, max_size=3), min_size=1, max_size=3),
    }[kind]
    annotations = st.dictionaries(
        symbols | st.integers(0, 2**64 - 1).map(ULong), values, max_size=3
    )
    optional = st.none
    return Message(
        body=draw(body),
        body_kind=kind,
        header=draw(
            optional()
            | st.builds(
                Header,
                st.none() | st.booleans(),
                st.none() | st.integers(0, 255).map(UByte),
                st.none() | st.integers(0, 2**32 - 1).map(UInt),
            )
        ),
        delivery_annotations=draw(optional() | annotations),
        message_annotations=draw(optional() | annotations),
        properties=draw(
            optional()
            | st.builds(
                Properties,
                st.none() | texts | st.uuids() | st.integers(0, 2**64 - 1).map(ULong),
                st.none() | st.binary(max_size=10),
                st.none() | texts,
                content_type=st.none() | symbols,
                creation_time=st.none() | int64.map(Timestamp),
                group_sequence=st.none() | st.integers(0, 2**32 - 1).map(UInt),
            )
        ),
        application_properties=draw(optional() | st.dictionaries(texts, values, max_size=3)),
        footer=draw(optional() | annotations),
    )


def normalised(message: Message) -> Message:
    """Empty maps are not sent, so they decode as absent."""
    for name in ("delivery_annotations", "message_annotations", "application_properties", "footer"):
        if not getattr(message, name):
            setattr(message, name, None)
    return message


@given(messages())
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=150)
def test_messages_round_trip_and_body_fast_path_agrees(message: Message) -> None:
    raw = encode_message(message)
    decoded = decode_message(raw)
    expected = normalised(message)
    assert typed(decoded.body) == typed(expected.body)
    assert decoded.header == expected.header
    assert decoded.properties == expected.properties
    for name in ("delivery_annotations", "message_annotations", "application_properties", "footer"):
        assert typed(getattr(decoded, name)) == typed(getattr(expected, name))
    assert_fast_path_agrees(raw, decoded)


def assert_fast_path_agrees(raw: bytes, decoded: Message) -> None:
    body = message_body(raw)
    assert isinstance(body, memoryview)
    if decoded.body_kind is BodyKind.DATA:
        assert bytes(body) == decoded.body
    else:  # the encoded body sections (and footer), which decode to the same body
        assert typed(decode_message(body).body) == typed(decoded.body)


def test_several_data_sections_are_joined() -> None:
    raw = encode_message(Message(body=b"ab")) + encode_message(Message(body=b"cd"))
    assert decode_message(raw).body == b"abcd"
    assert bytes(message_body(raw)) == b"abcd"


def test_fast_path_returns_a_view_into_the_buffer() -> None:
    raw = bytearray(encode_message(Message(body=b"zz", header=Header(durable=True))))
    body = message_body(raw)
    raw[-1] = ord("!")
    assert bytes(body) == b"z!"


def test_symbolic_section_descriptors() -> None:
    raw = encode_value(Described(Symbol("amqp:data:binary"), b"hi"))
    assert decode_message(raw).body == b"hi"
    assert bytes(message_body(raw)) == b"hi"


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "a0",
        "a005ab",
        "b0000000",
        "70000001",
        "5602",
        "a102c3",
        "73ffffffff",
        "c0",
        "c00501",
        "c0020241",
        "c0030241",
        "c1030140",
        "c103024545",
        "e00201",
        "e0020100",
        "e0030240",
        "d0ffffffff00000000",
        "ff",
        "00",
        "0053",
        "a0004040",
    ],
)
def test_malformed_values_raise_decode_error(encoded: str) -> None:
    with pytest.raises(Amqp10DecodeError):
        decode_value(bytes.fromhex(encoded))


def test_zero_width_array_count_is_capped() -> None:
    with pytest.raises(Amqp10DecodeError):
        decode_value(bytes.fromhex("f000000005ffffffff40"))


def test_nesting_is_capped() -> None:
    nested: Any = []
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    with pytest.raises(Amqp10DecodeError, match="nested"):
        decode_value(encode_value(nested))
    described = b"\x00" * 5000 + b"\x40"
    with pytest.raises(Amqp10DecodeError):
        decode_value(described)
    with pytest.raises(Amqp10DecodeError):
        message_body(b"\x00\x53\x70" + described)


@pytest.mark.parametrize(
    "encoded",
    [
        "0053a0",  # unknown section code
        "40",  # not a described section
        "005375a1026869",  # data section holding a string
        "00537740" + "005375a000",  # value then data
        "005373c00f0e" + "40" * 14,  # 14 properties fields
        "005370a10161",  # header that is not a list
        "00537540",  # null data section
    ],
)
def test_malformed_messages_raise_decode_error(encoded: str) -> None:
    with pytest.raises(Amqp10DecodeError):
        decode_message(bytes.fromhex(encoded))


def decode_everything(raw: bytes) -> None:
    """Every decoding entry point either succeeds or raises Amqp10DecodeError."""
    try:
        decoded = decode_message(raw)
    except Amqp10DecodeError:
        decoded = None
    try:
        body = message_body(raw)
    except Amqp10DecodeError:
        body = None
    if decoded is not None:
        assert body is not None
        assert_fast_path_agrees(raw, decoded)
    with contextlib.suppress(Amqp10DecodeError):
        decode_value(raw)
    with contextlib.suppress(Amqp10DecodeError):
        to_amqp091(raw)


@given(st.binary(max_size=200))
@settings(max_examples=500)
def test_random_bytes_raise_only_decode_error(raw: bytes) -> None:
    decode_everything(raw)


@given(st.binary(max_size=100).map(lambda b: b"\x00\x53" + b))
@settings(max_examples=500)
def test_random_sections_raise_only_decode_error(raw: bytes) -> None:
    decode_everything(raw)


@given(messages(), st.data())
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=150)
def test_mutated_messages_raise_only_decode_error(message: Message, data: Any) -> None:
    raw = bytearray(encode_message(message))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        if action == "flip":
            raw[where] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "set":
            raw[where] = data.draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x40, 0xE0, 0xF0]))
        elif action == "cut":
            del raw[where:]
            if not raw:
                break
        else:
            raw[where:where] = data.draw(st.binary(min_size=1, max_size=4))
    decode_everything(bytes(raw))


# --- AMQP 0-9-1 mapping -----------------------------------------------------------------------


def test_plain_stream_message_reads_as_091_message() -> None:
    properties, body = to_amqp091(bytes(AMQPMessage(body=b"hello")))
    assert body == b"hello"
    assert properties == {"delivery_mode": 2}  # RabbitMQ treats header-less messages as durable


@pytest.mark.parametrize(
    ("name", "value", "check"),
    [
        (
            "content_type",
            "application/json",
            lambda m: m.properties.content_type == Symbol("application/json"),
        ),
        ("content_encoding", "gzip", lambda m: type(m.properties.content_encoding) is Symbol),
        ("delivery_mode", 2, lambda m: m.header.durable is True),
        ("delivery_mode", 1, lambda m: m.header.durable is False),
        ("priority", 7, lambda m: typed(m.header.priority) == typed(UByte(7))),
        ("correlation_id", "corr", lambda m: m.properties.correlation_id == "corr"),
        ("correlation_id", "urn:uuid:" + str(UUID), lambda m: m.properties.correlation_id == UUID),
        ("reply_to", "reply", lambda m: m.properties.reply_to == "reply"),
        ("expiration", "60000", lambda m: typed(m.header.ttl) == typed(UInt(60000))),
        ("message_id", "mid", lambda m: m.properties.message_id == "mid"),
        ("message_id", "urn:uuid:" + str(UUID), lambda m: m.properties.message_id == UUID),
        (
            "timestamp",
            1_700_000_000,
            lambda m: typed(m.properties.creation_time) == typed(Timestamp(1_700_000_000_000)),
        ),
        (
            "type",
            "the type",
            lambda m: m.message_annotations == {Symbol("x-basic-type"): "the type"},
        ),
        ("user_id", "guest", lambda m: m.properties.user_id == b"guest"),
        ("app_id", "application id", lambda m: m.properties.group_id == "application id"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_each_091_property_maps_and_round_trips(name: str, value: Any, check: Any) -> None:
    raw = from_amqp091({name: value}, b"body")
    assert check(decode_message(raw))
    properties, body = to_amqp091(raw)
    assert properties[name] == value
    assert body == b"body"


def test_091_message_without_properties() -> None:
    raw = from_amqp091(None, b"")
    message = decode_message(raw)
    assert message == Message(body=b"", header=Header(durable=False))
    assert to_amqp091(raw) == ({"delivery_mode": 1}, b"")


def test_cluster_id_is_dropped() -> None:
    assert to_amqp091(from_amqp091({"cluster_id": "c"}, b""))[0] == {"delivery_mode": 1}


def test_exchange_and_routing_key_become_annotations_not_headers() -> None:
    raw = from_amqp091({}, b"b", exchange="amq.direct", routing_key="rk")
    assert decode_message(raw).message_annotations == {
        "x-exchange": "amq.direct",
        "x-routing-key": "rk",
    }
    assert "headers" not in to_amqp091(raw)[0]


MOMENT = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("header", "value", "amqp10", "back"),
    [
        ("str", "short string", "short string", "short string"),
        ("long-str", "l" * 300, b"l" * 300, b"l" * 300),  # not a shortstr: binary, as RabbitMQ
        ("int", -5, -5, -5),
        ("long", 2**40, Long(2**40), 2**40),
        ("double", 1.25, 1.25, 1.25),
        ("bool", False, False, False),
        ("bytes", b"\x00\x01", b"\x00\x01", b"\x00\x01"),
        ("timestamp", MOMENT, Timestamp(int(MOMENT.timestamp()) * 1000), MOMENT),
        ("void", None, None, None),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "",
)
def test_headers_map_to_application_properties(
    header: str, value: Any, amqp10: Any, back: Any
) -> None:
    raw = from_amqp091({"headers": {header: value}}, b"")
    assert typed(decode_message(raw).application_properties) == typed({header: amqp10})
    assert typed(to_amqp091(raw)[0]["headers"]) == typed({header: back})


def test_x_headers_and_cc_map_to_message_annotations() -> None:
    headers = {
        "x-list": [1, "a", [True]],
        "x-table": {"k": MOMENT},
        "CC": ["q1", "q2"],
        "x-str": "v",
        "list": [1],
        "table": {"a": 1},
        "dec": decimal.Decimal("1.5"),
        "x-dec": decimal.Decimal(1),
    }
    message = decode_message(from_amqp091({"headers": headers, "type": "t"}, b""))
    assert message.application_properties is None  # arrays, tables and decimals are dropped
    assert typed(message.message_annotations) == typed(
        {
            Symbol("x-basic-type"): "t",
            Symbol("x-list"): [1, "a", [True]],
            Symbol("x-table"): {Symbol("k"): Timestamp(int(MOMENT.timestamp()) * 1000)},
            Symbol("x-cc"): ["q1", "q2"],
            Symbol("x-str"): "v",
        }
    )
    properties, _ = to_amqp091(encode_message(message))
    assert properties["type"] == "t"
    assert properties["headers"] == {
        "x-list": [1, "a", [True]],
        "x-table": {"k": MOMENT},
        "CC": ["q1", "q2"],
        "x-str": "v",
    }


def test_properties_objects_are_accepted() -> None:
    fields = {
        "content_type": "text/plain",
        "delivery_mode": 2,
        "priority": 1,
        "app_id": "a",
        "headers": {"h": 1},
        "timestamp": 1_700_000_000,
    }
    from_dict = from_amqp091(fields, b"x")
    assert from_amqp091(BasicProperties(**fields), b"x") == from_dict
    assert from_amqp091(pika.BasicProperties(**fields), b"x") == from_dict
    assert to_amqp091(from_dict) == (fields, b"x")


def test_basic_properties_round_trip_together() -> None:
    fields = {
        "content_type": "ct",
        "content_encoding": "ce",
        "headers": {"h": "v", "x-h": 1},
        "delivery_mode": 2,
        "priority": 9,
        "correlation_id": "c",
        "reply_to": "r",
        "expiration": "5",
        "message_id": "m",
        "timestamp": 12,
        "type": "t",
        "user_id": "u",
        "app_id": "a",
    }
    assert to_amqp091(from_amqp091(fields, b"payload")) == (fields, b"payload")


@pytest.mark.parametrize(
    ("message_id", "expected", "header"),
    [
        (ULong(42), "42", None),
        (UUID, "urn:uuid:" + str(UUID), None),
        (b"\x01\x02", None, b"\x01\x02"),
        ("i" * 300, None, "i" * 300),
    ],
    ids=["ulong", "uuid", "binary", "long-string"],
)
def test_stream_message_ids_for_091(message_id: Any, expected: Any, header: Any) -> None:
    raw = encode_message(
        Message(body=b"", properties=Properties(message_id=message_id, correlation_id=message_id))
    )
    properties, _ = to_amqp091(raw)
    assert properties.get("message_id") == expected
    assert properties.get("correlation_id") == expected
    if header is None:
        assert "headers" not in properties
    else:
        assert properties["headers"] == {"x-message-id": header, "x-correlation-id": header}


def test_stream_header_and_annotations_for_091() -> None:
    raw = encode_message(
        Message(
            body=b"b",
            message_annotations={
                "x-basic-delivery-mode": UByte(1),
                "x-basic-priority": UByte(3),
                "x-basic-expiration": "100",
                "x-opt-rabbitmq-received-time": Timestamp(1500),
                "x-exchange": "e",
                "x-routing-key": "rk",
                "x-death": 1,
                "x-keep": Symbol("s"),
                "x-uuid": UUID,
            },
            properties=Properties(user_id=b"\xff\xfe", reply_to="r" * 300, group_id="g"),
            application_properties={"n": UShort(3), "c": Char("c"), "k" * 300: 1},
        )
    )
    properties, _ = to_amqp091(raw)
    assert properties == {
        "delivery_mode": 1,
        "priority": 3,
        "expiration": "100",
        "app_id": "g",
        "headers": {"n": 3, "timestamp_in_ms": 1500, "x-keep": "s"},
    }


def test_non_data_body_reaches_091_encoded_and_comes_back() -> None:
    original = bytes(AMQPMessage(value=[1, "two"], application_properties={"k": "v"}))
    properties, body = to_amqp091(original)
    assert properties["type"] == "amqp-1.0"
    assert decode_message(body).body == [1, "two"]
    republished = decode_message(from_amqp091(properties, body))
    assert (republished.body_kind, republished.body) == (BodyKind.VALUE, [1, "two"])
    assert republished.application_properties == {"k": "v"}


def test_bad_expiration_and_encoded_body_are_refused() -> None:
    with pytest.raises(ValueError):
        from_amqp091({"expiration": "soon"}, b"")
    with pytest.raises(Amqp10DecodeError):
        from_amqp091({"type": "amqp-1.0"}, b"not amqp")
