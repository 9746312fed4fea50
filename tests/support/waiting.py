"""Waiting in async tests for what the broker does in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

TIMEOUT_S = 30.0


async def wait_until(condition: Callable[[], bool], *, what: str,
                     timeout_s: float = TIMEOUT_S) -> None:
    """Return once `condition()` holds; fail naming `what` after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)
