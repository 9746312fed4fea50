"""The write gate: whether writers may store data now.

While a resource alarm is set, writers are held: the appenders keep what they staged
until it clears. Protocols ask the gate how to surface that on their wire (stop
reading, or refuse with the reason) instead of each checking the alarms.
"""

from __future__ import annotations

from mainstem.broker.alarms import ResourceAlarms


class WritesHeld(Exception):
    """A write refused at once because a resource alarm holds writers."""


class WriteGate:
    def __init__(self, alarms: ResourceAlarms) -> None:
        self._alarms = alarms

    @property
    def held(self) -> bool:
        return self._alarms.blocked

    @property
    def reason(self) -> str:
        return self._alarms.describe()

    async def opened(self) -> None:
        """Return at once when writes are allowed, else once the alarms clear."""
        await self._alarms.wait_clear()

    def check(self) -> None:
        """Raise WritesHeld while writes are held: for writers that refuse, not wait."""
        if self._alarms.blocked:
            raise WritesHeld(self._alarms.describe())
