"""Who may use which management API route: RabbitMQ's user tags and the virtual hosts a
user may log in to (those it has permissions on).

- `management`: its own vhosts' queues, exchanges, bindings and consumers, its own
  connections and channels, declaring and messaging as its permissions allow;
- `policymaker`: as management, plus policies and parameters of its vhosts;
- `monitoring`: as management, plus reading everything (every vhost, every connection,
  the nodes), never users, permissions or definitions (password hashes);
- `administrator`: everything.

Each handler declares its scope with `@scoped(Scope.X)` beside its route decorators
(policies' and parameters' handlers: `Scope.POLICIES`); one that declares none is for
administrators only, so a new route is never opened by accident. Within its scope a handler
may narrow further: `visible` for the rows of a list, `check_owner` for a connection or
channel, `check_permission` for what the user's permissions allow.
A request outside its scope is answered as RabbitMQ's management plugin answers it: 401
{"error": "not_authorised", "reason": ...}. Lists are cut to what the user may see
(`visible`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from mainstem.admin.state import USER, state_of
from mainstem.broker.auth import ADMINISTRATOR_TAG, PermissionKind, User
from mainstem.broker.errors import AccessRefused

MONITORING_TAG = "monitoring"
POLICYMAKER_TAG = "policymaker"
MANAGEMENT_TAGS = frozenset({ADMINISTRATOR_TAG, MONITORING_TAG, POLICYMAKER_TAG, "management"})
_SCOPE = "mainstem_scope"  # the handler attribute `scoped` sets
_LOGIN_VHOSTS = web.RequestKey("login_vhosts", frozenset[str])
Handler = TypeVar("Handler", bound=Callable[..., Any])


class Scope(enum.Enum):
    """Who may call a route, besides administrators (who may call every route)."""

    MANAGEMENT = "any management user"
    VHOST = "users who may log in to the route's vhost"
    VHOST_OR_MONITOR = "as VHOST; monitoring users for every vhost"
    OWNER = "monitoring users for every connection, other users for their own"
    POLICIES = "policymakers in the route's vhost"
    MONITOR = "monitoring users"
    ADMINISTRATOR = "administrators only"


class NotAuthorised(Exception):
    """The request is outside the user's scope; `reason` is RabbitMQ's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def scoped(scope: Scope) -> Callable[[Handler], Handler]:
    """Declare who may call a handler (see the module's docstring)."""
    def declare(handler: Handler) -> Handler:
        setattr(handler, _SCOPE, scope)
        return handler

    return declare


def is_monitor(user: User) -> bool:
    return bool({ADMINISTRATOR_TAG, MONITORING_TAG} & set(user.tags))


def is_policymaker(user: User) -> bool:
    return bool({ADMINISTRATOR_TAG, POLICYMAKER_TAG} & set(user.tags))


def authorize(request: web.Request, user: User) -> None:
    """Raise NotAuthorised unless `user` may call the request's route (an unknown path or
    method is left to be answered 404 or 405)."""
    if not MANAGEMENT_TAGS & set(user.tags):
        raise NotAuthorised("Not management user")
    if user.is_administrator or request.match_info.http_exception is not None:
        return
    scope = getattr(request.match_info.handler, _SCOPE, Scope.ADMINISTRATOR)
    if not _allowed(request, user, scope):
        raise NotAuthorised(_REASONS.get(scope, "User not authorised to access virtual host"))


def _allowed(request: web.Request, user: User, scope: Scope) -> bool:
    vhost = request.match_info.get("vhost")
    match scope:
        case Scope.MANAGEMENT | Scope.OWNER:  # OWNER: each object by `check_owner`
            return True
        case Scope.VHOST:
            return _may_enter(request, vhost)
        case Scope.VHOST_OR_MONITOR:
            return is_monitor(user) or _may_enter(request, vhost)
        case Scope.POLICIES:
            return is_policymaker(user) and _may_enter(request, vhost)
        case Scope.MONITOR:
            return is_monitor(user)
    return False  # ADMINISTRATOR


_REASONS = {Scope.ADMINISTRATOR: "Not administrator user", Scope.MONITOR: "Not monitor user",
            Scope.POLICIES: "User not authorised to access object"}


def _may_enter(request: web.Request, vhost: str | None) -> bool:
    """No vhost in the path, or one that does not exist (answered 404 later), passes."""
    if vhost is None or state_of(request).core.catalog.get_namespace(vhost) is None:
        return True
    return vhost in login_vhosts(request)


def login_vhosts(request: web.Request) -> frozenset[str]:
    """The vhosts the request's user has permissions on (read once per request)."""
    if _LOGIN_VHOSTS not in request:
        catalog = state_of(request).core.catalog
        request[_LOGIN_VHOSTS] = frozenset(
            p.namespace for p in catalog.list_permissions(user=request[USER].name))
    return request[_LOGIN_VHOSTS]


def visible_vhosts(request: web.Request, names: Iterable[str]) -> list[str]:
    """Of `names`, the vhosts the user sees: all for monitors, else its login vhosts."""
    user = request[USER]
    return [name for name in names if is_monitor(user) or name in login_vhosts(request)]


def visible(request: web.Request, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a list the user may see: a connection's or channel's (a row with a
    `user`) if it is the user's own, another object if it is in one of its vhosts (a row
    naming no vhost, such as a vhost's own, was chosen by its handler); monitors and
    administrators see every row."""
    user = request.get(USER)
    if user is None or is_monitor(user):
        return rows
    vhosts = login_vhosts(request)
    return [row for row in rows if _sees(row, user, vhosts)]


def _sees(row: dict[str, Any], user: User, vhosts: frozenset[str]) -> bool:
    if "user" in row:
        return bool(row["user"] == user.name)
    queue = row.get("queue")  # a consumer's row names its vhost with its queue
    if isinstance(queue, dict):
        return queue.get("vhost") in vhosts
    return "vhost" not in row or row["vhost"] in vhosts


def check_owner(request: web.Request, owner: str | None) -> None:
    """A connection or channel: monitors read any, administrators close any, other users
    only their own (RabbitMQ's rule for both)."""
    user = request[USER]
    allowed = user.is_administrator if request.method == "DELETE" else is_monitor(user)
    if not allowed and owner != user.name:
        raise NotAuthorised("User not authorised to access object")


def check_permission(request: web.Request, kind: PermissionKind, vhost: str, name: str,
                     resource_type: str) -> None:
    """A user other than an administrator acts as its permissions allow, as it would by
    AMQP; a refusal is answered 401 with the refusal's text, as RabbitMQ does."""
    user = request[USER]
    if not user.is_administrator:
        try:
            state_of(request).core.auth.check(user, vhost, kind, name, resource_type)
        except AccessRefused as refused:  # RabbitMQ answers its channel's refusal so
            raise NotAuthorised(refused.message) from None
