"""Objects of the management API outside RabbitMQ's core plugin: stream publishers and
consumers (the paths and shapes of RabbitMQ's stream management plugin), and mainstem's
own Iggy streams with their topics and consumer groups, and segments (every partition,
addressed as the segment protocol names it).

Rows are read from the live broker on each request; nothing here is stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from mainstem.admin.scope import Rows, Scope, scoped, visible
from mainstem.admin.state import state_of
from mainstem.admin.tier_extents import stream_extent
from mainstem.broker.errors import NotFound
from mainstem.broker.iggy.model import STREAM, TOPIC, Group
from mainstem.broker.segment_store import SegmentName
from mainstem.protocols.identity import NODE

if TYPE_CHECKING:
    from mainstem.broker.core import BrokerCore
    from mainstem.broker.streams import Stream

routes = web.RouteTableDef()


def _stream_rows(request: web.Request, kind: str) -> list[dict[str, Any]]:
    """Rows of one kind (publishers, consumers) of every stream connection, each with its
    connection_details as RabbitMQ gives them, filtered by the path's vhost and queue."""
    vhost, queue = request.match_info.get("vhost"), request.match_info.get("queue")
    core = state_of(request).core
    if vhost is not None and core.catalog.get_namespace(vhost) is None:
        raise NotFound(f"virtual host '{vhost}' not found")  # as RabbitMQ: 404
    if vhost is not None and queue is not None and core.streams.find(vhost, queue) is None:
        raise NotFound(f"stream '{queue}' not found in virtual host '{vhost}'")
    rows: list[dict[str, Any]] = []
    for connection in state_of(request).connections.list():
        describe = getattr(connection.ctx, "stream_" + kind)
        if describe is None:
            continue
        shown = connection.describe()
        details = {"name": connection.name, "user": connection.ctx.user, "node": NODE,
                   "peer_host": shown["peer_host"], "peer_port": shown["peer_port"]}
        rows.extend({**row, "connection_details": details} for row in describe()
                    if vhost in (None, row["queue"]["vhost"])
                    and queue in (None, row["queue"]["name"]))
    return visible(request, rows, Rows.VISIBLE)


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/stream/publishers")
@routes.get("/api/stream/publishers/{vhost}")
@routes.get("/api/stream/publishers/{vhost}/{queue}")
async def list_stream_publishers(request: web.Request) -> web.Response:
    """Stream protocol publishers, as RabbitMQ's stream management plugin lists them."""
    return web.json_response(_stream_rows(request, "publishers"))


@scoped(Scope.VHOST_VISIBLE)
@routes.get("/api/stream/consumers")
@routes.get("/api/stream/consumers/{vhost}")
async def list_stream_consumers(request: web.Request) -> web.Response:
    """Stream subscriptions with their offset and lag, as RabbitMQ's plugin lists them."""
    return web.json_response(_stream_rows(request, "consumers"))


def _messages(stream: Stream) -> int:
    return sum(p.committed_offset - p.first_offset for p in stream.partitions)


def _group_row(group: Group) -> dict[str, Any]:
    # Iggy numbers partitions from 1; the model deals them from 0.
    return {"id": group.id, "name": group.name, "generation": group.generation,
            "members": [{"client_id": client, "partitions": [p + 1 for p in partitions]}
                        for client, partitions in group.members.items()]}


def iggy_stream_rows(core: BrokerCore) -> list[dict[str, Any]]:
    """Each namespace as the Iggy stream it is, its streams as topics (ids as Iggy
    clients see them, assigned on first sight as the Iggy listener does)."""
    model = core.iggy
    rows = []
    for namespace in core.catalog.list_namespaces():
        topics = [{
            "id": model.id_of(TOPIC, stream.namespace, stream.name), "name": stream.name,
            "partitions": len(stream.partitions), "messages": _messages(stream),
            "size_bytes": sum(p.size_bytes for p in stream.partitions),
            **stream_extent(stream.services),
            "consumer_groups": [_group_row(g) for g in model.list_groups(stream.namespace,
                                                                         stream.name)],
        } for stream in core.streams.list(namespace.name)]
        rows.append({"id": model.id_of(STREAM, "", namespace.name), "name": namespace.name,
                     "topics": topics})
    return rows


@routes.get("/api/iggy/streams")
async def list_iggy_streams(request: web.Request) -> web.Response:
    """Iggy streams (namespaces) with their topics and consumer groups."""
    return web.json_response(iggy_stream_rows(state_of(request).core))


def segment_rows(core: BrokerCore) -> list[dict[str, Any]]:
    """Every partition as a segment: byte range, events, sealed."""
    segments = core.segments
    rows = []
    for stream in core.streams.list():
        for number, partition in enumerate(stream.partitions):
            name = SegmentName(stream.namespace, stream.name, number)
            rows.append({"name": str(name), "vhost": stream.namespace, "stream": stream.name,
                         "number": number, "sealed": segments.is_sealed(name),
                         "start_offset": segments.start_offset(name),
                         "write_offset": segments.write_offset(name),
                         "events": partition.committed_offset - partition.first_offset})
    return rows


@routes.get("/api/segments")
async def list_segments(request: web.Request) -> web.Response:
    """Segments: every partition of every stream, by its segment name."""
    return web.json_response(segment_rows(state_of(request).core))
