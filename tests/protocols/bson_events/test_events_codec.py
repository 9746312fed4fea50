"""The BSON event protocol's codec, both ways: every frame a client sends and every frame
the server sends goes through encode_frame and comes back out of an EventCodec unchanged,
whatever the read boundaries; oversized and broken streams are reported, not buffered."""

from __future__ import annotations

import struct

import bson
import bson.int64
import pytest
from bson.raw_bson import RawBSONDocument
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.bson_events.codec import (
    EVENT_TAIL,
    FRAME_OVERHEAD,
    MAX_DOCUMENT,
    EventCodec,
    Frame,
    FramingError,
    Malformed,
    Oversized,
    RecevEncoder,
    encode_frame,
    encode_ok,
)

# What mainstem's client sends (and mewbase's spellings the server also reads) ...
CLIENT_FRAMES = ["CONNECT", "PUBLISH", "PUB", "EMIT", "STARTTX", "COMMITTX", "ABORTTX",
                 "SUBSCRIBE", "UNSUBSCRIBE", "SUBCLOSE", "ACKEV", "QUERY", "QUERYACK",
                 "FINDBYID", "LISTBINDERS", "CREATEBINDER", "LISTCHANNELS", "CREATECHANNEL",
                 "PING", "CREATEPROJECTION", "BEGINLOAD", "LOADDOCS", "HANDOVER"]
# ... and what the server sends.
SERVER_FRAMES = ["RESPONSE", "SUBRESPONSE", "RECEV", "QUERYRESPONSE", "QUERYRESULT"]

keys = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
               max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.binary(max_size=12),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(keys, inner, max_size=3), max_leaves=8)
bodies = st.dictionaries(keys, values, max_size=5)
frames = st.tuples(st.sampled_from(CLIENT_FRAMES + SERVER_FRAMES), bodies)


def read_all(data: bytes, step: int, max_event_size: int | None = None) -> list:
    codec = EventCodec(max_event_size)
    events = []
    for i in range(0, len(data), step):
        codec.receive_data(data[i:i + step])
        events += codec.next_events()
    return events


@settings(max_examples=300)
@given(st.lists(frames, min_size=1, max_size=4), st.integers(1, 64))
def test_every_frame_round_trips_in_both_directions(sent: list, step: int) -> None:
    encoded = [encode_frame(kind, body) for kind, body in sent]
    got = read_all(b"".join(encoded), step)
    assert got == [Frame(kind, body, len(raw)) for (kind, body), raw in zip(sent, encoded,
                                                                              strict=True)]


@pytest.mark.parametrize("kind", CLIENT_FRAMES + SERVER_FRAMES)
def test_a_typical_frame_of_each_type(kind: str) -> None:
    body = {"rID": 7, "channel": "orders", "event": {"total": 9.5, "items": ["a", "b"]}}
    raw = encode_frame(kind, body)
    assert raw == bson.encode({"type": kind, "frame": body})  # what mewbase clients write
    assert read_all(raw, 3) == [Frame(kind, body, len(raw))]


def test_an_oversized_frame_is_skipped_and_the_next_one_read() -> None:
    big = encode_frame("PUBLISH", {"event": {"blob": bytes(FRAME_OVERHEAD + 200)}})
    small = encode_frame("PING", {"rID": 1})
    assert read_all(big + small, 1000, max_event_size=100) == [
        Oversized(len(big)), Frame("PING", {"rID": 1}, len(small))]
    assert read_all(big, 1000)[0].size == len(big)  # a client's codec takes any size
    assert EventCodec(None).max_frame_size == MAX_DOCUMENT


def test_valid_bson_of_the_wrong_shape_is_malformed() -> None:
    assert read_all(bson.encode({"type": 1, "frame": {"rID": 3}}), 100) == [
        Malformed("the frame has no string 'type'", 3)]
    assert read_all(bson.encode({"type": "PING"}), 100) == [
        Malformed("the frame has no document 'frame'", None)]


@pytest.mark.parametrize("raw", [struct.pack("<i", 4), struct.pack("<i", 9) + b"\x07" * 5])
def test_a_stream_that_cannot_be_framed_raises(raw: bytes) -> None:
    with pytest.raises(FramingError):
        read_all(raw, 100)


def test_a_run_of_frames_with_one_that_is_not_bson_raises() -> None:
    good = encode_frame("PING", {"rID": 1})
    broken = struct.pack("<i", 12) + b"\x07" * 8  # a plausible length, no BSON
    with pytest.raises(FramingError):
        read_all(good + broken + good, 1000)


ints = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200)
@given(st.lists(st.one_of(ints, st.booleans(), st.text(max_size=4),
                          ints.map(bson.int64.Int64)), max_size=5))
def test_ok_responses_are_the_bytes_encode_frame_gives(request_ids: list) -> None:
    assert encode_ok(request_ids) == b"".join(
        encode_frame("RESPONSE", {"ok": True, "rID": rid}) for rid in request_ids)


@settings(max_examples=200)
@given(st.integers(1, 2**40), st.lists(st.tuples(ints, st.integers(0, 2**63 - 1)),
                                       min_size=1, max_size=6), bodies)
def test_recev_frames_are_the_bytes_encode_frame_gives(sub_id: int, deliveries: list,
                                                      event: dict) -> None:
    raw = bson.encode(event)
    encoder = RecevEncoder(sub_id)
    for timestamp, position in deliveries:
        built = encoder.heads(timestamp)(position, len(raw)) + raw + EVENT_TAIL
        assert built == encode_frame("RECEV", {"subID": sub_id, "timestamp": timestamp,
                                               "pos": position, "event": RawBSONDocument(raw)})


def _read_one(raw: bytes) -> tuple[EventCodec, Frame]:
    codec = EventCodec(None)
    codec.receive_data(encode_frame("PING", {"rID": 1}) + raw[:9])  # the frame in two reads
    codec.next_events()
    codec.receive_data(raw[9:])
    [frame] = codec.next_events()
    return codec, frame


@settings(max_examples=200)
@given(st.sampled_from(["PUBLISH", "PUB", "EMIT"]), keys, bodies,
       st.integers(-(2**31), 2**31 - 1))
def test_a_publish_as_the_client_writes_it_is_stored_as_read(kind: str, channel: str,
                                                            event: dict, rid: int) -> None:
    codec, frame = _read_one(encode_frame(kind, {"channel": channel, "event": event,
                                                 "rID": rid}))
    as_read = codec.publish_event(frame, channel)
    assert as_read is not None and bytes(as_read) == bson.encode(event)


@pytest.mark.parametrize("frame", [
    {"type": "PUBLISH", "frame": {"event": {"a": 1}, "channel": "c", "rID": 1}},
    {"type": "PUBLISH", "frame": {"channel": "c", "event": {"a": 1}, "rID": 2**40}},
    {"type": "PUBLISH", "frame": {"channel": "c", "event": {"a": 1}, "rID": 1, "sessID": 2}},
    {"type": "PUBLISH", "frame": {"channel": "c", "event": [1], "rID": 1}},
    {"type": "PUBLISH", "frame": {"channel": "c", "event": {"a": 1}, "rID": 1}, "more": 1},
    {"more": 1, "type": "PUBLISH", "frame": {"channel": "c", "event": {"a": 1}, "rID": 1}},
])
def test_any_other_publish_layout_is_not_taken_as_read(frame: dict) -> None:
    codec, read = _read_one(bson.encode(frame))
    assert codec.publish_event(read, "c") is None
