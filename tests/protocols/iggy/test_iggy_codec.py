"""The Iggy codec on byte vectors from the seed, a fuzz of the server's parser, every
request mainstem's client sends through the server's framing, and every reply it reads,
round-tripped."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from iggy_py import IggyClient as PyIggy
from iggy_py import PollingStrategy, SendMessage

from mainstem import Broker
from mainstem.client.iggy import IggyClient, IggyClientError
from mainstem.formats.chunk import Chunk, ChunkHeader
from mainstem.formats.osiris import SIMPLE_ENTRY, SUB_BATCH_ENTRY
from mainstem.protocols.iggy import batch, layouts, records, vsr
from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import commands as cmd
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


def vsr_request(operation: int, body: bytes = b"", code: int = 0, session: int = 0,
                request: int = 1) -> bytes:
    """A request frame of the replicated framing, as apache-iggy 0.9 builds it."""
    header = bytearray(vsr.HEADER_SIZE)
    struct.pack_into("<I", header, vsr.SIZE_OFFSET, vsr.HEADER_SIZE + len(body))
    header[vsr.COMMAND_OFFSET] = vsr.Command.REQUEST
    vsr.REQUEST_FIELDS.pack_into(header, vsr.FIELDS_OFFSET, (7).to_bytes(16, "little"),
                                 b"\x09" * 16, 0, request, operation, session, code)
    return bytes(header) + body


def login_body(version: int = vsr.PROTOCOL_VERSION, password: str = "guest") -> bytes:
    return struct.pack("<I", version) + b"".join(
        c.encode_name(s) for s in ("raw", "0.0.1", "guest", password)) + bytes(4)


def test_a_vsr_request_header_is_told_from_a_seed_request() -> None:
    header = vsr_request(vsr.Operation.NON_REPLICATED, code=c.Code.PING)
    assert vsr.may_become_request(header[:60]) and not vsr.may_become_request(header[:61])
    assert vsr.is_request(header[:61]) and vsr.is_request(header)
    seed = c.encode_request(c.Code.PING, bytes(100))
    assert not vsr.may_become_request(seed[:8]) and not vsr.is_request(seed)
    reply = vsr.encode_reply(vsr.parse_frames(header, 4096)[0][0])
    assert not vsr.is_request(reply)  # a reply is no client's first frame


def test_vsr_frames_parse_and_replies_echo_the_request() -> None:
    ping = vsr_request(vsr.Operation.NON_REPLICATED, code=c.Code.PING)
    send = vsr_request(vsr.Operation.SEND_MESSAGES, b"body", session=5, request=3)
    frames, used = vsr.parse_frames(ping + send + send[:100], 4096)
    assert used == len(ping) + len(send) and len(frames) == 2
    assert (frames[0].operation, frames[0].code, frames[0].session) == (2, c.Code.PING, 0)
    assert (frames[1].request, frames[1].session, bytes(frames[1].body)) == (3, 5, b"body")
    reply = vsr.encode_reply(frames[1], b"xy", status=41, commit=9)
    size, command = struct.unpack_from("<I", reply, 48)[0], reply[60]
    assert (size, command, reply[256:]) == (258, vsr.Command.REPLY, b"xy")
    fields = vsr.REPLY_FIELDS.unpack_from(reply, 128)
    assert fields == (b"\x09" * 16, bytes(16), (7).to_bytes(16, "little"), 9, 9, 0, 3, 160, 41)
    assert struct.unpack_from("<I", reply, 216)[0] == 41  # the status the SDK reads
    assert vsr.committed(b"p") == bytes(4) + b"p"
    assert vsr.refused(1012) == struct.pack("<III", 1, 0, 1012)
    eviction = vsr.encode_eviction(frames[0].client, vsr.Eviction.INCOMPATIBLE_PROTOCOL)
    assert (len(eviction), eviction[60], eviction[255]) == (256, 13, 14)
    assert struct.unpack_from("<II", eviction, 144) == (0x2C00, 0x2C00)
    assert vsr.encode_eviction(frames[0].client, vsr.Eviction.INVALID_CREDENTIALS)[144:152] == \
        bytes(8)


def test_vsr_frame_bounds_are_framing_errors() -> None:
    frame = bytearray(vsr_request(vsr.Operation.NON_REPLICATED))
    for size in (0, 255, 5000):
        struct.pack_into("<I", frame, 48, size)
        with pytest.raises(c.FramingError):
            vsr.parse_frames(bytes(frame), 4096)
    struct.pack_into("<I", frame, 48, 256)
    frame[60] = vsr.Command.REPLY
    with pytest.raises(c.FramingError):
        vsr.parse_frames(bytes(frame), 4096)


def sent(raw_id: bytes, headers: bytes, payload: memoryview) -> tuple[int, bytes, bytes]:
    """A sent message as read (id, headers, payload)."""
    return int.from_bytes(raw_id, "little"), headers, bytes(payload)


def test_batch_round_trip_and_headers_of_both_generations() -> None:
    seed_headers = c.encode_headers({"k": (2, b"v"), "n": (11, struct.pack("<I", 7))})
    polled = [(10, (1).to_bytes(16, "little"), seed_headers, b"one"),
              (11, (2).to_bytes(16, "little"), b"", b"two")]
    encoded = batch.encode_batch(3, 1_700_000_000_000_000, polled)
    head = batch.BATCH_HEADER.unpack_from(encoded)
    assert head == (3, 10, 1_700_000_000_000_000, 1_700_000_000_000_000, len(encoded), 0, 2)
    assert batch.read_batch(c.Reader(memoryview(encoded)), sent) == \
        [(1, seed_headers, b"one"), (2, b"", b"two")]
    vsr_headers = batch.to_vsr_headers(seed_headers)
    assert vsr_headers.startswith(b"\x02\x01\x00\x00\x00k\x02\x01\x00\x00\x00v")
    assert batch.to_seed_headers(vsr_headers) == seed_headers
    assert batch.group_by_timestamp([(1, polled[:1]), (1, polled[1:]), (2, polled[:1])]) == \
        [(1, polled), (2, [polled[0]])]


def test_bad_batches_are_refused() -> None:
    good = batch.encode_batch(0, 0, [(0, (1).to_bytes(16, "little"), b"", b"abc")])
    wrong_count = bytearray(good)
    struct.pack_into("<I", wrong_count, 48, 2)
    reserved = bytearray(good)
    reserved[256 + 40] = 1
    raw_key = b"\x01\x01\x00\x00\x00k\x02\x01\x00\x00\x00v"
    cases = [(good[:-1], c.ErrorCode.INVALID_FORMAT), (good + b"x", c.ErrorCode.INVALID_FORMAT),
             (bytes(wrong_count), c.ErrorCode.INVALID_MESSAGES_COUNT),
             (bytes(reserved), c.ErrorCode.INVALID_FORMAT)]
    for raw, code in cases:
        with pytest.raises(c.IggyError) as refused:
            batch.read_batch(c.Reader(memoryview(raw)), sent)
        assert refused.value.code == code
    with pytest.raises(c.IggyError):
        batch.to_seed_headers(raw_key)


def test_topic_options_of_the_replicated_generation() -> None:
    def typed(kind: int, raw: bytes) -> bytes:
        return bytes((kind,)) + struct.pack("<I", len(raw)) + raw

    pairs = typed(2, b"durability") + typed(2, b"replicated") + \
        typed(2, b"message_expiry") + typed(12, struct.pack("<Q", 60_000_000))
    assert layouts.read_options(c.Reader(memoryview(pairs))) == {"message_expiry": 60_000_000}
    for bad in (typed(2, b"max_topic_size") + typed(2, b"12345678"), typed(2, b"key")):
        with pytest.raises(c.IggyError):
            layouts.read_options(c.Reader(memoryview(bad)))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_vsr_parser_on_random_bytes_frames_or_refuses(raw: bytes) -> None:
    try:
        frames, used = vsr.parse_frames(raw, 4096)
    except c.FramingError:
        return
    assert used <= len(raw)
    for frame in frames:
        with contextlib.suppress(c.IggyError):
            batch.read_batch(c.Reader(frame.body), sent)


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes
                   ) -> tuple[bytes, bytes]:
    writer.write(frame)
    header = await reader.readexactly(vsr.HEADER_SIZE)
    size = struct.unpack_from("<I", header, vsr.SIZE_OFFSET)[0]
    return header, await reader.readexactly(size - vsr.HEADER_SIZE)


async def test_vsr_logins_and_fuzzed_frames_never_hurt_the_server(tmp_path: Path) -> None:
    operations = [int(op) for op in vsr.Operation] + [0, 129, 200]
    codes = [int(code) for code in c.Code] + [0, 9999]

    @settings(max_examples=150, deadline=None)
    @given(st.sampled_from(operations), st.sampled_from(codes), st.binary(max_size=300))
    def frames(operation: int, code: int, body: bytes) -> None:
        garbage.append(vsr_request(operation, body, code, session=1))

    garbage: list[bytes] = []
    frames()
    async with Broker(data_dir=tmp_path / "data") as broker:
        port = broker.ports["iggy"]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for body, reason in ((login_body(0x2B00), vsr.Eviction.INCOMPATIBLE_PROTOCOL),
                             (login_body(password="wrong"), vsr.Eviction.INVALID_CREDENTIALS),
                             (b"\x00", vsr.Eviction.MALFORMED_LOGIN)):
            header, _ = await exchange(reader, writer, vsr_request(vsr.Operation.REGISTER, body))
            assert (header[60], header[255]) == (vsr.Command.EVICTION, reason)
        header, _ = await exchange(reader, writer, vsr_request(
            vsr.Operation.NON_REPLICATED, code=c.Code.GET_STREAMS))
        assert struct.unpack_from("<I", header, 216)[0] == c.ErrorCode.UNAUTHENTICATED
        header, body = await exchange(reader, writer,
                                      vsr_request(vsr.Operation.REGISTER, login_body()))
        assert header[60] == vsr.Command.REPLY and body[:4] == bytes(4)
        bystander = await IggyClient.connect("127.0.0.1", port)
        await bystander.login("guest", "guest")
        for frame in garbage:  # every frame gets a reply or an eviction
            header, _ = await exchange(reader, writer, frame)
            assert header[60] in (vsr.Command.REPLY, vsr.Command.EVICTION)
            if frame[176] == vsr.Operation.LOGOUT or header[60] == vsr.Command.EVICTION:
                await exchange(reader, writer, vsr_request(vsr.Operation.REGISTER, login_body()))
        await bystander.ping()
        await bystander.close()
        writer.close()


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
            layouts.SEED.entries(reader)
        except c.IggyError:
            pass


# ------------------------------------------------------------- commands, both ways

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
long_strings = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
u8, u32, u64 = st.integers(0, 0xFF), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
idents = u32 | names
# A 4-byte group body reads as the seed's u32 id (commands.GroupCommand): no 2-byte names.
group_idents = u32 | names.filter(lambda name: len(name.encode()) != 2)
consumers = st.builds(c.Consumer, st.sampled_from([c.CONSUMER, c.CONSUMER_GROUP]), idents)
header_values = st.one_of(
    st.tuples(st.sampled_from([1, 2]), st.binary(max_size=8)),  # raw, string
    st.tuples(st.just(6), st.binary(min_size=4, max_size=4)),  # int32
    st.tuples(st.just(12), st.binary(min_size=8, max_size=8)),  # uint64
)
headers = st.dictionaries(long_strings, header_values, max_size=3)
messages = st.builds(cmd.Message, st.binary(max_size=40), st.integers(0, 2**128 - 1), headers)
partitionings = st.one_of(
    st.builds(cmd.Partitioning, st.just(cmd.BALANCED)),
    st.builds(cmd.Partitioning.partition, u32),
    st.builds(cmd.Partitioning, st.just(cmd.MESSAGES_KEY), st.binary(min_size=1, max_size=20)),
)


# Every request mainstem's client sends (what the server reads of each:
# test_iggy_requests.py).
REQUESTS = [
    st.builds(cmd.LoginUser, names, names, long_strings, long_strings),
    st.builds(cmd.GetClient, u32),
    st.builds(cmd.CreateStream, u32, names),
    *(st.builds(cmd.StreamCommand, st.just(code), idents)
      for code in (c.Code.DELETE_STREAM, c.Code.GET_STREAM, c.Code.GET_TOPICS)),
    *(st.builds(cmd.TopicCommand, st.just(code), idents, idents)
      for code in (c.Code.DELETE_TOPIC, c.Code.GET_TOPIC, c.Code.GET_CONSUMER_GROUPS)),
    st.builds(cmd.CreateTopic, idents, u32, u32, u64, u64, names, u8, u8),
    *(st.builds(cmd.PartitionsCommand, st.just(code), idents, idents, u32)
      for code in (c.Code.CREATE_PARTITIONS, c.Code.DELETE_PARTITIONS)),
    st.builds(cmd.SendMessages, idents, idents, partitionings, st.lists(messages, max_size=4)),
    st.builds(cmd.PollMessages, consumers, idents, idents, u32, u8, u64, u32, st.booleans()),
    st.builds(cmd.StoreConsumerOffset, consumers, idents, idents, u32, u64),
    st.builds(cmd.GetConsumerOffset, consumers, idents, idents, u32),
    st.builds(cmd.CreateConsumerGroup, idents, idents, u32, names),
    *(st.builds(cmd.GroupCommand, st.just(code), idents, idents, group_idents)
      for code in (c.Code.DELETE_CONSUMER_GROUP, c.Code.JOIN_CONSUMER_GROUP,
                   c.Code.LEAVE_CONSUMER_GROUP, c.Code.GET_CONSUMER_GROUP)),
]


@pytest.mark.parametrize("requests", REQUESTS)
@settings(max_examples=60)
@given(data=st.data())
def test_requests_pass_the_servers_framing_whole(requests: st.SearchStrategy,
                                                  data: st.DataObject) -> None:
    request = data.draw(requests)
    payload = request.encode()
    (framed,), used = c.parse_requests(c.encode_request(request.code, payload), 1 << 20)
    assert (framed.code, bytes(framed.payload), used) == (request.code, payload,
                                                          8 + len(payload))


polled_messages = st.builds(cmd.PolledMessage, u64, u64, st.integers(0, 2**128 - 1), u32,
                            headers, st.binary(max_size=40))
f32 = st.floats(width=32, allow_nan=False)
stats = st.fixed_dictionaries({
    **{name: u32 for name in cmd.STATS_FIELDS},
    **{name: f32 for name in ("cpu_usage", "total_cpu_usage")},
    **{name: u64 for name in ("memory_usage", "total_memory", "available_memory", "run_time",
                              "start_time", "read_bytes", "written_bytes",
                              "messages_size_bytes", "messages_count")},
    **{name: long_strings for name in cmd.STATS_STRINGS},
})
client_groups = st.lists(st.tuples(u32, u32, u32), max_size=3)

# (strategy, encoder, decoder) for every reply mainstem's client reads
REPLIES = [
    (st.builds(cmd.LoggedIn, u32), cmd.LoggedIn.encode, cmd.LoggedIn.decode),
    (st.builds(cmd.StreamInfo, u32, u64, u32, u64, u64, names), cmd.StreamInfo.encode,
     cmd.StreamInfo.decode),
    (st.builds(cmd.TopicInfo, u32, u64, u32, u64, u64, u64, u64, names), cmd.TopicInfo.encode,
     cmd.TopicInfo.decode),
    (st.builds(cmd.Polled, u32, u64, st.lists(polled_messages, max_size=4)), cmd.Polled.encode,
     cmd.Polled.decode),
    (st.builds(cmd.OffsetInfo, u32, u64, u64), cmd.OffsetInfo.encode, cmd.OffsetInfo.decode),
    (st.builds(cmd.ConsumerGroup, u32, names, u32,
               st.dictionaries(u32, st.lists(u32, max_size=3), max_size=3)),
     cmd.ConsumerGroup.encode, cmd.ConsumerGroup.decode),
    (st.builds(cmd.ConsumerGroup, u32, names, u32, st.just({})),
     lambda g: g.encode(details=False), lambda r: cmd.ConsumerGroup.decode(r, details=False)),
    (client_groups.flatmap(lambda groups: st.builds(
        cmd.ClientInfo, u32, u32, u8, long_strings, st.just(len(groups)), st.just(groups))),
     cmd.ClientInfo.encode, lambda r: cmd.ClientInfo.decode(r, details=True)),
    (st.builds(cmd.ClientInfo, u32, u32, u8, long_strings, u32), cmd.ClientInfo.encode,
     lambda r: cmd.ClientInfo.decode(r, details=False)),
    (stats, cmd.encode_stats, cmd.decode_stats),
]


@pytest.mark.parametrize(("replies", "encode", "decode"), REPLIES)
@settings(max_examples=60)
@given(data=st.data())
def test_replies_round_trip(
    replies: st.SearchStrategy,
    encode: Callable[[object], bytes],
    decode: Callable[[c.Reader], object],
    data: st.DataObject,
) -> None:
    reply = data.draw(replies)
    reader = c.Reader(memoryview(encode(reply)))
    assert decode(reader) == reply
    reader.end()


def test_a_list_reply_decodes_item_after_item() -> None:
    infos = [cmd.StreamInfo(1, 2, 3, 4, 5, "a"), cmd.StreamInfo(6, 7, 8, 9, 10, "bc")]
    reader = c.Reader(memoryview(b"".join(i.encode() for i in infos)))
    assert cmd.decode_all(reader, cmd.StreamInfo.decode) == infos


def test_the_clients_poll_decoder_reads_the_servers_poll_reply() -> None:
    polled = [(1_700_000_000_000_000, [(7, (42).to_bytes(16, "little"), c.encode_headers(
        {"k": (2, b"v")}), b"payload")])]
    reply = layouts.SEED.polled(0, 9, 1, polled)
    assert cmd.Polled.decode(c.Reader(memoryview(reply))) == cmd.Polled(1, 9, [cmd.PolledMessage(
        7, 1_700_000_000_000_000, 42, zlib.crc32(b"payload"), {"k": (2, b"v")}, b"payload")])


async def test_iggy_py_sends_what_our_commands_encode(tmp_path: Path) -> None:
    """iggy-py's requests, recorded by a relay in front of a broker, are the bytes our
    commands encode for the same calls."""
    captured: list[c.Request] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   record: bool) -> None:
        buffer = b""
        while data := await reader.read(65536):
            writer.write(data)
            if record:
                buffer += data
                requests, used = c.parse_requests(buffer, 1 << 20)
                captured.extend(c.Request(r.code, memoryview(bytes(r.payload)))
                                for r in requests)
                buffer = buffer[used:]
        writer.close()

    async with Broker(data_dir=tmp_path / "data") as broker:
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1",
                                                                 broker.ports["iggy"])
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        client = PyIggy(f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
        await client.connect()
        await client.login_user("guest", "guest")
        await client.create_stream("shop", 7)
        await client.create_topic("shop", "orders", partitions_count=2, topic_id=3)
        await client.send_messages("shop", "orders", 2, [SendMessage("m0"), SendMessage("m1")])
        await client.poll_messages("shop", "orders", 2, PollingStrategy.First(), 10, True)
        await client.get_topic(7, "orders")
        proxy.close()

    pings = [r for r in captured if r.code == c.Code.PING]  # iggy-py's own, bodiless
    assert pings and not any(len(r.payload) for r in pings)
    requests = [(r.code, bytes(r.payload)) for r in captured if r.code != c.Code.PING]
    login = cmd.LoginUser.decode(c.Reader(memoryview(requests[0][1])))
    assert (login.username, login.password) == ("guest", "guest")  # and iggy-py's version
    ours = [login, cmd.CreateStream(7, "shop"),
            # iggy-py's defaults: no expiry (u64 max), no size limit, no compression, 0 replicas
            cmd.CreateTopic("shop", 3, 2, 2**64 - 1, 0, "orders", 1, 0),
            cmd.SendMessages("shop", "orders", cmd.Partitioning.partition(2),
                             [cmd.Message(b"m0"), cmd.Message(b"m1")]),
            cmd.PollMessages(c.Consumer(c.CONSUMER, 1), "shop", "orders", 2, 3, 0, 10, True),
            cmd.TopicCommand(c.Code.GET_TOPIC, 7, "orders")]
    assert requests == [(command.code, command.encode()) for command in ours]


def chunk_of(entries: list[bytes], chunk_id: int = 100) -> Chunk:
    """A chunk of these Osiris entries, a simple entry or a sub-batch of one record each."""
    data = b"".join(entries)
    header = ChunkHeader(0, len(entries), len(entries), 0, 1, chunk_id, 0, len(data), 0, 0)
    return Chunk(header, memoryview(data), memoryview(b""))


def test_sent_messages_become_entries_that_polls_read_back_in_place() -> None:
    headers = c.encode_headers({"k": (2, b"v")})
    foreign = b"\x00\x53\x75\xa0\x03raw"  # an AMQP 1.0 data section: a stream publisher's
    entries = [records.entry((5).to_bytes(16, "little"), b"", b"plain"),
               records.entry(records.NO_ID, headers, b"with headers"),
               SIMPLE_ENTRY.pack(len(foreign)) + foreign]
    stored, size = records.read_chunk(chunk_of(entries), 0, 10, 1 << 20)
    assert [(offset, head, bytes(payload)) for offset, _, head, payload in stored] == [
        (100, b"", b"plain"), (101, headers, b"with headers"), (102, b"", b"raw")]
    assert (stored[0][1], stored[2][1]) == ((5).to_bytes(16, "little"), bytes(16))
    assert stored[1][1] != bytes(16)  # the server gave the message an id
    assert size == len(b"plainwith headersraw")
    for (_, raw_id, head, payload), raw in zip(stored, entries, strict=True):
        message_id, decoded_headers, body = decode_record(memoryview(raw)[4:])
        assert (raw_id, head, bytes(payload)) == \
            (message_id.to_bytes(16, "little"), decoded_headers, bytes(body))
    assert [s[0] for s in records.read_chunk(chunk_of(entries), 101, 1, 1 << 20)[0]] == [101]
    assert [s[0] for s in records.read_chunk(chunk_of(entries), 0, 10, 1)[0]] == [100]


def test_a_chunk_holding_a_sub_batch_is_read_the_generic_way() -> None:
    plain = records.entry((1).to_bytes(16, "little"), b"", b"p")
    sub_batch = SUB_BATCH_ENTRY.pack(0x80, 2, 6, 6) + b"opaque"
    stored, _ = records.read_chunk(chunk_of([plain, sub_batch, plain]), 101, 10, 1 << 20)
    assert [(o, bytes(p)) for o, _, _, p in stored] == [(101, b"opaque"), (103, b"p")]
