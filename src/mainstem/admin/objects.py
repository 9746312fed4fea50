"""Declaring and deleting AMQP objects over HTTP, and the API's publish, get and purge.

RabbitMQ's bodies and status codes: PUT answers 201 when it created, 204 when the object
was there already; bindings are POSTed and answer 201 with their Location. rabbitmqadmin
sends booleans as the strings "true"/"false", so both spellings are accepted.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import time
from typing import Any
from urllib.parse import quote

from aiohttp import web

from mainstem.admin.scope import Scope, check_permission, scoped
from mainstem.admin.state import add_message_stats, no_content, read_body, state_of
from mainstem.broker.amqp.queues import QueueMessage
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.routing import Binding
from mainstem.broker.amqp.routing.model import DestinationKind
from mainstem.broker.auth import PermissionKind
from mainstem.broker.errors import AccessRefused, InvalidArgument, NotFound
from mainstem.broker.policies import EXCHANGE
from mainstem.protocols.amqp091.events import decode_properties
from mainstem.protocols.amqp091.methods import BasicProperties
from mainstem.protocols.amqp091.properties import essentials, to_stream_record

routes = web.RouteTableDef()
DEFAULT_EXCHANGE = "amq.default"  # how the API names the nameless default exchange
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
             "reject_requeue_false")
_PROPERTY_KINDS = dict(BasicProperties.FIELDS)  # name -> its AMQP type ("shortstr", ...)
_PROPERTY_NAMES = tuple(_PROPERTY_KINDS)
_NUMBERS = {"octet", "short", "long", "longlong", "timestamp"}


def created() -> web.Response:
    return web.Response(status=201)


def flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value: object = body.get(key, default)
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise InvalidArgument(f"{key} must be true or false")


def json_object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{key} must be a JSON object")
    return value


def virtual_host(request: web.Request) -> VirtualHost:
    """The AMQP side of the path's virtual host (404 if there is no such vhost)."""
    name = request.match_info["vhost"]
    try:
        return state_of(request).core.queues.vhost(name)
    except NotFound:
        raise NotFound(f"virtual host '{name}' not found") from None


def may(request: web.Request, kind: PermissionKind, resource_type: str, name: str) -> None:
    """Raise unless the user's permissions in the path's vhost allow `kind` on `name`."""
    check_permission(request, kind, request.match_info["vhost"], name, resource_type)


def exchange_name(request: web.Request, key: str = "name") -> str:
    name = request.match_info[key]
    return "" if name == DEFAULT_EXCHANGE else name


def classic_queue(vhost: VirtualHost, name: str) -> ClassicQueue:
    queue = vhost.lookup(name, None)
    if not isinstance(queue, ClassicQueue):
        raise InvalidArgument(f"{vhost.describe('queue', name)} is a stream: it cannot do this")
    return queue


# -- queues ----------------------------------------------------------------------


@scoped(Scope.VHOST)
@routes.put("/api/queues/{vhost}/{name}")
async def put_queue(request: web.Request) -> web.Response:
    """Declare a queue: {"durable", "auto_delete", "arguments": {"x-queue-type": ...}}."""
    body = await read_body(request)
    vhost, name = virtual_host(request), request.match_info["name"]
    may(request, "configure", "queue", name)
    if name.startswith("amq."):
        raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
    existed = name in vhost.queues or vhost.stream(name) is not None
    await vhost.placed(vhost.declare_queue(
        name, durable=flag(body, "durable", True), exclusive=False,
        auto_delete=flag(body, "auto_delete", False), arguments=json_object(body, "arguments"),
        owner=None))
    await vhost.shared()
    return no_content() if existed else created()


@scoped(Scope.VHOST)
@routes.delete("/api/queues/{vhost}/{name}/contents")
async def purge_queue(request: web.Request) -> web.Response:
    vhost = virtual_host(request)
    may(request, "read", "queue", request.match_info["name"])
    queue = vhost.lookup(request.match_info["name"], None)
    if isinstance(queue, ClassicQueue):
        queue.purge()
    return no_content()


@scoped(Scope.VHOST)
@routes.post("/api/queues/{vhost}/{name}/get")
async def get_messages(request: web.Request) -> web.Response:
    """Fetch messages: {"count", "ackmode", "encoding": "auto"|"base64", "truncate"}."""
    may(request, "read", "queue", request.match_info["name"])
    body = await read_body(request)
    count, truncate = _count(body.get("count", 1), "count"), body.get("truncate")
    ackmode, encoding = body.get("ackmode", "ack_requeue_true"), body.get("encoding", "auto")
    if ackmode not in ACK_MODES:
        raise InvalidArgument(f"ackmode must be one of {', '.join(ACK_MODES)}")
    if encoding not in ("auto", "base64"):
        raise InvalidArgument("encoding must be auto or base64")
    limit = None if truncate in (None, "") else _count(truncate, "truncate", minimum=0)
    queue = classic_queue(virtual_host(request), request.match_info["name"])
    taken: list[tuple[QueueMessage, int]] = []
    while len(taken) < count and (message := queue.get()) is not None:
        queue.unacked_count += 1
        queue.stats.delivered(no_ack=False, by_get=True, redelivered=message.redelivered)
        taken.append((message, queue.ready_count))
    rows = [_message_row(message, remaining, encoding, limit) for message, remaining in taken]
    messages = [message for message, _ in taken]
    if ackmode == "ack_requeue_false":
        for message in messages:
            queue.ack(message)
    elif ackmode == "reject_requeue_false":
        for message in messages:
            queue.reject(message)
    else:
        queue.requeue(messages)
    return web.json_response(rows)


def _count(value: object, key: str, minimum: int = 1) -> int:
    try:
        number: int = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise InvalidArgument(f"{key} must be an integer") from None
    if number < minimum:
        raise InvalidArgument(f"{key} must be at least {minimum}")
    return number


def _message_row(message: QueueMessage, remaining: int, encoding: str,
                 limit: int | None) -> dict[str, Any]:
    body = message.body if limit is None else message.body[:limit]
    payload, payload_encoding = _encoded(body, encoding)
    return {
        "payload_bytes": len(message.body),
        "redelivered": message.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": remaining,
        "properties": properties_json(message.properties),
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


def _encoded(body: bytes, encoding: str) -> tuple[str, str]:
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), "base64"


def properties_json(raw: bytes) -> dict[str, Any]:
    """The set properties of a message, as JSON values (tables made plain)."""
    properties = decode_properties(raw)
    return {name: _plain(value) for name in _PROPERTY_NAMES
            if (value := getattr(properties, name)) is not None}


def _plain(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


# -- exchanges ---------------------------------------------------------------------


def exchange_row(vhost: str, exchange: Any) -> dict[str, Any]:
    return {"name": exchange.name, "vhost": vhost, "type": exchange.type.value,
            "durable": exchange.durable, "auto_delete": exchange.auto_delete,
            "internal": exchange.internal, "arguments": dict(exchange.arguments)}


@scoped(Scope.VHOST)
@routes.get("/api/exchanges/{vhost}/{name}")
async def get_exchange(request: web.Request) -> web.Response:
    vhost, name = virtual_host(request), exchange_name(request)
    row = exchange_row(vhost.name, vhost.graph.get_exchange(name))  # NotFound if there is none
    policies = state_of(request).core.catalog.policies
    row.update(policies.applied(vhost.name, name, EXCHANGE).fields())
    add_message_stats(state_of(request), "exchange", row)
    return web.json_response(row)


@scoped(Scope.VHOST)
@routes.put("/api/exchanges/{vhost}/{name}")
async def put_exchange(request: web.Request) -> web.Response:
    """Declare an exchange: {"type", "durable", "auto_delete", "internal", "arguments"}."""
    body = await read_body(request)
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidArgument("type must be an exchange type: direct, fanout, topic, headers")
    vhost, name = virtual_host(request), exchange_name(request)
    may(request, "configure", "exchange", name)
    existed = vhost.graph.has_exchange(name)
    try:
        exchange = vhost.graph.declare_exchange(
            name, kind, durable=flag(body, "durable", True),
            auto_delete=flag(body, "auto_delete", False),
            internal=flag(body, "internal", False), arguments=json_object(body, "arguments"))
    except ValueError as exc:  # an unknown exchange type
        raise InvalidArgument(str(exc)) from None
    vhost.changed(durable=exchange.durable)
    await vhost.shared()
    return no_content() if existed else created()


@scoped(Scope.VHOST)
@routes.delete("/api/exchanges/{vhost}/{name}")
async def delete_exchange(request: web.Request) -> web.Response:
    vhost, name = virtual_host(request), exchange_name(request)
    may(request, "configure", "exchange", name)
    vhost.graph.get_exchange(name)  # NotFound if there is none (deleting would pass)
    vhost.graph.delete_exchange(name, if_unused=request.query.get("if-unused") == "true")
    vhost.changed(durable=True)
    await vhost.shared()
    return no_content()


@scoped(Scope.VHOST)
@routes.post("/api/exchanges/{vhost}/{name}/publish")
async def publish(request: web.Request) -> web.Response:
    """Publish one message: {"routing_key", "payload", "payload_encoding", "properties"};
    answers {"routed": bool}."""
    body = await read_body(request)
    routing_key, payload = body.get("routing_key"), body.get("payload")
    if not isinstance(routing_key, str) or not isinstance(payload, str):
        raise InvalidArgument("routing_key and payload must be strings")
    data = _decoded(payload, body.get("payload_encoding", "string"))
    raw = _encode_properties(json_object(body, "properties"))
    facts = essentials(raw)
    vhost, name = virtual_host(request), exchange_name(request)
    may(request, "write", "exchange", name or "amq.default")
    if name:
        vhost.graph.get_exchange(name)  # NotFound if there is none
    expires_at = None
    if facts.expiration is not None:  # milliseconds, as a string (AMQP's expiration)
        if not facts.expiration.isdigit():
            raise InvalidArgument(f"invalid expiration '{facts.expiration}'")
        expires_at = time.monotonic() + int(facts.expiration) / 1000
    message = QueueMessage(name, routing_key, raw, data, persistent=facts.persistent,
                           priority=facts.priority, expires_at=expires_at)
    headers = json_object(json_object(body, "properties"), "headers")
    outcome = vhost.publish(name, routing_key, message, headers, (), to_stream_record)
    return web.json_response({"routed": outcome.routed})


def _decoded(payload: str, encoding: object) -> bytes:
    if encoding == "string":
        return payload.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError:
            raise InvalidArgument("payload is not base64") from None
    raise InvalidArgument("payload_encoding must be string or base64")


def _encode_properties(values: dict[str, Any]) -> bytes:
    unknown = sorted(set(values) - set(_PROPERTY_NAMES))
    if unknown:
        raise InvalidArgument(f"unknown message properties: {', '.join(unknown)}")
    properties = BasicProperties()
    for name, value in values.items():
        kind = _PROPERTY_KINDS[name]
        if kind in _NUMBERS:
            value = _count(value, name, minimum=0)
        elif kind == "table":
            value = json_object(values, name)
        elif not isinstance(value, str):
            raise InvalidArgument(f"property {name} must be a string")
        setattr(properties, name, value)
    return properties.encode()


# -- bindings ----------------------------------------------------------------------


def _kind(letter: str) -> DestinationKind:
    return "queue" if letter == "q" else "exchange"


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's name for a binding within its ends (unquoted): "~" for an empty key
    without arguments, the key itself, or the key, "~" and a digest of the arguments."""
    if not arguments:
        return routing_key or "~"
    encoded = json.dumps(arguments, sort_keys=True, default=repr).encode()
    return f"{routing_key}~{hashlib.sha1(encoded, usedforsecurity=False).hexdigest()[:12]}"


def binding_row(vhost: str, binding: Binding) -> dict[str, Any]:
    arguments = dict(binding.arguments)
    return {"source": binding.source, "vhost": vhost, "destination": binding.destination,
            "destination_type": binding.destination_kind, "routing_key": binding.routing_key,
            "arguments": arguments,
            "properties_key": properties_key(binding.routing_key, arguments)}


def _ends(request: web.Request) -> tuple[VirtualHost, str, DestinationKind, str]:
    vhost = virtual_host(request)
    source, kind = exchange_name(request, "source"), _kind(request.match_info["kind"])
    destination = request.match_info["destination"]
    vhost.graph.get_exchange(source)  # NotFound if there is none
    if kind == "queue":
        vhost.lookup_for_binding(destination)
    else:
        vhost.graph.get_exchange(destination)
    return vhost, source, kind, destination


def _may_bind(request: web.Request) -> None:
    """Binding and unbinding: write on the destination, read on the source (RabbitMQ's)."""
    kind = "queue" if request.match_info["kind"] == "q" else "exchange"
    may(request, "write", kind, request.match_info["destination"])
    may(request, "read", "exchange", exchange_name(request, "source") or "amq.default")


def _between(request: web.Request) -> list[Binding]:
    vhost, source, kind, destination = _ends(request)
    return [b for b in vhost.graph.bindings(source)
            if b.destination_kind == kind and b.destination == destination]


_BETWEEN = "/api/bindings/{vhost}/e/{source}/{kind:[eq]}/{destination}"


@scoped(Scope.VHOST)
@routes.get(_BETWEEN)
async def bindings_between(request: web.Request) -> web.Response:
    vhost = request.match_info["vhost"]
    return web.json_response([binding_row(vhost, b) for b in _between(request)])


@scoped(Scope.VHOST)
@routes.post(_BETWEEN)
async def create_binding(request: web.Request) -> web.Response:
    """Bind: {"routing_key", "arguments"}; 201 with the new binding's Location."""
    body = await read_body(request)
    routing_key = body.get("routing_key", "")
    if not isinstance(routing_key, str):
        raise InvalidArgument("routing_key must be a string")
    arguments = json_object(body, "arguments")
    _may_bind(request)
    vhost, source, kind, destination = _ends(request)
    vhost.bind(Binding(source, destination, kind, routing_key, arguments))
    key = quote(properties_key(routing_key, arguments), safe="~")
    location = f"{request.rel_url.raw_path}/{key}"
    return web.Response(status=201, headers={"Location": location})


def _one_binding(request: web.Request) -> Binding:
    key = request.match_info["props"]  # aiohttp hands it over unquoted
    for binding in _between(request):
        if properties_key(binding.routing_key, dict(binding.arguments)) == key:
            return binding
    raise NotFound("binding not found")


@scoped(Scope.VHOST)
@routes.get(_BETWEEN + "/{props}")
async def get_binding(request: web.Request) -> web.Response:
    return web.json_response(binding_row(request.match_info["vhost"], _one_binding(request)))


@scoped(Scope.VHOST)
@routes.delete(_BETWEEN + "/{props}")
async def delete_binding(request: web.Request) -> web.Response:
    _may_bind(request)
    vhost = virtual_host(request)
    vhost.unbind(_one_binding(request), None)
    return no_content()


@scoped(Scope.VHOST)
@routes.get("/api/queues/{vhost}/{name}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    vhost, name = virtual_host(request), request.match_info["name"]
    vhost.lookup_for_binding(name)
    rows = [binding_row(vhost.name, Binding("", name, "queue", name, {}))]
    rows += [binding_row(vhost.name, b) for b in vhost.graph.bindings()
             if b.destination_kind == "queue" and b.destination == name]
    return web.json_response(rows)


@scoped(Scope.VHOST)
@routes.get("/api/exchanges/{vhost}/{name}/bindings/source")
async def exchange_source_bindings(request: web.Request) -> web.Response:
    vhost, name = virtual_host(request), exchange_name(request)
    vhost.graph.get_exchange(name)  # NotFound if there is none
    return web.json_response([binding_row(vhost.name, b) for b in vhost.graph.bindings(name)])


@scoped(Scope.VHOST)
@routes.get("/api/exchanges/{vhost}/{name}/bindings/destination")
async def exchange_destination_bindings(request: web.Request) -> web.Response:
    vhost, name = virtual_host(request), exchange_name(request)
    vhost.graph.get_exchange(name)  # NotFound if there is none
    return web.json_response([binding_row(vhost.name, b) for b in vhost.graph.bindings()
                              if b.destination_kind == "exchange" and b.destination == name])
