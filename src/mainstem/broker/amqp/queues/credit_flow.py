"""Credit flow: a publisher is held while a queue it routes to cannot keep up.

RabbitMQ hands credit between the reader, the channel and each queue process, and a reader
out of credit stops reading its socket. Here one event loop does all the work, so the only
queue that falls behind is one whose pager has more than a bound's worth of messages to
write out; it hands each publisher a future, and the publisher's connection reads nothing
more until every such future is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class CreditFlow:
    def __init__(self) -> None:
        self._waits: set[asyncio.Future[None]] = set()

    @property
    def blocked(self) -> bool:
        return bool(self._waits)

    def hold(self, backlogs: Iterable[asyncio.Future[None]]) -> None:
        """Backlogs of the queues the last publish went to."""
        self._waits.update(backlog for backlog in backlogs if not backlog.done())

    async def wait(self) -> None:
        """Return once every queue this publisher was held by has caught up."""
        while self._waits:
            waits, self._waits = self._waits, set()
            await asyncio.wait(waits)
