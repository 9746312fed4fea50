"""What the management API's tests share: an HTTP session logged in as the administrator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from mainstem import Broker

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


@pytest.fixture
async def http(broker: Broker) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}",
                                     headers=ADMIN) as session:
        yield session
