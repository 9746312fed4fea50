"""RabbitMQ's topic permissions over HTTP: per user, vhost and topic exchange, the routing
keys a user may publish with (write) and bind with (read). Administrators only, as in
RabbitMQ; the catalog holds them (TOPIC_PERMISSION changes, shared in a cluster)."""

from __future__ import annotations

from aiohttp import web

from mainstem.admin.listing import list_response
from mainstem.admin.state import no_content, read_body, state_of
from mainstem.broker.auth import check_patterns
from mainstem.broker.catalog import TOPIC_PERMISSION, Catalog, TopicPermissionRecord
from mainstem.broker.errors import InvalidArgument, NotFound

routes = web.RouteTableDef()


def topic_permission_row(record: TopicPermissionRecord) -> dict[str, str]:
    return {"user": record.user, "vhost": record.namespace, "exchange": record.exchange,
            "write": record.write, "read": record.read}


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    catalog = state_of(request).core.catalog
    return await list_response(request, [topic_permission_row(record)
                                         for record in catalog.list_topic_permissions()])


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def user_topic_permissions(request: web.Request) -> web.Response:
    catalog, user, vhost = _user_and_vhost(request)
    rows = [topic_permission_row(r) for r in catalog.list_topic_permissions(user, vhost)]
    if not rows:
        raise NotFound(f"no topic permissions for user '{user}' in virtual host '{vhost}'")
    return web.json_response(rows)


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permission(request: web.Request) -> web.Response:
    """{"exchange", "write", "read"}: one exchange's patterns, set or replaced."""
    body = await read_body(request)
    catalog, user, vhost = _user_and_vhost(request)
    exchange, write, read = (body.get(key, "") for key in ("exchange", "write", "read"))
    if not isinstance(exchange, str) or not exchange:
        raise InvalidArgument("a topic permission names its exchange")
    if not isinstance(write, str) or not isinstance(read, str):
        raise InvalidArgument("write and read are patterns (strings)")
    check_patterns(configure="", write=write, read=read)
    await catalog.apply_changes_everywhere(
        [(TOPIC_PERMISSION, (user, vhost, exchange), {"write": write, "read": read})])
    return no_content()


@routes.delete("/api/topic-permissions/{vhost}/{user}")
@routes.delete("/api/topic-permissions/{vhost}/{user}/{exchange}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    """The user's topic permissions in the vhost: all of them, or one exchange's."""
    catalog, user, vhost = _user_and_vhost(request)
    records = catalog.list_topic_permissions(user, vhost, request.match_info.get("exchange"))
    if not records:
        raise NotFound(f"no topic permissions for user '{user}' in virtual host '{vhost}'")
    await catalog.apply_changes_everywhere(
        [(TOPIC_PERMISSION, (user, vhost, r.exchange), None) for r in records])
    return no_content()


def _user_and_vhost(request: web.Request) -> tuple[Catalog, str, str]:
    catalog = state_of(request).core.catalog
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if catalog.get_user(user) is None:
        raise NotFound(f"user '{user}' not found")
    if catalog.get_namespace(vhost) is None:
        raise NotFound(f"virtual host '{vhost}' not found")
    return catalog, user, vhost


