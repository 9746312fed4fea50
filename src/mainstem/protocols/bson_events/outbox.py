"""Frames queued during one event-loop turn and written together: one send for a burst of
RESPONSE, RECEV or QUERYRESULT frames (or a client's acknowledgements) instead of a
system call for each."""

from __future__ import annotations

import asyncio


class Outbox:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._frames: list[bytes] = []
        self._scheduled = False
        self.size = 0  # bytes queued

    def add(self, frame: bytes) -> None:
        self._frames.append(frame)
        self.size += len(frame)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Hand everything queued to the transport now."""
        self._scheduled = False
        if self._frames and not self._writer.transport.is_closing():
            self._writer.write(b"".join(self._frames))
        self._frames.clear()
        self.size = 0

    async def drain_above(self, high_water: int) -> None:
        """Flush, then wait while the transport holds more than `high_water` bytes."""
        self.flush()
        if self._writer.transport.get_write_buffer_size() > high_water:
            await self._writer.drain()
