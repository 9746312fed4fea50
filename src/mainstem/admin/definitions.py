"""Definitions export and import in RabbitMQ's JSON format (what `rabbitmqadmin export` and
`import` move, and what the management UI downloads): users with their password hashes,
virtual hosts (their metadata exported), permissions, policies and operator policies,
durable queues (streams as x-queue-type stream), exchanges and bindings, vhost limits
(RabbitMQ's "vhost-limits" parameters) and user limits. mainstem has no other parameters:
they export as empty lists, and a file that holds some is refused rather than half applied.

The whole-broker form is /api/definitions; /api/definitions/{vhost} holds one virtual
host's queues, exchanges and bindings, without the vhost field."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mainstem.admin.limits_api import (
    import_limits,
    is_limits_parameter,
    limit_parameters,
    user_limits_of,
)
from mainstem.admin.objects import flag, json_object
from mainstem.admin.policy_api import policy_row
from mainstem.admin.resources import RABBITMQ_VERSION
from mainstem.admin.state import read_body, state_of
from mainstem.admin.vhost_metadata import vhost_fields
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.routing import Binding
from mainstem.broker.auth import (
    DEFAULT_HASHING,
    PERMISSION_KINDS,
    check_patterns,
    export_password_hash,
    import_password_hash,
)
from mainstem.broker.catalog import NamespaceRecord, UserRecord
from mainstem.broker.core import BrokerCore
from mainstem.broker.errors import InvalidArgument
from mainstem.broker.limits import USER_LIMIT, VHOST_LIMIT
from mainstem.broker.policies import OPERATOR_POLICY, POLICY, parse_policy
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity

routes = web.RouteTableDef()
_UNSUPPORTED = ("parameters", "global_parameters", "topic_permissions")
_POLICIES = {"policies": POLICY, "operator_policies": OPERATOR_POLICY}
# global parameters every RabbitMQ export holds: they describe its cluster, set nothing
_INFORMATIONAL = ("cluster_name", "internal_cluster_id")


# -- export ----------------------------------------------------------------------


def export_definitions(core: BrokerCore, vhost: str | None = None,
                       identity: ServerIdentity = DEFAULT_IDENTITY) -> dict[str, Any]:
    names = [vhost] if vhost is not None else [ns.name for ns in core.catalog
                                                 .list_namespaces()]
    objects: dict[str, list[dict[str, Any]]] = {"queues": [], "exchanges": [], "bindings": []}
    for name in names:
        for kind, rows in _vhost_objects(core, name).items():
            objects[kind] += [row if vhost is None else _without_vhost(row) for row in rows]
    header = {"rabbit_version": RABBITMQ_VERSION, "rabbitmq_version": RABBITMQ_VERSION,
              "product_name": identity.product, "product_version": identity.version}
    policies = {key: [row if vhost is None else _without_vhost(row)
                      for row in map(policy_row, core.catalog.policies.list(kind, vhost))]
                for key, kind in _POLICIES.items()}
    if vhost is not None:
        return {**header, "parameters": [_without_vhost(row)
                                         for row in limit_parameters(core, vhost)],
                **policies, **objects}
    return {**header, "users": [_user(core, record) for record in core.catalog.list_users()],
            "vhosts": [_vhost(record) for record in core.catalog.list_namespaces()],
            "permissions": [{"user": p.user, "vhost": p.namespace, "configure": p.configure,
                             "write": p.write, "read": p.read}
                            for p in core.catalog.list_permissions()],
            "topic_permissions": [], "parameters": limit_parameters(core),
            "global_parameters": [], **policies, **objects}


def _user(core: BrokerCore, record: Any) -> dict[str, Any]:
    password_hash, algorithm = export_password_hash(record.password_hash)
    return {"name": record.name, "password_hash": password_hash,
            "hashing_algorithm": algorithm, "tags": list(record.tags),
            "limits": user_limits_of(core, record.name)}


def _vhost(record: NamespaceRecord) -> dict[str, Any]:
    metadata = vhost_fields(record.metadata)
    return {"name": record.name, "limits": [], **metadata, "metadata": metadata}


def _without_vhost(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "vhost"}


def _vhost_objects(core: BrokerCore, name: str) -> dict[str, list[dict[str, Any]]]:
    queues = [{"name": s.name, "vhost": name, "durable": True, "auto_delete": False,
               "arguments": {"x-queue-type": "stream", **s.record.arguments}}
              for s in core.streams.list(name) if len(s.partitions) == 1]
    host = core.queues.vhosts.get(name)
    if host is None:
        return {"queues": queues, "exchanges": [], "bindings": []}
    queues += [{"name": q.name, "vhost": name, "durable": True, "auto_delete": q.auto_delete,
                "arguments": q.arguments}
               for q in host.queues.values() if q.durable and q.owner is None]
    records = host.graph.to_records()
    return {
        "queues": queues,
        "exchanges": [{**record, "vhost": name} for record in records["exchanges"]],
        "bindings": [{"source": b["source"], "vhost": name, "destination": b["destination"],
                      "destination_type": b["destination_kind"],
                      "routing_key": b["routing_key"], "arguments": b["arguments"]}
                     for b in records["bindings"]],
    }


@routes.get("/api/definitions")
async def get_definitions(request: web.Request) -> web.Response:
    """Export every definition in RabbitMQ's format."""
    state = state_of(request)
    return _download(request, export_definitions(state.core, identity=state.identity))


@routes.get("/api/definitions/{vhost}")
async def get_vhost_definitions(request: web.Request) -> web.Response:
    """Export one virtual host's queues, exchanges and bindings."""
    state, name = state_of(request), request.match_info["vhost"]
    state.core.queues.vhost(name)  # 404 for a missing vhost
    return _download(request, export_definitions(state.core, name, state.identity))


def _download(request: web.Request, definitions: dict[str, Any]) -> web.Response:
    response = web.json_response(definitions)
    if request.query.get("download"):  # the management UI's "download" link
        response.headers["Content-Disposition"] = \
            f'attachment; filename="{request.query["download"]}"'
    return response


# -- import ----------------------------------------------------------------------


@routes.post("/api/definitions")
async def post_definitions(request: web.Request) -> web.Response:
    """Import a definitions file (RabbitMQ's or mainstem's export)."""
    await import_definitions(state_of(request).core, await read_body(request))
    return web.Response(status=204)


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    """Import queues, exchanges and bindings into one virtual host."""
    core = state_of(request).core
    core.queues.vhost(request.match_info["vhost"])
    await import_definitions(core, await read_body(request), vhost=request.match_info["vhost"])
    return web.Response(status=204)


async def import_definitions(core: BrokerCore, definitions: dict[str, Any],
                             vhost: str | None = None) -> None:
    """Import a definitions file; its vhosts, users, permissions, limits and policies are
    made everywhere (in a cluster, each in etcd first) before the next is checked."""
    for key in _UNSUPPORTED:
        if [row for row in _rows(definitions, key)
                if row.get("name") not in _INFORMATIONAL and not is_limits_parameter(row)]:
            raise InvalidArgument(f"mainstem has no {key.replace('_', ' ')}: remove them "
                                  "from the file (policies carry queue settings)")
    if vhost is None:
        for row in _rows(definitions, "vhosts"):
            if core.catalog.get_namespace(_text(row, "name")) is None:
                await core.catalog.add_namespace_everywhere(_text(row, "name"))
        for row in _rows(definitions, "users"):
            await _import_user(core, row)
        for row in _rows(definitions, "permissions"):
            patterns = {kind: _text(row, kind) for kind in PERMISSION_KINDS}
            check_patterns(**patterns)
            await core.catalog.set_permissions_everywhere(_text(row, "user"),
                                                          _text(row, "vhost"), **patterns)
    for row in _rows(definitions, "parameters"):
        if is_limits_parameter(row):
            await import_limits(core, VHOST_LIMIT, vhost or _text(row, "vhost"), row.get("value"))

    def host(row: dict[str, Any]) -> VirtualHost:
        return core.queues.vhost(vhost if vhost is not None else _text(row, "vhost"))

    for key, kind in _POLICIES.items():
        for row in _rows(definitions, key):
            await core.catalog.put_policy_everywhere(
                parse_policy(kind, host(row).name, _text(row, "name"), row))

    for row in _rows(definitions, "queues"):
        host(row).declare_queue(_text(row, "name"), durable=flag(row, "durable", True),
                                exclusive=False, auto_delete=flag(row, "auto_delete", False),
                                arguments=json_object(row, "arguments"), owner=None)
    for row in _rows(definitions, "exchanges"):
        target = host(row)
        target.graph.declare_exchange(
            _text(row, "name"), _text(row, "type"), durable=flag(row, "durable", True),
            auto_delete=flag(row, "auto_delete", False), internal=flag(row, "internal", False),
            arguments=json_object(row, "arguments"))
        target.changed(durable=True)
    for row in _rows(definitions, "bindings"):
        kind = _text(row, "destination_type")
        if kind not in ("queue", "exchange"):
            raise InvalidArgument("destination_type must be queue or exchange")
        host(row).bind(Binding(_text(row, "source"), _text(row, "destination"),
                               "queue" if kind == "queue" else "exchange",
                               _text(row, "routing_key"), json_object(row, "arguments")))


async def _import_user(core: BrokerCore, row: dict[str, Any]) -> None:
    tags = row.get("tags", [])
    if isinstance(tags, str):  # RabbitMQ before 3.10 wrote "administrator,monitoring"
        tags = [tag for tag in tags.split(",") if tag]
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgument("a user's tags must be a list or a comma-separated string")
    stored = import_password_hash(_text(row, "password_hash"),
                                  row.get("hashing_algorithm") or DEFAULT_HASHING)
    await core.catalog.put_user_everywhere(UserRecord(_text(row, "name"), stored, tuple(tags)))
    await import_limits(core, USER_LIMIT, _text(row, "name"), row.get("limits") or {})


def _rows(definitions: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = definitions.get(key) or []
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise InvalidArgument(f"{key} must be a list of JSON objects")
    return rows


def _text(row: dict[str, Any], key: str) -> str:
    value = row.get(key, "")
    if not isinstance(value, str):
        raise InvalidArgument(f"{key} must be a string")
    return value
