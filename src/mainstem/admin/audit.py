"""The audit log of the management API: one `admin.change` line per change it made
(`protocol` http; the wire protocols' changes are logged by the same function,
`broker.audit.log_change`).

Every PUT, POST and DELETE under /api/ that succeeded (status below 400) is logged with
who made it (the authenticated `user`), from where (`peer`), the `action` (`users.create`,
`permissions.update`, `queues.delete`, `queues.purge`, `definitions.import`, ...), the
`object` as the path names it (`vhost`, `name`, `user`, `source`, ...) and the `status`.
`details` carries the body's descriptive fields (tags, permission patterns, queue and
exchange settings), never a password or a hash: for those only which kind of credential
was set (`credentials`). Refused requests change nothing and are not logged here (a failed
login is `auth.failed`); POSTs that read or move messages (publish, get) are not changes
of the broker's configuration and are not logged either.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from mainstem.admin import state as shared
from mainstem.broker.audit import log_change

# What a handler made of a request, logged with it: a definitions import's counts per kind
IMPORTED = "audit.imported"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CHANGING = frozenset({"PUT", "POST", "DELETE"})
# POSTs on messages, not on the broker's objects
_NOT_CHANGES = frozenset({"/api/exchanges/{vhost}/{name}/publish",
                          "/api/queues/{vhost}/{name}/get"})
# Body fields that describe a change and are safe to log; passwords and hashes never are.
_DETAILS = ("tags", "configure", "write", "read", "type", "durable", "auto_delete",
            "internal", "arguments", "routing_key", "partitions", "channel", "binder",
            "pattern", "apply-to", "priority", "definition")
_CREDENTIALS = ("password", "password_hash")
_MAX_BODY_FOR_DETAILS = 64 * 1024  # a definitions import is logged without them


@web.middleware
async def audit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost, so that the status logged is the one the client got."""
    response = await handler(request)
    if (request.method in _CHANGING and request.path.startswith("/api/")
            and response.status < 400 and shared.USER in request):
        path = request.match_info.route.resource
        template = path.canonical if path is not None else request.path
        if template not in _NOT_CHANGES:
            log_change("http", request[shared.USER].name, request.remote,
                       _action(request.method, template, response.status),
                       dict(request.match_info), status=response.status,
                       **request.get(IMPORTED, {}), **await _details(request))
    return response


def _action(method: str, template: str, status: int) -> str:
    """`KIND.VERB`: KIND is the collection the path names (users, queues, ...)."""
    kind = template.split("/")[2]
    if method == "DELETE":
        return f"{kind}.purge" if template.endswith("/contents") else f"{kind}.delete"
    if method == "POST":
        return f"{kind}.import" if kind == "definitions" else f"{kind}.create"
    return f"{kind}.create" if status == 201 else f"{kind}.update"


async def _details(request: web.Request) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if reason := request.headers.get("X-Reason"):  # a connection's close reason
        fields["reason"] = reason
    if request.content_length is None or request.content_length > _MAX_BODY_FOR_DETAILS:
        return fields
    try:
        body = json.loads(await request.read() or b"null")  # read once, kept by aiohttp
    except (ValueError, RecursionError):
        return fields
    if not isinstance(body, dict):
        return fields
    details = {key: body[key] for key in _DETAILS if key in body}
    credentials = [key for key in _CREDENTIALS if key in body]
    if credentials:
        details["credentials"] = ",".join(credentials)
    if details:
        fields["details"] = details
    return fields
