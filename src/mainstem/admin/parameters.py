"""Runtime parameters: mainstem has none (policies are in `policy_api`, limits in
`limits_api`). Listing answers as RabbitMQ does with none set (an empty list), one by name is
404, and setting one is refused with a clear reason."""

from __future__ import annotations

from aiohttp import web

from mainstem.broker.errors import InvalidArgument, NotFound

routes = web.RouteTableDef()
_KINDS = {"parameters": "runtime parameters", "global-parameters": "global parameters"}
# path segments after the kind: how many name a list (none to all), how many one object
_LISTS = {"parameters": 2, "global-parameters": 0}
_OBJECT = {"parameters": 3, "global-parameters": 1}


def _kind(request: web.Request) -> str:
    return _KINDS[request.path.split("/")[2]]


async def none_set(request: web.Request) -> web.Response:
    return web.json_response([])


async def not_found(request: web.Request) -> web.Response:
    raise NotFound(f"mainstem has no {_kind(request)}")


async def refused(request: web.Request) -> web.Response:
    raise InvalidArgument(f"mainstem has no {_kind(request)}: set queue arguments instead")


def _segments(count: int) -> str:
    return "".join(f"/{{{name}}}" for name in "abc"[:count])


for _base in _KINDS:
    for _count in range(_LISTS.get(_base, 1) + 1):
        routes.get(f"/api/{_base}{_segments(_count)}")(none_set)
    _one = f"/api/{_base}{_segments(_OBJECT.get(_base, 2))}"
    routes.get(_one)(not_found)
    routes.put(_one)(refused)
    routes.delete(_one)(not_found)
