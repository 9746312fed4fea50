"""AMQP 0-9-1 codec: generated methods, field tables, framing, content assembly, encoders.

pamqp (a real client codec) provides reference bytes in both directions.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import inspect
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body as pamqp_body
from pamqp import commands as pamqp_commands
from pamqp import frame as pamqp_frame
from pamqp import header as pamqp_header

from mainstem.protocols.amqp091 import (
    PROTOCOL_HEADER,
    AmqpCodec,
    AmqpCodecError,
    BasicProperties,
    ContentMessage,
    DeliverEncoder,
    HeaderCheck,
    Heartbeat,
    MethodFrame,
    ProtocolHeaderMismatch,
    ProtocolHeaderReceived,
    ReplyCode,
    classify_protocol_header,
    encode_content,
    encode_heartbeat,
    encode_method,
    encode_table,
    generate,
)
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.spec import load_spec
from mainstem.protocols.amqp091.wire import MAX_TABLE_DEPTH, read_table

FRAME_MAX = 4096


def decode_all(data: bytes, **codec_options) -> list:
    codec = AmqpCodec(expect_protocol_header=False, **codec_options)
    codec.receive_data(data)
    events = codec.next_frames()
    assert codec._buffer == b"", "a complete stream leaves nothing buffered"
    return events


def decode_one(data: bytes):
    (event,) = decode_all(data)
    return event


def pamqp_unmarshal_all(data: bytes) -> list:
    frames = []
    while data:
        consumed, channel, frame = pamqp_frame.unmarshal(data)
        frames.append((channel, frame))
        data = data[consumed:]
    return frames


def pamqp_method_class(method_class: type[m.Method]) -> type:
    class_name, method_name = method_class.NAME.split(".")
    words = "".join(word.capitalize() for word in method_name.split("-"))
    return getattr(getattr(pamqp_commands, class_name.capitalize()), words)


def pamqp_field_values(pamqp_method) -> list:
    """pamqp's argument values in wire order (its parameter names differ from the XML's)."""
    names = list(inspect.signature(type(pamqp_method).__init__).parameters)[1:]
    return [getattr(pamqp_method, name) for name in names if name not in ("args", "kwargs")]


def field_values(method: m.Method) -> list:
    return [getattr(method, attr) for attr, _ in method.FIELDS]


# --- generated code matches the XML ---------------------------------------------------------


def test_generated_module_is_fresh():
    assert generate.main(["--check"]) == 0


def test_every_xml_method_is_generated_with_its_metadata():
    spec = load_spec()
    assert len(spec.methods) == len(m.METHODS) == len(m.METHODS_BY_INDEX)
    for method_spec, method_class in zip(spec.methods, m.METHODS, strict=True):
        generated = (
            method_class.NAME,
            method_class.CLASS_ID,
            method_class.METHOD_ID,
            method_class.SYNCHRONOUS,
            method_class.HAS_CONTENT,
            method_class.FIELDS,
        )
        assert generated == (
            method_spec.full_name,
            method_spec.class_id,
            method_spec.method_id,
            method_spec.synchronous,
            method_spec.has_content,
            tuple((f.attr, f.type) for f in method_spec.fields),
        )


def test_rabbitmq_extensions_and_resolved_domains():
    assert m.ExchangeDeclare.FIELDS[2] == ("type", "shortstr")  # domain shortstr
    assert m.BasicDeliver.FIELDS[1] == ("delivery_tag", "longlong")  # domain delivery-tag
    assert m.BasicQos.FIELDS[2] == ("global_", "bit")  # keyword renamed
    assert m.BasicNack.INDEX == 60 << 16 | 120
    assert m.ConfirmSelect.FIELDS == (("nowait", "bit"),)
    assert m.BasicPublish.HAS_CONTENT and not m.BasicPublish.SYNCHRONOUS
    assert [name for name, _ in BasicProperties.__dataclass_fields__.items()][-1] == "cluster_id"
    assert m.ReplyCode.UNEXPECTED_FRAME == 505 and m.FRAME_END == 0xCE
    assert m.ReplyCode.FRAME_ERROR in m.HARD_ERRORS
    assert m.ReplyCode.NOT_FOUND not in m.HARD_ERRORS


# --- hypothesis: every method round-trips -------------------------------------------------

shortstr = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
table_keys = st.text(min_size=1, max_size=20)
scalar_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 1, 1)
    ).map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
    st.builds(
        lambda mantissa, scale: decimal.Decimal(mantissa).scaleb(-scale),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 255),
    ),
)
table_values = st.recursive(
    scalar_values,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(table_keys, inner, max_size=4),
    max_leaves=12,
)
tables = st.dictionaries(table_keys, table_values, max_size=6)

PRIMITIVE_STRATEGIES = {
    "octet": st.integers(0, 2**8 - 1),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "bit": st.booleans(),
    "shortstr": shortstr,
    "longstr": st.binary(max_size=300),
    "table": tables,
}


@st.composite
def any_method(draw):
    method_class = draw(st.sampled_from(m.METHODS))
    values = [draw(PRIMITIVE_STRATEGIES[kind]) for _, kind in method_class.FIELDS]
    return method_class(*values)


properties_strategy = st.builds(
    BasicProperties,
    content_type=st.none() | shortstr,
    content_encoding=st.none() | shortstr,
    headers=st.none() | tables,
    delivery_mode=st.none() | st.integers(0, 255),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | shortstr,
    reply_to=st.none() | shortstr,
    expiration=st.none() | shortstr,
    message_id=st.none() | shortstr,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
    type=st.none() | shortstr,
    user_id=st.none() | shortstr,
    app_id=st.none() | shortstr,
    cluster_id=st.none() | shortstr,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(method=any_method(), channel=st.integers(0, 65535))
def test_every_method_round_trips(method, channel):
    if method.HAS_CONTENT:
        data = encode_content(channel, method, BasicProperties(), b"x", FRAME_MAX)
        assert decode_one(data) == ContentMessage(channel, method, b"\0\0", b"x")
    else:
        assert decode_one(encode_method(channel, method)) == MethodFrame(channel, method)


def test_round_trip_covers_every_method():
    # The strategy samples from the generated list, which the XML test ties to the spec.
    for method_class in m.METHODS:
        method = method_class()
        encoded = (
            encode_content(1, method, b"\0\0", b"", FRAME_MAX)
            if method.HAS_CONTENT
            else encode_method(1, method)
        )
        assert decode_one(encoded).method == method


@settings(max_examples=200)
@given(properties=properties_strategy, body=st.binary(max_size=10_000))
def test_properties_and_bodies_round_trip(properties, body):
    method = m.BasicPublish(0, "ex", "rk", True, False)
    event = decode_one(encode_content(3, method, properties, body, FRAME_MAX))
    assert (event.method, event.properties, event.body) == (method, properties, body)
    assert event.properties_raw == properties.encode()


# --- pamqp -> our decoder -----------------------------------------------------------------

CLIENT_METHODS = [
    pamqp_commands.Connection.StartOk(
        client_properties={
            "product": "pika",
            "capabilities": {"publisher_confirms": True, "consumer_cancel_notify": True},
        },
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    ),
    pamqp_commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
    pamqp_commands.Connection.Open(virtual_host="/"),
    pamqp_commands.Channel.Open(),
    pamqp_commands.Exchange.Declare(
        exchange="logs",
        exchange_type="topic",
        durable=True,
        auto_delete=True,
        arguments={"alternate-exchange": "ae", "x-weight": 3},
    ),
    pamqp_commands.Queue.Declare(
        queue="q1",
        durable=True,
        exclusive=True,
        arguments={"x-queue-type": "stream", "x-max-length-bytes": 20_000_000_000},
    ),
    pamqp_commands.Queue.Bind(queue="q1", exchange="logs", routing_key="a.*", nowait=True),
    pamqp_commands.Basic.Qos(prefetch_count=250, global_=True),
    pamqp_commands.Basic.Consume(
        queue="q1", consumer_tag="ctag-1", no_ack=True, arguments={"x-stream-offset": "first"}
    ),
    pamqp_commands.Basic.Ack(delivery_tag=2**40, multiple=True),
    pamqp_commands.Basic.Nack(delivery_tag=7, multiple=False, requeue=True),
    pamqp_commands.Basic.Reject(delivery_tag=8, requeue=True),
    pamqp_commands.Confirm.Select(nowait=True),
    pamqp_commands.Exchange.Bind(destination="d", source="s", routing_key="k", nowait=True),
    pamqp_commands.Basic.Cancel(consumer_tag="ctag-1"),
    pamqp_commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
]


@pytest.mark.parametrize("pamqp_method", CLIENT_METHODS, ids=lambda p: p.name)
def test_client_methods_from_pamqp_decode(pamqp_method):
    event = decode_one(pamqp_frame.marshal(pamqp_method, 5))
    assert isinstance(event, MethodFrame) and event.channel == 5
    assert pamqp_method_class(type(event.method)) is type(pamqp_method)
    assert field_values(event.method) == [
        value.encode() if kind == "longstr" and isinstance(value, str) else value
        for value, (_, kind) in zip(
            pamqp_field_values(pamqp_method), event.method.FIELDS, strict=True
        )
    ]


def test_specific_client_fields_decode():
    start_ok, tune_ok, _, _, declare, queue_declare, *_ = (
        decode_one(pamqp_frame.marshal(p, 1)).method for p in CLIENT_METHODS
    )
    assert start_ok.response == b"\0guest\0guest"
    assert start_ok.client_properties["capabilities"]["publisher_confirms"] is True
    assert tune_ok.frame_max == 131072
    assert declare.type == "topic" and declare.durable and declare.auto_delete
    assert not declare.internal and declare.arguments["x-weight"] == 3
    assert queue_declare.arguments == {
        "x-queue-type": "stream",
        "x-max-length-bytes": 20_000_000_000,
    }


def test_publish_with_content_from_pamqp():
    properties = pamqp_commands.Basic.Properties(
        content_type="application/json",
        headers={"trace": "abc", "n": 1, "nested": {"ok": True}},
        delivery_mode=2,
        priority=4,
        correlation_id="c1",
        reply_to="amq.rabbitmq.reply-to",
        expiration="60000",
        message_id="m1",
        timestamp=datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
        message_type="event",
        user_id="guest",
        app_id="app",
    )
    body = bytes(range(256)) * 40  # 10240 bytes: three body frames at frame_max 4096
    data = pamqp_frame.marshal(
        pamqp_commands.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True), 9
    ) + pamqp_frame.marshal(pamqp_header.ContentHeader(0, len(body), properties), 9)
    for start in range(0, len(body), FRAME_MAX - 8):
        data += pamqp_frame.marshal(pamqp_body.ContentBody(body[start : start + 4088]), 9)
    event = decode_one(data)
    assert event.channel == 9 and event.body == body
    assert event.method == m.BasicPublish(0, "ex", "rk", True, False)
    assert event.properties == BasicProperties(
        content_type="application/json",
        headers={"trace": "abc", "n": 1, "nested": {"ok": True}},
        delivery_mode=2,
        priority=4,
        correlation_id="c1",
        reply_to="amq.rabbitmq.reply-to",
        expiration="60000",
        message_id="m1",
        timestamp=int(datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC).timestamp()),
        type="event",
        user_id="guest",
        app_id="app",
    )


# --- our encoder -> pamqp -----------------------------------------------------------------

SERVER_METHODS = [
    m.ConnectionStart(
        0,
        9,
        {"product": "mainstem", "capabilities": {"publisher_confirms": True}},
        b"PLAIN AMQPLAIN",
        b"en_US",
    ),
    m.ConnectionTune(2047, 131072, 60),
    m.ConnectionOpenOk(),
    m.ConnectionClose(320, "CONNECTION_FORCED - shutdown", 0, 0),
    m.ConnectionBlocked("low on memory"),
    m.ChannelOpenOk(),
    m.QueueDeclareOk("amq.gen-abc", 12, 3),
    m.BasicCancel("ctag-1", True),
    m.BasicConsumeOk("ctag-1"),
    m.BasicAck(99, True),
]


@pytest.mark.parametrize("method", SERVER_METHODS, ids=lambda method: method.NAME)
def test_server_methods_decode_with_pamqp(method):
    ((channel, decoded),) = pamqp_unmarshal_all(encode_method(4, method))
    assert channel == 4
    assert isinstance(decoded, pamqp_method_class(type(method)))
    expected = [v.decode() if isinstance(v, bytes) else v for v in field_values(method)]
    assert pamqp_field_values(decoded) == expected


def test_connection_blocked_is_a_rabbitmq_extension_pamqp_knows():
    assert (m.ConnectionBlocked.CLASS_ID, m.ConnectionBlocked.METHOD_ID) == (10, 60)


@pytest.mark.parametrize(
    "method",
    [
        m.BasicDeliver("ctag", 12345678901, True, "ex", "rk"),
        m.BasicReturn(312, "NO_ROUTE", "ex", "rk"),
        m.BasicGetOk(5, False, "", "q", 10),
    ],
    ids=lambda method: method.NAME,
)
def test_server_content_decodes_with_pamqp(method):
    properties = BasicProperties(
        content_type="text/plain", headers={"a": "b"}, delivery_mode=2, timestamp=1_700_000_000
    )
    body = b"0123456789" * 1000
    frames = pamqp_unmarshal_all(encode_content(2, method, properties, body, FRAME_MAX))
    (_, decoded_method), (_, content_header), *bodies = frames
    assert pamqp_field_values(decoded_method) == field_values(method)
    assert content_header.body_size == len(body)
    assert content_header.properties.headers == {"a": "b"}
    assert content_header.properties.delivery_mode == 2
    assert content_header.properties.timestamp.timestamp() == 1_700_000_000
    assert len(bodies) == 3 and all(len(b.value) <= FRAME_MAX - 8 for _, b in bodies)
    assert b"".join(b.value for _, b in bodies) == body


@pytest.mark.parametrize("body_size", [0, 1, FRAME_MAX - 8, FRAME_MAX - 7, 3 * FRAME_MAX])
def test_deliver_fast_path_matches_generic_encoder(body_size):
    properties = BasicProperties(content_type="text/plain", headers={"x": 1})
    body = bytes(body_size)
    fast = DeliverEncoder(7, "consumer-1", FRAME_MAX).encode(
        42, True, "amq.direct", "key", properties.encode(), body
    )
    method = m.BasicDeliver("consumer-1", 42, True, "amq.direct", "key")
    assert fast == encode_content(7, method, properties, body, FRAME_MAX)
    assert decode_one(fast) == ContentMessage(7, method, properties.encode(), body)


def test_heartbeat_frame():
    assert encode_heartbeat() == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert decode_all(encode_heartbeat()) == [Heartbeat()]


# --- field tables -------------------------------------------------------------------------


def test_every_rabbitmq_table_type_decodes():
    def entry(key: bytes, tag: bytes, payload: bytes) -> bytes:
        return bytes([len(key)]) + key + tag + payload

    entries = [
        entry(b"t", b"t", b"\x01"),
        entry(b"b", b"b", struct.pack(">b", -5)),
        entry(b"B", b"B", b"\xfa"),
        entry(b"s", b"s", struct.pack(">h", -300)),
        entry(b"u", b"u", struct.pack(">H", 60000)),
        entry(b"I", b"I", struct.pack(">i", -70000)),
        entry(b"i", b"i", struct.pack(">I", 4_000_000_000)),
        entry(b"l", b"l", struct.pack(">q", -(2**40))),
        entry(b"f", b"f", struct.pack(">f", 1.5)),
        entry(b"d", b"d", struct.pack(">d", 2.25)),
        entry(b"D", b"D", struct.pack(">Bi", 2, -12345)),
        entry(b"S", b"S", struct.pack(">I", 4) + "h\u00e9".encode() + b"!"),
        entry(b"A", b"A", struct.pack(">I", 7) + b"b\x01V" + b"t\x00" + b"B\x02"),
        entry(b"T", b"T", struct.pack(">Q", 1_700_000_000)),
        entry(b"F", b"F", struct.pack(">I", 3) + b"\x01kV"),  # nested {"k": void}
        entry(b"V", b"V", b""),
        entry(b"x", b"x", struct.pack(">I", 3) + b"\x00\xff\x01"),
    ]
    raw = b"".join(entries)
    table, end = read_table(memoryview(struct.pack(">I", len(raw)) + raw), 0)
    assert end == 4 + len(raw)
    assert table == {
        "t": True,
        "b": -5,
        "B": 250,
        "s": -300,
        "u": 60000,
        "I": -70000,
        "i": 4_000_000_000,
        "l": -(2**40),
        "f": 1.5,
        "d": 2.25,
        "D": decimal.Decimal("-123.45"),
        "S": "h\u00e9!",
        "A": [1, None, False, 2],
        "T": datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC),
        "F": {"k": None},
        "V": None,
        "x": b"\x00\xff\x01",
    }


def test_python_values_encode_as_rabbitmq_types():
    def tag_of(value) -> bytes:
        return encode_table({"k": value})[6:7]

    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    assert tag_of("s") == b"S"
    assert tag_of(True) == b"t"
    assert tag_of(5) == b"I" and tag_of(-(2**31)) == b"I"
    assert tag_of(2**31) == b"l" and tag_of(-(2**63)) == b"l"
    assert tag_of({}) == b"F" and tag_of([]) == b"A" and tag_of(()) == b"A"
    assert tag_of(b"raw") == b"x" and tag_of(1.0) == b"d" and tag_of(when) == b"T"
    assert tag_of(None) == b"V" and tag_of(decimal.Decimal("1.5")) == b"D"
    with pytest.raises(ValueError):
        encode_table({"k": 2**63})
    with pytest.raises(TypeError):
        encode_table({"k": object()})


def test_tables_match_pamqp_where_type_mappings_agree():
    from pamqp import decode as pamqp_decode
    from pamqp import encode as pamqp_encode

    table = {
        "a-str": "value",
        "b-bool": False,
        "c-nested": {"deep": ["x", True, None, decimal.Decimal("3.14")]},
        "d-long": 2**40,
        "e-when": datetime.datetime(2030, 6, 1, 8, 30, tzinfo=datetime.UTC),
        "f-void": None,
    }  # sorted keys: pamqp sorts, we keep insertion order
    assert encode_table(table) == pamqp_encode.field_table(table)
    # pamqp encodes bytes from a bytearray; both use 'x'.
    assert encode_table({"x": b"\x01\x02"}) == pamqp_encode.field_table({"x": bytearray(b"\1\2")})
    # Everything pamqp produces (its small-int and float choices too) decodes to equal values.
    mixed = {"i8": 5, "i16": 300, "u16": 40000, "u32": 3_000_000_000, "f": 0.5, **table}
    decoded, _ = read_table(memoryview(pamqp_encode.field_table(mixed)), 0)
    assert decoded == mixed
    _, pamqp_view = pamqp_decode.field_table(encode_table(mixed))
    assert pamqp_view == mixed


@settings(max_examples=300)
@given(table=tables)
def test_tables_round_trip(table):
    assert read_table(memoryview(encode_table(table)), 0) == (table, len(encode_table(table)))


def test_invalid_utf8_in_strings_survives_byte_for_byte():
    raw = struct.pack(">I", 9) + b"\x01kS" + struct.pack(">I", 2) + b"\xff\xfe"
    table, _ = read_table(memoryview(raw), 0)
    assert encode_table(table) == raw


def test_nesting_depth_is_bounded():
    nested: dict = {}
    for _ in range(MAX_TABLE_DEPTH + 1):
        nested = {"n": nested}
    method = m.QueueDeclare(queue="q", arguments=nested)
    with pytest.raises(AmqpCodecError) as info:
        decode_all(encode_method(1, method))
    assert info.value.reply_code == ReplyCode.SYNTAX_ERROR
    assert (info.value.class_id, info.value.method_id) == (50, 10)


# --- framing and content assembly ---------------------------------------------------------


def session_bytes() -> tuple[bytes, list]:
    """A client conversation with content interleaved across two channels."""
    publish = m.BasicPublish(0, "ex", "rk", False, False)
    body_a, body_b = b"A" * 5000, b"B" * 9000
    props = BasicProperties(delivery_mode=2).encode()
    content_a = encode_content(1, publish, props, body_a, FRAME_MAX)
    content_b = encode_content(2, publish, props, body_b, FRAME_MAX)
    frames_a = split_frames(content_a)
    frames_b = split_frames(content_b)
    pairs = zip(frames_a, frames_b[: len(frames_a)], strict=True)
    interleaved = [f for pair in pairs for f in pair] + frames_b[len(frames_a) :]
    data = (
        PROTOCOL_HEADER
        + pamqp_frame.marshal(CLIENT_METHODS[0], 0)
        + b"".join(interleaved)
        + encode_heartbeat()
        + encode_method(1, m.BasicAck(1, False))
    )
    expected = [
        ProtocolHeaderReceived(),
        decode_one(pamqp_frame.marshal(CLIENT_METHODS[0], 0)),
        ContentMessage(1, publish, props, body_a),
        ContentMessage(2, publish, props, body_b),
        Heartbeat(),
        MethodFrame(1, m.BasicAck(1, False)),
    ]
    return data, expected


def split_frames(data: bytes) -> list[bytes]:
    frames = []
    while data:
        size = 8 + struct.unpack_from(">I", data, 3)[0]
        frames.append(data[:size])
        data = data[size:]
    return frames


def test_batch_parses_every_complete_frame():
    data, expected = session_bytes()
    codec = AmqpCodec()
    codec.receive_data(data)
    assert codec.next_frames() == expected


def test_split_at_every_byte():
    data, expected = session_bytes()
    for cut in range(len(data) + 1):
        codec = AmqpCodec()
        codec.receive_data(data[:cut])
        events = codec.next_frames()
        codec.receive_data(data[cut:])
        assert events + codec.next_frames() == expected, cut


def test_byte_by_byte():
    data, expected = session_bytes()
    codec = AmqpCodec()
    events = []
    for i in range(len(data)):
        codec.receive_data(data[i : i + 1])
        events += codec.next_frames()
    assert events == expected


def expect_error(data: bytes, code: ReplyCode, **codec_options) -> AmqpCodecError:
    with pytest.raises(AmqpCodecError) as info:
        decode_all(data, **codec_options)
    assert info.value.reply_code == code, info.value
    return info.value


def test_oversize_frame_rejected_from_its_header_alone():
    header_only = struct.pack(">BHI", 3, 1, FRAME_MAX - 7)
    error = expect_error(header_only, ReplyCode.FRAME_ERROR, frame_max=FRAME_MAX)
    assert "exceeds frame_max" in error.reply_text
    # Exactly frame_max is fine.
    ack = encode_method(1, m.BasicAck(1, False))
    assert decode_all(ack, frame_max=len(ack)) == [MethodFrame(1, m.BasicAck(1, False))]
    expect_error(ack, ReplyCode.FRAME_ERROR, frame_max=len(ack) - 1)


def test_frame_max_can_be_lowered_after_tune():
    codec = AmqpCodec(expect_protocol_header=False)
    codec.frame_max = 100
    codec.receive_data(encode_method(1, m.QueueDeclare(queue="q" * 120)))
    with pytest.raises(AmqpCodecError):
        codec.next_frames()


def test_bad_frame_end_rejected():
    data = bytearray(encode_method(1, m.BasicAck(1, False)))
    data[-1] = 0xCD
    expect_error(bytes(data), ReplyCode.FRAME_ERROR)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x09\x00\x00\x00\x00\x00\x00\xce", ReplyCode.FRAME_ERROR),  # unknown frame type
        (b"\x08\x00\x01\x00\x00\x00\x00\xce", ReplyCode.FRAME_ERROR),  # heartbeat on channel 1
        (b"\x01\x00\x01\x00\x00\x00\x02\x00\x3c\xce", ReplyCode.FRAME_ERROR),  # no method id
        (b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x03\xe7\xce", ReplyCode.COMMAND_INVALID),
        (b"\x01\x00\x01\x00\x00\x00\x05\x00\x3c\x00\x50\x00\xce", ReplyCode.SYNTAX_ERROR),
    ],
    ids=["frame-type", "heartbeat-channel", "short-method", "unknown-method", "short-ack"],
)
def test_malformed_frames(data, code):
    expect_error(data, code)


def test_trailing_bytes_in_a_method_are_a_syntax_error():
    ack = encode_method(1, m.BasicAck(1, False))
    padded = ack[:6] + bytes([ack[6] + 1]) + ack[7:-1] + b"\x00\xce"
    error = expect_error(padded, ReplyCode.SYNTAX_ERROR)
    assert (error.class_id, error.method_id) == (60, 80)
    assert error.close_method() == m.ConnectionClose(502, str(error), 60, 80)


def content_frames(channel: int = 1, body: bytes = b"hello") -> list[bytes]:
    method = m.BasicPublish(0, "", "q", False, False)
    return split_frames(encode_content(channel, method, BasicProperties(), body, FRAME_MAX))


def test_content_frames_out_of_order_are_unexpected():
    method_frame, header_frame, body_frame = content_frames()
    ack = encode_method(1, m.BasicAck(1, False))
    for data in (
        header_frame,  # header without a method
        body_frame,  # body without a method
        method_frame + body_frame,  # body before header
        method_frame + ack,  # method before header
        method_frame + header_frame + ack,  # method before body
        method_frame + header_frame + header_frame,  # second header
        method_frame + header_frame + body_frame + body_frame,  # body after completion
    ):
        expect_error(data, ReplyCode.UNEXPECTED_FRAME)


def test_body_larger_than_declared_is_unexpected():
    method_frame, header_frame, _ = content_frames()
    too_long = struct.pack(">BHI", 3, 1, 6) + b"hello!" + b"\xce"
    expect_error(method_frame + header_frame + too_long, ReplyCode.UNEXPECTED_FRAME)


def test_content_header_for_another_class_is_unexpected():
    method_frame, header_frame, body_frame = content_frames()
    wrong = header_frame[:7] + b"\x00\x3d" + header_frame[9:]
    expect_error(method_frame + wrong + body_frame, ReplyCode.UNEXPECTED_FRAME)


def test_message_size_limit_checked_at_the_header():
    method_frame, header_frame, _ = content_frames(body=b"x" * 100)
    error = expect_error(method_frame + header_frame, ReplyCode.FRAME_ERROR, max_body_size=99)
    assert "larger than configured max size" in error.reply_text


def test_empty_body_completes_at_the_header():
    method_frame, header_frame = content_frames(body=b"")
    (event,) = decode_all(method_frame + header_frame)
    assert event.body == b"" and event.properties == BasicProperties()


def test_error_keeps_events_parsed_before_it_and_poisons_the_codec():
    ack = encode_method(1, m.BasicAck(1, False))
    codec = AmqpCodec(expect_protocol_header=False)
    codec.receive_data(ack + b"\x09\x00\x00\x00\x00\x00\x00\xce" + ack)
    with pytest.raises(AmqpCodecError):
        codec.next_frames()
    assert codec.parsed_before_error == [MethodFrame(1, m.BasicAck(1, False))]
    codec.receive_data(ack)
    with pytest.raises(AmqpCodecError):
        codec.next_frames()


def test_malformed_properties_raise_on_access():
    method_frame, _, body_frame = content_frames()
    header = struct.pack(">HHQ", 60, 0, 5) + b"\x80\x00\x05ab"  # shortstr runs past the end
    frame = struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
    (event,) = decode_all(method_frame + frame + body_frame)
    with pytest.raises(AmqpCodecError) as info:
        _ = event.properties
    assert info.value.reply_code == ReplyCode.SYNTAX_ERROR


def test_encode_content_splits_bodies_by_frame_max():
    method = m.BasicPublish()
    body = bytes(10_000)
    frames = split_frames(encode_content(1, method, BasicProperties(), body, 1000))
    assert all(len(frame) <= 1000 for frame in frames)
    assert len(frames) == 2 + 11


# --- protocol header ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "check"),
    [
        (b"AMQP\x00\x00\x09\x01", HeaderCheck.AMQP_0_9_1),
        (b"AMQP\x00\x00\x09\x01\x01\x00", HeaderCheck.AMQP_0_9_1),
        (b"", HeaderCheck.INCOMPLETE),
        (b"AMQ", HeaderCheck.INCOMPLETE),
        (b"AMQP\x00\x00\x09", HeaderCheck.INCOMPLETE),
        (b"AMQP\x00\x01\x00\x00", HeaderCheck.OTHER_AMQP),  # AMQP 1.0
        (b"AMQP\x03\x01\x00\x00", HeaderCheck.OTHER_AMQP),  # AMQP 1.0 SASL
        (b"AMQP\x01\x01\x08\x00", HeaderCheck.OTHER_AMQP),  # 0-8
        (b"GET / HTTP/1.1", HeaderCheck.NOT_AMQP),
        (b"X", HeaderCheck.NOT_AMQP),
    ],
)
def test_classify_protocol_header(data, check):
    assert classify_protocol_header(data) is check


def test_codec_rejects_a_wrong_protocol_header_early():
    codec = AmqpCodec()
    codec.receive_data(b"GET")
    with pytest.raises(ProtocolHeaderMismatch) as info:
        codec.next_frames()
    assert info.value.received == b"GET"


def test_codec_waits_for_the_whole_header():
    codec = AmqpCodec()
    codec.receive_data(PROTOCOL_HEADER[:5])
    assert codec.next_frames() == []
    codec.receive_data(PROTOCOL_HEADER[5:])
    assert codec.next_frames() == [ProtocolHeaderReceived()]


# --- fuzz ---------------------------------------------------------------------------------


def feed_and_touch(data: bytes, **codec_options) -> None:
    codec = AmqpCodec(**codec_options)
    codec.receive_data(data)
    for event in codec.next_frames():
        if isinstance(event, ContentMessage):
            _ = event.properties


@settings(max_examples=500)
@given(data=st.binary(max_size=200), with_header=st.booleans())
def test_fuzz_random_bytes_raise_only_codec_errors(data, with_header):
    with contextlib.suppress(AmqpCodecError):
        feed_and_touch(data, expect_protocol_header=with_header)


VALID_STREAM = session_bytes()[0][len(PROTOCOL_HEADER) :][:3000] + b"".join(
    encode_method(3, method) for method in SERVER_METHODS[:4]
)


@settings(max_examples=500)
@given(
    mutations=st.lists(
        st.tuples(st.integers(0, len(VALID_STREAM) - 1), st.integers(0, 255)), max_size=4
    ),
    cut=st.integers(0, len(VALID_STREAM)),
)
def test_fuzz_mutated_frames_raise_only_codec_errors(mutations, cut):
    data = bytearray(VALID_STREAM[:cut])
    for position, value in mutations:
        if position < len(data):
            data[position] = value
    with contextlib.suppress(AmqpCodecError):
        feed_and_touch(bytes(data), expect_protocol_header=False)


@pytest.mark.parametrize("body_size", [0, 1, FRAME_MAX - 8, FRAME_MAX - 7, 3 * FRAME_MAX])
def test_publish_read_at_once_equals_publish_read_frame_by_frame(body_size):
    """A publish whose frames arrive together takes the one-step path; split into its
    frames it takes the frame-by-frame one: the same messages either way."""
    properties = BasicProperties(delivery_mode=2, headers={"k": "v"})
    data = b"".join(encode_content(channel, m.BasicPublish(0, "ex", f"key{i}", i % 2 == 0),
                                   properties, bytes([i]) * body_size, FRAME_MAX)
                    for i, channel in enumerate((1, 2, 1, 1)))
    at_once = decode_all(data)
    codec = AmqpCodec(expect_protocol_header=False)
    frame_by_frame = []
    for frame in split_frames(data):
        codec.receive_data(frame)
        frame_by_frame += codec.next_frames()
    assert at_once == frame_by_frame
    assert [(e.channel, e.method.routing_key, e.method.mandatory, len(e.body))
            for e in at_once] == [(1, "key0", True, body_size), (2, "key1", False, body_size),
                                  (1, "key2", True, body_size), (1, "key3", False, body_size)]
    assert all(e.properties == properties for e in at_once)
