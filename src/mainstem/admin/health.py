"""Health checks and the aliveness test, as RabbitMQ's management API has them: 200
{"status": "ok"} or 503 {"status": "failed", "reason": ...}. A single node is never
quorum- or mirror-sync-critical. `is-in-service` (RabbitMQ 4.1's) fails while a cluster node
waits for etcd to join; `stream-damage` (mainstem's) once a stream chunk was found damaged."""

from __future__ import annotations

import datetime
from typing import Any

from aiohttp import web
from cryptography import x509

from mainstem.admin.objects import virtual_host
from mainstem.admin.scope import Scope, scoped
from mainstem.admin.state import state_of
from mainstem.broker.amqp.queues import ClassicQueue, QueueMessage
from mainstem.broker.errors import InvalidArgument
from mainstem.protocols.amqp091.properties import EMPTY_PROPERTIES, to_stream_record
from mainstem.protocols.identity import NODE

routes = web.RouteTableDef()
# RabbitMQ's protocol names -> mainstem's listener names (mainstem's own pass as they are)
_PROTOCOLS = {"amqp091": "amqp", "amqp": "amqp", "amqp/ssl": "amqp/tls",
              "stream": "stream", "stream/ssl": "stream/tls", "http": "admin",
              "https": "admin/tls", "http/prometheus": "prometheus",
              "https/prometheus": "prometheus/tls"}
_UNIT_DAYS = {"days": 1, "weeks": 7, "months": 30, "years": 365}
ALIVENESS_QUEUE = "aliveness-test"


def ok() -> web.Response:
    return web.json_response({"status": "ok"})


def failed(reason: str, **details: Any) -> web.Response:
    return web.json_response({"status": "failed", "reason": reason, **details}, status=503)


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/alarms")
@routes.get("/api/health/checks/local-alarms")
async def alarms(request: web.Request) -> web.Response:
    """503 while a memory or disk alarm holds publishers back."""
    active = sorted(state_of(request).core.alarms.active)
    if active:
        return failed("resource alarm(s) in effect", alarms=[
            {"node": NODE, "resource": name} for name in active])
    return ok()


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/is-in-service")
async def is_in_service(request: web.Request) -> web.Response:
    """503 while the node takes no clients: a cluster node joining (waiting for etcd)."""
    reason = state_of(request).not_ready()
    return ok() if reason is None else failed(reason)


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/stream-damage")
async def stream_damage(request: web.Request) -> web.Response:
    """503 once a stream chunk was found damaged (it is served to no one): which partitions,
    which chunks, and where (local disk or the tier)."""
    damaged = state_of(request).core.streams.damage.damaged()
    if damaged:
        return failed("damaged stream chunks found", partitions=[
            {"vhost": p.key.vhost, "stream": p.key.stream, "partition": p.key.partition,
             "chunks": [{"chunk_id": chunk_id, "where": where}
                        for chunk_id, where in sorted(p.chunks.items())]}
            for p in damaged])
    return ok()


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts(request: web.Request) -> web.Response:
    """Every virtual host runs (they cannot be stopped one by one in mainstem)."""
    return ok()


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/node-is-quorum-critical")
@routes.get("/api/health/checks/node-is-mirror-sync-critical")
async def single_node(request: web.Request) -> web.Response:
    """A single node: no quorum or mirror depends on it being up."""
    return ok()


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener(request: web.Request) -> web.Response:
    port_text = request.match_info["port"]
    if not port_text.isdigit():
        raise InvalidArgument("port must be a number")
    ports = sorted(state_of(request).listeners.values())
    if int(port_text) in ports:
        return ok()
    return failed(f"No active listener on port {port_text}", missing=int(port_text),
                  ports=ports)


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/protocol-listener/{protocol}")
async def protocol_listener(request: web.Request) -> web.Response:
    """By RabbitMQ's name (amqp091, stream, http, ...) or mainstem's (iggy, ...)."""
    protocol = request.match_info["protocol"]
    listeners = state_of(request).listeners
    if _PROTOCOLS.get(protocol, protocol) in listeners:
        return ok()
    return failed(f"No active listener for protocol {protocol}", missing=protocol,
                  protocols=sorted(listeners))


@scoped(Scope.MANAGEMENT)
@routes.get("/api/health/checks/certificate-expiration/{within}/{unit}")
async def certificate_expiration(request: web.Request) -> web.Response:
    """503 if a TLS listener's certificate expires within the period (days, weeks,
    months, years)."""
    within, unit = request.match_info["within"], request.match_info["unit"]
    if not within.isdigit() or unit not in _UNIT_DAYS:
        raise InvalidArgument(f"expected a number and one of {', '.join(_UNIT_DAYS)}")
    certfile = state_of(request).certfile
    if certfile is None:
        return ok()
    limit = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=int(within) * _UNIT_DAYS[unit])
    expiring = [cert for cert in x509.load_pem_x509_certificates(certfile.read_bytes())
                if cert.not_valid_after_utc <= limit]
    if expiring:
        return failed("Certificates expiring", expired=[
            {"certfile": str(certfile), "subject": cert.subject.rfc4514_string(),
             "not_after": cert.not_valid_after_utc.isoformat()} for cert in expiring])
    return ok()


@scoped(Scope.VHOST)
@routes.get("/api/aliveness-test/{vhost}")
async def aliveness_test(request: web.Request) -> web.Response:
    """Declare the aliveness-test queue, publish a message to it and get it back."""
    vhost = virtual_host(request)
    queue = vhost.declare_queue(ALIVENESS_QUEUE, durable=False, exclusive=False,
                                auto_delete=False, arguments={}, owner=None)
    vhost.publish("", ALIVENESS_QUEUE, QueueMessage("", ALIVENESS_QUEUE, EMPTY_PROPERTIES,
                                                    b"test_message"), None, (),
                  to_stream_record)
    if not isinstance(queue, ClassicQueue):
        raise InvalidArgument(f"'{ALIVENESS_QUEUE}' is a stream in this virtual host")
    message = queue.get()
    if message is None or message.body != b"test_message":
        return failed("the test message did not come back")
    queue.settle(message)
    return ok()
