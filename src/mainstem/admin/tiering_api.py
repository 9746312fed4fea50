"""GET /api/tiering (mainstem's own; RabbitMQ has no tier): the broker's tier, its
counters, every stream partition's extents (`tier_extents`) with its tiered segments'
records, and the streams written as tables (`broker/tables.py`) with their lag, files,
bytes and errors, also alone at GET /api/tables; POST /api/tables/{vhost}/{name}/rebuild
writes a stream's table again from the stream's start."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mainstem.admin.scope import Scope, check_permission, scoped
from mainstem.admin.state import state_of, stream_of, vhost_of
from mainstem.admin.tier_extents import partition_extent
from mainstem.broker.errors import NotFound, PreconditionFailed

if TYPE_CHECKING:
    from mainstem.broker.tables import Tables
    from mainstem.broker.tiering import Tiering
    from mainstem.formats.table_schema import BodySchema

routes = web.RouteTableDef()


def tier_summary(tiering: Tiering | None) -> dict[str, Any]:
    """The tier's URL (never its credentials) and counters; nulls without a tier."""
    if tiering is None:
        return {"url": None, "owner": None, "stats": None}
    return {"url": tiering.location.url, "owner": tiering.owner,
            "stats": {**dataclasses.asdict(tiering.stats),
                      "upload_lag_bytes": tiering.upload_lag_bytes()}}


@scoped(Scope.MONITOR)
@routes.get("/api/tiering")
@routes.get("/api/tiering/{vhost}")
async def get_tiering(request: web.Request) -> web.Response:
    """The tier, its counters, and each stream partition's extents and tiered records."""
    core, vhost = state_of(request).core, _known_vhost(request)
    partitions = [
        {"vhost": stream.namespace, "stream": stream.name, "partition": index,
         "first_offset": partition.first_offset, **partition_extent(partition),
         "records": [dataclasses.asdict(r) for r in partition.tiered_records]}
        for stream in core.streams.list(vhost)
        for index, partition in enumerate(stream.services)]
    return web.json_response({**tier_summary(core.tiering),
                              "partitions": partitions,
                              "tables": table_rows(core.tables, vhost)})


def table_rows(tables: Tables | None, vhost: str | None) -> list[dict[str, Any]]:
    """Each table stream's table: where it is, its declared body schema (None: none), its
    Iceberg metadata, its lag in records (committed in the stream, not yet in the table),
    each partition's end, its committed files, rows and bytes, its metadata objects, and
    its failed rounds on this node."""
    if tables is None:
        return []
    return [{"vhost": stream.namespace, "stream": stream.name,
             "location": tables.location(stream),
             "schema": _schema_json(tables.body_schema(stream)),
             "metadata_location": tables.metadata_location(stream),
             "lag": tables.lag(stream),
             "ends": [tables.table_end(stream, i) for i in range(len(stream.services))],
             **tables.summary(stream)}
            for stream in tables.table_streams() if vhost in (None, stream.namespace)]


def _schema_json(declared: BodySchema | None) -> dict[str, str] | None:
    return None if declared is None else declared.as_json()


@scoped(Scope.MONITOR)
@routes.get("/api/tables")
@routes.get("/api/tables/{vhost}")
async def get_tables(request: web.Request) -> web.Response:
    """The streams written as tables, as in GET /api/tiering's `tables`."""
    return web.json_response(table_rows(state_of(request).core.tables,
                                        _known_vhost(request)))


def _known_vhost(request: web.Request) -> str | None:
    """The route's vhost (None: every vhost), which must exist."""
    vhost = vhost_of(request)
    if vhost is not None and state_of(request).core.catalog.get_namespace(vhost) is None:
        raise NotFound(f"virtual host '{vhost}' not found")
    return vhost


@scoped(Scope.VHOST)
@routes.post("/api/tables/{vhost}/{name}/rebuild")
async def post_rebuild(request: web.Request) -> web.Response:
    """Drop the stream's table (its data files and metadata, after the grace period) and
    write it again from the stream's start; answered once dropped, with how many data
    files went. On the node leading every partition of the stream (400 elsewhere)."""
    check_permission(request, "configure", request.match_info["vhost"],
                     request.match_info["name"], "stream")
    core, stream = state_of(request).core, stream_of(request)
    tables = core.tables
    if tables is None or not tables.is_table(stream):
        raise PreconditionFailed(f"stream '{stream.name}' is not written as a table")
    return web.json_response({"vhost": stream.namespace, "stream": stream.name,
                              "dropped_files": await tables.rebuild(stream)})
