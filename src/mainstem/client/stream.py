"""A small blocking RabbitMQ Stream protocol client for batch work (Spark tasks): offsets of
a stream, its raw chunks between two offsets, and deduplicating publishes.

It is not a general client (use rstream or rbfly for applications): reads hand back the
Osiris chunks undecoded, so a caller can turn a whole chunk into columns at once.
"""

from __future__ import annotations

import socket
import ssl
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import unquote, urlsplit

from mainstem.client.tls_diagnosis import closed_before_answering, tls_failure
from mainstem.formats.chunk import Chunk, ChunkHeader, parse_header
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.codec import StreamCodec, encode
from mainstem.protocols.rabbit_stream.constants import OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.responses import REPLY_PARSERS
from mainstem.protocols.rabbit_stream.state import (
    ClientHandshake,
    Phase,
    ProtocolError,
    StepRefused,
)
from mainstem.protocols.rabbit_stream.wire import FrameError

TLS_SCHEME = "rabbitmq-stream+tls"
PORT, TLS_PORT = 5552, 5551
MAX_FRAME = 8 * 1024 * 1024
CREDIT = 16  # chunks in flight per read, at most

# Every response code the stream protocol defines, in words. Fields: {user}, {vhost},
# {request} (the frame that failed) and {target} ("stream 'x'", or "the request").
MEANINGS: dict[ResponseCode, str] = {
    ResponseCode.STREAM_DOES_NOT_EXIST: "{target} does not exist",
    ResponseCode.SUBSCRIPTION_ID_ALREADY_EXISTS: "the subscription id of {request} is "
                                                 "already in use on this connection",
    ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST: "the subscription of {request} does not exist",
    ResponseCode.STREAM_ALREADY_EXISTS: "{target} already exists",
    ResponseCode.STREAM_NOT_AVAILABLE: "{target} is not available (its leader is not ready)",
    ResponseCode.SASL_MECHANISM_NOT_SUPPORTED: "the server does not offer SASL PLAIN",
    ResponseCode.AUTHENTICATION_FAILURE: "authentication failed for user {user!r}",
    ResponseCode.SASL_ERROR: "SASL error while authenticating user {user!r}",
    ResponseCode.SASL_CHALLENGE: "the server sent user {user!r} a SASL challenge, which PLAIN "
                                 "does not answer",
    ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK: "user {user!r} may only connect from "
                                                       "localhost",
    ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE: "user {user!r} has no access to virtual host "
                                              "{vhost!r}",
    ResponseCode.UNKNOWN_FRAME: "the server does not know the {request} frame",
    ResponseCode.FRAME_TOO_LARGE: "the {request} frame is larger than the server accepts",
    ResponseCode.INTERNAL_ERROR: "the server failed on {request} for {target} (internal error)",
    ResponseCode.ACCESS_REFUSED: "user {user!r} may not {request} on {target}",
    ResponseCode.PRECONDITION_FAILED: "{request} on {target}: precondition failed (arguments "
                                      "that differ from the existing stream's, or a name in "
                                      "use)",
    ResponseCode.PUBLISHER_DOES_NOT_EXIST: "the publisher of {request} does not exist on this "
                                           "connection",
    ResponseCode.NO_OFFSET: "no offset is stored for {target}",
    ResponseCode.SASL_CANNOT_CHANGE_MECHANISM: "user {user!r} cannot change the SASL mechanism "
                                               "after the handshake",
    ResponseCode.SASL_CANNOT_CHANGE_USERNAME: "user {user!r} cannot be changed on an "
                                              "authenticated connection",
}


class _Correlated(Protocol):
    correlation_id: int


class _Answer(_Correlated, Protocol):
    response_code: int


Reply = TypeVar("Reply", bound=_Answer)
AnyReply = TypeVar("AnyReply", bound=_Correlated)  # Metadata's has no top-level code


class StreamClientError(Exception):
    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def describe(code: int, endpoint: Endpoint, request: str, stream: str | None = None) -> str:
    """A response code in words, naming the stream and the user it concerns."""
    try:
        meaning = MEANINGS[ResponseCode(code)]
    except (ValueError, KeyError):
        meaning = "{request} failed with unknown response code " + f"{code:#x}"
    target = f"stream {stream!r}" if stream is not None else "the request"
    return meaning.format(user=endpoint.user, vhost=endpoint.vhost, request=request,
                          target=target)


@dataclass(frozen=True)
class Tls:
    """How to check the server (PEM files; the system's CAs without `cafile`) and, for
    servers that ask, the client's certificate."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        context.check_hostname = self.check_hostname  # the CA is checked either way
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str = field(repr=False)  # never in a log line or an error
    vhost: str
    tls: Tls | None = None

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """``rabbitmq-stream[+tls]://user:pass@host:port/vhost`` (vhost "%2F" is "/")."""
        parts = urlsplit(url if "://" in url else "rabbitmq-stream://" + url)
        tls = Tls() if parts.scheme == TLS_SCHEME else None
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return cls(parts.hostname or "127.0.0.1", parts.port or (TLS_PORT if tls else PORT),
                   unquote(parts.username or "guest"), unquote(parts.password or "guest"), vhost,
                   tls)


@dataclass(frozen=True)
class Offsets:
    first: int  # the first offset still stored
    end: int  # one past the last committed offset


def _open_socket(endpoint: Endpoint, timeout: float) -> socket.socket:
    """A TCP connection, wrapped in TLS when the endpoint asks for it."""
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except OSError as exc:
        raise StreamClientError(f"cannot connect to {endpoint.host}:{endpoint.port}: "
                                f"{exc.strerror or exc}") from None
    # Small frames go out at once: Nagle would hold a frame sent right after another (Open
    # after Tune, a Credit after a Credit) until the server's delayed ACK, 40 ms later.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if endpoint.tls is None:
        return sock
    try:
        return endpoint.tls.context().wrap_socket(sock, server_hostname=endpoint.host)
    except ssl.SSLError as exc:
        sock.close()
        raise StreamClientError(f"TLS with {endpoint.host}:{endpoint.port} failed: "
                                f"{tls_failure(exc)}") from None
    except OSError as exc:
        sock.close()
        raise StreamClientError(f"TLS with {endpoint.host}:{endpoint.port} failed: "
                                f"{exc}") from None


def _chunk(header: ChunkHeader, raw: memoryview) -> Chunk:
    """A delivered chunk's data entries (the Deliver frame carries no trailer)."""
    return Chunk(header, raw[HEADER_SIZE:HEADER_SIZE + header.data_length], memoryview(b""))


class StreamClient:
    def __init__(self, endpoint: Endpoint, timeout: float = 30.0) -> None:
        self.endpoint = endpoint
        self._sock = _open_socket(endpoint, timeout)
        self._codec = StreamCodec(MAX_FRAME, REPLY_PARSERS)
        self._frames: deque[f.Frame] = deque()
        self._correlation = 0
        self._deliveries: list[memoryview] = []
        self._confirmed: set[int] = set()
        self._errors: dict[int, int] = {}
        # Streams the server said are no longer available here (MetadataUpdate): deleted,
        # or their leader moved, which drops this connection's publishers to them.
        self.unavailable: list[str] = []
        self._publisher_streams: dict[int, str] = {}
        self._answered = False  # a frame came: a close is no longer a handshake's failure
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
        try:
            self._sock.sendall(encode(frame))
        except ssl.SSLError:  # the server ended TLS: why (an alert) may still be read
            self._receive()
            raise StreamClientError(self._closed()) from None

    def _receive(self) -> bytes:
        """Bytes from the server; none when it closed the connection."""
        try:
            return self._sock.recv(1 << 20)
        except ssl.SSLEOFError:  # closed without TLS's close_notify
            return b""
        except ssl.SSLError as exc:  # an alert after the handshake (TLS 1.3)
            raise StreamClientError(f"TLS with {self.endpoint.host}:{self.endpoint.port} "
                                    f"failed: {tls_failure(exc)}") from None

    def _read_frame(self) -> f.Frame:
        while not self._frames:
            data = self._receive()
            if not data:
                raise StreamClientError(self._closed())
            self._codec.receive_data(data)
            try:
                self._frames.extend(self._codec.next_frames())
            except FrameError as exc:
                raise StreamClientError(f"bad frame from the server: {exc}") from None
        self._answered = True
        return self._frames.popleft()

    def _closed(self) -> str:
        if self._answered:
            return "the server closed the connection"
        e = self.endpoint
        return closed_before_answering(e.host, e.port, e.tls is not None,
                                       bool(e.tls and e.tls.certfile))

    def _call(self, request: Callable[[int], f.Frame], reply: type[Reply],
              stream: str | None = None) -> Reply:
        """Send the request (about `stream`, if any) made with the next correlation id and
        wait for its reply, handling what arrives in between."""
        sent, frame = self._exchange(request, reply)
        code = frame.response_code
        if code != ResponseCode.OK:
            raise StreamClientError(
                describe(code, self.endpoint, type(sent).__name__, stream), code)
        return frame

    def _exchange(self, request: Callable[[int], f.Frame], reply: type[AnyReply]
                  ) -> tuple[f.Frame, AnyReply]:
        """The request sent with the next correlation id, and its reply."""
        self._correlation += 1
        correlation_id = self._correlation
        sent = request(correlation_id)
        self._send(sent)
        while True:
            frame = self._read_frame()
            if isinstance(frame, reply) and frame.correlation_id == correlation_id:
                return sent, frame
            self._other(frame)

    def _other(self, frame: f.Frame) -> None:
        if isinstance(frame, r.Deliver):
            self._deliveries.append(frame.chunk)
        elif isinstance(frame, r.PublishConfirm):
            self._confirmed.update(frame.publishing_ids)
        elif isinstance(frame, r.PublishError):
            self._errors.update(frame.errors)
        elif isinstance(frame, f.Tune):
            self._send(frame)  # accept the server's proposal
        elif isinstance(frame, r.MetadataUpdate):
            self.unavailable.append(frame.stream)
        elif isinstance(frame, f.Close):
            raise StreamClientError("the server closed the connection")
        # heartbeats and the rest need no answer here

    def _handshake(self) -> None:
        """Driven by the protocol's own handshake state, the server's in reverse."""
        e = self.endpoint
        handshake = ClientHandshake(e.user, e.password, e.vhost, {"product": "mainstem-spark"})
        self._send(handshake.begin())
        while handshake.phase is not Phase.OPEN:
            try:
                answers = handshake.receive(self._read_frame())
            except StepRefused as refused:
                raise StreamClientError(describe(refused.code, e, refused.request),
                                        refused.code) from None
            except ProtocolError as error:
                raise StreamClientError(f"the server broke the handshake: {error}") from None
            for frame in answers:
                self._send(frame)
        self._correlation = handshake.correlations.next()

    # -- streams ---------------------------------------------------------------

    def stats(self, stream: str) -> dict[str, int]:
        """The stream's StreamStats: RabbitMQ's keys (first_chunk_id, committed_chunk_id)
        and mainstem's (first_offset, committed_offset, tiered_bytes, local_first_offset)."""
        stats: dict[str, int] = self._call(lambda corr: f.StreamStats(corr, stream),
                                           r.StreamStatsResponse, stream).stats
        return stats

    def offsets(self, stream: str) -> Offsets:
        stats = self.stats(stream)
        return Offsets(stats.get("first_offset", max(stats["first_chunk_id"], 0)),
                       stats["committed_offset"] + 1)

    def create_stream(self, stream: str, arguments: dict[str, str] | None = None) -> bool:
        """Create a stream; False if it already exists (its arguments are left as they are)."""
        try:
            self._call(lambda corr: f.CreateStream(corr, stream, arguments or {}), f.Response,
                       stream)
        except StreamClientError as exc:
            if exc.code == ResponseCode.STREAM_ALREADY_EXISTS:
                return False
            raise
        return True

    def replicas(self, streams: Sequence[str]) -> dict[str, list[tuple[str, int]]]:
        """Where each stream may be read, as Metadata says: its replicas, or its leader
        when it has none (a broker that runs alone); streams it does not know are left
        out."""
        _, answer = self._exchange(lambda corr: f.Metadata(corr, list(streams)),
                                   r.MetadataResponse)
        nodes = {b.reference: (b.host, b.port) for b in answer.brokers}
        found = {}
        for meta in answer.streams:
            if meta.response_code != ResponseCode.OK or meta.leader_reference is None:
                continue
            refs = meta.replica_references or [meta.leader_reference]
            found[meta.name] = [nodes[ref] for ref in refs if ref in nodes]
        return found

    def offset_for_timestamp(self, stream: str, timestamp_ms: int) -> int:
        """The first offset of the first chunk at or after a time (the end if none)."""
        spec = f.OffsetSpec(OffsetType.TIMESTAMP, timestamp_ms)
        return self._call(lambda corr: f.ResolveOffsetSpec(corr, stream, spec),
                          r.ResolveOffsetSpecResponse, stream).offset  # always of type offset

    def tiered_segments(self, stream: str) -> r.TieredSegmentsResponse:
        """Where the broker's tier is and the segments of `stream` that live only there,
        oldest first (mainstem's own command): none from a broker without a tier, or one
        that does not know the command."""
        try:
            return self._call(lambda corr: f.TieredSegments(corr, stream),
                              r.TieredSegmentsResponse, stream)
        except StreamClientError as exc:
            if exc.code != ResponseCode.UNKNOWN_FRAME:
                raise
            return r.TieredSegmentsResponse(0, ResponseCode.OK)

    def partitions(self, super_stream: str) -> list[str] | None:
        """The partition streams of a super stream, None if it is not one."""
        try:
            return self._call(lambda corr: f.Partitions(corr, super_stream),
                              r.PartitionsResponse, super_stream).streams
        except StreamClientError:
            return None

    def chunks(self, stream: str, start: int, end: int) -> Iterator[Chunk]:
        """The committed chunks that hold offsets in [start, end), oldest first; the caller
        skips records outside the range (a chunk may straddle either bound)."""
        if start >= end:
            return
        subscription = 1
        spec = f.OffsetSpec(OffsetType.OFFSET, start)
        self._call(lambda corr: f.Subscribe(corr, subscription, stream, spec, CREDIT),
                   f.Response, stream)
        granted = CREDIT  # chunks asked for and not received yet
        try:
            while True:
                while not self._deliveries:
                    self._other(self._read_frame())
                raw = self._deliveries.pop(0)
                granted -= 1
                header = parse_header(raw[:HEADER_SIZE])
                if header.next_offset >= end:
                    yield _chunk(header, raw)
                    return
                granted += self._ask_for_more(subscription, granted, end - header.next_offset,
                                              header.num_records)
                yield _chunk(header, raw)
        finally:
            self._call(lambda corr: f.Unsubscribe(corr, subscription), f.Response)
            self._deliveries.clear()

    def _ask_for_more(self, subscription: int, granted: int, left: int, per_chunk: int) -> int:
        """Credit for more chunks, in groups (a frame per chunk costs a syscall and a wake-up
        of the broker), never past what the `left` records need at this chunk's size."""
        wanted = min(CREDIT, -(-left // max(per_chunk, 1)))
        more = wanted - granted
        if more >= CREDIT // 2 or (more > 0 and granted == 0):
            self._send(f.Credit(subscription, more))
            return more
        return 0

    # -- publishing ------------------------------------------------------------

    def declare_publisher(self, publisher_id: int, reference: str, stream: str) -> int:
        """Declare a publisher, deduplicating if it has a reference; returns the last
        publishing id stored for the reference (-1 if none, or without a reference), so a
        retry can skip what already arrived."""
        self._call(lambda corr: f.DeclarePublisher(corr, publisher_id, reference, stream),
                   f.Response, stream)
        self._publisher_streams[publisher_id] = stream
        if not reference:
            return -1
        sequence = self._call(lambda corr: f.QueryPublisherSequence(corr, reference, stream),
                              r.QueryPublisherSequenceResponse, stream).sequence
        return sequence if sequence else -1

    def publish(self, publisher_id: int, messages: Sequence[tuple[int, bytes]]) -> None:
        """Publish (publishing id, AMQP 1.0 message) pairs and wait for every confirm."""
        if not messages:
            return
        self._send(f.Publish.of_bodies(publisher_id, messages))
        wanted = {i for i, _ in messages}
        while not wanted <= self._confirmed | self._errors.keys():
            self._other(self._read_frame())
        failed = wanted & self._errors.keys()
        self._confirmed -= wanted
        if failed:
            code = self._errors[min(failed)]
            for publishing_id in failed:
                del self._errors[publishing_id]
            reason = describe(code, self.endpoint, "Publish",
                              self._publisher_streams.get(publisher_id))
            raise StreamClientError(f"{len(failed)} messages refused: {reason}", code)
