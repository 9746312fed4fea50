"""Who may use which management API route, as RabbitMQ 3.10's management plugin decides:
by the user's tags and the virtual hosts it may log in to (those it has permissions in).

Each handler declares its scope, one of RabbitMQ's checks, with `@scoped(Scope.X)` beside
its route decorators (`scoped_as` for a handler shared by routes of different scopes); one
that declares none is for administrators only, so a new route is never opened by accident.
`GRANTS` says per scope and tag how far a user goes (every vhost, its login vhosts, or
refused), `ROWS` which rows of a list it sees; docs/management-permissions.md holds both
tables with each route's scope. Within its scope a handler may narrow further: `visible`
for the rows of a list, `check_owner` for a connection or channel, `check_permission` for
what the user's permissions allow, which holds for administrators too (RabbitMQ declares,
deletes, publishes and gets over a channel opened as the user).
A request outside its scope is answered as RabbitMQ's management plugin answers it: 401
{"error": "not_authorised", "reason": ...}.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from mainstem.admin.state import USER, state_of
from mainstem.broker.auth import ADMINISTRATOR_TAG, PermissionKind, User
from mainstem.broker.errors import AccessRefused

MONITORING_TAG = "monitoring"
POLICYMAKER_TAG = "policymaker"
_SCOPE = "mainstem_scope"  # the handler attribute `scoped` sets
_LOGIN_VHOSTS = web.RequestKey("login_vhosts", frozenset[str])
Handler = TypeVar("Handler", bound=Callable[..., Any])
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Scope(enum.Enum):
    """Who may call a route: one of the checks of RabbitMQ's management plugin."""

    MANAGEMENT = "any management user (is_authorized)"
    VHOST = "users who may log in to the route's vhost (is_authorized_vhost)"
    VHOST_VISIBLE = "as VHOST; monitoring users any vhost (is_authorized_vhost_visible)"
    OWNER = "any management user, each connection or channel by `check_owner`"
    POLICIES = "policymakers who may log in to the route's vhost (is_authorized_policies)"
    MONITOR = "monitoring users (is_authorized_monitor)"
    ADMINISTRATOR = "administrators only (is_authorized_admin)"


class Rows(enum.Enum):
    """Which rows of a list a user sees."""

    OBJECTS = "a vhost's objects: queues, exchanges, bindings, policies (filter_vhost)"
    # RabbitMQ cuts consumers and stream clients to a non-monitor's own; mainstem to its
    # vhosts, as the overview's totals
    VISIBLE = "vhosts, their limits, consumers, stream clients, the overview's totals"
    OWNED = "connections and channels (filter_user)"


class Reach(enum.IntEnum):
    """How far a tag takes a user in a scope or a list; a user with several tags goes as
    far as the farthest."""

    NONE = 0  # refused (401)
    OWN = 1  # its own connections and channels
    LOGIN = 2  # the vhosts it has permissions in
    ANY = 3  # every vhost


MANAGEMENT_TAG = "management"
TAGS = (ADMINISTRATOR_TAG, MONITORING_TAG, POLICYMAKER_TAG, MANAGEMENT_TAG)


def _by_tag(administrator: Reach, monitoring: Reach, policymaker: Reach,
            management: Reach) -> dict[str, Reach]:
    return dict(zip(TAGS, (administrator, monitoring, policymaker, management), strict=True))


_A, _L, _O, _N = Reach.ANY, Reach.LOGIN, Reach.OWN, Reach.NONE
# RabbitMQ 3.10's rules, per tag (administrator, monitoring, policymaker, management); a
# user without any of these tags is refused everything ("Not management user").
# docs/management-permissions.md holds the same table with each route's scope.
GRANTS: dict[Scope, dict[str, Reach]] = {
    Scope.MANAGEMENT: _by_tag(_A, _A, _A, _A),
    Scope.OWNER: _by_tag(_A, _A, _A, _A),
    Scope.VHOST: _by_tag(_A, _L, _L, _L),
    Scope.VHOST_VISIBLE: _by_tag(_A, _A, _L, _L),
    Scope.POLICIES: _by_tag(_A, _N, _L, _N),
    Scope.MONITOR: _by_tag(_A, _A, _N, _N),
    Scope.ADMINISTRATOR: _by_tag(_A, _N, _N, _N),
}
ROWS: dict[Rows, dict[str, Reach]] = {
    Rows.OBJECTS: _by_tag(_A, _L, _L, _L),
    Rows.VISIBLE: _by_tag(_A, _A, _L, _L),
    Rows.OWNED: _by_tag(_A, _A, _O, _O),
}
MANAGEMENT_TAGS = frozenset(TAGS)


def reach(user: User, table: dict[str, Reach]) -> Reach:
    return max((table.get(tag, Reach.NONE) for tag in user.tags), default=Reach.NONE)


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


def scoped_as(scope: Scope, handler: Route) -> Route:
    """A handler shared by routes of different scopes, declared for one of them."""
    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(request)
    return scoped(scope)(handle)


def is_monitor(user: User) -> bool:
    return bool({ADMINISTRATOR_TAG, MONITORING_TAG} & set(user.tags))


def authorize(request: web.Request, user: User) -> None:
    """Raise NotAuthorised unless `user` may call the request's route (an unknown path or
    method is left to be answered 404 or 405)."""
    if not MANAGEMENT_TAGS & set(user.tags):
        raise NotAuthorised("Not management user")
    if request.match_info.http_exception is not None:
        return
    scope = getattr(request.match_info.handler, _SCOPE, Scope.ADMINISTRATOR)
    allowed = reach(user, GRANTS[scope])
    if allowed is Reach.NONE or (allowed is Reach.LOGIN and not _may_enter(request)):
        raise NotAuthorised(_REASONS.get(scope, "User not authorised to access virtual host"))


_REASONS = {Scope.ADMINISTRATOR: "Not administrator user", Scope.MONITOR: "Not monitor user",
            Scope.POLICIES: "User not authorised to access object"}


def _may_enter(request: web.Request) -> bool:
    """No vhost in the path, or one that does not exist (answered 404 later), passes."""
    vhost = request.match_info.get("vhost")
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
    """Of `names`, the vhosts the user sees (administrators and monitors: all)."""
    return [row["vhost"] for row in visible(request, [{"vhost": name} for name in names],
                                            Rows.VISIBLE)]


def visible(request: web.Request, rows: list[dict[str, Any]],
            kind: Rows | None = None) -> list[dict[str, Any]]:
    """The rows of a list the user may see (`ROWS`): by default a row with a `user` is a
    connection's or channel's, another an object in a vhost (a row naming no vhost was
    chosen by its handler)."""
    user = request.get(USER)
    if user is None:
        return rows
    reaches = {key: reach(user, table) for key, table in ROWS.items()}
    vhosts = login_vhosts(request)
    return [row for row in rows
            if _sees(row, user, reaches[kind or _kind_of(row)], vhosts)]


def _kind_of(row: dict[str, Any]) -> Rows:
    return Rows.OWNED if "user" in row else Rows.OBJECTS


def _sees(row: dict[str, Any], user: User, allowed: Reach, vhosts: frozenset[str]) -> bool:
    if allowed is Reach.ANY:
        return True
    if allowed is Reach.OWN:
        return bool(row.get("user") == user.name)
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
    """Every user, administrators too, declares, deletes, publishes and gets as its
    permissions allow, as it would by AMQP (RabbitMQ's management plugin does these over
    a channel opened as the user); a refusal is answered 401 with the refusal's text."""
    try:
        state_of(request).core.auth.check(request[USER], vhost, kind, name, resource_type)
    except AccessRefused as refused:  # RabbitMQ answers its channel's refusal so
        raise NotAuthorised(refused.message) from None
