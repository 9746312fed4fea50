"""An OpenAPI 3.1 description of the management API, built from its route table."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from mainstem import __version__

_PARAMETER = re.compile(r"{(\w+)}")
_CONSTRAINED = re.compile(r"{(\w+):[^}]+}")  # aiohttp's {name:regex}: OpenAPI has {name}
_JSON = {"application/json": {"schema": {"type": "object"}}}


def openapi_document(tables: Iterable[web.RouteTableDef]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in (route for table in tables for route in table):
        if not isinstance(route, web.RouteDef):
            continue
        path = _CONSTRAINED.sub(r"{\1}", route.path)
        operation: dict[str, Any] = {
            "summary": (route.handler.__doc__ or route.handler.__name__.replace("_", " "))
            .strip().splitlines()[0],
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in _PARAMETER.findall(path)
            ],
            "responses": {"200": {"description": "JSON", "content": _JSON}}
            if route.method == "GET" else {"201": {"description": "created"},
                                           "204": {"description": "done"}},
        }
        if route.method in ("PUT", "POST"):
            operation["requestBody"] = {"content": _JSON}
        paths.setdefault(path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "mainstem management API", "version": __version__,
                 "description": "RabbitMQ management API paths and shapes, plus streams."},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}],
        "paths": paths,
    }
