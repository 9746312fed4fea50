"""The management HTTP server: API, Prometheus metrics and web console in one aiohttp app;
and the Prometheus listener's app, which serves the same metrics alone.

Everything under /api needs HTTP basic auth, checked by the same Auth as every protocol
(loopback-only users stay loopback-only), by a user whose tags allow the route (`scope`:
administrator, monitoring, policymaker, management); so does /metrics on the management
port (`admin.metrics`: authenticated, open or off), as it names every vhost, queue and
stream. The Prometheus listener is open, as RabbitMQ's is; the console's static files
carry no data.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from pathlib import Path

from aiohttp import web

from mainstem.admin import (
    api,
    connections,
    definitions,
    health,
    inventory,
    limits_api,
    objects,
    parameters,
    policy_api,
    scope,
    tiering_api,
    topic_permissions_api,
    verify_api,
)
from mainstem.admin import state as shared
from mainstem.admin.audit import audit
from mainstem.admin.metrics import PATHS, Metrics
from mainstem.admin.openapi import openapi_document
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    NotFound,
    StorageFailed,
    Unavailable,
)

log = logging.getLogger("mainstem.admin")
CONSOLE_DIR = Path(__file__).parent / "console"
_REALM = 'Basic realm="mainstem management"'
CONSOLE_HEADER = "X-Mainstem-Console"
_SAMPLE_INTERVAL_S = 1.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What app.cleanup_ctx runs: set up until its yield, clean up after it.
CleanupContext = Callable[[web.Application], AsyncIterator[None]]
METRICS = web.AppKey("metrics", Metrics)
GUARDED = web.AppKey("guarded", tuple)  # path prefixes that need a login
_own_routes = web.RouteTableDef()
ROUTE_TABLES = (api.routes, connections.routes, objects.routes, definitions.routes,
                health.routes, parameters.routes, policy_api.routes, limits_api.routes,
                inventory.routes, tiering_api.routes, verify_api.routes,
                topic_permissions_api.routes, _own_routes)


def create_app(state: shared.AdminState, *, served_metrics: str, per_object_metrics: bool
               ) -> web.Application:
    """The app over what the server hands it; `served_metrics` is `admin.metrics`
    (authenticated, open or off)."""
    app = web.Application(middlewares=[audit, _errors, _authenticate],
                          client_max_size=1024 * 1024)
    app[shared.STATE] = state
    for table in ROUTE_TABLES:
        app.add_routes(table)
    metrics = Metrics(state, per_object_metrics)
    app[METRICS] = metrics
    app[GUARDED] = ("/api/", *(PATHS if served_metrics == "authenticated" else ()))
    if served_metrics != "off":
        metrics.add_routes(app)
    app.router.add_get("/", _console_index)
    app.router.add_static("/console/", CONSOLE_DIR)
    app.cleanup_ctx.append(_sampling(state))
    app.cleanup_ctx.append(_forgetting_deleted_streams(state))
    app.cleanup_ctx.append(metrics.lifetime)
    return app


def prometheus_app(admin: web.Application,
                   on_answered: Callable[[Hashable], None]) -> web.Application:
    """RabbitMQ's Prometheus listener: the management app's metrics, with no login.
    `on_answered` is called with the transport of each connection whose request was
    answered."""
    @web.middleware
    async def answered(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.transport is not None:
            on_answered(request.transport)
        return response

    app = web.Application(middlewares=[answered])
    admin[METRICS].add_routes(app)
    return app


@scope.scoped(scope.Scope.MANAGEMENT)
@_own_routes.get("/api/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    """This API described in OpenAPI 3.1."""
    return web.json_response(openapi_document(ROUTE_TABLES))


async def _console_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(CONSOLE_DIR / "index.html")


def _sampling(state: shared.AdminState) -> CleanupContext:
    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        async def run() -> None:
            while True:
                state.sample()
                await asyncio.sleep(_SAMPLE_INTERVAL_S)

        task = asyncio.get_running_loop().create_task(run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return lifetime


def _forgetting_deleted_streams(state: shared.AdminState) -> CleanupContext:
    """A deleted stream's delivery counters go with it, so /metrics lists live streams."""
    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        stats = state.core.delivery_stats
        unwatch = state.core.streams.watch(lambda stream: stats.forget(stream.namespace,
                                                                       stream.name))
        yield
        unwatch()

    return lifetime


def _error(status: int, error: str, reason: str, **headers: str) -> web.Response:
    # RabbitMQ's error body: {"error": ..., "reason": ...}
    return web.Response(status=status, headers=headers, content_type="application/json",
                        text=json.dumps({"error": error, "reason": reason}))


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except scope.NotAuthorised as exc:
        return _error(401, "not_authorised", exc.reason)
    except NotFound as exc:
        return _error(404, "Object Not Found", str(exc))
    except AlreadyExists as exc:
        return _error(409, "conflict", str(exc))
    except AccessRefused as exc:
        return _error(403, "access_refused", str(exc))
    except Unavailable as exc:  # the cluster's store did not answer: try again later
        return _error(503, "service_unavailable", str(exc))
    except StorageFailed as exc:  # the disk refused the catalog's write
        return _error(507, "insufficient_storage", str(exc))
    except BrokerError as exc:
        return _error(400, "bad_request", str(exc))
    except web.HTTPNotFound:  # no route: RabbitMQ's JSON error, not aiohttp's text
        return _error(404, "Object Not Found", "Not Found")
    except web.HTTPMethodNotAllowed as exc:
        return _error(405, "Method Not Allowed", f"{request.method} is not allowed here",
                      Allow=",".join(sorted(exc.allowed_methods)))
    except web.HTTPException as exc:  # aiohttp's own (413 body too large, ...): as JSON
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
    except ConnectionError:  # the client cut its request short: the server's log says so,
        raise  # one rate-limited line (admin/http_log.py), not a traceback per request
    except Exception:
        log.exception("management API request %s %s failed", request.method, request.path)
        return _error(500, "internal_server_error", "see the broker's log")


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith(request.app[GUARDED]):
        return await handler(request)
    # The console asks for no challenge: a browser would answer it with its own dialog.
    challenge = {} if CONSOLE_HEADER in request.headers else {"WWW-Authenticate": _REALM}
    credentials = _basic_credentials(request.headers.get("Authorization", ""))
    if credentials is None:
        return _error(401, "not_authorised", "Login failed", **challenge)
    state = request.app[shared.STATE]
    try:
        user = await state.core.login(*credentials, request.remote)
    except AuthenticationFailed as exc:
        log.warning("auth.failed", extra={"user": credentials[0], "peer": request.remote,
                                          "protocol": "http", "reason": exc.message})
        return _error(401, "not_authorised", str(exc), **challenge)
    if state.on_login is not None and request.transport is not None:
        state.on_login(request.transport)
    request[shared.USER] = user
    scope.authorize(request, user)
    return await handler(request)


def _basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except ValueError:  # not base64 (non-ASCII text included) or not UTF-8
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None
