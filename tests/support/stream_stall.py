"""Stream protocol consumers that stop reading, and the data they stall on: for the
broker-memory test and bench/stalled_consumers."""

from __future__ import annotations

import socket

from mainstem.client.stream import MAX_FRAME, StreamClient
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import StreamCodec, encode
from mainstem.protocols.rabbit_stream.constants import OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.responses import REPLY_PARSERS

RECEIVE_BUFFER = 4096  # a stalled consumer's SO_RCVBUF


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
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
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
