"""Definitions export and import in RabbitMQ's JSON format (what `rabbitmqadmin export` and
`import` move, and what the management UI downloads): users with their password hashes,
virtual hosts (their metadata exported), permissions and topic permissions, policies and
operator policies (as RabbitMQ 3.x writes them: `parameters` of component
`operator_policy`, the one form RabbitMQ 3.10 reads back), durable queues (streams as
x-queue-type stream), exchanges and bindings, vhost limits (RabbitMQ's "vhost-limits"
parameters) and user limits.

An import takes every shape RabbitMQ 3.8 to 4.x exports: operator policies as `parameters`
of component `operator_policy` (3.x) or as `operator_policies`, a cleared vhost limit as
`"value": []` (HTTP API) or `{}` (rabbitmqctl), an operator policy's definition as
[key, value] pairs (rabbitmqctl), user tags as a list or a comma-separated string. Policy
keys of classic mirroring and lazy queues (`ha-*`, `queue-mode`) are ignored, as RabbitMQ 4
ignores them (both are gone); the answer (200) names each policy and the keys ignored.
Other parameters (federation, shovels) are refused.

An import is all or nothing. The whole file is checked first, before any change. Then the
catalog's changes (vhosts, users, limits, permissions, topic permissions, policies) are
made in one catalog transaction; in a cluster, where etcd holds one key per change, one by
one etcd first, and on a failure those made are put back (`Catalog.apply_changes_everywhere`).
Then the queues, exchanges and bindings; should one fail (a queue that exists with other
settings), those this import created are deleted and the catalog's changes put back, so a
refused import leaves the broker as it found it.

The whole-broker form is /api/definitions; /api/definitions/{vhost} holds one virtual
host's queues, exchanges and bindings, without the vhost field."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from mainstem.admin.audit import IMPORTED
from mainstem.admin.limits_api import (
    is_limits_parameter,
    limit_parameters,
    user_limits_of,
)
from mainstem.admin.objects import flag, json_object
from mainstem.admin.policy_api import policy_row
from mainstem.admin.resources import RABBITMQ_VERSION
from mainstem.admin.state import read_body, state_of
from mainstem.admin.vhost_metadata import vhost_fields, vhost_metadata
from mainstem.broker.amqp.queues import parse_queue_arguments
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.routing import Binding, ExchangeType
from mainstem.broker.auth import (
    DEFAULT_HASHING,
    PERMISSION_KINDS,
    check_patterns,
    export_password_hash,
    import_password_hash,
)
from mainstem.broker.catalog import (
    TOPIC_PERMISSION,
    Change,
    NamespaceRecord,
    VhostMetadata,
    validate_name,
)
from mainstem.broker.core import BrokerCore
from mainstem.broker.errors import InvalidArgument, NotFound
from mainstem.broker.limits import USER_LIMIT, VHOST_LIMIT, checked_value
from mainstem.broker.policies import OPERATOR_POLICY, POLICY, parse_policy
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity

routes = web.RouteTableDef()
_POLICIES = {"policies": POLICY, "operator_policies": OPERATOR_POLICY}
# global parameters every RabbitMQ export holds: they describe its cluster, set nothing
_INFORMATIONAL = ("cluster_name", "internal_cluster_id")
# RabbitMQ 3.x keeps operator policies as parameters of this component
_OPERATOR_POLICY_COMPONENT = "operator_policy"
# policy keys of classic mirroring and lazy queues, both gone in RabbitMQ 4, which ignores them
_GONE_KEY_PREFIXES = ("ha-",)
_GONE_KEYS = ("queue-mode",)


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
    policies = [row if vhost is None else _without_vhost(row)
                for row in map(policy_row, core.catalog.policies.list(POLICY, vhost))]
    # operator policies as RabbitMQ 3.x writes (and reads: 3.10 ignores an
    # "operator_policies" key): parameters of component operator_policy
    parameters = [row if vhost is None else _without_vhost(row)
                  for row in [*limit_parameters(core, vhost), *_operator_policy_rows(core, vhost)]]
    if vhost is not None:
        return {**header, "parameters": parameters, "policies": policies, **objects}
    return {**header, "users": [_user(core, record) for record in core.catalog.list_users()],
            "vhosts": [_vhost(record) for record in core.catalog.list_namespaces()],
            "permissions": [{"user": p.user, "vhost": p.namespace, "configure": p.configure,
                             "write": p.write, "read": p.read}
                            for p in core.catalog.list_permissions()],
            "topic_permissions": [{"user": t.user, "vhost": t.namespace,
                                   "exchange": t.exchange, "write": t.write, "read": t.read}
                                  for t in core.catalog.list_topic_permissions()],
            "parameters": parameters, "global_parameters": [], "policies": policies,
            **objects}


def _operator_policy_rows(core: BrokerCore, vhost: str | None) -> list[dict[str, Any]]:
    return [{"vhost": policy.vhost, "component": _OPERATOR_POLICY_COMPONENT,
             "name": policy.name, "value": policy.row()}
            for policy in core.catalog.policies.list(OPERATOR_POLICY, vhost)]


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
    return _answer(request, await import_definitions(state_of(request).core,
                                                     await read_body(request)))


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    """Import queues, exchanges and bindings into one virtual host."""
    core = state_of(request).core
    core.queues.vhost(request.match_info["vhost"])
    return _answer(request, await import_definitions(core, await read_body(request),
                                                     vhost=request.match_info["vhost"]))


def _answer(request: web.Request, report: ImportReport) -> web.Response:
    """204 as RabbitMQ answers; 200 with the warnings when something was ignored. The
    audit line names what changed."""
    request[IMPORTED] = {"imported": report.counts, "warnings": report.warnings}
    if not report.warnings:
        return web.Response(status=204)
    return web.json_response({"warnings": report.warnings})


@dataclass
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # rows imported, per kind
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Plan:
    """A definitions file checked whole: the catalog's changes, then the topology."""

    core: BrokerCore
    vhost: str | None  # the one vhost of /api/definitions/{vhost}
    changes: list[Change] = field(default_factory=list)
    queues: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (vhost, row)
    exchanges: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    bindings: list[tuple[str, Binding]] = field(default_factory=list)
    report: ImportReport = field(default_factory=ImportReport)
    keys: set[tuple[str, tuple[Any, ...]]] = field(default_factory=set)  # of `changes`

    def add(self, counted: str, kind: str, key: tuple[Any, ...], row: dict[str, Any]) -> None:
        self.changes.append((kind, key, row))
        self.keys.add((kind, key))
        self.report.counts[counted] = self.report.counts.get(counted, 0) + 1

    def planned(self, kind: str, name: str) -> bool:
        return (kind, (name,)) in self.keys

    def vhost_of(self, row: dict[str, Any]) -> str:
        """The row's vhost, which must exist or come with the file."""
        name = self.vhost if self.vhost is not None else _text(row, "vhost")
        if self.core.catalog.get_namespace(name) is None and not self.planned("namespace", name):
            raise NotFound(f"virtual host '{name}' is neither in the file nor in the broker")
        return name

    def user_of(self, row: dict[str, Any]) -> str:
        name = _text(row, "user")
        if self.core.catalog.get_user(name) is None and not self.planned("user", name):
            raise NotFound(f"user '{name}' is neither in the file nor in the broker")
        return name


async def import_definitions(core: BrokerCore, definitions: dict[str, Any],
                             vhost: str | None = None) -> ImportReport:
    """Import a definitions file whole or not at all (see the module's docstring)."""
    plan = _checked(core, definitions, vhost)
    undo = [core.catalog.prior(change) for change in reversed(plan.changes)]
    # the queues see the new policies once the import holds whole, never one put back
    with core.catalog.policy_changes_held():
        await core.catalog.apply_changes_everywhere(plan.changes)
        created: list[tuple[VirtualHost, str, str | Binding]] = []
        try:
            with core.queues.one_save():
                _declare_topology(plan, created)
        except BaseException:
            await _withdraw(created)
            await core.catalog.apply_changes_everywhere(undo)
            raise
    # answered once the cluster holds the topology, as a declaration over AMQP is
    for name in {name for rows in (plan.queues, plan.exchanges, plan.bindings)
                 for name, _ in rows}:
        await core.queues.vhost(name).shared()
    return plan.report


def _checked(core: BrokerCore, definitions: dict[str, Any], vhost: str | None) -> _Plan:
    plan = _Plan(core, vhost)
    for row in _rows(definitions, "global_parameters"):
        if row.get("name") not in _INFORMATIONAL:
            raise InvalidArgument(f"mainstem has no global parameter {row.get('name')!r}:"
                                  " remove it from the file")
    if vhost is None:
        _check_vhosts(plan, _rows(definitions, "vhosts"))
        for row in _rows(definitions, "users"):
            _check_user(plan, row)
        _check_permissions(plan, definitions)
    for row in _rows(definitions, "parameters"):
        _check_parameter(plan, row)
    for key, kind in _POLICIES.items():
        for row in _rows(definitions, key):
            _check_policy(plan, kind, row, row)
    _check_topology(plan, definitions)
    return plan


def _check_vhosts(plan: _Plan, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        name = _text(row, "name")
        validate_name(name, "virtual host")
        if plan.core.catalog.get_namespace(name) is None and not plan.planned("namespace",
                                                                              name):
            # RabbitMQ 3.11+ writes description, tags and default_queue_type under
            # "metadata" (and, for older readers, beside it)
            metadata = vhost_metadata(row.get("metadata") or row, VhostMetadata())
            plan.add("vhosts", "namespace", (name,),
                     {"created_at": time.time(), **metadata.row()})


def _check_user(plan: _Plan, row: dict[str, Any]) -> None:
    tags = row.get("tags", [])
    if isinstance(tags, str):  # RabbitMQ before 3.10 wrote "administrator,monitoring"
        tags = [tag for tag in tags.split(",") if tag]
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgument("a user's tags must be a list or a comma-separated string")
    name = _text(row, "name")
    validate_name(name, "user")
    stored = import_password_hash(_text(row, "password_hash"),
                                  row.get("hashing_algorithm") or DEFAULT_HASHING)
    plan.add("users", "user", (name,), {"password_hash": stored, "tags": tags})
    for limit, value in _limits(row.get("limits")).items():
        plan.add("user_limits", USER_LIMIT, (name, limit),
                 {"value": checked_value(USER_LIMIT, limit, value)})


def _limits(value: object) -> dict[str, Any]:
    """A limits object; RabbitMQ writes a cleared one as [] (an empty Erlang list)."""
    if value is None or value == []:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument("limits must be a JSON object of limit names and integers")
    return value


def _check_permissions(plan: _Plan, definitions: dict[str, Any]) -> None:
    for row in _rows(definitions, "permissions"):
        patterns: dict[str, Any] = {kind: _text(row, kind) for kind in PERMISSION_KINDS}
        check_patterns(**patterns)
        plan.add("permissions", "permission", (plan.user_of(row), plan.vhost_of(row)),
                 patterns)
    for row in _rows(definitions, "topic_permissions"):
        write, read = _text(row, "write"), _text(row, "read")
        check_patterns(configure="", write=write, read=read)
        exchange = _text(row, "exchange")
        validate_name(exchange, "exchange")
        plan.add("topic_permissions", TOPIC_PERMISSION,
                 (plan.user_of(row), plan.vhost_of(row), exchange),
                 {"write": write, "read": read})


def _check_parameter(plan: _Plan, row: dict[str, Any]) -> None:
    if is_limits_parameter(row):
        owner = plan.vhost_of(row)
        for limit, value in _limits(row.get("value")).items():
            plan.add("vhost_limits", VHOST_LIMIT, (owner, limit),
                     {"value": checked_value(VHOST_LIMIT, limit, value)})
    elif row.get("component") == _OPERATOR_POLICY_COMPONENT:
        value = json_object(row, "value")
        _check_policy(plan, OPERATOR_POLICY, row,
                      {**value, "definition": _pairs_object(value.get("definition"))})
    else:
        raise InvalidArgument(f"mainstem has no {row.get('component')!r} parameters: remove"
                              " them from the file (policies carry queue settings)")


def _pairs_object(value: object) -> object:
    """`rabbitmqctl export_definitions` (3.10) writes an operator policy's definition as the
    Erlang proplist it is stored as: [[key, value], ...]. The HTTP API writes an object."""
    if isinstance(value, list) and all(isinstance(pair, list) and len(pair) == 2
                                       and isinstance(pair[0], str) for pair in value):
        return dict(value)
    return value


def _check_policy(plan: _Plan, kind: str, row: dict[str, Any], body: dict[str, Any]) -> None:
    """A policy (or operator policy); keys of classic mirroring and lazy queues are left
    out with a warning, and a policy of nothing else is not made."""
    name, vhost = _text(row, "name"), plan.vhost_of(row)
    definition = json_object(body, "definition")
    gone = sorted(key for key in definition
                  if key.startswith(_GONE_KEY_PREFIXES) or key in _GONE_KEYS)
    kept = {key: value for key, value in definition.items() if key not in gone}
    if gone:
        plan.report.warnings.append(
            f"{kind.replace('_', ' ')} '{name}' in vhost '{vhost}': ignored {', '.join(gone)}"
            " (classic mirroring and lazy queues are gone, as in RabbitMQ 4)"
            + ("" if kept else "; nothing else left, so it was not created"))
        if not kept:
            return
    policy = parse_policy(kind, vhost, name, {**body, "definition": kept})
    validate_name(name, "policy")
    plan.add("policies" if kind == POLICY else "operator_policies", kind, (vhost, name),
             policy.row())


def _check_topology(plan: _Plan, definitions: dict[str, Any]) -> None:
    for row in _rows(definitions, "queues"):
        vhost, name = plan.vhost_of(row), _text(row, "name")
        parse_queue_arguments(name, vhost, json_object(row, "arguments"))
        plan.queues.append((vhost, row))
    for row in _rows(definitions, "exchanges"):
        ExchangeType.parse(_text(row, "type"))
        plan.exchanges.append((plan.vhost_of(row), row))
    for row in _rows(definitions, "bindings"):
        kind = _text(row, "destination_type")
        if kind not in ("queue", "exchange"):
            raise InvalidArgument("destination_type must be queue or exchange")
        plan.bindings.append((plan.vhost_of(row), Binding(
            _text(row, "source"), _text(row, "destination"),
            "queue" if kind == "queue" else "exchange", _text(row, "routing_key"),
            json_object(row, "arguments"))))
    for counted, rows in (("queues", plan.queues), ("exchanges", plan.exchanges),
                          ("bindings", plan.bindings)):
        if rows:
            plan.report.counts[counted] = len(rows)


def _declare_topology(plan: _Plan, created: list[tuple[VirtualHost, str, str | Binding]]
                      ) -> None:
    """Declare the file's queues, exchanges and bindings, noting in `created` what did not
    exist before (for `_withdraw`). No await: the AMQP objects are saved once, after."""
    hosts = plan.core.queues
    for name, row in plan.queues:
        host, queue = hosts.vhost(name), _text(row, "name")
        if host.queues.get(queue) is None and host.stream(queue) is None:
            created.append((host, "queue", queue))
        host.declare_queue(queue, durable=flag(row, "durable", True), exclusive=False,
                           auto_delete=flag(row, "auto_delete", False),
                           arguments=json_object(row, "arguments"), owner=None)
    for name, row in plan.exchanges:
        host, exchange = hosts.vhost(name), _text(row, "name")
        if not host.graph.has_exchange(exchange):
            created.append((host, "exchange", exchange))
        host.graph.declare_exchange(
            exchange, _text(row, "type"), durable=flag(row, "durable", True),
            auto_delete=flag(row, "auto_delete", False), internal=flag(row, "internal", False),
            arguments=json_object(row, "arguments"))
        host.changed(durable=True)
    for name, binding in plan.bindings:
        host = hosts.vhost(name)
        if not host.graph.has_exchange(binding.source) or \
                binding not in host.graph.bindings(binding.source):
            created.append((host, "binding", binding))
        host.bind(binding)


async def _withdraw(created: list[tuple[VirtualHost, str, str | Binding]]) -> None:
    """Delete what a failed import created, newest first."""
    for host, kind, what in reversed(created):
        if isinstance(what, Binding):
            host.unbind(what, None)
        elif kind == "exchange":
            host.graph.delete_exchange(what)
            host.changed(durable=True)
        else:
            await host.delete_queue(what, owner=None)


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
