"""Runtime parameters: mainstem has none (policies are in `policy_api`, limits in
`limits_api`). Listing answers as RabbitMQ does with none set (an empty list), one by name is
404, and setting one is refused with a clear reason."""

from __future__ import annotations

from aiohttp import web

from mainstem.admin.scope import Scope, scoped_as
from mainstem.broker.errors import InvalidArgument, NotFound

routes = web.RouteTableDef()
_KINDS = {"parameters": "runtime parameters", "global-parameters": "global parameters"}
# path segments after the kind: how many name a list (none to all), how many one object
_LISTS = {"parameters": 2, "global-parameters": 0}
_OBJECT = {"parameters": 3, "global-parameters": 1}
_SEGMENTS = {"parameters": ("component", "vhost", "name"), "global-parameters": ("name",)}
# Who may, as RabbitMQ: runtime parameters' lists any management user (cut to its vhosts),
# one parameter policymakers in their vhosts; global parameters administrators.
_SCOPES = {"parameters": (Scope.VHOST, Scope.POLICIES),
           "global-parameters": (Scope.ADMINISTRATOR, Scope.ADMINISTRATOR)}


def _kind(request: web.Request) -> str:
    return _KINDS[request.path.split("/")[2]]


async def none_set(request: web.Request) -> web.Response:
    return web.json_response([])


async def not_found(request: web.Request) -> web.Response:
    raise NotFound(f"mainstem has no {_kind(request)}")


async def refused(request: web.Request) -> web.Response:
    raise InvalidArgument(f"mainstem has no {_kind(request)}: set queue arguments instead")


def _segments(base: str, count: int) -> str:
    return "".join(f"/{{{name}}}" for name in _SEGMENTS[base][:count])


for _base in _KINDS:
    _lists, _one_scope = _SCOPES[_base]
    for _count in range(_LISTS.get(_base, 1) + 1):
        routes.get(f"/api/{_base}{_segments(_base, _count)}")(scoped_as(_lists, none_set))
    _one = f"/api/{_base}{_segments(_base, _OBJECT.get(_base, 2))}"
    routes.get(_one)(scoped_as(_one_scope, not_found))
    routes.put(_one)(scoped_as(_one_scope, refused))
    routes.delete(_one)(scoped_as(_one_scope, not_found))
