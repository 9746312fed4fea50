"""The segment protocol codec: modified UTF-8, round trips of every message type (both
directions share the codec), append blocks, partial messages, fuzzing."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.segment import codec as c


@given(st.text())
def test_modified_utf8_round_trip(text: str) -> None:
    raw = c.encode_mutf8(text)
    assert b"\x00" not in raw and not any(b >= 0xF0 for b in raw)
    assert c.decode_mutf8(raw) == text


def test_modified_utf8_vectors() -> None:
    assert c.encode_mutf8("\x00") == b"\xc0\x80"
    assert c.encode_mutf8("\U0001F600") == b"\xed\xa0\xbd\xed\xb8\x80"  # a surrogate pair
    for bad in (b"\xf0\x9f\x98\x80", b"\xed\xa0\xbd", b"\xff", b"\xc3"):
        with pytest.raises(c.FrameError):
            c.decode_mutf8(bad)


@given(st.text(max_size=50), st.integers(-(2**63), 2**63 - 1), st.booleans(), st.binary())
def test_round_trip(segment: str, offset: int, flag: bool, data: bytes) -> None:
    cid = uuid.uuid4()
    for message in (c.SetupAppend(cid, segment), c.AppendSetup(segment, cid, offset),
                    c.SegmentRead(segment, offset, flag, not flag, data),
                    c.TruncateSegment(offset, segment, offset), c.NoSuchSegment(segment, "x")):
        (decoded, size), = c.Decoder().feed(message.encode())
        assert size == len(message.encode())
        assert decoded.encode() == message.encode()


@given(st.binary(min_size=1, max_size=3000), st.integers(9, 100))
def test_partial_split_and_join(data: bytes, frame_max: int) -> None:
    frame = c.SegmentRead("s", 0, False, False, data).encode()
    pieces = c.split_partial(frame, frame_max)
    decoder, joiner = c.Decoder(frame_max), c.Reassembler(1 << 20)
    joined = [joiner.add(m) if isinstance(m, c.Partial) else m
              for m, _ in decoder.feed(b"".join(pieces))]
    assert joined[-1].encode() == frame and all(j is None for j in joined[:-1])


def test_new_partial_before_the_end_is_an_error() -> None:
    joiner = c.Reassembler(100)
    joiner.add(c.Partial(c.PARTIAL_BEGIN, b"abc"))
    with pytest.raises(c.FrameError):
        joiner.add(c.Partial(c.PARTIAL_BEGIN, b"abc"))


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_fuzz_decoder_raises_only_frame_errors(data: bytes) -> None:
    try:
        for message, _ in c.Decoder(64).feed(data):
            if isinstance(message, c.Partial):
                c.Reassembler(64).add(message)
    except c.FrameError:
        pass


@settings(max_examples=300)
@given(st.sampled_from(sorted(c.MESSAGES)), st.binary(max_size=60))
def test_fuzz_known_types_with_random_bodies(type_code: int, body: bytes) -> None:
    with contextlib.suppress(c.FrameError):
        c.Decoder().feed(c.HEADER.pack(type_code, len(body)) + body)


FIELD_VALUES = {
    "s": st.text(max_size=20),
    "u": st.uuids(),
    "q": st.integers(-(2**63), 2**63 - 1),
    "i": st.integers(-(2**31), 2**31 - 1),
    "?": st.booleans(),
    "b": st.binary(max_size=40),
}


@st.composite
def messages(draw: st.DrawFn) -> c.Message:
    cls = draw(st.sampled_from([c.MESSAGES[t] for t in sorted(c.MESSAGES)]))
    if cls is c.Partial:
        return c.Partial(draw(st.sampled_from([c.PARTIAL_BEGIN, c.PARTIAL_MIDDLE,
                                               c.PARTIAL_END])), draw(FIELD_VALUES["b"]))
    return cls(*(draw(FIELD_VALUES[kind]) for kind in cls.FIELDS))


@settings(max_examples=500)
@given(st.lists(messages(), min_size=1, max_size=5), st.integers(1, 64))
def test_every_message_type_round_trips(sent: list[c.Message], step: int) -> None:
    data = b"".join(m.encode() for m in sent)
    decoder = c.Decoder()
    got = []
    for i in range(0, len(data), step):
        got += decoder.feed(data[i:i + step])
    assert got == [(m, len(m.encode())) for m in sent]


@given(st.uuids(), st.integers(0, 2**40), st.lists(st.binary(max_size=30), min_size=1,
                                                    max_size=5))
def test_an_append_block_is_begin_events_end(cid: uuid.UUID, offset: int,
                                             events: list[bytes]) -> None:
    frames, end = c.encode_append_block(cid, offset, events)
    decoded = [m for m, _ in c.Decoder().feed(frames)]
    assert end == offset + sum(c.event_length(e) for e in events)
    assert decoded == [c.BeginAppendBlock(cid, offset, end - offset),
                       *(c.Event(e) for e in events), c.EndAppendBlock(cid, end, end - offset)]


@settings(max_examples=300)
@given(st.lists(messages(), min_size=1, max_size=6), st.integers(1, 64))
def test_event_runs_decode_as_their_frames_split_anywhere(sent: list[c.Message],
                                                          step: int) -> None:
    """feed_events gives what feed gives, with each run of Events as their frames minus
    the type (length and data) and the run's bytes on the wire."""
    data = b"".join(m.encode() for m in sent)
    decoder = c.Decoder()
    got: list[tuple[c.Message, int]] = []
    for i in range(0, len(data), step):
        for item in decoder.feed_events(data[i:i + step]):
            if isinstance(item, c.Events):
                assert item.size == sum(len(f) + 4 for f in item.framed)
                got += [(c.Event(bytes(f[4:])), len(f) + 4) for f in item.framed]
                assert all(len(f) == 4 + int.from_bytes(f[:4], "big") for f in item.framed)
            else:
                got.append(item)
    assert got == [(m, len(m.encode())) for m in sent]
