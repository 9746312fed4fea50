"""Lists as RabbitMQ's management API returns them: filtered by `name` (a substring, or a
regular expression with `use_regex=true`), sorted by `sort` (a dotted key) and
`sort_reverse`, cut to `columns`, and paged by `page` and `page_size` (at most 500) into
{filtered_count, item_count, items, page, page_count, page_size, total_count}. A regular
expression is RE2's (`broker/patterns.py`), and the loop is given back every
`_MATCHING_SLICE_S` while it is matched against many rows."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from mainstem.admin.scope import visible
from mainstem.broker.errors import InvalidArgument
from mainstem.broker.patterns import name_pattern

MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100
_MATCHING_SLICE_S = 0.01  # a filter of thousands of rows leaves other requests this much


async def list_response(request: web.Request, rows: list[dict[str, Any]]) -> web.Response:
    """The rows the request's user may see (`scope.visible`), shaped as the query asks."""
    seen = visible(request, rows)
    filtered = await _filtered(seen, request.query.get("name", ""),
                               request.query.get("use_regex") == "true")
    return web.json_response(shaped(request.query, filtered, len(seen)))


def shaped(query: Mapping[str, str], rows: list[dict[str, Any]], total: int) -> Any:
    """The rows left by the name filter, of `total`, shaped by the rest of the query."""
    sort = query.get("sort")
    if sort:
        rows = sorted(rows, key=lambda row: _sort_key(_dotted(row, sort)),
                      reverse=query.get("sort_reverse") == "true")
    elif query.get("sort_reverse") == "true":
        rows = rows[::-1]
    columns = [c for c in query.get("columns", "").split(",") if c]
    if columns:
        rows = [_columns(row, columns) for row in rows]
    if "page" not in query:
        return rows
    page = _positive(query["page"], "page")
    page_size = _positive(query.get("page_size", str(DEFAULT_PAGE_SIZE)), "page_size")
    if page_size > MAX_PAGE_SIZE:
        raise InvalidArgument(f"page_size must be at most {MAX_PAGE_SIZE}")
    page_count = max(math.ceil(len(rows) / page_size), 1)
    if page > page_count:
        raise InvalidArgument(f"page_out_of_range: page {page} of {page_count}")
    items = rows[(page - 1) * page_size:page * page_size]
    return {"filtered_count": len(rows), "item_count": len(items), "items": items,
            "page": page, "page_count": page_count, "page_size": page_size,
            "total_count": total}


async def _filtered(rows: list[dict[str, Any]], name: str, use_regex: bool
                    ) -> list[dict[str, Any]]:
    if not name:
        return rows
    if not use_regex:
        lowered = name.lower()
        return [row for row in rows if lowered in str(row.get("name", "")).lower()]
    pattern = name_pattern(name, "name")
    kept, slice_start = [], time.monotonic()
    for row in rows:
        if pattern.search(str(row.get("name", ""))):
            kept.append(row)
        if time.monotonic() - slice_start > _MATCHING_SLICE_S:
            await asyncio.sleep(0)
            slice_start = time.monotonic()
    return kept


def _positive(value: str, key: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise InvalidArgument(f"{key} must be a positive integer")
    return int(value)


def _dotted(row: Mapping[str, Any], path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    # None first, then numbers, then text: rows of mixed shapes still sort
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


def _columns(row: Mapping[str, Any], columns: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for column in columns:
        value = _dotted(row, column)
        if value is None and column.split(".")[0] not in row:
            continue
        target = kept
        *parents, leaf = column.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return kept
