"""RabbitMQ Stream codec: seed byte vectors, rstream's real encoder/decoder, framing, fuzzing,
and both directions (requests a client encodes, replies a client decodes)."""

from __future__ import annotations

import contextlib
import itertools
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rstream import schema
from rstream.constants import OffsetType as RsOffsetType
from rstream.encoding import decode_frame, encode_frame, encode_publish

from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import (
    StreamCodec,
    encode,
    encode_deliver_prefix,
    parse_reply,
)
from mainstem.protocols.rabbit_stream.constants import Key, MainstemKey, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.offload import decode_publishes, decoded_frames
from mainstem.protocols.rabbit_stream.wire import FrameError, FrameTooLarge, MalformedFrame

# ------------------------------------------------------------------ helpers


def s(text: str) -> bytes:
    """A protocol string: int16 length + UTF-8."""
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def arr(*items: bytes) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def raw_frame(key: int, version: int, *fields: bytes) -> bytes:
    body = struct.pack(">HH", key, version) + b"".join(fields)
    return struct.pack(">I", len(body)) + body


def entry(body: bytes) -> bytes:
    """An Osiris simple entry: u32 length (top bit 0) + body."""
    return struct.pack(">I", len(body)) + body


def publish(publisher_id: int, messages: list[tuple[int, bytes]], filters=None) -> f.Publish:
    entries = [memoryview(entry(body)) for _, body in messages]
    return f.Publish(
        publisher_id,
        [pid for pid, _ in messages],
        entries,
        num_records=len(messages),
        payload_bytes=sum(len(body) for _, body in messages),
        filter_values=filters,
    )


def as_read(frame: f.Frame) -> f.Frame:
    """What the server's codec makes of a frame a client wrote: a Publish comes as its
    block (ids packed, entries joined), worked out here from the messages."""
    if not isinstance(frame, f.Publish):
        return frame
    ids = frame.publishing_ids
    return f.PublishBlock(
        frame.publisher_id, b"".join(U64(pid) for pid in ids),
        b"".join(bytes(e) for e in frame.entries), len(ids), frame.num_records,
        frame.payload_bytes, frame.filter_values,
        rising=bool(ids) and all(a < b for a, b in itertools.pairwise(ids)))


def parse_all(data: bytes, max_frame_size: int = 0) -> list[f.Frame]:
    codec = StreamCodec(max_frame_size)
    codec.receive_data(data)
    return codec.next_frames()


def parse_one(data: bytes) -> f.Frame:
    (frame,) = parse_all(data)
    return frame


U32 = struct.Struct(">I").pack
U16 = struct.Struct(">H").pack
U64 = struct.Struct(">Q").pack

# ------------------------------------------------------------------ seed byte vectors

SEED_VECTORS = [
    pytest.param(
        raw_frame(0x11, 1, U32(1), arr(s("product") + s("rstream"), s("version") + s("1.1"))),
        f.PeerProperties(1, {"product": "rstream", "version": "1.1"}),
        id="PeerProperties",
    ),
    pytest.param(raw_frame(0x12, 1, U32(2)), f.SaslHandshake(2), id="SaslHandshake"),
    pytest.param(
        raw_frame(0x13, 1, U32(3), s("PLAIN"), U32(10), b"\0guest\0gue"),
        f.SaslAuthenticate(3, "PLAIN", b"\0guest\0gue"),
        id="SaslAuthenticate",
    ),
    pytest.param(
        raw_frame(0x13, 1, U32(3), s("EXTERNAL"), struct.pack(">i", -1)),
        f.SaslAuthenticate(3, "EXTERNAL", b""),
        id="SaslAuthenticate-null-data",
    ),
    pytest.param(raw_frame(0x14, 1, U32(1048576), U32(60)), f.Tune(1048576, 60), id="Tune"),
    pytest.param(raw_frame(0x8014, 1, U32(8192), U32(0)), f.Tune(8192, 0), id="Tune-as-response"),
    pytest.param(raw_frame(0x15, 1, U32(4), s("/")), f.Open(4, "/"), id="Open"),
    pytest.param(
        raw_frame(0x01, 1, U32(5), b"\x07", s("app-1"), s("orders")),
        f.DeclarePublisher(5, 7, "app-1", "orders"),
        id="DeclarePublisher",
    ),
    pytest.param(
        raw_frame(0x02, 1, b"\x07", U32(2), U64(10), entry(b"hello"), U64(11), entry(b"")),
        publish(7, [(10, b"hello"), (11, b"")]),
        id="Publish-v1",
    ),
    pytest.param(
        raw_frame(
            0x02, 2, b"\x07", U32(2), U64(1), s("eu"), entry(b"a"), U64(2), U16(0xFFFF), entry(b"b")
        ),
        publish(7, [(1, b"a"), (2, b"b")], filters=["eu", None]),
        id="Publish-v2",
    ),
    pytest.param(
        raw_frame(
            0x07,
            1,
            U32(6),
            b"\x01",
            s("orders"),
            U16(5),
            struct.pack(">q", -1000),
            U16(10),
            arr(s("single-active-consumer") + s("true"), s("name") + s("app")),
        ),
        f.Subscribe(
            6,
            1,
            "orders",
            f.OffsetSpec(OffsetType.TIMESTAMP, -1000),
            10,
            {"single-active-consumer": "true", "name": "app"},
        ),
        id="Subscribe-properties",
    ),
    pytest.param(
        raw_frame(0x07, 1, U32(6), b"\x02", s("orders"), U16(1), U16(3)),
        f.Subscribe(6, 2, "orders", f.OffsetSpec(OffsetType.FIRST), 3, {}),
        id="Subscribe-no-properties-array",
    ),
    pytest.param(raw_frame(0x09, 1, b"\x01", U16(5)), f.Credit(1, 5), id="Credit"),
    pytest.param(
        raw_frame(0x0A, 1, s("ref"), s("orders"), U64(42)),
        f.StoreOffset("ref", "orders", 42),
        id="StoreOffset",
    ),
    pytest.param(
        raw_frame(0x0B, 1, U32(7), s("ref"), s("orders")),
        f.QueryOffset(7, "ref", "orders"),
        id="QueryOffset",
    ),
    pytest.param(
        raw_frame(0x0F, 1, U32(8), arr(s("a"), s("b"))), f.Metadata(8, ["a", "b"]), id="Metadata"
    ),
    pytest.param(
        raw_frame(0x18, 1, U32(9), s("rk"), s("invoices")),
        f.Route(9, "rk", "invoices"),
        id="Route",
    ),
    pytest.param(
        raw_frame(0x19, 1, U32(10), s("invoices")), f.Partitions(10, "invoices"), id="Partitions"
    ),
    pytest.param(
        raw_frame(0x1C, 1, U32(11), s("orders")), f.StreamStats(11, "orders"), id="StreamStats"
    ),
    pytest.param(
        raw_frame(
            0x1D,
            1,
            U32(12),
            s("inv"),
            arr(s("inv-0"), s("inv-1")),
            arr(s("0"), s("1")),
            arr(s("x-max-age") + s("7D")),
        ),
        f.CreateSuperStream(12, "inv", ["inv-0", "inv-1"], ["0", "1"], {"x-max-age": "7D"}),
        id="CreateSuperStream",
    ),
    pytest.param(
        raw_frame(0x1E, 1, U32(13), s("inv")),
        f.DeleteSuperStream(13, "inv"),
        id="DeleteSuperStream",
    ),
    pytest.param(
        raw_frame(
            0x1B, 1, U32(14), arr(struct.pack(">HHH", 2, 1, 2), struct.pack(">HHH", 8, 1, 2))
        ),
        f.ExchangeCommandVersions(14, [f.CommandVersion(2, 1, 2), f.CommandVersion(8, 1, 2)]),
        id="ExchangeCommandVersions",
    ),
    pytest.param(raw_frame(0x17, 1), f.Heartbeat(), id="Heartbeat"),
    pytest.param(raw_frame(0x16, 1, U32(15), U16(1), s("bye")), f.Close(15, 1, "bye"), id="Close"),
    pytest.param(
        raw_frame(0x8016, 1, U32(15), U16(1)), f.Response(Key.CLOSE, 15, 1), id="CloseResponse"
    ),
    pytest.param(
        raw_frame(0x801A, 1, U32(16), U16(1), U16(4), U64(99)),
        f.ConsumerUpdateReply(16, 1, f.OffsetSpec(OffsetType.OFFSET, 99)),
        id="ConsumerUpdateReply",
    ),
    pytest.param(
        raw_frame(0x801A, 1, U32(16), U16(1), U16(0)),
        f.ConsumerUpdateReply(16, 1, f.OffsetSpec(OffsetType.NONE)),
        id="ConsumerUpdateReply-none",
    ),
    pytest.param(
        raw_frame(0x0D, 1, U32(17), s("orders"), arr(s("x-max-length-bytes") + s("1000"))),
        f.CreateStream(17, "orders", {"x-max-length-bytes": "1000"}),
        id="Create",
    ),
    pytest.param(
        raw_frame(0x1F, 1, U32(18), s("orders"), U16(2), arr(s("filter.0") + s("eu"))),
        f.ResolveOffsetSpec(18, "orders", f.OffsetSpec(OffsetType.LAST), {"filter.0": "eu"}),
        id="ResolveOffsetSpec",
    ),
]


@pytest.mark.parametrize(("data", "expected"), SEED_VECTORS)
def test_seed_vector_parses(data: bytes, expected: f.Frame) -> None:
    assert parse_one(data) == as_read(expected)


@pytest.mark.parametrize(("data", "expected"), SEED_VECTORS)
def test_seed_vector_encodes_back(data: bytes, expected: f.Frame) -> None:
    # Lossy spellings (Tune as 0x8014, null SASL data, omitted properties) re-encode canonically.
    assert parse_one(encode(expected)) == as_read(expected)


# ------------------------------------------------------------------ rstream's real encoder

RS_REQUESTS = [
    pytest.param(
        encode_frame(schema.PeerProperties(1, [schema.Property("product", "RabbitMQ Stream")])),
        f.PeerProperties(1, {"product": "RabbitMQ Stream"}),
        id="PeerProperties",
    ),
    pytest.param(encode_frame(schema.SaslHandshake(2)), f.SaslHandshake(2), id="SaslHandshake"),
    pytest.param(
        encode_frame(schema.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")),
        f.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest"),
        id="SaslAuthenticate",
    ),
    pytest.param(encode_frame(schema.Tune(1048576, 60)), f.Tune(1048576, 60), id="Tune"),
    pytest.param(encode_frame(schema.Open(4, "/")), f.Open(4, "/"), id="Open"),
    pytest.param(
        encode_frame(schema.Create(5, "s", [schema.Property("x-max-age", "1D")])),
        f.CreateStream(5, "s", {"x-max-age": "1D"}),
        id="Create",
    ),
    pytest.param(encode_frame(schema.Delete(6, "s")), f.DeleteStream(6, "s"), id="Delete"),
    pytest.param(
        encode_frame(schema.DeclarePublisher(7, 3, "ref", "s")),
        f.DeclarePublisher(7, 3, "ref", "s"),
        id="DeclarePublisher",
    ),
    pytest.param(
        encode_frame(schema.QueryPublisherSequence(8, "ref", "s")),
        f.QueryPublisherSequence(8, "ref", "s"),
        id="QueryPublisherSequence",
    ),
    pytest.param(
        encode_frame(schema.DeletePublisher(9, 3)), f.DeletePublisher(9, 3), id="DeletePublisher"
    ),
    pytest.param(
        encode_publish(
            schema.Publish(3, [schema.Message(1, None, b"a"), schema.Message(2, None, b"bc")])
        ),
        publish(3, [(1, b"a"), (2, b"bc")]),
        id="Publish-v1",
    ),
    pytest.param(
        encode_publish(
            schema.Publish(3, [schema.Message(1, "eu", b"a"), schema.Message(2, "us", b"bc")]), 2
        ),
        publish(3, [(1, b"a"), (2, b"bc")], filters=["eu", "us"]),
        id="Publish-v2",
    ),
    pytest.param(
        encode_frame(schema.Metadata(10, ["a", "b"])), f.Metadata(10, ["a", "b"]), id="Metadata"
    ),
    pytest.param(encode_frame(schema.Close(11, 1, "OK")), f.Close(11, 1, "OK"), id="Close"),
    pytest.param(
        encode_frame(schema.CloseResponse(11, 1)), f.Response(Key.CLOSE, 11, 1), id="CloseResponse"
    ),
    pytest.param(
        encode_frame(
            schema.Subscribe(
                12,
                1,
                "s",
                schema.OffsetSpec.from_params(RsOffsetType.OFFSET, 5),
                10,
                [schema.Property("filter.0", "eu"), schema.Property("match-unfiltered", "true")],
            )
        ),
        f.Subscribe(
            12,
            1,
            "s",
            f.OffsetSpec(OffsetType.OFFSET, 5),
            10,
            {"filter.0": "eu", "match-unfiltered": "true"},
        ),
        id="Subscribe-offset",
    ),
    pytest.param(
        encode_frame(
            schema.Subscribe(
                13,
                2,
                "s",
                schema.OffsetSpec.from_params(RsOffsetType.TIMESTAMP, 1700000000000),
                1,
                [],
            )
        ),
        f.Subscribe(13, 2, "s", f.OffsetSpec(OffsetType.TIMESTAMP, 1700000000000), 1, {}),
        id="Subscribe-timestamp",
    ),
    pytest.param(
        encode_frame(
            schema.Subscribe(
                14, 3, "s", schema.OffsetSpec.from_params(RsOffsetType.NEXT, None), 1, []
            )
        ),
        f.Subscribe(14, 3, "s", f.OffsetSpec(OffsetType.NEXT), 1, {}),
        id="Subscribe-next",
    ),
    pytest.param(encode_frame(schema.Unsubscribe(15, 3)), f.Unsubscribe(15, 3), id="Unsubscribe"),
    pytest.param(
        encode_frame(schema.StoreOffset("ref", "s", 77)),
        f.StoreOffset("ref", "s", 77),
        id="StoreOffset",
    ),
    pytest.param(
        encode_frame(schema.QueryOffset(16, "ref", "s")),
        f.QueryOffset(16, "ref", "s"),
        id="QueryOffset",
    ),
    pytest.param(encode_frame(schema.Credit(3, 1)), f.Credit(3, 1), id="Credit"),
    pytest.param(
        encode_frame(schema.SuperStreamRoute(17, "rk", "inv")),
        f.Route(17, "rk", "inv"),
        id="Route",
    ),
    pytest.param(
        encode_frame(schema.SuperStreamPartitions(18, "inv")),
        f.Partitions(18, "inv"),
        id="Partitions",
    ),
    pytest.param(
        encode_frame(schema.ExchangeCommandVersionRequest(19, [schema.FrameHandlerInfo(2, 1, 2)])),
        f.ExchangeCommandVersions(19, [f.CommandVersion(2, 1, 2)]),
        id="ExchangeCommandVersions",
    ),
    pytest.param(
        encode_frame(
            schema.CreateSuperStream(
                20, "inv", ["inv-0", "inv-1"], ["0", "1"], [schema.Property("x-max-age", "1D")]
            )
        ),
        f.CreateSuperStream(20, "inv", ["inv-0", "inv-1"], ["0", "1"], {"x-max-age": "1D"}),
        id="CreateSuperStream",
    ),
    pytest.param(
        encode_frame(schema.DeleteSuperStream(21, "inv")),
        f.DeleteSuperStream(21, "inv"),
        id="DeleteSuperStream",
    ),
    pytest.param(
        # rstream appends a u64 offset even for NEXT; the reply must still parse.
        encode_frame(schema.ConsumerUpdateServerResponse(22, 1, schema.OffsetSpecification(3, 0))),
        f.ConsumerUpdateReply(22, 1, f.OffsetSpec(OffsetType.NEXT)),
        id="ConsumerUpdateReply",
    ),
    pytest.param(encode_frame(schema.Heartbeat()), f.Heartbeat(), id="Heartbeat"),
]


@pytest.mark.parametrize(("data", "expected"), RS_REQUESTS)
def test_rstream_request_parses(data: bytes, expected: f.Frame) -> None:
    assert parse_one(data) == as_read(expected)


# Where rstream's bytes differ from the protocol's: it keys its Close reply 0x0016, and it
# appends an offset to a ConsumerUpdate reply whatever the offset type.
RS_QUIRKS = {"CloseResponse", "ConsumerUpdateReply"}


@pytest.mark.parametrize(
    ("data", "expected"), [p for p in RS_REQUESTS if p.id not in RS_QUIRKS]
)
def test_our_requests_encode_to_rstreams_bytes(data: bytes, expected: f.Frame) -> None:
    assert encode(expected) == data


def test_publish_of_bodies_is_simple_entries() -> None:
    messages = [(5, b"ab"), (6, b"")]
    assert f.Publish.of_bodies(3, messages) == publish(3, messages)


def test_rstream_sub_batch_entry_is_kept_opaque() -> None:
    records = entry(b"one") + entry(b"three")
    data = encode_frame(
        schema.PublishSubBatching(
            publisher_id=2,
            number_of_root_messages=1,
            publishing_id=40,
            compress_type=0x80,  # sub-batch flag | compression none
            subbatching_message_count=2,
            uncompressed_data_size=len(records),
            compressed_data_size=len(records),
            messages=records,
        )
    )
    block = parse_one(data)
    assert isinstance(block, f.PublishBlock)
    expected_entry = struct.pack(">BHII", 0x80, 2, len(records), len(records)) + records
    assert block.entries == expected_entry
    assert (block.count, block.num_records, block.payload_bytes) == (1, 2, 8)
    assert (block.first_id, block.last_id, block.rising) == (40, 40, True)
    assert block.publish() == f.Publish(2, [40], [expected_entry], 2, 8)


def test_a_block_holds_the_entries_without_ids_and_the_ids_as_a_confirm_carries_them(
        ) -> None:
    block = parse_one(encode(publish(1, [(5, b"ab"), (6, b"cde")])))
    assert isinstance(block, f.PublishBlock)
    assert block.entries == entry(b"ab") + entry(b"cde")
    assert (block.count, block.num_records, block.payload_bytes) == (2, 2, 5)
    assert (block.first_id, block.last_id, block.rising) == (5, 6, True)
    assert encode(r.PublishConfirm(1, block.packed_ids)) == encode(r.PublishConfirm(1, [5, 6]))
    assert not parse_one(encode(publish(1, []))).rising
    assert not parse_one(encode(publish(1, [(7, b""), (7, b"")]))).rising
    assert not parse_one(encode(publish(1, [(8, b""), (7, b"")]))).rising


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.binary(max_size=40)),
                         max_size=20),
       filters=st.booleans())
def test_a_worker_answers_each_publish_as_the_block_of_what_the_loop_would_parse(
        messages: list[tuple[int, bytes]], filters: bool) -> None:
    values = [None if i % 3 else f"f{i}" for i in range(len(messages))] if filters else None
    wire = encode(publish(9, messages, values))
    (answer,) = decoded_frames(decode_publishes(wire))
    assert isinstance(answer, f.PublishBlock)
    assert answer == parse_one(wire) == as_read(publish(9, messages, values))
    assert answer.publish() == publish(9, messages, values)
    ids = [pid for pid, _ in messages]
    assert answer.rising == (bool(ids) and all(a < b for a, b in itertools.pairwise(ids)))


def sub_batch(records: list[bytes], uncompressed: int | None = None) -> bytes:
    """An Osiris sub-batch entry holding `records` uncompressed."""
    data = b"".join(entry(body) for body in records)
    size = len(data) if uncompressed is None else uncompressed
    return struct.pack(">BHII", 0x80, len(records), size, len(data)) + data


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.one_of(
           st.binary(max_size=30).map(lambda body: (entry(body), 1, len(body))),
           st.lists(st.binary(max_size=10), max_size=4).map(
               lambda bodies: (sub_batch(bodies), len(bodies), sum(map(len, bodies))))),
           max_size=12),
       filters=st.booleans())
def test_a_block_counts_the_records_and_payload_of_simple_and_sub_batch_entries(
        messages: list[tuple[bytes, int, int]], filters: bool) -> None:
    values = [None if i % 2 else f"f{i}" for i in range(len(messages))] if filters else None
    frame = f.Publish(4, list(range(len(messages))), [e for e, _, _ in messages],
                      sum(n for _, n, _ in messages), sum(p for _, _, p in messages), values)
    block = parse_one(encode(frame))
    assert block == as_read(frame)
    assert block.publish() == frame


@pytest.mark.parametrize("bad", [0, 1], ids=["first-of-two", "last-of-two"])
def test_a_publish_whose_message_runs_past_the_frame_is_refused(bad: int) -> None:
    wire = bytearray(encode(publish(1, [(1, b"ab"), (2, b"cd")])))
    length_at = [4 + 2 + 2 + 1 + 4 + 8, 4 + 2 + 2 + 1 + 4 + 8 + 4 + 2 + 8][bad]
    wire[length_at:length_at + 4] = U32(0x7FFF)
    with pytest.raises(MalformedFrame):
        parse_all(bytes(wire))


def test_a_worker_answers_a_malformed_publish_with_its_error_in_order() -> None:
    good = encode(publish(1, [(1, b"a")]))
    bad = bytearray(encode(publish(1, [(2, b"bc")])))
    bad[-3:-2] = b"\x7f"  # the entry's length runs past the frame
    answers = decoded_frames(decode_publishes(good + bytes(bad) + good))
    assert [type(answer) for answer in answers] == [f.PublishBlock, MalformedFrame,
                                                    f.PublishBlock]


# ------------------------------------------------------------------ rstream's real decoder


def rs_decode(frame: f.Frame) -> schema.Frame:
    data = encode(frame)
    assert struct.unpack_from(">I", data)[0] == len(data) - 4
    return decode_frame(data[4:])


RS_RESPONSES = [
    pytest.param(
        r.PeerPropertiesResponse(1, ResponseCode.OK, {"product": "mainstem"}),
        schema.PeerPropertiesResponse(1, 1, [schema.Property("product", "mainstem")]),
        id="PeerProperties",
    ),
    pytest.param(
        r.SaslHandshakeResponse(2, ResponseCode.OK, ["PLAIN", "AMQPLAIN"]),
        schema.SaslHandshakeResponse(2, 1, ["PLAIN", "AMQPLAIN"]),
        id="SaslHandshake",
    ),
    pytest.param(
        r.SaslAuthenticateResponse(3, ResponseCode.OK),
        schema.SaslAuthenticateResponse(3, 1),
        id="SaslAuthenticate",
    ),
    pytest.param(f.Tune(1048576, 60), schema.Tune(1048576, 60), id="Tune"),
    pytest.param(
        r.OpenResponse(4, ResponseCode.OK, {"advertised_host": "h", "advertised_port": "5552"}),
        schema.OpenResponse(
            4,
            1,
            [schema.Property("advertised_host", "h"), schema.Property("advertised_port", "5552")],
        ),
        id="Open",
    ),
    pytest.param(
        f.Response(Key.CREATE_STREAM, 5, ResponseCode.STREAM_ALREADY_EXISTS),
        schema.CreateResponse(5, 5),
        id="Create",
    ),
    pytest.param(
        f.Response(Key.DECLARE_PUBLISHER, 6, ResponseCode.OK),
        schema.DeclarePublisherResponse(6, 1),
        id="DeclarePublisher",
    ),
    pytest.param(
        f.Response(Key.SUBSCRIBE, 7, ResponseCode.OK),
        schema.SubscribeResponse(7, 1),
        id="Subscribe",
    ),
    pytest.param(
        f.Response(Key.CREATE_SUPER_STREAM, 8, ResponseCode.OK),
        schema.CreateSuperStreamResponse(8, 1),
        id="CreateSuperStream",
    ),
    pytest.param(
        r.QueryPublisherSequenceResponse(9, ResponseCode.OK, 123),
        schema.QueryPublisherSequenceResponse(9, 1, 123),
        id="QueryPublisherSequence",
    ),
    pytest.param(
        r.QueryOffsetResponse(10, ResponseCode.NO_OFFSET, 0),
        schema.QueryOffsetResponse(10, 19, 0),
        id="QueryOffset",
    ),
    pytest.param(
        r.PublishConfirm(3, [1, 2, 3]), schema.PublishConfirm(3, [1, 2, 3]), id="PublishConfirm"
    ),
    pytest.param(
        r.PublishError(3, [(4, ResponseCode.PUBLISHER_DOES_NOT_EXIST)]),
        schema.PublishError(3, [schema.PublishingError(4, 18)]),
        id="PublishError",
    ),
    pytest.param(
        r.MetadataResponse(
            11,
            [r.Broker(0, "localhost", 5552)],
            [
                r.StreamMetadata("s", ResponseCode.OK, 0, [0]),
                r.StreamMetadata("gone", ResponseCode.STREAM_DOES_NOT_EXIST, None),
            ],
        ),
        schema.MetadataResponse(
            11,
            [schema.Broker(0, "localhost", 5552)],
            [schema.StreamMetadata("s", 1, 0, [0]), schema.StreamMetadata("gone", 2, 0xFFFF, [])],
        ),
        id="Metadata",
    ),
    pytest.param(
        r.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, "s"),
        schema.MetadataUpdate(schema.MetadataInfo(6, "s")),
        id="MetadataUpdate",
    ),
    pytest.param(f.Close(12, 1, "shutdown"), schema.Close(12, 1, "shutdown"), id="Close"),
    pytest.param(f.Heartbeat(), schema.Heartbeat(), id="Heartbeat"),
    pytest.param(
        r.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST, 9),
        schema.CreditResponse(4, 9),
        id="CreditResponse",
    ),
    pytest.param(
        r.RouteResponse(13, ResponseCode.OK, ["inv-1"]),
        schema.SuperStreamRouteResponse(13, 1, ["inv-1"]),
        id="Route",
    ),
    pytest.param(
        r.PartitionsResponse(14, ResponseCode.OK, ["inv-0", "inv-1"]),
        schema.SuperStreamPartitionsResponse(14, 1, ["inv-0", "inv-1"]),
        id="Partitions",
    ),
    pytest.param(
        r.ExchangeCommandVersionsResponse(
            15, ResponseCode.OK, [f.CommandVersion(1, 1, 1), f.CommandVersion(2, 1, 2)]
        ),
        schema.ExchangeCommandVersionResponse(
            15, 1, [schema.FrameHandlerInfo(1, 1, 1), schema.FrameHandlerInfo(2, 1, 2)]
        ),
        id="ExchangeCommandVersions",
    ),
    pytest.param(
        r.ConsumerUpdate(16, 2, True),
        schema.ConsumerUpdateResponse(16, 2, 1),  # rstream's name for the server's request
        id="ConsumerUpdate",
    ),
]


@pytest.mark.parametrize(("frame", "expected"), RS_RESPONSES)
def test_rstream_decodes_our_frames(frame: f.Frame, expected: schema.Frame) -> None:
    assert rs_decode(frame) == expected


@pytest.mark.parametrize(("frame", "expected"), RS_RESPONSES)
def test_client_side_decodes_what_rstream_decodes(frame: f.Frame, expected: schema.Frame) -> None:
    assert parse_reply(memoryview(encode(frame))[4:]) == frame


def test_client_side_reads_a_failed_open_without_properties() -> None:
    data = raw_frame(0x8015, 1, U32(4), U16(ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE))
    assert parse_reply(memoryview(data)[4:]) == r.OpenResponse(4, 0x0C)


def test_unknown_server_frame_is_an_unknown_command() -> None:
    data = raw_frame(0x8030, 1, U32(4), U16(1))
    assert parse_reply(memoryview(data)[4:]) == f.UnknownCommand(0x8030, 1, 4)


def test_server_command_versions_work_with_rstreams_index_lookup() -> None:
    reply = rs_decode(r.ExchangeCommandVersionsResponse(1, 1, r.SERVER_COMMAND_VERSIONS))
    publish_entry = reply.command_versions[Key.PUBLISH - 1]  # how rstream finds Publish
    assert (publish_entry.key_command, publish_entry.max_version) == (Key.PUBLISH, 2)
    deliver_entry = reply.command_versions[Key.DELIVER - 1]
    assert (deliver_entry.key_command, deliver_entry.max_version) == (Key.DELIVER, 2)


def test_sasl_challenge_carries_bytes() -> None:
    data = encode(r.SaslAuthenticateResponse(1, ResponseCode.SASL_CHALLENGE, b"nonce"))
    assert data[-9:] == U32(5) + b"nonce"
    assert encode(r.SaslAuthenticateResponse(1, ResponseCode.AUTHENTICATION_FAILURE)) == (
        raw_frame(0x8013, 1, U32(1), U16(8))
    )


def test_stream_stats_and_resolve_offset_spec_layouts() -> None:
    stats = {"first_chunk_id": 0, "committed_chunk_id": 10, "last_chunk_id": -1}
    assert encode(r.StreamStatsResponse(1, ResponseCode.OK, stats)) == raw_frame(
        0x801C,
        1,
        U32(1),
        U16(1),
        arr(*(s(k) + struct.pack(">q", v) for k, v in stats.items())),
    )
    assert encode(r.ResolveOffsetSpecResponse(2, 1, OffsetType.OFFSET, 7)) == raw_frame(
        0x801F, 1, U32(2), U16(1), U16(4), U64(7)
    )


def test_tiered_segments_layout_and_its_key_outside_rabbitmqs() -> None:
    """mainstem's own command: a key RabbitMQ's protocol does not use, never advertised."""
    assert MainstemKey.TIERED_SEGMENTS not in {k.value for k in Key}
    assert max(Key) < MainstemKey.TIERED_SEGMENTS < 0x8000
    assert all(v.key != MainstemKey.TIERED_SEGMENTS for v in r.SERVER_COMMAND_VERSIONS)
    assert encode(f.TieredSegments(3, "s")) == raw_frame(0x7E01, 1, U32(3), s("s"))
    segment = r.TieredSegment("s/0/1.segment", 1, 9, 16, 90, 5, 6, 200, 7, 56, 8, 2)
    assert encode(r.TieredSegmentsResponse(3, 1, "/tier", None, "eu", [segment])) == raw_frame(
        0xFE01, 1, U32(3), U16(1), s("/tier"), U16(0xFFFF), s("eu"),
        arr(s("s/0/1.segment") + struct.pack(">QQQQqqQIQII", 1, 9, 16, 90, 5, 6, 200, 7, 56,
                                              8, 2)))
    # a server without the command answers with a code only: no tier
    assert parse_reply(memoryview(raw_frame(0xFE01, 1, U32(3), U16(0x0D)))[4:]) == \
        r.TieredSegmentsResponse(3, ResponseCode.UNKNOWN_FRAME)


# ------------------------------------------------------------------ Deliver


def osiris_chunk(chunk_id: int, bodies: list[bytes]) -> bytes:
    data = b"".join(entry(b) for b in bodies)
    header = struct.pack(
        ">BBHIqQQIIIB3x",
        0x50,
        0,
        len(bodies),
        len(bodies),
        1700000000000,
        1,
        chunk_id,
        zlib.crc32(data),
        len(data),
        0,
        16,
    )
    assert len(header) == 48
    return header + data


def test_deliver_v1_prefix_plus_chunk_is_what_rstream_reads() -> None:
    chunk = osiris_chunk(100, [b"m1", b"m22"])
    deliver = decode_frame((encode_deliver_prefix(5, 1, len(chunk)) + chunk)[4:])
    assert isinstance(deliver, schema.Deliver)
    assert deliver.subscription_id == 5
    assert deliver.chunk_first_offset == 100
    assert deliver.get_messages() == [b"m1", b"m22"]


@pytest.mark.parametrize("committed", [None, 99])
def test_deliver_frame_is_the_prefix_plus_the_chunk(committed: int | None) -> None:
    chunk = osiris_chunk(100, [b"m1", b"m22"])
    version = 1 if committed is None else 2
    data = encode_deliver_prefix(5, version, len(chunk), committed or 0) + chunk
    frame = r.Deliver(5, memoryview(chunk), committed)
    assert encode(frame) == data
    assert parse_reply(memoryview(data)[4:]) == frame


def test_deliver_v2_prefix_layout() -> None:
    prefix = encode_deliver_prefix(7, 2, 60, committed_chunk_id=99)
    assert prefix == struct.pack(">IHHBQ", 2 + 2 + 1 + 8 + 60, 0x0008, 2, 7, 99)
    with pytest.raises(ValueError):
        encode_deliver_prefix(7, 3, 60)
    with pytest.raises(ValueError):
        encode_deliver_prefix(7, 1, 47)


# ------------------------------------------------------------------ framing

STREAM = b"".join(data for data, _ in (p.values for p in SEED_VECTORS))
EXPECTED = [as_read(frame) for _, frame in (p.values for p in SEED_VECTORS)]


def test_one_next_frames_call_drains_every_frame() -> None:
    assert parse_all(STREAM) == EXPECTED


def test_split_at_every_byte_boundary_parses_identically() -> None:
    data = STREAM[:600]
    reference = parse_all(STREAM)  # frames fully inside the first 600 bytes come out the same
    for cut in range(len(data) + 1):
        codec = StreamCodec(0)
        codec.receive_data(data[:cut])
        got = codec.next_frames()
        codec.receive_data(memoryview(data)[cut:])
        got += codec.next_frames()
        assert got == reference[: len(got)]
        assert len(got) == len(parse_all(data))


def test_byte_by_byte_feed() -> None:
    codec = StreamCodec(0)
    got: list[f.Frame] = []
    for i in range(len(STREAM)):
        codec.receive_data(STREAM[i : i + 1])
        got += codec.next_frames()
    assert got == EXPECTED


def test_oversize_frame_rejected_from_its_size_prefix_alone() -> None:
    codec = StreamCodec(max_frame_size=100)
    codec.receive_data(struct.pack(">I", 101))
    with pytest.raises(FrameTooLarge) as info:
        codec.next_frames()
    assert info.value.code == ResponseCode.FRAME_TOO_LARGE
    assert (info.value.size, info.value.limit) == (101, 100)


def test_good_frames_before_an_error_come_out_first_then_the_error_sticks() -> None:
    codec = StreamCodec(max_frame_size=100)
    codec.receive_data(raw_frame(0x17, 1) + struct.pack(">I", 5000))
    assert codec.next_frames() == [f.Heartbeat()]
    for _ in range(2):
        with pytest.raises(FrameTooLarge):
            codec.next_frames()


def test_max_frame_size_is_settable_after_tune() -> None:
    big = encode(publish(1, [(1, b"x" * 9000)]))
    codec = StreamCodec()
    codec.max_frame_size = 1 << 20
    codec.receive_data(big)
    (frame,) = codec.next_frames()
    assert isinstance(frame, f.PublishBlock)
    with pytest.raises(FrameTooLarge):
        parse_all(big, max_frame_size=8192)


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    data = raw_frame(0x0F, 1, U32(1), arr(s("x" * 10)))
    assert parse_all(data, max_frame_size=len(data) - 4) == [f.Metadata(1, ["x" * 10])]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(raw_frame(0x7F, 1, U32(33), b"zz"), f.UnknownCommand(0x7F, 1, 33), id="key"),
        pytest.param(
            raw_frame(0x0F, 9, U32(34), arr()), f.UnknownCommand(0x0F, 9, 34), id="version"
        ),
        pytest.param(raw_frame(0x8005, 1, b"\x01"), f.UnknownCommand(0x8005, 1, None), id="short"),
    ],
)
def test_unknown_commands_become_frames(data: bytes, expected: f.Frame) -> None:
    assert parse_all(data + raw_frame(0x17, 1)) == [expected, f.Heartbeat()]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(struct.pack(">I", 2) + b"\0\x17", id="size-below-header"),
        pytest.param(raw_frame(0x15, 1, U32(1), U16(10), b"abc"), id="string-past-end"),
        pytest.param(raw_frame(0x15, 1, U32(1), U16(0xFFFF)), id="null-required-string"),
        pytest.param(raw_frame(0x15, 1, U32(1), s("/"), b"!"), id="trailing-bytes"),
        pytest.param(raw_frame(0x15, 1, U32(1), U16(2), b"\xff\xfe"), id="bad-utf8"),
        pytest.param(raw_frame(0x17, 1, b"\0"), id="heartbeat-with-body"),
        pytest.param(raw_frame(0x0F, 1, U32(1), U32(1 << 30)), id="forged-array-count"),
        pytest.param(raw_frame(0x07, 1, U32(1), b"\0", s("s"), U16(9), U16(1)), id="offset-type"),
        pytest.param(
            raw_frame(0x02, 1, b"\0", U32(1), U64(1), U32(100), b"short"), id="publish-body-short"
        ),
        pytest.param(
            raw_frame(0x02, 1, b"\0", U32(1), U64(1), struct.pack(">BHII", 0x80, 2, 9, 50)),
            id="sub-batch-short",
        ),
    ],
)
def test_malformed_frames_raise(data: bytes) -> None:
    with pytest.raises(MalformedFrame) as info:
        parse_all(data)
    assert info.value.code == ResponseCode.UNKNOWN_FRAME


# ------------------------------------------------------------------ fuzzing


@settings(max_examples=400)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=40))
def test_random_bytes_only_raise_codec_errors(data: bytes, step: int) -> None:
    codec = StreamCodec(max_frame_size=256)
    try:
        for i in range(0, len(data), step):
            codec.receive_data(data[i : i + step])
            codec.next_frames()
    except FrameError:
        pass


@settings(max_examples=300)
@given(st.integers(0, 0x1F), st.integers(1, 2), st.binary(max_size=64))
def test_random_bodies_behind_real_keys_only_raise_codec_errors(
    key: int, version: int, body: bytes
) -> None:
    for wire_key in (key, key | 0x8000):
        with contextlib.suppress(FrameError):
            parse_all(raw_frame(wire_key, version, body))


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
u8, u16 = st.integers(0, 0xFF), st.integers(0, 0xFFFF)
u32, u64 = st.integers(0, 0xFFFFFFFF), st.integers(0, 2**64 - 1)
props = st.dictionaries(text, text, max_size=3)
offset_specs = st.one_of(
    st.builds(f.OffsetSpec, st.sampled_from([OffsetType.FIRST, OffsetType.LAST, OffsetType.NEXT])),
    st.builds(f.OffsetSpec, st.just(OffsetType.OFFSET), u64),
    st.builds(f.OffsetSpec, st.just(OffsetType.TIMESTAMP), st.integers(-(2**63), 2**63 - 1)),
)


@st.composite
def publishes(draw: st.DrawFn) -> f.Publish:
    messages = draw(st.lists(st.tuples(u64, st.binary(max_size=20)), max_size=5))
    with_filters = draw(st.booleans())
    filters = [draw(st.none() | text) for _ in messages] if with_filters else None
    return publish(draw(u8), messages, filters)


inbound_frames = st.one_of(
    st.builds(f.DeclarePublisher, u32, u8, text, text),
    publishes(),
    st.builds(f.QueryPublisherSequence, u32, text, text),
    st.builds(f.DeletePublisher, u32, u8),
    st.builds(f.Subscribe, u32, u8, text, offset_specs, u16, props),
    st.builds(f.Credit, u8, u16),
    st.builds(f.StoreOffset, text, text, u64),
    st.builds(f.QueryOffset, u32, text, text),
    st.builds(f.Unsubscribe, u32, u8),
    st.builds(f.CreateStream, u32, text, props),
    st.builds(f.DeleteStream, u32, text),
    st.builds(f.Metadata, u32, st.lists(text, max_size=3)),
    st.builds(f.PeerProperties, u32, props),
    st.builds(f.SaslHandshake, u32),
    st.builds(f.SaslAuthenticate, u32, text, st.binary(max_size=20)),
    st.builds(f.Tune, u32, u32),
    st.builds(f.Open, u32, text),
    st.builds(f.Close, u32, u16, text),
    st.builds(f.Response, st.just(Key.CLOSE), u32, u16),
    st.builds(f.Heartbeat),
    st.builds(f.Route, u32, text, text),
    st.builds(f.Partitions, u32, text),
    st.builds(
        f.ConsumerUpdateReply,
        u32,
        u16,
        offset_specs | st.just(f.OffsetSpec(OffsetType.NONE)),
    ),
    st.builds(f.ExchangeCommandVersions, u32, st.lists(st.builds(f.CommandVersion, u16, u16, u16))),
    st.builds(f.StreamStats, u32, text),
    st.builds(
        f.CreateSuperStream,
        u32,
        text,
        st.lists(text, max_size=3),
        st.lists(text, max_size=3),
        props,
    ),
    st.builds(f.DeleteSuperStream, u32, text),
    st.builds(f.ResolveOffsetSpec, u32, text, offset_specs, props),
    st.builds(f.TieredSegments, u32, text),
)


@settings(max_examples=500)
@given(st.lists(inbound_frames, min_size=1, max_size=4), st.integers(1, 50))
def test_random_valid_frames_round_trip(frames: list[f.Frame], step: int) -> None:
    data = b"".join(encode(frame) for frame in frames)
    codec = StreamCodec(0)
    got: list[f.Frame] = []
    for i in range(0, len(data), step):
        codec.receive_data(data[i : i + step])
        got += codec.next_frames()
    assert got == [as_read(frame) for frame in frames]


# ------------------------------------------------------------------ server -> client

i64 = st.integers(-(2**63), 2**63 - 1)
stream_metadata = st.builds(
    r.StreamMetadata, text, u16, st.none() | st.integers(0, 0xFFFE), st.lists(u16, max_size=3)
)
sasl_replies = st.builds(r.SaslAuthenticateResponse, u32, u16) | st.builds(
    r.SaslAuthenticateResponse, u32, st.just(ResponseCode.SASL_CHALLENGE), st.binary(max_size=20)
)
command_versions = st.lists(st.builds(f.CommandVersion, u16, u16, u16), max_size=3)

outbound_frames = st.one_of(
    st.builds(r.PublishConfirm, u8, st.lists(u64, max_size=5)),
    st.builds(r.PublishError, u8, st.lists(st.tuples(u64, u16), max_size=5)),
    st.builds(r.Deliver, u8, st.binary(min_size=48, max_size=80).map(memoryview)),
    st.builds(r.Deliver, u8, st.binary(min_size=48, max_size=80).map(memoryview), u64),
    st.builds(r.MetadataUpdate, u16, text),
    st.builds(f.Tune, u32, u32),
    st.builds(f.Close, u32, u16, text),
    st.builds(f.Heartbeat),
    st.builds(r.ConsumerUpdate, u32, u8, st.booleans()),
    st.builds(r.QueryPublisherSequenceResponse, u32, u16, u64),
    st.builds(r.CreditResponse, u16, u8),
    st.builds(r.QueryOffsetResponse, u32, u16, u64),
    st.builds(
        r.MetadataResponse,
        u32,
        st.lists(st.builds(r.Broker, u16, text, u32), max_size=3),
        st.lists(stream_metadata, max_size=3),
    ),
    st.builds(r.PeerPropertiesResponse, u32, u16, props),
    st.builds(r.SaslHandshakeResponse, u32, u16, st.lists(text, max_size=3)),
    sasl_replies,
    st.builds(r.OpenResponse, u32, u16, props),
    st.builds(r.RouteResponse, u32, u16, st.lists(text, max_size=3)),
    st.builds(r.PartitionsResponse, u32, u16, st.lists(text, max_size=3)),
    st.builds(r.ExchangeCommandVersionsResponse, u32, u16, command_versions),
    st.builds(r.StreamStatsResponse, u32, u16, st.dictionaries(text, i64, max_size=3)),
    st.builds(r.ResolveOffsetSpecResponse, u32, u16, st.sampled_from(OffsetType), u64),
    st.builds(r.TieredSegmentsResponse, u32, u16, text, st.none() | text, text,
              st.lists(st.builds(r.TieredSegment, text, u64, u64, u64, u64, i64, i64, u64,
                                 u32, u64, u32, u32), max_size=3)),
    st.builds(f.Response, st.sampled_from(r.CODE_ONLY_REPLIES), u32, u16),
)


@settings(max_examples=500)
@given(st.lists(outbound_frames, min_size=1, max_size=4), st.integers(1, 50))
def test_random_server_frames_round_trip(frames: list[f.Frame], step: int) -> None:
    data = b"".join(encode(frame) for frame in frames)
    codec = StreamCodec(0, r.REPLY_PARSERS)
    got: list[f.Frame] = []
    for i in range(0, len(data), step):
        codec.receive_data(data[i : i + step])
        got += codec.next_frames()
    assert got == [as_read(frame) for frame in frames]


@settings(max_examples=300)
@given(st.integers(0, 0x1F), st.integers(1, 2), st.binary(max_size=64))
def test_random_server_bodies_only_raise_codec_errors(key: int, version: int, body: bytes) -> None:
    for wire_key in (key, key | 0x8000):
        with contextlib.suppress(FrameError):
            parse_reply(memoryview(raw_frame(wire_key, version, body))[4:])
