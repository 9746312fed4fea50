"""AMQP 0-9-1 <-> AMQP 1.0 message conversion, as RabbitMQ 4.x does it for stream queues.

A stream stores AMQP 1.0 messages, so an AMQP 0-9-1 publish to a stream queue is converted
(``from_amqp091``) and a stream message delivered to an AMQP 0-9-1 consumer is converted back
(``to_amqp091``). The rules follow RabbitMQ's ``mc_amqpl`` (see its "Inter-Protocol Property
Conversions" guide), so rstream/Java clients and 0-9-1 clients see what they would see there.

AMQP 0-9-1 -> AMQP 1.0 (``from_amqp091``)
=====================  ===================================================================
0-9-1 property         AMQP 1.0
=====================  ===================================================================
delivery_mode          header.durable = (delivery_mode == 2); a header section is always sent
priority               header.priority (ubyte)
expiration             header.ttl (uint, the decimal string parsed)
message_id             properties.message-id: uuid if "urn:uuid:<uuid>", else string
correlation_id         properties.correlation-id: same rule as message_id
user_id                properties.user-id (binary, the UTF-8 bytes)
reply_to               properties.reply-to (string)
content_type           properties.content-type (symbol)
content_encoding       properties.content-encoding (symbol)
timestamp (seconds)    properties.creation-time (timestamp, seconds * 1000)
app_id                 properties.group-id (string; RabbitMQ >= 3.13, before it was
                       application-properties "x-basic-app-id")
type                   message-annotations "x-basic-type" (string)
headers "x-*"          message-annotations, symbol key, any value type
headers "CC" (array)   message-annotations "x-cc"
other headers          application-properties, unless the value is an array or a table
                       (AMQP 1.0 allows only simple values there: those are dropped)
cluster_id             dropped
body                   one data section; with type "amqp-1.0" the body already is encoded
                       AMQP 1.0 body sections and is stored as such
(exchange, routing key) message-annotations "x-exchange", "x-routing-key" (what a stream
                       queue adds when RabbitMQ stores the message)
=====================  ===================================================================

Header values: str -> string if a valid shortstr (< 256 UTF-8 bytes, no NUL) else binary;
bytes -> binary; bool -> boolean; int -> int, or long beyond 32 bits (the 0-9-1 decoder does
not keep byte/short/unsigned tags); float -> double; datetime -> timestamp (ms); None -> null;
list -> list; dict -> map with symbol keys. A header holding a decimal is dropped (RabbitMQ
has no AMQP 1.0 form for it either).

AMQP 1.0 -> AMQP 0-9-1 (``to_amqp091``)
=======================================  ===================================================
AMQP 1.0                                 0-9-1 property
=======================================  ===================================================
header.durable                           delivery_mode 2 (true) / 1 (false); without a
                                         header: "x-basic-delivery-mode" annotation, else 2
                                         (RabbitMQ treats messages as durable by default)
header.priority                          priority (else "x-basic-priority" annotation)
header.ttl                               expiration (decimal string; else
                                         "x-basic-expiration" annotation)
properties.message-id / correlation-id   message_id / correlation_id: string if < 256 bytes,
                                         ulong as decimal, uuid as "urn:uuid:..."; a binary or
                                         longer id goes to header "x-message-id" /
                                         "x-correlation-id" instead
properties.user-id                       user_id, if a valid shortstr (else dropped)
properties.reply-to                      reply_to, if < 256 bytes
properties.group-id                      app_id, if < 256 bytes
properties.content-type / -encoding      content_type / content_encoding
properties.creation-time                 timestamp (ms // 1000)
message-annotations "x-basic-type"       type (data bodies only)
non-data body (amqp-value / -sequence)   type "amqp-1.0"; body = the encoded body sections
                                         and footer, unchanged
application-properties                   headers (keys < 256 bytes)
message-annotations "x-cc"               header "CC"
"x-opt-rabbitmq-received-time"           header "timestamp_in_ms" (long)
other "x-*" message-annotations          headers, except RabbitMQ's own "x-basic-*",
                                         "x-exchange", "x-routing-key", "x-death"
=======================================  ===================================================

Values map back: string/symbol -> str; integer types -> int; float/double -> float;
binary -> bytes; boolean -> bool; timestamp -> aware UTC datetime (whole seconds); null ->
None; list/array -> list; map -> dict. A header whose value has no 0-9-1 form (uuid, char,
decimal, described, non-string map key, a ulong beyond a signed long) is dropped.

A stream record that is not an AMQP 1.0 message at all (rstream's RawMessage, a BSON event)
raises ``Amqp10DecodeError`` here; the AMQP 0-9-1 consumer delivers its bytes as the body.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from mainstem.formats.amqp10 import (
    BodyKind,
    Char,
    Header,
    Long,
    Message,
    Properties,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    decode_message,
    encode_message,
    message_body,
)

AMQP10_TYPE = "amqp-1.0"  # the 0-9-1 `type` of a body that is encoded AMQP 1.0 sections
BASIC_PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
    "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id",
)  # fmt: skip

_URN_UUID = "urn:uuid:"
_INTERNAL_ANNOTATIONS = ("x-routing-key", "x-exchange", "x-death")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_LONG_LIMIT = 1 << 63  # a 0-9-1 table holds signed 64-bit integers
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class _NoEquivalent(Exception):
    """The value has no form in the other protocol; its header is dropped."""


# --- AMQP 0-9-1 -> AMQP 1.0 -------------------------------------------------------------------


def _as_mapping(properties: Any) -> Mapping[str, Any]:
    """Accept a mapping, None, or an object with the basic property attributes."""
    if properties is None:
        return {}
    if isinstance(properties, Mapping):
        return properties
    return {name: getattr(properties, name, None) for name in BASIC_PROPERTY_NAMES}


def _is_shortstr(raw: bytes) -> bool:
    return len(raw) < 256 and b"\x00" not in raw


def _string_value(value: str) -> str | bytes:
    # RabbitMQ stores a longstr header as string only if it is a valid shortstr.
    raw = value.encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
    return value if _is_shortstr(raw) else raw


def _from_091_value(value: Any) -> Any:
    if isinstance(value, str):
        return _string_value(value)
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return int(value) if _INT32_MIN <= value <= _INT32_MAX else Long(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return Timestamp(_seconds(value) * 1000)
    if isinstance(value, list | tuple):
        return [_from_091_value(item) for item in value]
    if isinstance(value, dict):
        return {Symbol(k): _from_091_value(v) for k, v in value.items()}
    raise _NoEquivalent(value)  # decimal.Decimal and anything unknown


def _seconds(value: datetime.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return (value - _EPOCH) // datetime.timedelta(seconds=1)


def _message_id_to_10(value: str | None) -> Any:
    if value is None:
        return None
    if value.startswith(_URN_UUID) and len(value) == len(_URN_UUID) + 36:
        try:
            return uuid.UUID(value[len(_URN_UUID) :])
        except ValueError:
            pass
    return value


def _split_headers(
    headers: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(application properties, x- message annotations) from 0-9-1 headers."""
    application: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    for key, value in headers.items():
        try:
            converted = _from_091_value(value)
        except _NoEquivalent:
            continue
        if key.startswith("x-"):
            annotations[key] = converted
        elif key == "CC" and isinstance(value, list | tuple):
            annotations["x-cc"] = converted
        elif not isinstance(value, list | tuple | dict):  # application properties: simple only
            application[key] = converted
    return application, annotations


def from_amqp091(
    properties: Any,
    body: bytes | bytearray | memoryview,
    *,
    exchange: str | None = None,
    routing_key: str | None = None,
) -> bytes:
    """Encode an AMQP 0-9-1 publish as the AMQP 1.0 message RabbitMQ stores in a stream.

    ``properties``: a mapping of basic property names (``BASIC_PROPERTY_NAMES``), an object
    with those attributes (``BasicProperties``) or None. ``exchange``/``routing_key`` become
    the "x-exchange"/"x-routing-key" annotations. Raises ``ValueError`` for an expiration that
    is not a non-negative integer (the channel should have refused it already).
    """
    props = _as_mapping(properties)
    get = props.get
    application, x_annotations = _split_headers(get("headers") or {})
    annotations: dict[str, Any] = {}
    if get("type") is not None:
        annotations["x-basic-type"] = str(get("type"))
    annotations.update(x_annotations)
    if exchange is not None:
        annotations["x-exchange"] = exchange
    if routing_key is not None:
        annotations["x-routing-key"] = routing_key
    message = Message(
        body=bytes(body),
        header=_header_from_091(props),
        message_annotations=annotations or None,
        properties=_properties_from_091(props),
        application_properties=application or None,
    )
    if get("type") != AMQP10_TYPE:
        return encode_message(message)
    # The body already is encoded AMQP 1.0 body sections (a stream message that went through
    # a 0-9-1 client): store those rather than wrap them in a data section.
    message_body(body)  # validates the sections, raising Amqp10DecodeError
    return encode_message(message, encoded_body=body)


def _header_from_091(props: Mapping[str, Any]) -> Header:
    expiration = props.get("expiration")
    ttl = None
    if expiration is not None:
        ttl = int(expiration)
        if ttl < 0:
            raise ValueError(f"expiration {expiration!r} is negative")
    priority = props.get("priority")
    return Header(
        durable=props.get("delivery_mode") == 2,
        priority=None if priority is None else UByte(priority),
        ttl=None if ttl is None else UInt(ttl),
    )


def _properties_from_091(props: Mapping[str, Any]) -> Properties | None:
    get = props.get
    timestamp = get("timestamp")
    user_id = get("user_id")
    properties = Properties(
        message_id=_message_id_to_10(get("message_id")),
        user_id=None if user_id is None else user_id.encode("utf-8", "surrogateescape"),
        reply_to=get("reply_to"),
        correlation_id=_message_id_to_10(get("correlation_id")),
        content_type=get("content_type"),
        content_encoding=get("content_encoding"),
        creation_time=None if timestamp is None else int(timestamp) * 1000,
        group_id=get("app_id"),
    )
    return None if properties == Properties() else properties


# --- AMQP 1.0 -> AMQP 0-9-1 -------------------------------------------------------------------


def _to_091_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | float | bytes):
        return value
    if isinstance(value, Timestamp):
        try:
            return _EPOCH + datetime.timedelta(seconds=value // 1000)
        except OverflowError:
            raise _NoEquivalent(value) from None
    if isinstance(value, int):
        if not -_LONG_LIMIT <= value < _LONG_LIMIT:  # a ulong beyond a signed long
            raise _NoEquivalent(value)
        return int(value)
    if isinstance(value, str) and not isinstance(value, Char):
        return str(value)
    if isinstance(value, list):
        return [_to_091_value(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NoEquivalent(value)
        return {str(k): _to_091_value(v) for k, v in value.items()}
    raise _NoEquivalent(value)  # uuid, char, decimal, described


def _short_text(value: Any) -> str | None:
    if isinstance(value, str) and len(value.encode("utf-8", "surrogateescape")) < 256:
        return str(value)
    return None


def _id_to_091(value: Any, header: str, headers: dict[str, Any]) -> str | None:
    if isinstance(value, uuid.UUID):
        return _URN_UUID + str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, bytes):
        headers[header] = value
        return None
    if isinstance(value, str):
        if _short_text(value) is None:
            headers[header] = str(value)
            return None
        return str(value)
    return None


def _user_id_to_091(value: Any) -> str | None:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    if not isinstance(raw, bytes) or not _is_shortstr(raw):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _headers_to_091(message: Message) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for key, value in (message.application_properties or {}).items():
        if isinstance(key, str) and _short_text(key) is not None:
            _put_header(headers, str(key), value)
    # x- annotations come second so they win, as RabbitMQ lists them first.
    for key, value in (message.message_annotations or {}).items():
        if not isinstance(key, str):
            continue
        if key == "x-cc":
            _put_header(headers, "CC", value)
        elif key == "x-opt-rabbitmq-received-time" and isinstance(value, Timestamp):
            headers["timestamp_in_ms"] = int(value)
        elif key.startswith("x-") and _short_text(key) is not None and not _internal(key):
            _put_header(headers, str(key), value)
    return headers


def _internal(key: str) -> bool:
    # Annotations RabbitMQ maps to properties itself, and x-opt-deaths (not converted here).
    return key.startswith("x-basic-") or key in _INTERNAL_ANNOTATIONS or key == "x-opt-deaths"


def _put_header(headers: dict[str, Any], key: str, value: Any) -> None:
    with contextlib.suppress(_NoEquivalent):
        headers[key] = _to_091_value(value)


def _annotation(message: Message, key: str) -> Any:
    return (message.message_annotations or {}).get(key)


def _delivery_mode(message: Message) -> int:
    durable = message.header.durable if message.header is not None else None
    if durable is True:
        return 2
    if durable is False:
        return 1
    mode = _annotation(message, "x-basic-delivery-mode")
    return 1 if mode == 1 else 2


def _expiration(message: Message) -> str | None:
    ttl = message.header.ttl if message.header is not None else None
    if isinstance(ttl, int):
        return str(int(ttl))
    return _short_text(_annotation(message, "x-basic-expiration"))


def _priority(message: Message) -> int | None:
    priority = message.header.priority if message.header is not None else None
    if priority is None:
        priority = _annotation(message, "x-basic-priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and 0 <= priority < 256:
        return int(priority)
    return None


def _timestamp_to_091(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value // 1000
    return None


def to_amqp091(message: bytes | bytearray | memoryview) -> tuple[dict[str, Any], bytes]:
    """Convert a stored AMQP 1.0 message to (basic properties, body) for an AMQP 0-9-1
    consumer. Only present properties are in the dict (keys from ``BASIC_PROPERTY_NAMES``).
    Raises ``Amqp10DecodeError`` on malformed bytes."""
    decoded = decode_message(message, keep_encoded_body=True)
    props = decoded.properties or Properties()
    headers = _headers_to_091(decoded)
    if decoded.body_kind is BodyKind.DATA:
        type_ = _short_text(_annotation(decoded, "x-basic-type"))
    else:
        type_ = AMQP10_TYPE
    result = {
        "content_type": _short_text(props.content_type),
        "content_encoding": _short_text(props.content_encoding),
        "delivery_mode": _delivery_mode(decoded),
        "priority": _priority(decoded),
        "correlation_id": _id_to_091(props.correlation_id, "x-correlation-id", headers),
        "reply_to": _short_text(props.reply_to),
        "expiration": _expiration(decoded),
        "message_id": _id_to_091(props.message_id, "x-message-id", headers),
        "timestamp": _timestamp_to_091(props.creation_time),
        "type": type_,
        "user_id": _user_id_to_091(props.user_id),
        "app_id": _short_text(props.group_id),
        "headers": headers or None,
    }
    return {k: v for k, v in result.items() if v is not None}, decoded.body
