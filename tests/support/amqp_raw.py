"""An AMQP 0-9-1 client at the frame level, for tests of what the broker answers to
exactly these frames (and of connections that stop reading)."""

from __future__ import annotations

import socket
import time

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.codec import AmqpCodec
from mainstem.protocols.amqp091.encode import encode_content, encode_method
from mainstem.protocols.amqp091.events import ContentMessage, MethodFrame
from mainstem.protocols.amqp091.wire import Method

Frame = tuple[int, Method]  # (channel, method)


class RawClient:
    """An AMQP client at the frame level: sends methods, reads what the server answers."""

    def __init__(self, port: int, channel_max: int = 2047, receive_buffer: int | None = None
                 ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # set before connecting: it sizes the TCP window
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.codec = AmqpCodec(frame_max=1 << 24, expect_protocol_header=False)
        self.eof = False
        self.pending: list[Frame] = []
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(m.ConnectionStart)
        capabilities = {"consumer_cancel_notify": True, "publisher_confirms": True}
        self.send(0, m.ConnectionStartOk({"capabilities": capabilities}, "PLAIN",
                                         b"\0guest\0guest", "en_US"))
        self.expect(m.ConnectionTune)
        self.send(0, m.ConnectionTuneOk(channel_max, 131072, 0))
        self.send(0, m.ConnectionOpen("/"))
        self.expect(m.ConnectionOpenOk)

    def send(self, channel: int, *methods: Method) -> None:
        self.sock.sendall(b"".join(encode_method(channel, method) for method in methods))

    def publish(self, channel: int, exchange: str, key: str, body: bytes = b"x",
                persistent: bool = False) -> bytes:
        properties = m.BasicProperties(delivery_mode=2 if persistent else None)
        return encode_content(channel, m.BasicPublish(exchange=exchange, routing_key=key),
                              properties, body, 131072)

    def read(self, timeout: float = 0.3) -> list[Frame]:
        """Every frame until the server is quiet for `timeout` seconds or hangs up."""
        frames, self.pending = self.pending, []
        while self._receive(timeout):
            frames += self.pending
            self.pending = []
        return frames

    def _receive(self, timeout: float) -> bool:
        """One recv into `pending`; False once quiet for `timeout` s or at the end."""
        if self.eof:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.codec.receive_data(data)
        self.pending += [(event.channel, event.method) for event in self.codec.next_frames()
                         if isinstance(event, MethodFrame | ContentMessage)]
        return True

    def expect(self, kind: type[Method], channel: int = 0) -> Method:
        """The first such method (what came before it is dropped)."""
        deadline = time.monotonic() + 5
        while True:
            for i, (number, method) in enumerate(self.pending):
                if number == channel and isinstance(method, kind):
                    del self.pending[:i + 1]
                    return method
            self.pending = []
            if time.monotonic() > deadline or (not self._receive(5) and self.eof):
                raise AssertionError(f"no {kind.NAME} on channel {channel}")

    def open_channel(self, number: int) -> None:
        self.send(number, m.ChannelOpen())
        self.expect(m.ChannelOpenOk, number)

    def close(self) -> None:
        self.sock.close()
