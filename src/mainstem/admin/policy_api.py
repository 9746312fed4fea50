"""Policies and operator policies over HTTP, on RabbitMQ's paths and bodies:
/api/policies[/VHOST[/NAME]] and the same under /api/operator-policies. A PUT answers 201
when it created the policy, 204 when it replaced one; a bad one is 400 with the reason."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mainstem.admin.objects import created
from mainstem.admin.scope import Scope, scoped_as, visible
from mainstem.admin.state import no_content, read_body, state_of, vhost_of
from mainstem.broker.errors import NotFound
from mainstem.broker.policies import OPERATOR_POLICY, POLICY, Policy, parse_policy

routes = web.RouteTableDef()
_PATHS = {"policies": POLICY, "operator-policies": OPERATOR_POLICY}


def policy_row(policy: Policy) -> dict[str, Any]:
    return {"vhost": policy.vhost, "name": policy.name, **policy.row()}


def _kind(request: web.Request) -> str:
    return _PATHS[request.path.split("/")[2]]


def _existing_vhost(request: web.Request) -> str:
    vhost = request.match_info["vhost"]
    if state_of(request).core.catalog.get_namespace(vhost) is None:
        raise NotFound(f"vhost '{vhost}' not found")
    return vhost


async def list_policies(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    if vhost is not None:
        _existing_vhost(request)
    policies = state_of(request).core.catalog.policies.list(_kind(request), vhost)
    return web.json_response(visible(request, [policy_row(policy) for policy in policies]))


def _find(request: web.Request) -> Policy | None:
    name = request.match_info["name"]
    policies = state_of(request).core.catalog.policies.list(_kind(request),
                                                            _existing_vhost(request))
    return next((policy for policy in policies if policy.name == name), None)


async def get_policy(request: web.Request) -> web.Response:
    policy = _find(request)
    if policy is None:
        raise NotFound(f"policy '{request.match_info['name']}' not found")
    return web.json_response(policy_row(policy))


async def put_policy(request: web.Request) -> web.Response:
    """Set a policy: {"pattern", "definition", "priority", "apply-to"}."""
    existed = _find(request) is not None
    policy = parse_policy(_kind(request), _existing_vhost(request), request.match_info["name"],
                          await read_body(request))
    await state_of(request).core.catalog.put_policy_everywhere(policy)
    return no_content() if existed else created()


async def delete_policy(request: web.Request) -> web.Response:
    await state_of(request).core.catalog.delete_policy_everywhere(
        _kind(request), _existing_vhost(request), request.match_info["name"])
    return no_content()


def _routes(path: str, one: Scope) -> None:
    """As RabbitMQ: lists for any management user, cut to its vhosts; one policy for
    policymakers in their vhosts, one operator policy for administrators alone."""
    routes.get(f"/api/{path}")(scoped_as(Scope.VHOST, list_policies))
    routes.get(f"/api/{path}/{{vhost}}")(scoped_as(Scope.VHOST, list_policies))
    routes.get(f"/api/{path}/{{vhost}}/{{name}}")(scoped_as(one, get_policy))
    routes.put(f"/api/{path}/{{vhost}}/{{name}}")(scoped_as(one, put_policy))
    routes.delete(f"/api/{path}/{{vhost}}/{{name}}")(scoped_as(one, delete_policy))


_routes("policies", Scope.POLICIES)
_routes("operator-policies", Scope.ADMINISTRATOR)
