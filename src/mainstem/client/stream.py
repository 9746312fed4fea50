"""A small blocking RabbitMQ Stream protocol client for batch work (Spark tasks): offsets of
a stream, its raw chunks between two offsets, and deduplicating publishes.

It is not a general client (use rstream or rbfly for applications): reads hand back the
Osiris chunks undecoded, so a caller can turn a whole chunk into columns at once.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from mainstem.log.chunk import HEADER_SIZE, Chunk, parse_header
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.protocols.rabbit_stream.constants import RESPONSE_FLAG, Key, OffsetType
from mainstem.protocols.rabbit_stream.wire import Reader

_SIZE = struct.Struct(">I")
_KEY_VERSION = struct.Struct(">HH")
_ENTRY = struct.Struct(">I")
MAX_FRAME = 8 * 1024 * 1024
CREDIT = 8  # chunks in flight per read
OK, NO_OFFSET = 1, 0x13


class StreamClientError(Exception):
    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """``rabbitmq-stream://user:pass@host:port/vhost`` (vhost "%2F" is "/")."""
        parts = urlsplit(url if "://" in url else "rabbitmq-stream://" + url)
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return cls(parts.hostname or "127.0.0.1", parts.port or 5552,
                   unquote(parts.username or "guest"), unquote(parts.password or "guest"), vhost)


@dataclass(frozen=True)
class Offsets:
    first: int  # the first offset still stored
    end: int  # one past the last committed offset


class StreamClient:
    def __init__(self, endpoint: Endpoint, timeout: float = 30.0) -> None:
        self.endpoint = endpoint
        self._sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
        self._buffer = bytearray()
        self._correlation = 0
        self._deliveries: list[memoryview] = []
        self._confirmed: set[int] = set()
        self._errors: dict[int, int] = {}
        self._handshake()

    @classmethod
    def connect(cls, url: str) -> StreamClient:
        return cls(Endpoint.parse(url))

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- frames ----------------------------------------------------------------

    def _send(self, frame: f.Frame) -> None:
        self._sock.sendall(encode(frame))

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    def _read_frame(self) -> tuple[int, memoryview]:
        while True:
            if len(self._buffer) >= 4:
                (size,) = _SIZE.unpack_from(self._buffer)
                if size > MAX_FRAME:
                    raise StreamClientError(f"frame of {size} bytes from the server")
                if len(self._buffer) >= 4 + size:
                    body = memoryview(bytes(self._buffer[4:4 + size]))
                    del self._buffer[:4 + size]
                    key, _ = _KEY_VERSION.unpack_from(body)
                    return key, body[4:]
            data = self._sock.recv(1 << 20)
            if not data:
                raise StreamClientError("the server closed the connection")
            self._buffer += data

    def _response(self, key: int, correlation: int) -> Reader:
        """Wait for the response to a request, handling what arrives in between."""
        while True:
            got, body = self._read_frame()
            reader = Reader(body)
            if got == key | RESPONSE_FLAG and reader.u32() == correlation:
                code = reader.u16()
                if code != OK:
                    raise StreamClientError(f"{Key(key).name} failed with code {code:#x}", code)
                return reader
            self._other(got, body)

    def _other(self, key: int, body: memoryview) -> None:
        reader = Reader(body)
        if key == Key.DELIVER:
            reader.u8()
            self._deliveries.append(body[1:])
        elif key == Key.PUBLISH_CONFIRM:
            reader.u8()
            self._confirmed.update(reader.u64() for _ in range(reader.u32()))
        elif key == Key.PUBLISH_ERROR:
            reader.u8()
            for _ in range(reader.u32()):
                publishing_id = reader.u64()
                self._errors[publishing_id] = reader.u16()
        elif key == Key.TUNE:
            self._send(f.Tune(reader.u32(), reader.u32()))  # accept the server's proposal
        elif key == Key.CLOSE:
            raise StreamClientError("the server closed the connection")
        # heartbeats, metadata updates and the rest need no answer here

    def _handshake(self) -> None:
        e = self.endpoint
        corr = self._next_correlation()
        self._send(f.PeerProperties(corr, {"product": "mainstem-spark"}))
        self._response(Key.PEER_PROPERTIES, corr)
        corr = self._next_correlation()
        self._send(f.SaslHandshake(corr))
        self._response(Key.SASL_HANDSHAKE, corr)
        corr = self._next_correlation()
        self._send(f.SaslAuthenticate(corr, "PLAIN", f"\0{e.user}\0{e.password}".encode()))
        self._response(Key.SASL_AUTHENTICATE, corr)
        key, body = self._read_frame()
        if key != Key.TUNE:
            raise StreamClientError(f"expected Tune after authentication, got key {key:#x}")
        self._other(key, body)  # take the server's frame max and heartbeat
        corr = self._next_correlation()
        self._send(f.Open(corr, e.vhost))
        self._response(Key.OPEN, corr)

    # -- streams ---------------------------------------------------------------

    def offsets(self, stream: str) -> Offsets:
        corr = self._next_correlation()
        self._send(f.StreamStats(corr, stream))
        reader = self._response(Key.STREAM_STATS, corr)
        stats = {}
        for _ in range(reader.u32()):
            name = reader.string()
            stats[name] = reader.i64()
        return Offsets(stats.get("first_offset", max(stats["first_chunk_id"], 0)),
                       stats["committed_offset"] + 1)

    def offset_for_timestamp(self, stream: str, timestamp_ms: int) -> int:
        """The first offset of the first chunk at or after a time (the end if none)."""
        corr = self._next_correlation()
        self._send(f.ResolveOffsetSpec(corr, stream, f.OffsetSpec(OffsetType.TIMESTAMP,
                                                                  timestamp_ms)))
        reader = self._response(Key.RESOLVE_OFFSET_SPEC, corr)
        reader.u16()  # the offset type: always an offset
        return reader.u64()

    def partitions(self, super_stream: str) -> list[str] | None:
        """The partition streams of a super stream, None if it is not one."""
        corr = self._next_correlation()
        self._send(f.Partitions(corr, super_stream))
        try:
            return self._response(Key.PARTITIONS, corr).strings()
        except StreamClientError:
            return None

    def chunks(self, stream: str, start: int, end: int) -> Iterator[Chunk]:
        """The committed chunks that hold offsets in [start, end), oldest first; the caller
        skips records outside the range (a chunk may straddle either bound)."""
        if start >= end:
            return
        subscription = 1
        corr = self._next_correlation()
        self._send(f.Subscribe(corr, subscription, stream, f.OffsetSpec(OffsetType.OFFSET, start),
                               CREDIT))
        self._response(Key.SUBSCRIBE, corr)
        try:
            while True:
                while not self._deliveries:
                    key, body = self._read_frame()
                    self._other(key, body)
                raw = self._deliveries.pop(0)
                self._send(f.Credit(subscription, 1))
                header = parse_header(raw[:HEADER_SIZE])
                chunk = Chunk(header, raw[HEADER_SIZE:HEADER_SIZE + header.data_length],
                              memoryview(b""))
                yield chunk
                if header.next_offset >= end:
                    return
        finally:
            corr = self._next_correlation()
            self._send(f.Unsubscribe(corr, subscription))
            self._response(Key.UNSUBSCRIBE, corr)
            self._deliveries.clear()

    # -- publishing ------------------------------------------------------------

    def declare_publisher(self, publisher_id: int, reference: str, stream: str) -> int:
        """Declare a deduplicating publisher; returns the last publishing id stored for
        the reference (-1 if none), so a retry can skip what already arrived."""
        corr = self._next_correlation()
        self._send(f.DeclarePublisher(corr, publisher_id, reference, stream))
        self._response(Key.DECLARE_PUBLISHER, corr)
        corr = self._next_correlation()
        self._send(f.QueryPublisherSequence(corr, reference, stream))
        sequence = self._response(Key.QUERY_PUBLISHER_SEQUENCE, corr).u64()
        return sequence if sequence else -1

    def publish(self, publisher_id: int, messages: Sequence[tuple[int, bytes]]) -> None:
        """Publish (publishing id, AMQP 1.0 message) pairs and wait for every confirm."""
        if not messages:
            return
        entries = [memoryview(_ENTRY.pack(len(body)) + body) for _, body in messages]
        self._send(f.Publish(publisher_id, [i for i, _ in messages], entries, len(entries),
                             sum(len(b) for _, b in messages)))
        wanted = {i for i, _ in messages}
        while not wanted <= self._confirmed | self._errors.keys():
            key, body = self._read_frame()
            self._other(key, body)
        failed = wanted & self._errors.keys()
        self._confirmed -= wanted
        if failed:
            code = self._errors[min(failed)]
            raise StreamClientError(f"{len(failed)} messages refused, code {code:#x}", code)

    def delete_publisher(self, publisher_id: int) -> None:
        corr = self._next_correlation()
        self._send(f.DeletePublisher(corr, publisher_id))
        self._response(Key.DELETE_PUBLISHER, corr)
