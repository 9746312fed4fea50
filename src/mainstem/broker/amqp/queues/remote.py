"""A queue of the cluster that is live on another node.

Every node knows every shared queue (declarations succeed and bindings hold anywhere);
where one is not live here — a quorum queue whose journal another node leads, a classic
queue whose home is another node — this node holds a `RemoteQueue` in its place. What a
queue does with messages and consumers happens at its home node.
"""

from __future__ import annotations

from collections.abc import Callable

from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.queue import ClassicQueue, Consumer
from mainstem.broker.errors import PreconditionFailed


class NotHere(PreconditionFailed):
    """A queue is used on a node where it is not live."""


class RemoteQueue(ClassicQueue):
    """Stands for a queue live on the node `home()` names (None while it has none)."""

    home: Callable[[], str | None] = staticmethod(lambda: None)  # set by the vhost
    home_node = ""  # a classic queue's home, live or not (a quorum queue's moves)

    def not_here(self) -> NotHere:
        home = self.home()
        where = (f"is live on node '{home}': connect there" if home else
                 "has no live node at the moment: retry")
        return NotHere(f"{self.kind} queue '{self.name}' {where}")

    def touch(self) -> None:
        """x-expires runs at the home only: a copy here must not delete the queue."""

    def publish(self, message: QueueMessage, confirm: bool = False) -> bool:
        return False  # refused: a confirming publisher gets basic.nack

    def add_consumer(self, consumer: Consumer) -> None:
        raise self.not_here()

    def get(self) -> QueueMessage | None:
        raise self.not_here()

    def purge(self) -> int:
        raise self.not_here()

    def delete_storage(self) -> None:
        self._ready.close()

    async def close(self) -> None:
        self.stop_timers()
        self._ready.close()
