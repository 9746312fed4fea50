"""Calls of the management API from tests, checking the status first."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def call(http: aiohttp.ClientSession, method: str, path: str, body: Any = None,
               status: int = 200) -> Any:
    """The JSON answer (None for an empty one), after checking the status."""
    async with http.request(method, path, json=body) as response:
        text = await response.text()
        assert response.status == status, (method, path, text)
        return json.loads(text) if text else None
