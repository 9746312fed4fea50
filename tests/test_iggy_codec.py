"""The Iggy codec on byte vectors from the seed, and a fuzz of the server's parser."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem import Broker
from mainstem.client.iggy import IggyClient, IggyClientError
from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy.records import decode_record, encode_record


def test_request_framing_from_the_seed() -> None:
    # a 100-byte payload makes length 104 and a 108-byte frame
    frame = c.encode_request(c.Code.PING, bytes(100))
    assert len(frame) == 108 and struct.unpack_from("<II", frame) == (104, 1)
    requests, used = c.parse_requests(frame + frame[:7], 1 << 20)
    assert used == 108 and [r.code for r in requests] == [1]
    assert len(requests[0].payload) == 100


def test_oversized_and_short_lengths_are_framing_errors() -> None:
    for length in (0, 3, 2_000_000):
        try:
            c.parse_requests(struct.pack("<II", length, 1), 1 << 20)
        except c.FramingError:
            continue
        raise AssertionError(f"length {length} accepted")


def test_a_vsr_request_header_is_told_from_a_seed_request() -> None:
    header = bytearray(256)
    struct.pack_into("<I", header, 48, 256)
    header[60] = 5  # request
    assert c.may_become_vsr_request(bytes(header[:60]))
    assert not c.may_become_vsr_request(bytes(header[:61]))
    assert c.is_vsr_request(bytes(header[:61])) and c.is_vsr_request(bytes(header))
    seed = c.encode_request(c.Code.PING, bytes(100))
    assert not c.may_become_vsr_request(seed[:8]) and not c.is_vsr_request(seed)
    header[60] = 8  # a reply is no client's first frame
    assert not c.is_vsr_request(bytes(header))


def test_identifiers() -> None:
    assert c.encode_identifier(1) == b"\x01\x04\x01\x00\x00\x00"
    assert c.encode_identifier("my-stream") == b"\x02\x09my-stream"
    for raw, expected in ((b"\x01\x04\x01\x00\x00\x00", 1), (b"\x02\x01a", "a")):
        assert c.Reader(memoryview(raw)).identifier() == expected
    for bad in (b"\x02\x00", b"\x01\x02\x01\x00", b"\x03\x01a", b"\x02\x05ab"):
        try:
            c.Reader(memoryview(bad)).identifier()
        except c.IggyError as exc:
            assert exc.code in (c.ErrorCode.INVALID_IDENTIFIER, c.ErrorCode.INVALID_FORMAT)
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_consumer_seed_u32_and_client_identifier_forms() -> None:
    tail = b"\x01\x04\x01\x00\x00\x00" * 2 + bytes(4)
    seed = c.Reader(memoryview(b"\x01" + struct.pack("<I", 9) + tail))
    assert c.read_consumer(seed, 4) == c.Consumer(1, 9)
    client = c.Reader(memoryview(b"\x02\x02\x02cg" + tail))
    assert c.read_consumer(client, 4) == c.Consumer(2, "cg")


@given(st.integers(0, 2**128 - 1), st.binary(max_size=64), st.binary(max_size=300))
def test_record_round_trip(message_id: int, headers: bytes, payload: bytes) -> None:
    got_id, got_headers, got_payload = decode_record(memoryview(
        encode_record(message_id, headers, payload)))
    assert (got_id, got_headers, bytes(got_payload)) == (message_id, headers, payload)


async def test_fuzzed_frames_never_hurt_the_server(tmp_path: Path) -> None:
    codes = [int(code) for code in c.Code] + [0, 7, 9999]

    @settings(max_examples=150, deadline=None)
    @given(st.sampled_from(codes), st.binary(max_size=80))
    def frames(code: int, payload: bytes) -> None:
        garbage.append(c.encode_request(code, payload))

    garbage: list[bytes] = []
    frames()
    async with Broker(data_dir=tmp_path / "data") as broker:
        port = broker.ports["iggy"]
        bystander = await IggyClient.connect("127.0.0.1", port)
        await bystander.login("guest", "guest")
        fuzzer = await IggyClient.connect("127.0.0.1", port)
        await fuzzer.login("guest", "guest")
        for frame in garbage:
            code = struct.unpack_from("<I", frame, 4)[0]
            with contextlib.suppress(IggyClientError):  # an error status is fine
                await fuzzer.request(code, frame[8:])
        await bystander.ping()
        # a framing error (oversized length) closes only that connection
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack("<II", 0xFFFF_FFFF, 1))
        status, _ = struct.unpack("<II", await reader.readexactly(8))
        assert status == c.ErrorCode.INVALID_COMMAND
        assert await reader.read() == b""
        writer.close()
        # truncated frame, then the peer goes away
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack("<II", 50, 101) + b"\x01")
        writer.close()
        # zero-length names and identifiers longer than their bytes get an error status
        await fuzzer.login("guest", "guest")  # the fuzz may have sent LOGOUT_USER
        for code, payload in ((c.Code.CREATE_STREAM, bytes(5)),
                              (c.Code.GET_STREAM, b"\x02\xff" + b"x" * 200),
                              (c.Code.GET_STREAM, b"\x02\x00")):
            try:
                await fuzzer.request(code, payload)
            except IggyClientError as exc:
                assert exc.code in (c.ErrorCode.INVALID_FORMAT, c.ErrorCode.INVALID_IDENTIFIER)
            else:
                raise AssertionError(f"{payload!r} accepted")
        await bystander.ping()
        await bystander.close()
        await fuzzer.close()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parser_on_random_bytes_frames_or_refuses(raw: bytes) -> None:
    try:
        requests, used = c.parse_requests(raw, 4096)
    except c.FramingError:
        return
    assert used <= len(raw)
    for request in requests:
        reader = c.Reader(request.payload)
        try:
            reader.identifier()
            c.read_messages(reader)
        except c.IggyError:
            pass
