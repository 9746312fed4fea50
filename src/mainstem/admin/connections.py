"""Who is connected: connections of every protocol, AMQP channels and consumers, as
RabbitMQ's management API lists them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mainstem.admin.listing import list_response
from mainstem.admin.scope import Scope, check_owner, scoped
from mainstem.admin.state import (
    AdminState,
    channel_key,
    connection_key,
    no_content,
    state_of,
    vhost_of,
)
from mainstem.broker.errors import NotFound
from mainstem.protocols.identity import NODE
from mainstem.protocols.registry import Connection, ConnectionRegistry

routes = web.RouteTableDef()


def connection_row(state: AdminState, connection: Connection) -> dict[str, Any]:
    """A connection with its traffic rates (recv_oct_details, send_oct_details)."""
    row = connection.describe()
    row.update(state.message_stats(connection_key(connection),
                                   {"recv_oct": row["recv_oct"], "send_oct": row["send_oct"]}))
    return row


@scoped(Scope.OWNER)
@routes.get("/api/connections")
@routes.get("/api/vhosts/{vhost}/connections")
async def list_connections(request: web.Request) -> web.Response:
    state, vhost = state_of(request), vhost_of(request)
    return await list_response(request, [connection_row(state, c) for c in state.connections.list()
                                   if vhost is None or c.ctx.namespace == vhost])


def _connection(request: web.Request) -> Connection:
    """The path's connection, if the user may see it (close it, for a DELETE)."""
    name = request.match_info["name"]
    connection = state_of(request).connections.find(name)
    if connection is None:
        raise NotFound(f"connection '{name}' not found")
    check_owner(request, connection.ctx.user)
    return connection


@scoped(Scope.OWNER)
@routes.get("/api/connections/{name}")
async def get_connection(request: web.Request) -> web.Response:
    return web.json_response(connection_row(state_of(request), _connection(request)))


# -- channels (AMQP 0-9-1) -------------------------------------------------------


def channel_rows(state: AdminState, connections: list[Connection]) -> list[dict[str, Any]]:
    rows = []
    for connection in connections:
        ctx = connection.ctx
        peer_host, _, peer_port = ctx.peer.rpartition(":")
        for number, channel in sorted(ctx.channels.items()):
            rows.append({
                "name": f"{connection.name} ({number})", "node": NODE, "user": ctx.user,
                "vhost": ctx.namespace,
                "connection_details": {"name": connection.name,
                                       "peer_host": peer_host.strip("[]"),
                                       "peer_port": int(peer_port) if peer_port.isdigit()
                                       else None},
                **channel.describe(),
                "message_stats": state.message_stats(channel_key(connection, number),
                                                     channel.stats.counts()),
            })
    return rows


@scoped(Scope.OWNER)
@routes.get("/api/channels")
@routes.get("/api/vhosts/{vhost}/channels")
async def list_channels(request: web.Request) -> web.Response:
    state, vhost = state_of(request), vhost_of(request)
    connections = [c for c in state.connections.list()
                   if vhost is None or c.ctx.namespace == vhost]
    return await list_response(request, channel_rows(state, connections))


@scoped(Scope.OWNER)
@routes.get("/api/connections/{name}/channels")
async def connection_channels(request: web.Request) -> web.Response:
    return await list_response(request, channel_rows(state_of(request), [_connection(request)]))


@scoped(Scope.OWNER)
@routes.get("/api/channels/{name}")
async def get_channel(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    state = state_of(request)
    for row in channel_rows(state, state.connections.list()):
        if row["name"] == name:
            check_owner(request, row["user"])
            return web.json_response(row)
    raise NotFound(f"channel '{name}' not found")


@scoped(Scope.OWNER)
@routes.delete("/api/connections/{name}")
async def close_connection(request: web.Request) -> web.Response:
    connection = _connection(request)
    # RabbitMQ passes the reason in the X-Reason header.
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    await state_of(request).connections.close(connection, reason)
    return no_content()


def consumer_rows(connections: ConnectionRegistry) -> list[dict[str, Any]]:
    """Every consumer that a handler recorded with ctx.add_consumer, as RabbitMQ shows one."""
    rows = []
    for connection in connections.list():
        ctx = connection.ctx
        for tag, details in ctx.consumers.items():
            queue = str(details.get("queue", ""))
            channel_details: dict[str, Any] = {"connection_name": connection.name,
                                               "peer_host": ctx.peer, "user": ctx.user}
            if "channel" in details:  # AMQP 0-9-1: the channel's name, as /api/channels
                channel_details.update(name=f"{connection.name} ({details['channel']})",
                                       number=details["channel"])
            rows.append({
                "consumer_tag": tag,
                "queue": {"name": queue, "vhost": ctx.namespace},
                "channel_details": channel_details,
                "ack_required": details.get("ack_required", False),
                "prefetch_count": details.get("prefetch_count", 0),
                "active": details.get("active", True),
                "arguments": details.get("arguments", {}),
            })
    return rows


@scoped(Scope.VHOST_OR_MONITOR)
@routes.get("/api/consumers")
@routes.get("/api/consumers/{vhost}")
async def list_consumers(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    return await list_response(request, [row for row in consumer_rows(state_of(request).connections)
                              if vhost is None or row["queue"]["vhost"] == vhost])
