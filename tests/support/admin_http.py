"""Calls of the management API from tests: a session as a user, calls that check the
status first."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from mainstem import Broker


def session(broker: Broker, user: str, password: str | None = None) -> aiohttp.ClientSession:
    """A client of `broker`'s management API as `user` (password: the user's name)."""
    return aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}", headers={
        "Authorization": aiohttp.encode_basic_auth(user, password or user)})


async def call(http: aiohttp.ClientSession, method: str, path: str, body: Any = None,
               status: int = 200) -> Any:
    """The JSON answer (None for an empty one), after checking the status."""
    async with http.request(method, path, json=body) as response:
        text = await response.text()
        assert response.status == status, (method, path, text)
        return json.loads(text) if text else None
