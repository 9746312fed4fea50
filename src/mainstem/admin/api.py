"""The HTTP management API: RabbitMQ's paths and JSON shapes, plus mainstem's streams.

Handlers share `state.AdminState` (`state_of(request)`); authentication happens in the
app's middleware. Connections, channels and consumers are in `connections`, declaring and
messaging in `objects`, definitions, health checks and policies in their own modules.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from bson import json_util

from mainstem import __version__
from mainstem.admin.connections import consumer_rows
from mainstem.admin.history import KEPT_S, LENGTHS
from mainstem.admin.limits_api import user_limits_of
from mainstem.admin.listing import list_response
from mainstem.admin.resources import RABBITMQ_VERSION
from mainstem.admin.scope import (
    Rows,
    Scope,
    check_permission,
    is_monitor,
    scoped,
    visible,
    visible_vhosts,
)
from mainstem.admin.state import (
    CHURN,
    OVERVIEW,
    USER,
    AdminState,
    add_message_stats,
    churn_counts,
    no_content,
    read_body,
    state_of,
    stream_of,
    vhost_of,
)
from mainstem.admin.tier_extents import partition_extent, stream_extent
from mainstem.admin.vhost_metadata import tag_list, vhost_fields, vhost_metadata
from mainstem.broker.alarms import DISK, MEMORY
from mainstem.broker.auth import (
    DEFAULT_HASHING,
    PERMISSION_KINDS,
    check_patterns,
    import_password_hash,
)
from mainstem.broker.catalog import NamespaceRecord, UserRecord, VhostMetadata
from mainstem.broker.cluster_view import ClusterView
from mainstem.broker.errors import InvalidArgument, NotFound, PreconditionFailed
from mainstem.broker.events.projections import Projection
from mainstem.protocols.identity import NODE
from mainstem.protocols.registry import consumers_per_queue

if TYPE_CHECKING:
    from mainstem.broker.core import BrokerCore
    from mainstem.broker.streams import Stream

routes = web.RouteTableDef()

# -- overview ------------------------------------------------------------------


@scoped(Scope.MANAGEMENT)
@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    """As RabbitMQ: totals over what the user sees (its vhosts' objects, its connections);
    node-level data (listeners, alarms, the node's message rates) for monitors only."""
    state = state_of(request)
    queues = visible(request, [q for provider in state.providers for q in provider.queues(None)],
                     Rows.VISIBLE)
    connections = visible(request, [c.describe() for c in state.connections.list()])
    monitor = is_monitor(request[USER])
    return web.json_response({
        "management_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": state.identity.product,
        "product_version": state.identity.version,
        "cluster_name": state.identity.cluster_name,
        "node": NODE,
        "listeners": [
            {"node": NODE, "protocol": name, "ip_address": state.hosts.get(name), "port": port}
            for name, port in state.listeners.items() if monitor
        ],
        "object_totals": {
            "connections": len(connections),
            "channels": sum(row["channels"] for row in connections),
            "queues": len(queues),
            "exchanges": len(visible(request, [e for p in state.providers
                                               for e in p.exchanges(None)], Rows.VISIBLE)),
            "consumers": len(visible(request, consumer_rows(state.connections), Rows.VISIBLE)),
            "streams": len(visible(request, [{"vhost": s.namespace}
                                             for s in state.core.streams.list()], Rows.VISIBLE)),
        },
        "queue_totals": {**message_totals(queues), **_length_history(request)},
        **({"message_stats": {**state.message_stats(OVERVIEW, state.totals()),
                              **_rate_history(request)},
            "churn_rates": state.message_stats(CHURN, churn_counts(state.core)),
            **_alarm_fields(state)} if monitor else {}),
    })


def _history_window(request: web.Request, kind: str) -> tuple[float, float] | None:
    """RabbitMQ's `<kind>_age` and `<kind>_incr` (s): the history asked for, if any."""
    age, incr = (request.query.get(f"{kind}_{part}") for part in ("age", "incr"))
    if age is None:
        return None
    try:
        return min(float(age), KEPT_S), max(float(incr or 5), 1.0)
    except ValueError:
        raise InvalidArgument(f"{kind}_age and {kind}_incr are seconds") from None


def _rate_history(request: web.Request) -> dict[str, Any]:
    """The node's counters' samples under `<name>_details.samples` (the console's rate
    chart); the rates beside them stay."""
    window, history = _history_window(request, "msg_rates"), state_of(request).history
    if window is None:
        return {}
    details = state_of(request).message_stats(OVERVIEW, state_of(request).totals())
    return {f"{name}_details": {**details[f"{name}_details"],
                                "samples": history.counter_samples(*window, name)}
            for name in ("publish", "deliver_get", "ack")}


def _length_history(request: web.Request) -> dict[str, Any]:
    """The queue lengths' samples over the vhosts the user sees."""
    window = _history_window(request, "lengths")
    if window is None:
        return {}
    seen = set(visible_vhosts(request, [ns.name for ns in state_of(request).core.catalog
                                                .list_namespaces()]))
    history = state_of(request).history
    return {f"{name}_details": {"samples": history.length_samples(*window, name,
                                                                  seen.__contains__)}
            for name in LENGTHS}


def _alarm_fields(state: AdminState) -> dict[str, Any]:
    alarms = state.core.alarms.active
    fields: dict[str, Any] = {"alarms": sorted(alarms), "mem_alarm": MEMORY in alarms,
                              "disk_free_alarm": DISK in alarms}
    if state.monitor is not None and state.monitor.usage is not None:
        usage, marks = state.monitor.usage, state.monitor.watermarks
        fields.update(
            mem_used=usage.memory_used,
            mem_limit=int(marks.memory_high_watermark * usage.memory_total),
            disk_free=usage.disk_free,
            disk_free_limit=marks.disk_free_limit,
        )
    return fields


@scoped(Scope.MONITOR)
@routes.get("/api/nodes")
async def nodes(request: web.Request) -> web.Response:
    state = state_of(request)
    cluster = state.core.cluster
    me = {"name": NODE if cluster is None else cluster.node_name, "type": "disc",
          "running": True, "uptime": int((time.time() - state.started_at) * 1000),
          **_alarm_fields(state)}
    if cluster is None:
        return await list_response(request, [me])
    known = cluster.nodes.get(cluster.node_name)
    if known is not None:
        me.update(host=known.host, listeners=dict(known.ports))
    others = [{"name": name, "type": "disc", "running": True, "host": node.host,
               "listeners": dict(node.ports)}
              for name, node in sorted(cluster.nodes.items()) if name != cluster.node_name]
    return await list_response(request, [me, *others])


@routes.get("/api/environment")
async def environment(request: web.Request) -> web.Response:
    """The node's effective configuration, secrets redacted; administrators only, as
    rabbitmqctl environment needs the node's cookie."""
    return web.json_response(state_of(request).environment)


# -- virtual hosts ---------------------------------------------------------------


@scoped(Scope.MANAGEMENT)
@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    state = state_of(request)
    records = {ns.name: ns for ns in state.core.catalog.list_namespaces()}
    names = visible_vhosts(request, list(records))
    return await list_response(request, [_vhost_row(state, records[name]) for name in names])


def _vhost_row(state: AdminState, record: NamespaceRecord) -> dict[str, Any]:
    """A virtual host with its queues' message totals, as RabbitMQ lists one."""
    queues = [q for provider in state.providers for q in provider.queues(record.name)]
    metadata = vhost_fields(record.metadata)
    return {"name": record.name, **metadata, "metadata": metadata, "tracing": False,
            **message_totals(queues)}


def message_totals(queues: list[dict[str, Any]]) -> dict[str, int]:
    return {key: sum(q.get(key, 0) for q in queues)
            for key in ("messages", "messages_ready", "messages_unacknowledged")}


def _vhost_record(request: web.Request) -> NamespaceRecord:
    name = request.match_info["vhost"]
    record = state_of(request).core.catalog.get_namespace(name)
    if record is None:
        raise NotFound(f"virtual host '{name}' not found")
    return record


def _existing_vhost(request: web.Request) -> str:
    return _vhost_record(request).name


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    return web.json_response(_vhost_row(state_of(request), _vhost_record(request)))


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    """Create a vhost or set its metadata (PUT is idempotent, as in RabbitMQ); the user
    who creates one gets full permissions in it, as RabbitMQ grants its creator."""
    name, catalog = request.match_info["vhost"], state_of(request).core.catalog
    body = await read_body(request)
    existing = catalog.get_namespace(name)
    metadata = vhost_metadata(body, VhostMetadata() if existing is None else existing.metadata)
    if existing is not None and existing.metadata == metadata:
        return no_content()  # nothing to share
    if not await catalog.put_namespace_everywhere(name, metadata):
        return no_content()
    await catalog.set_permissions_everywhere(request[USER].name, name, ".*", ".*", ".*")
    return web.Response(status=201)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    await state_of(request).core.delete_namespace(request.match_info["vhost"])
    return no_content()


# -- users and permissions -------------------------------------------------------


def _user_row(core: BrokerCore, record: UserRecord) -> dict[str, Any]:
    # The password hash stays inside the broker: the API never needs to show it.
    return {"name": record.name, "tags": list(record.tags),
            "limits": user_limits_of(core, record.name)}


@scoped(Scope.MANAGEMENT)
@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    """The authenticated user."""
    user = request[USER]
    return web.json_response({"name": user.name, "tags": list(user.tags)})


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    core = state_of(request).core
    return await list_response(request, [_user_row(core, u) for u in core.catalog.list_users()])


def _existing_user(request: web.Request) -> UserRecord:
    name = request.match_info["user"]
    record = state_of(request).core.catalog.get_user(name)
    if record is None:
        raise NotFound(f"user '{name}' not found")
    return record


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    return web.json_response(_user_row(state_of(request).core, _existing_user(request)))


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    """Create a user or change its password and tags: {"password": ..., "tags": "a,b"}, or
    {"password_hash": ..., "hashing_algorithm": "rabbit_password_hashing_sha256", ...}."""
    name = request.match_info["user"]
    body = await read_body(request)
    tags = tag_list(body.get("tags", ""))
    core = state_of(request).core
    existing = core.catalog.get_user(name)
    if "password_hash" in body:
        algorithm = body.get("hashing_algorithm") or DEFAULT_HASHING
        if not isinstance(body["password_hash"], str) or not isinstance(algorithm, str):
            raise InvalidArgument("password_hash and hashing_algorithm must be strings")
        await core.catalog.put_user_everywhere(UserRecord(
            name, import_password_hash(body["password_hash"], algorithm), tags))
        return no_content() if existing else web.Response(status=201)
    password = body.get("password")
    if password is not None and not isinstance(password, str):
        raise InvalidArgument("password must be a string")
    if existing is None:
        if not password:
            raise InvalidArgument("a new user needs a password")
        await core.catalog.put_user_everywhere(UserRecord(name, core.auth.hashed(password),
                                                          tags))
        return web.Response(status=201)
    password_hash = core.auth.hashed(password) if password else existing.password_hash
    await core.catalog.put_user_everywhere(UserRecord(name, password_hash, tags))
    return no_content()


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    await state_of(request).core.catalog.delete_user_everywhere(_existing_user(request).name)
    return no_content()


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    return await list_response(request, _permission_rows(state_of(request).core))


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    return await list_response(request, _permission_rows(state_of(request).core,
                                              user=request.match_info["user"]))


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    core = state_of(request).core
    return await list_response(request, _permission_rows(core, namespace=vhost_of(request)))


def _permission_rows(core: BrokerCore, **where: str | None) -> list[dict[str, str]]:
    return [{"user": p.user, "vhost": p.namespace, "configure": p.configure, "write": p.write,
             "read": p.read} for p in core.catalog.list_permissions(**where)]


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permission(request: web.Request) -> web.Response:
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    rows = _permission_rows(state_of(request).core, user=user, namespace=vhost)
    if not rows:
        raise NotFound(f"no permissions for user '{user}' in virtual host '{vhost}'")
    return web.json_response(rows[0])


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permission(request: web.Request) -> web.Response:
    body = await read_body(request)
    user, vhost = _existing_user(request).name, _existing_vhost(request)
    patterns = {kind: body.get(kind, "") for kind in PERMISSION_KINDS}
    check_patterns(**patterns)
    await state_of(request).core.catalog.set_permissions_everywhere(user, vhost, **patterns)
    return no_content()


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permission(request: web.Request) -> web.Response:
    await state_of(request).core.catalog.clear_permissions_everywhere(
        request.match_info["user"], request.match_info["vhost"])
    return no_content()



# -- queues, exchanges, bindings (from every provider) ----------------------------


def _merged(request: web.Request, kind: str) -> list[dict[str, Any]]:
    state, vhost = state_of(request), vhost_of(request)
    rows: list[dict[str, Any]] = [row for provider in state.providers
                                  for row in getattr(provider, kind)(vhost)]
    if kind != "bindings":
        for row in rows:
            add_message_stats(state, kind[:-1], row)
    if kind == "queues":  # a stream's consumers are its subscriptions, on any connection
        subscribers = consumers_per_queue(state.connections.list())
        for row in rows:
            if row["type"] == "stream":
                row["consumers"] = subscribers[row["vhost"], row["name"]]
    return rows


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/queues")
@routes.get("/api/queues/{vhost}")
async def list_queues(request: web.Request) -> web.Response:
    return await list_response(request, _merged(request, "queues"))


@scoped(Scope.VHOST)
@routes.get("/api/queues/{vhost}/{name}")
async def get_queue(request: web.Request) -> web.Response:
    """One queue, with its consumers (`consumer_details`) as RabbitMQ shows one."""
    name, vhost = request.match_info["name"], vhost_of(request)
    for row in _merged(request, "queues"):
        if row["name"] == name:
            row["consumer_details"] = [
                consumer for consumer in consumer_rows(state_of(request).connections)
                if consumer["queue"] == {"name": name, "vhost": vhost}]
            return web.json_response(row)
    raise NotFound(f"queue '{name}' not found in virtual host '{vhost_of(request)}'")


@scoped(Scope.VHOST)
@routes.delete("/api/queues/{vhost}/{name}")
async def delete_queue(request: web.Request) -> web.Response:
    """Delete a queue or stream; `?if-empty=true`, `?if-unused=true` as in RabbitMQ."""
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    check_permission(request, "configure", vhost, name, "queue")
    host = state_of(request).core.queues.vhosts.get(vhost)
    queue = None if host is None else host.queues.get(name)
    if queue is not None:
        if request.query.get("if-empty") == "true" and queue.ready_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{vhost}' not empty")
        if request.query.get("if-unused") == "true" and queue.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{vhost}' in use")
    for provider in state_of(request).providers:
        if await provider.delete_queue(vhost, name):
            return no_content()
    raise NotFound(f"queue '{name}' not found in virtual host '{vhost}'")


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/exchanges")
@routes.get("/api/exchanges/{vhost}")
async def list_exchanges(request: web.Request) -> web.Response:
    return await list_response(request, _merged(request, "exchanges"))


@scoped(Scope.VHOST)
@routes.get("/api/bindings")
@routes.get("/api/bindings/{vhost}")
async def list_bindings(request: web.Request) -> web.Response:
    return await list_response(request, _merged(request, "bindings"))


# -- streams (mainstem's own) -----------------------------------------------------


def stream_row(stream: Stream, cluster: ClusterView | None = None) -> dict[str, Any]:
    partitions: list[dict[str, Any]] = [
        {"index": i, "name": name, "first_offset": p.first_offset,
         "last_offset": p.committed_offset - 1, "committed_offset": p.committed_offset,
         "size_bytes": p.size_bytes, "segments": p.segment_count, **partition_extent(p),
         **replication_fields(cluster, stream, i)}
        for i, (name, p) in enumerate(zip(stream.partition_names, stream.services,
                                          strict=True))
    ]
    return {
        "name": stream.name, "vhost": stream.namespace, "arguments": stream.record.arguments,
        "partitions": partitions,
        "messages": sum(p["committed_offset"] - p["first_offset"] for p in partitions),
        "size_bytes": sum(p["size_bytes"] for p in partitions),
        **stream_extent(stream.services),
        "created_at": stream.record.created_at,
    }


def replication_fields(cluster: ClusterView | None, stream: Stream, index: int
                       ) -> dict[str, Any]:
    """A replicated partition's leader, epoch, replicas, in-sync set and (on its leader)
    each follower's lag in records; nothing for a broker that runs alone."""
    status = None if cluster is None else cluster.status(stream.namespace, stream.name, index)
    if status is None:
        return {}
    return {"leader": status.leader, "epoch": status.epoch, "replicas": list(status.replicas),
            "in_sync": list(status.in_sync), "replica_lag": dict(status.lag)}


def consumer_offsets(core: BrokerCore, stream: Stream) -> list[dict[str, Any]]:
    """Stored consumer offsets with their lag: committed messages not yet processed."""
    rows = []
    for (index, reference), offset in sorted(core.catalog.list_offsets(stream.namespace,
                                                                       stream.name).items()):
        committed = stream.partitions[index].committed_offset
        rows.append({"vhost": stream.namespace, "stream": stream.name, "partition": index,
                     "reference": reference, "offset": offset,
                     "lag": max(committed - offset - 1, 0)})
    return rows


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/streams")
@routes.get("/api/streams/{vhost}")
async def list_streams(request: web.Request) -> web.Response:
    core = state_of(request).core
    return await list_response(request, [stream_row(s, core.cluster)
                                   for s in core.streams.list(vhost_of(request))])


@scoped(Scope.VHOST)
@routes.get("/api/streams/{vhost}/{name}")
async def get_stream(request: web.Request) -> web.Response:
    return web.json_response(stream_row(stream_of(request), state_of(request).core.cluster))


@scoped(Scope.VHOST)
@routes.put("/api/streams/{vhost}/{name}")
async def put_stream(request: web.Request) -> web.Response:
    """Create a stream: {"partitions": 1, "arguments": {"x-max-age": "7D"}}."""
    body = await read_body(request)
    partitions, arguments = body.get("partitions", 1), body.get("arguments", {})
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise InvalidArgument("partitions must be a positive integer")
    if not isinstance(arguments, dict):
        raise InvalidArgument("arguments must be a JSON object")
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    check_permission(request, "configure", vhost, name, "stream")
    core = state_of(request).core
    if core.streams.find(vhost, name) is not None:
        return no_content()
    core.create_stream(vhost, name, partitions, arguments)
    return web.Response(status=201)


@scoped(Scope.VHOST)
@routes.delete("/api/streams/{vhost}/{name}")
async def delete_stream(request: web.Request) -> web.Response:
    check_permission(request, "configure", request.match_info["vhost"], request.match_info["name"],
                     "stream")
    await state_of(request).core.streams.delete(request.match_info["vhost"],
                                              request.match_info["name"])
    return no_content()


@routes.get("/api/streams/{vhost}/{name}/offsets")
async def stream_offsets(request: web.Request) -> web.Response:
    return web.json_response(consumer_offsets(state_of(request).core, stream_of(request)))


@routes.get("/api/consumer-offsets")
async def all_offsets(request: web.Request) -> web.Response:
    core = state_of(request).core
    return web.json_response([row for stream in core.streams.list()
                              for row in consumer_offsets(core, stream)])


# -- binders and projections (the BSON event protocol's query side) -------------------

MAX_DOCUMENTS_SHOWN = 1000


def projection_rows(core: BrokerCore, vhost: str | None = None) -> list[dict[str, Any]]:
    """Projections with their channel position and lag (events not folded yet)."""
    rows = []
    for namespace, definition, position in core.binders.projections():
        if vhost is not None and namespace != vhost:
            continue
        channel = core.streams.find(namespace, definition["channel"])
        end = channel.partitions[0].committed_offset if channel is not None else position
        rows.append({"vhost": namespace, "name": definition["name"],
                     "channel": definition["channel"], "binder": definition["binder"],
                     "id_field": definition["id_field"], "fold": definition["fold"],
                     "matcher": definition["matcher"], "position": position,
                     "lag": max(end - position, 0)})
    return sorted(rows, key=lambda row: (row["vhost"], row["name"]))


def _binder_rows(core: BrokerCore, vhost: str | None) -> list[dict[str, Any]]:
    projections = projection_rows(core, vhost)
    return [{"vhost": namespace, "name": name, "documents": documents,
             "projections": [p["name"] for p in projections
                             if p["vhost"] == namespace and p["binder"] == name]}
            for namespace, name, documents in core.binders.counts(vhost)]


@routes.get("/api/binders")
@routes.get("/api/binders/{vhost}")
async def list_binders(request: web.Request) -> web.Response:
    return web.json_response(_binder_rows(state_of(request).core, vhost_of(request)))


@routes.get("/api/binders/{vhost}/{name}")
async def get_binder(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    for row in _binder_rows(state_of(request).core, request.match_info["vhost"]):
        if row["name"] == name:
            return web.json_response(row)
    raise NotFound(f"no binder '{name}' in vhost '{request.match_info['vhost']}'")


@routes.put("/api/binders/{vhost}/{name}")
async def put_binder(request: web.Request) -> web.Response:
    """Create a binder."""
    existed = state_of(request).core.binders.create(_existing_vhost(request),
                                                  request.match_info["name"])
    return no_content() if existed else web.Response(status=201)


@routes.delete("/api/binders/{vhost}/{name}")
async def delete_binder(request: web.Request) -> web.Response:
    """Delete a binder, its documents and the projections that fill it."""
    await state_of(request).core.projections.delete_binder(request.match_info["vhost"],
                                                         request.match_info["name"])
    return no_content()


@routes.get("/api/binders/{vhost}/{name}/documents")
async def binder_documents(request: web.Request) -> web.Response:
    """The first documents in id order (`?limit=`, at most 1000), as relaxed extended JSON."""
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise InvalidArgument("limit must be an integer") from None
    if not 0 < limit <= MAX_DOCUMENTS_SHOWN:
        raise InvalidArgument(f"limit must be 1 to {MAX_DOCUMENTS_SHOWN}")
    documents = state_of(request).core.binders.documents(
        request.match_info["vhost"], request.match_info["name"], limit)
    return web.Response(text=json_util.dumps(documents), content_type="application/json")


@routes.get("/api/projections")
@routes.get("/api/projections/{vhost}")
async def list_projections(request: web.Request) -> web.Response:
    return web.json_response(projection_rows(state_of(request).core, vhost_of(request)))


@routes.put("/api/projections/{vhost}/{name}")
async def put_projection(request: web.Request) -> web.Response:
    """Declare (or redefine) a projection: {"channel", "binder", "id_field", "fold",
    "matcher"}; it starts at once."""
    body = await read_body(request)
    for key in ("channel", "binder", "id_field"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise InvalidArgument(f"{key} must be a non-empty string")
    matcher = body.get("matcher", {})
    if not isinstance(matcher, dict):
        raise InvalidArgument("matcher must be a JSON object")
    vhost, name = _existing_vhost(request), request.match_info["name"]
    core = state_of(request).core
    existed = core.binders.projection(vhost, name) is not None
    core.projections.declare(vhost, Projection(name, body["channel"], body["binder"],
                                               body["id_field"], str(body.get("fold", "merge")),
                                               matcher))
    return no_content() if existed else web.Response(status=201)


@routes.delete("/api/projections/{vhost}/{name}")
async def delete_projection(request: web.Request) -> web.Response:
    """Stop and forget a projection; its binder stays."""
    await state_of(request).core.projections.delete(request.match_info["vhost"],
                                                  request.match_info["name"])
    return no_content()
