"""Appending segment events until the server (or a cluster's leader) is SIGKILLed: a
thousand acknowledged, two thousand more in flight when it dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mainstem.client.segment import Appender, SegmentClient

EVENTS = [b"event-%05d" % i for i in range(3000)]
ACKED_BEFORE_KILL = 1000
BLOCK = 100


async def append_until_killed(port: int, segment: str, kill: Callable[[], None]
                              ) -> tuple[Appender, int]:
    """Create `segment` and append EVENTS through one appender, `kill` with most of them in
    flight; returns the appender (to set up again elsewhere) and the level acked first."""
    client = await SegmentClient.connect("127.0.0.1", port)
    await client.create(segment)
    appender = await client.appender(segment)
    for start in range(0, ACKED_BEFORE_KILL, BLOCK):
        appender.append_block(EVENTS[start:start + BLOCK])
    acked = await appender.flush()
    for start in range(ACKED_BEFORE_KILL, len(EVENTS), BLOCK):
        appender.append_block(EVENTS[start:start + BLOCK])
    await asyncio.sleep(0.01)
    kill()
    await client.close()
    return appender, acked
