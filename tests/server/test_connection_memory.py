"""Idle and stalled connections cost the broker little memory: a connection's receive
buffer takes memory only as bytes arrive, and a stream consumer that stops reading holds a
piece of one chunk, not its backlog; what it held returns when it closes (the broker runs
as a real process; its RSS is read from /proc)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from mainstem.client.stream import MAX_FRAME, StreamClient
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import StreamCodec, encode
from mainstem.protocols.rabbit_stream.constants import OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.responses import REPLY_PARSERS
from tests.support.server_process import kill, rss_bytes, start_server, started_ports

CONNECTIONS = 60  # per protocol whose connections receive into buffers of their own
PROTOCOLS = ("stream", "bson", "segment")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Popen, Path]]:
    log = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log, "--workers", "0")
    try:
        yield process, log
    finally:
        kill(process)


def open_sockets(pid: int) -> int:
    return sum(1 for fd in Path(f"/proc/{pid}/fd").iterdir()
               if fd.readlink().name.startswith("socket:"))


def test_idle_connections_do_not_each_hold_a_receive_buffer(
        server: tuple[Popen, Path]) -> None:
    process, log = server
    ports = started_ports(process, log)
    sockets: list[socket.socket] = []
    try:
        sockets.append(socket.create_connection(("127.0.0.1", ports["stream"])))  # warm-up
        time.sleep(0.5)
        before, sockets_before = rss_bytes(process.pid), open_sockets(process.pid)
        for protocol in PROTOCOLS:
            sockets += [socket.create_connection(("127.0.0.1", ports[protocol]))
                        for _ in range(CONNECTIONS)]
        deadline = time.monotonic() + 20
        while open_sockets(process.pid) < sockets_before + CONNECTIONS * len(PROTOCOLS):
            assert time.monotonic() < deadline, "the broker did not accept every connection"
            time.sleep(0.05)
        time.sleep(0.5)  # each handler has started and taken its socket over
        per_connection = (rss_bytes(process.pid) - before) / (CONNECTIONS * len(PROTOCOLS))
        print(f"broker RSS per idle connection: {per_connection / 1024:.0f} KiB")
        # A receive buffer is 1 MiB: had each connection taken one, this would be ≥ 1 MiB.
        assert per_connection < 128 * 1024
    finally:
        for sock in sockets:
            sock.close()


STALLED = 40  # stream consumers that subscribe with credit and never read
STALLED_LIMIT = 64 * 1024  # broker memory each may hold


def publish(port: int, stream: str, chunks: int, messages: int, size: int) -> None:
    """`chunks` Publish frames of `messages` bodies of `size` bytes (a chunk each)."""
    with StreamClient.connect(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/") as client:
        client.create_stream(stream)
        client.declare_publisher(1, "", stream)
        next_id = 0
        for _ in range(chunks):
            client.publish(1, [(next_id + i, bytes([i % 251]) * size) for i in range(messages)])
            next_id += messages


def stalled_consumer(port: int, stream: str) -> socket.socket:
    """A connection with a 4 KiB receive buffer that logs in, subscribes at `first` with
    credit for every chunk, and is never read again."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    codec = StreamCodec(MAX_FRAME, REPLY_PARSERS)
    frames: list[f.Frame] = []

    def wait_for(kind: type) -> None:
        while True:
            while frames:
                frame = frames.pop(0)
                if isinstance(frame, kind):
                    code = getattr(frame, "response_code", ResponseCode.OK)
                    assert code == ResponseCode.OK, frame
                    return
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            codec.receive_data(data)
            frames.extend(codec.next_frames())

    sock.sendall(encode(f.PeerProperties(1, {"product": "stalled"})))
    wait_for(r.PeerPropertiesResponse)
    sock.sendall(encode(f.SaslHandshake(2)))
    wait_for(r.SaslHandshakeResponse)
    sock.sendall(encode(f.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")))
    wait_for(r.SaslAuthenticateResponse)
    wait_for(f.Tune)
    sock.sendall(encode(f.Tune(MAX_FRAME, 0)))  # no heartbeats: it never reads them
    sock.sendall(encode(f.Open(4, "/")))
    wait_for(r.OpenResponse)
    sock.sendall(encode(f.Subscribe(5, 1, stream, f.OffsetSpec(OffsetType.FIRST, 0), 10_000)))
    return sock


def settled_rss(pid: int, timeout: float = 30.0) -> int:
    """The broker's RSS once it stops changing by more than 1 MiB in half a second."""
    deadline = time.monotonic() + timeout
    last = rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) < 1 << 20:
            return now
        last = now
    return last


def test_stalled_stream_consumers_hold_a_small_bounded_buffer_each(
        server: tuple[Popen, Path]) -> None:
    process, log = server
    port = started_ports(process, log)["stream"]
    # 12 MiB in chunks read whole (40 KiB), then 12 MiB in chunks sent by sendfile (400 KiB)
    publish(port, "stalled", 300, 10, 4096)
    publish(port, "stalled", 30, 100, 4096)
    sockets = [stalled_consumer(port, "stalled")]  # warm-up: first-use costs
    try:
        before = settled_rss(process.pid)
        sockets += [stalled_consumer(port, "stalled") for _ in range(STALLED)]
        stalled = settled_rss(process.pid)
        per_connection = (stalled - before) / STALLED
        print(f"broker RSS per stalled consumer: {per_connection / 1024:.1f} KiB "
              f"({before >> 20} -> {stalled >> 20} MiB)")
        assert per_connection <= STALLED_LIMIT
        time.sleep(2)  # still stalled: nothing more is taken on
        assert rss_bytes(process.pid) - stalled < STALLED * STALLED_LIMIT
    finally:
        for sock in sockets:
            sock.close()
    # The broker lets them go and serves a consumer that reads.
    with StreamClient.connect(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/") as client:
        end = client.offsets("stalled").end
        records = sum(chunk.header.num_records for chunk in client.chunks("stalled", 0, end))
    assert records == end == 300 * 10 + 30 * 100
