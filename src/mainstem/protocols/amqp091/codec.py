"""Sans-IO AMQP 0-9-1 frame parser for the server side: bytes in, events out.

    codec = AmqpCodec()
    codec.receive_data(await reader.read(65536))
    for event in codec.next_frames():   # every complete frame in the buffer
        ...
    codec.frame_max = negotiated        # after Connection.Tune-Ok

Content-bearing methods are assembled per channel (method, header, body frames) into one
``ContentMessage``; frames of different channels may interleave.
"""

from __future__ import annotations

import enum
import struct
from struct import Struct

from mainstem.protocols.amqp091.errors import AmqpCodecError, ProtocolHeaderMismatch
from mainstem.protocols.amqp091.events import (
    HEARTBEAT,
    PROTOCOL_HEADER_RECEIVED,
    ContentMessage,
    Event,
    MethodFrame,
)
from mainstem.protocols.amqp091.methods import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    METHODS_BY_INDEX,
    BasicPublish,
    ReplyCode,
)
from mainstem.protocols.amqp091.wire import MalformedData, Method

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
DEFAULT_FRAME_MAX = 131_072  # RabbitMQ's default; applies until Tune-Ok lowers it
DEFAULT_MAX_BODY_SIZE = 128 * 1024 * 1024  # RabbitMQ's max_message_size default

FRAME_OVERHEAD = 8  # type, channel, size, frame-end
_FRAME_HEAD = Struct(">BHI")
_METHOD_IDS = Struct(">HH")
_CONTENT_HEAD = Struct(">HHQ")  # class id, weight, body size
_U32 = Struct(">I")
_PUBLISH_INDEX = BasicPublish.INDEX
# Decoded basic.publish methods by their argument bytes: a publisher repeats a handful of
# (exchange, routing key, flags). The methods are never modified, so they can be shared.
_PUBLISH_CACHE_SIZE = 256


class HeaderCheck(enum.Enum):
    AMQP_0_9_1 = "amqp-0-9-1"
    INCOMPLETE = "incomplete"  # a proper prefix of our header: read more
    OTHER_AMQP = "other-amqp"  # "AMQP" and another version (1.0, 0-8, ...)
    NOT_AMQP = "not-amqp"


def classify_protocol_header(data: bytes | bytearray | memoryview) -> HeaderCheck:
    """Classify the first (up to 8) bytes a client sent; anything but AMQP_0_9_1 or
    INCOMPLETE is answered with ``PROTOCOL_HEADER`` and a close."""
    head = bytes(data[:8])
    if head == PROTOCOL_HEADER:
        return HeaderCheck.AMQP_0_9_1
    if PROTOCOL_HEADER.startswith(head):
        return HeaderCheck.INCOMPLETE
    return HeaderCheck.OTHER_AMQP if head.startswith(b"AMQP") else HeaderCheck.NOT_AMQP


class _PartialContent:
    """A content-bearing method waiting for its header, then its body frames."""

    __slots__ = ("body_size", "method", "parts", "properties_raw", "received")

    def __init__(self, method: Method) -> None:
        self.method = method
        self.body_size = -1  # -1 until the content header arrives
        self.properties_raw = b""
        self.parts: list[bytes] = []
        self.received = 0


class AmqpCodec:
    """Parses frames from a client. Errors raise ``AmqpCodecError`` and poison the codec;
    ``parsed_before_error`` keeps what the same buffer held before the violation, so the
    connection may still act on it (for example acks) before closing.

    ``frame_max`` is the largest whole frame accepted (header and end octet included, as in
    Connection.Tune); ``max_body_size`` caps a message's declared body size.
    """

    def __init__(self, *, frame_max: int = DEFAULT_FRAME_MAX,
                 max_body_size: int = DEFAULT_MAX_BODY_SIZE,
                 expect_protocol_header: bool = True) -> None:
        self.frame_max = frame_max
        self.max_body_size = max_body_size
        self._buffer = bytearray()
        self._awaiting_protocol_header = expect_protocol_header
        self._partial: dict[int, _PartialContent] = {}
        self._error: AmqpCodecError | None = None
        self.parsed_before_error: list[Event] = []
        self._publishes: dict[bytes, Method] = {}

    @property
    def failed(self) -> bool:
        """An error poisoned the codec: it drops whatever it receives from now on."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:
            self._buffer += data

    def next_frames(self) -> list[Event]:
        if self._error is not None:
            raise self._error
        events: list[Event] = []
        try:
            if self._awaiting_protocol_header and not self._take_protocol_header(events):
                return events
            consumed = self._parse_frames(events)
        except AmqpCodecError as exc:
            self.parsed_before_error = events
            self._error = exc
            raise
        del self._buffer[:consumed]
        return events

    def _take_protocol_header(self, events: list[Event]) -> bool:
        check = classify_protocol_header(self._buffer)
        if check is HeaderCheck.INCOMPLETE:
            return False
        if check is not HeaderCheck.AMQP_0_9_1:
            raise ProtocolHeaderMismatch(bytes(self._buffer[:8]))
        del self._buffer[:8]
        self._awaiting_protocol_header = False
        events.append(PROTOCOL_HEADER_RECEIVED)
        return True

    def _parse_frames(self, events: list[Event]) -> int:
        """Handle every complete frame; return how many bytes they used."""
        buf = self._buffer
        end = len(buf)
        pos = 0
        max_payload = self.frame_max - FRAME_OVERHEAD
        view = memoryview(buf)
        while end - pos >= 7:
            frame_type, channel, size = _FRAME_HEAD.unpack_from(buf, pos)
            if size > max_payload:  # checked before waiting for (and buffering) the payload
                raise AmqpCodecError(
                    ReplyCode.FRAME_ERROR,
                    f"frame size {size + FRAME_OVERHEAD} exceeds frame_max {self.frame_max}",
                )
            frame_end = pos + 7 + size
            if frame_end >= end:
                break
            if buf[frame_end] != FRAME_END:
                raise AmqpCodecError(
                    ReplyCode.FRAME_ERROR, f"bad frame end octet {buf[frame_end]:#04x}"
                )
            if (frame_type == FRAME_METHOD and size >= 4
                    and _U32.unpack_from(buf, pos + 7)[0] == _PUBLISH_INDEX
                    and channel not in self._partial):
                whole = self._whole_publish(view, pos, frame_end, channel, max_payload, events)
                if whole:
                    pos = whole
                    continue
            self._handle_frame(frame_type, channel, view[pos + 7 : frame_end], events)
            pos = frame_end + 1
        # Payload slices are copied by the handlers, so the buffer can shrink after this.
        view.release()
        return pos

    def _whole_publish(self, view: memoryview, pos: int, method_end: int, channel: int,
                       max_payload: int, events: list[Event]) -> int:
        """The common case in one step: a basic.publish whose content header and single
        body frame follow it in the buffer; where they end, or 0 for anything else (the
        frame-by-frame path then handles it, errors included)."""
        end = len(view)
        header = method_end + 1
        if end - header < 7:
            return 0
        size: int  # a struct's fields are Any to mypy; `after` is computed from it
        frame_type, header_channel, size = _FRAME_HEAD.unpack_from(view, header)
        header_end = header + 7 + size
        if (frame_type != FRAME_HEADER or header_channel != channel or size > max_payload
                or size < _CONTENT_HEAD.size + 2 or header_end >= end
                or view[header_end] != FRAME_END):
            return 0
        class_id, _weight, body_size = _CONTENT_HEAD.unpack_from(view, header + 7)
        if class_id != BasicPublish.CLASS_ID or body_size > self.max_body_size:
            return 0
        after = header_end + 1
        if body_size:
            if end - after < 7:
                return 0
            frame_type, body_channel, size = _FRAME_HEAD.unpack_from(view, after)
            body_end = after + 7 + size
            if (frame_type != FRAME_BODY or body_channel != channel or size != body_size
                    or size > max_payload or body_end >= end or view[body_end] != FRAME_END):
                return 0
            body = bytes(view[after + 7 : body_end])
            after = body_end + 1
        else:
            body = b""
        method = self._publish_method(view, pos, method_end)
        properties_raw = bytes(view[header + 7 + _CONTENT_HEAD.size : header_end])
        events.append(ContentMessage(channel, method, properties_raw, body))
        return after

    def _publish_method(self, view: memoryview, pos: int, method_end: int) -> Method:
        arguments = bytes(view[pos + 11 : method_end])
        method = self._publishes.get(arguments)
        if method is None:
            method = decode_method(view[pos + 7 : method_end])
            if len(self._publishes) >= _PUBLISH_CACHE_SIZE:
                self._publishes.clear()
            self._publishes[arguments] = method
        return method

    def _handle_frame(
        self, frame_type: int, channel: int, payload: memoryview, events: list[Event]
    ) -> None:
        if frame_type == FRAME_METHOD:
            self._handle_method(channel, payload, events)
        elif frame_type == FRAME_HEADER:
            self._handle_content_header(channel, payload, events)
        elif frame_type == FRAME_BODY:
            self._handle_body(channel, payload, events)
        elif frame_type == FRAME_HEARTBEAT:
            if channel != 0 or payload:
                raise AmqpCodecError(ReplyCode.FRAME_ERROR, "heartbeat must be empty, channel 0")
            events.append(HEARTBEAT)
        else:
            raise AmqpCodecError(ReplyCode.FRAME_ERROR, f"unknown frame type {frame_type}")

    def _handle_method(self, channel: int, payload: memoryview, events: list[Event]) -> None:
        if channel in self._partial:
            raise _unexpected(channel, "method frame", self._partial[channel])
        method = decode_method(payload)
        if method.HAS_CONTENT:
            self._partial[channel] = _PartialContent(method)
        else:
            events.append(MethodFrame(channel, method))

    def _handle_content_header(
        self, channel: int, payload: memoryview, events: list[Event]
    ) -> None:
        partial = self._partial.get(channel)
        if partial is None or partial.body_size >= 0:
            raise _unexpected(channel, "content header", partial)
        if len(payload) < _CONTENT_HEAD.size + 2:
            raise AmqpCodecError(ReplyCode.FRAME_ERROR, "content header frame too short")
        class_id, _weight, body_size = _CONTENT_HEAD.unpack_from(payload)
        if class_id != partial.method.CLASS_ID:
            raise AmqpCodecError(
                ReplyCode.UNEXPECTED_FRAME,
                f"expected content header for class {partial.method.CLASS_ID}, "
                f"got one for class {class_id}",
            )
        if body_size > self.max_body_size:
            raise AmqpCodecError(
                ReplyCode.FRAME_ERROR,
                f"message size {body_size} is larger than configured max size {self.max_body_size}",
            )
        partial.properties_raw = bytes(payload[_CONTENT_HEAD.size :])
        partial.body_size = body_size
        if body_size == 0:
            self._complete(channel, partial, events)

    def _handle_body(self, channel: int, payload: memoryview, events: list[Event]) -> None:
        partial = self._partial.get(channel)
        if partial is None or partial.body_size < 0:
            raise _unexpected(channel, "content body", partial)
        partial.received += len(payload)
        if partial.received > partial.body_size:
            raise AmqpCodecError(
                ReplyCode.UNEXPECTED_FRAME,
                f"content body of {partial.received} bytes exceeds declared {partial.body_size}",
            )
        partial.parts.append(bytes(payload))
        if partial.received == partial.body_size:
            self._complete(channel, partial, events)

    def _complete(self, channel: int, partial: _PartialContent, events: list[Event]) -> None:
        del self._partial[channel]
        parts = partial.parts
        # One body frame is the common case: its bytes become the body without another copy.
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        events.append(ContentMessage(channel, partial.method, partial.properties_raw, body))


def decode_method(payload: memoryview) -> Method:
    """Decode a method frame's payload (class id, method id, arguments)."""
    if len(payload) < _METHOD_IDS.size:
        raise AmqpCodecError(ReplyCode.FRAME_ERROR, "method frame too short")
    class_id, method_id = _METHOD_IDS.unpack_from(payload)
    method_class = METHODS_BY_INDEX.get(class_id << 16 | method_id)
    if method_class is None:
        raise AmqpCodecError(ReplyCode.COMMAND_INVALID,
                             f"unknown method class={class_id} method={method_id}",
                             class_id=class_id, method_id=method_id)
    try:
        return method_class.decode(payload[_METHOD_IDS.size :])
    except (MalformedData, struct.error, IndexError) as exc:
        raise AmqpCodecError(ReplyCode.SYNTAX_ERROR, f"malformed {method_class.NAME}: {exc}",
                             class_id=class_id, method_id=method_id) from exc


def _unexpected(channel: int, got: str, partial: _PartialContent | None) -> AmqpCodecError:
    if partial is None:
        expected = "a method frame"
    elif partial.body_size < 0:
        expected = f"a content header for {partial.method.NAME}"
    else:
        expected = f"a content body for {partial.method.NAME}"
    return AmqpCodecError(
        ReplyCode.UNEXPECTED_FRAME, f"expected {expected} on channel {channel}, got {got}"
    )
