"""GET and POST /api/streams/{vhost}/{name}/verify (mainstem's own): what the scrub found
in each partition's stored chunks — chunks and bytes checked, the damaged chunks and why,
the chunks repaired from another replica and where their bytes went, the last full pass
— and, on POST, a full pass first, at full speed (see broker/scrub.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mainstem.admin.scope import Scope, check_permission, scoped
from mainstem.admin.state import state_of, stream_of

if TYPE_CHECKING:
    from mainstem.broker.stream_service.integrity import Integrity
    from mainstem.broker.streams import Stream

routes = web.RouteTableDef()


def integrity_row(index: int, name: str, integrity: Integrity) -> dict[str, Any]:
    last = integrity.last_full_pass
    return {
        "index": index, "name": name, "chunks_checked": integrity.chunks_checked,
        "bytes_checked": integrity.bytes_checked, "passes": integrity.passes,
        "last_full_pass": None if last is None
        else datetime.fromtimestamp(last, UTC).isoformat(timespec="seconds"),
        "verified_offset": integrity.verified,
        "damaged_chunk_ids": sorted(integrity.damaged),
        "damaged": [{"chunk_id": chunk_id, "damage": damage}
                    for chunk_id, damage in sorted(integrity.damaged.items())],
        "repaired": [dataclasses.asdict(repair) for repair in integrity.repaired],
    }


def verify_report(stream: Stream, scrub_rate: int) -> dict[str, Any]:
    return {"vhost": stream.namespace, "name": stream.name, "scrub_rate": scrub_rate,
            "partitions": [integrity_row(i, name, service.integrity) for i, (name, service)
                           in enumerate(zip(stream.partition_names, stream.services,
                                            strict=True))]}


@scoped(Scope.VHOST_OR_MONITOR)
@routes.get("/api/streams/{vhost}/{name}/verify")
async def get_verify(request: web.Request) -> web.Response:
    core = state_of(request).core
    return web.json_response(verify_report(stream_of(request), core.scrubber.rate))


@scoped(Scope.VHOST)
@routes.post("/api/streams/{vhost}/{name}/verify")
async def post_verify(request: web.Request) -> web.Response:
    """Check every local committed chunk of the stream now, then report."""
    check_permission(request, "configure", request.match_info["vhost"],
                     request.match_info["name"], "stream")
    core, stream = state_of(request).core, stream_of(request)
    await core.scrubber.verify(stream)
    return web.json_response(verify_report(stream, core.scrubber.rate))
