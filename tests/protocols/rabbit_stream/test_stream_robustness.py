"""The stream listener under bad input: raw frames over a socket against a real server.

Every test checks two things: the offending connection gets the protocol's answer (a
response code, a Close, or a dropped socket), and the server keeps serving others.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rstream import AMQPMessage, Producer

from mainstem import Broker
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.protocols.rabbit_stream.constants import RESPONSE_FLAG, Key, ResponseCode
from mainstem.testing import ThreadedBroker

TIMEOUT_S = 5.0
HEADER = struct.Struct(">IHH")


class RawClient:
    """Just enough of a stream client to send arbitrary bytes and read whole frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[int, bytes]:
        """(key, body after key and version) of the next frame; EOFError when closed."""
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">I", self.buffer)
                if len(self.buffer) >= 4 + size:
                    body = self.buffer[4 : 4 + size]
                    self.buffer = self.buffer[4 + size :]
                    (key,) = struct.unpack_from(">H", body)
                    return key, body[4:]
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("server closed the connection")
            self.buffer += data

    def frame_with_key(self, key: int) -> bytes:
        while True:
            got, body = self.frame()
            if got == key:
                return body

    def open(self, *, frame_max: int = 1_048_576, heartbeat: int = 0) -> RawClient:
        self.send(encode(f.PeerProperties(1, {"product": "raw"})))
        self.frame_with_key(Key.PEER_PROPERTIES | RESPONSE_FLAG)
        self.send(encode(f.SaslHandshake(2)))
        self.frame_with_key(Key.SASL_HANDSHAKE | RESPONSE_FLAG)
        self.send(encode(f.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")))
        assert response_code(self.frame_with_key(Key.SASL_AUTHENTICATE | RESPONSE_FLAG)) == 1
        self.frame_with_key(Key.TUNE)
        self.send(encode(f.Tune(frame_max, heartbeat)))
        self.send(encode(f.Open(4, "/")))
        assert response_code(self.frame_with_key(Key.OPEN | RESPONSE_FLAG)) == ResponseCode.OK
        return self

    def is_closed_by_server(self) -> bool:
        """True once the server has closed the socket (after any frames it sent)."""
        try:
            while True:
                self.frame()
        except EOFError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def response_code(body: bytes) -> int:
    """The code of a response body (correlation id u32, then code u16)."""
    return struct.unpack_from(">H", body, 4)[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedBroker]:
    with ThreadedBroker(Path(tmp_path_factory.mktemp("robust")) / "data") as running:
        yield running


@pytest.fixture
def port(server: ThreadedBroker) -> int:
    return server.ports["stream"]


def assert_still_serving(port: int) -> None:
    client = RawClient(port).open()
    client.send(encode(f.Metadata(9, ["nothing-here"])))
    client.frame_with_key(Key.METADATA | RESPONSE_FLAG)
    client.close()


def test_command_before_authentication_closes_the_connection(port: int) -> None:
    client = RawClient(port)
    client.send(encode(f.CreateStream(1, "sneaky", {})))
    assert client.is_closed_by_server()
    assert_still_serving(port)


def test_wrong_password_gets_authentication_failure_and_close(port: int) -> None:
    client = RawClient(port)
    client.send(encode(f.PeerProperties(1, {})))
    client.send(encode(f.SaslHandshake(2)))
    client.send(encode(f.SaslAuthenticate(3, "PLAIN", b"\0guest\0wrong")))
    body = client.frame_with_key(Key.SASL_AUTHENTICATE | RESPONSE_FLAG)
    assert response_code(body) == ResponseCode.AUTHENTICATION_FAILURE
    assert client.is_closed_by_server()


def test_unknown_command_is_answered_with_unknown_frame(port: int) -> None:
    client = RawClient(port).open()
    client.send(HEADER.pack(8, 0x0777, 1) + struct.pack(">I", 42))
    body = client.frame_with_key(0x0777 | RESPONSE_FLAG)
    assert struct.unpack_from(">IH", body) == (42, ResponseCode.UNKNOWN_FRAME)
    assert_still_serving(port)


def test_frame_over_the_negotiated_maximum_closes_with_frame_too_large(port: int) -> None:
    client = RawClient(port).open(frame_max=4096)
    client.send(HEADER.pack(10_000, Key.PUBLISH, 1))
    body = client.frame_with_key(Key.CLOSE)
    assert response_code(body) == ResponseCode.FRAME_TOO_LARGE
    assert client.is_closed_by_server()
    assert_still_serving(port)


def test_malformed_frame_closes_the_connection_with_a_code(port: int) -> None:
    client = RawClient(port).open()
    client.send(HEADER.pack(6, Key.CREATE_STREAM, 1) + b"\x00\x00")  # truncated fields
    body = client.frame_with_key(Key.CLOSE)
    assert response_code(body) != ResponseCode.OK
    assert client.is_closed_by_server()


def test_a_peer_silent_for_two_heartbeats_is_dropped(port: int) -> None:
    client = RawClient(port).open(heartbeat=1)
    started = time.monotonic()
    client.sock.settimeout(6)
    assert client.is_closed_by_server()
    assert 1.5 < time.monotonic() - started < 5


def test_server_sends_heartbeats_to_a_quiet_peer(port: int) -> None:
    client = RawClient(port).open(heartbeat=1)
    client.sock.settimeout(3)
    client.frame_with_key(Key.HEARTBEAT)  # raises TimeoutError if none comes


# -- fuzzing: random and mutated frames never crash the server or a handler ----------

VALID_FRAMES = [
    encode(f.CreateStream(5, "fuzzed", {"max-age": "1h"})),
    encode(f.DeclarePublisher(6, 1, "ref", "fuzzed")),
    encode(f.Subscribe(7, 1, "fuzzed", f.OffsetSpec(1, 0), 10, {})),
    encode(f.QueryOffset(8, "ref", "fuzzed")),
    encode(f.Metadata(9, ["fuzzed", "other"])),
    encode(f.Credit(1, 5)),
]


@st.composite
def mutated_frame(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(VALID_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(frame) - 1))
        frame[position] = draw(st.integers(0, 255))
    return bytes(frame)


fuzz_input = st.one_of(st.binary(min_size=1, max_size=200), mutated_frame())


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(fuzz_input, min_size=1, max_size=4), authenticated=st.booleans())
def test_fuzzed_frames_never_break_the_server(port: int, data: list[bytes],
                                              authenticated: bool,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mainstem")
    client = RawClient(port).open() if authenticated else RawClient(port)
    try:
        for chunk in data:
            client.send(chunk)
        client.sock.settimeout(0.2)
        client.is_closed_by_server()
    except (ConnectionError, OSError):
        pass  # the server may drop us mid-send: that is an allowed answer
    finally:
        client.close()
    assert_still_serving(port)
    failures = [r for r in caplog.records if "connection.failed" in r.getMessage()]
    assert not failures, failures[0].__dict__.get("traceback", failures[0].getMessage())


async def test_disk_alarm_holds_a_publishing_connection(tmp_path: Path) -> None:
    async with Broker(data_dir=tmp_path / "data") as broker, \
            Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                     password="guest") as producer:
        await producer.create_stream("held")
        await producer.send_wait("held", AMQPMessage(body=b"before"))
        broker.core.alarms.set("disk", True)
        sending = asyncio.ensure_future(producer.send_wait("held", AMQPMessage(body=b"during")))
        await asyncio.sleep(0.3)
        assert not sending.done()  # its publish is held, not stored
        assert broker.core.streams.partition("/", "held").committed_offset == 1
        broker.core.alarms.set("disk", False)
        await asyncio.wait_for(sending, 5)
        assert broker.core.streams.partition("/", "held").committed_offset == 2
