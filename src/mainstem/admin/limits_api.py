"""Virtual host and user limits, with RabbitMQ's paths and shapes: a list of
{"vhost" | "user": name, "value": {limit: n}}, one limit set by PUT {"value": n} and
cleared by DELETE. Stored and enforced by the broker (`broker/limits.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from mainstem.admin.scope import Rows, Scope, scoped, visible
from mainstem.admin.state import no_content, read_body, state_of
from mainstem.broker.errors import InvalidArgument, NotFound
from mainstem.broker.limits import USER_LIMIT, VHOST_LIMIT

if TYPE_CHECKING:
    from mainstem.broker.core import BrokerCore

routes = web.RouteTableDef()
_OWNER = {VHOST_LIMIT: "vhost", USER_LIMIT: "user"}  # the path's and the rows' key


def limit_rows(core: BrokerCore, kind: str, owner: str | None = None) -> list[dict[str, Any]]:
    return [{_OWNER[kind]: who, "value": values}
            for who, values in core.limits.listed(kind, owner).items()]


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/vhost-limits")
@routes.get("/api/vhost-limits/{vhost}")
async def vhost_limits(request: web.Request) -> web.Response:
    core, vhost = state_of(request).core, request.match_info.get("vhost")
    if vhost is not None and core.catalog.get_namespace(vhost) is None:
        raise NotFound(f"virtual host '{vhost}' not found")
    return web.json_response(visible(request, limit_rows(core, VHOST_LIMIT, vhost), Rows.VISIBLE))


@scoped(Scope.VHOST_VISIBLE)  # RabbitMQ's: every management user reads every user's
@routes.get("/api/user-limits")
@routes.get("/api/user-limits/{user}")
async def user_limits(request: web.Request) -> web.Response:
    core, user = state_of(request).core, request.match_info.get("user")
    if user is not None and core.catalog.get_user(user) is None:
        raise NotFound(f"user '{user}' not found")
    return web.json_response(limit_rows(core, USER_LIMIT, user))


@routes.put("/api/vhost-limits/{vhost}/{name}")
@routes.put("/api/user-limits/{user}/{name}")
async def put_limit(request: web.Request) -> web.Response:
    body = await read_body(request)
    if "value" not in body:
        raise InvalidArgument('the body must be {"value": <integer>}')
    kind, owner = _owner(request)
    await state_of(request).core.limits.set(kind, owner, request.match_info["name"], body["value"])
    return no_content()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
@routes.delete("/api/user-limits/{user}/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    kind, owner = _owner(request)
    await state_of(request).core.limits.clear(kind, owner, request.match_info["name"])
    return no_content()


def _owner(request: web.Request) -> tuple[str, str]:
    if "vhost" in request.match_info:
        return VHOST_LIMIT, request.match_info["vhost"]
    return USER_LIMIT, request.match_info["user"]


# -- definitions: vhost limits are RabbitMQ's "vhost-limits" runtime parameters, user
# limits a field of each user ----------------------------------------------------------

LIMITS_COMPONENT = "vhost-limits"


def limit_parameters(core: BrokerCore, vhost: str | None = None) -> list[dict[str, Any]]:
    """The vhosts' limits as a definitions file's "parameters" rows."""
    return [{"vhost": who, "component": LIMITS_COMPONENT, "name": "limits", "value": values}
            for who, values in core.limits.listed(VHOST_LIMIT, vhost).items()]


def user_limits_of(core: BrokerCore, user: str) -> dict[str, int]:
    return core.limits.listed(USER_LIMIT, user).get(user, {})


def is_limits_parameter(row: dict[str, Any]) -> bool:
    return row.get("component") == LIMITS_COMPONENT
