"""Quorum queues of a cluster: a replicated journal, the queue live on its leader only.

In a cluster (`QueueManager.replication` set), a quorum queue's journal is a partition
the cluster replicates like a stream's (see docs/cluster.md). Every node knows the queue:
the node leading its journal holds it live (`QuorumQueue`, the replay of the journal),
every other node a `QuorumStandby` that answers declarations and refuses publishes and
consumers, naming the leader. Without a cluster a quorum queue is a classic queue with a
journal, as before.

A new leader's queue is live at once but replays its journal in slices (`replay`), the
event loop serving others between them; until the replay is done it delivers nothing, and
holds the publishes it is given, enqueued after the replayed messages once it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from mainstem.broker.amqp.queues.journal import Replay, pass_on
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.remote import NotHere, RemoteQueue
from mainstem.broker.stream_service import PartitionClosed, PartitionService

# Marks a replicated quorum queue in this node's own record of its vhost's queues: after a
# restart it comes back as a standby, until the cluster says where it leads.
REPLICATED = "x-mainstem-replicated"


class QuorumQueue(ClassicQueue):
    """The live queue on the journal's leader. Every message is journaled, whatever its
    delivery mode, as RabbitMQ's quorum queues keep them all; a publish is confirmed once
    the in-sync replicas hold it (the journal's commit waits for them)."""

    kind = "quorum"
    _replayed_through = 0  # queue positions a new leader replayed
    _commit_wait: asyncio.Task[None] | None = None
    # While the journal replays: done once it is (publishers wait for it, as for a pager).
    _replaying: asyncio.Future[None] | None = None
    _replay_task: asyncio.Task[int] | None = None
    _held: list[tuple[QueueMessage, bool, asyncio.Future[None] | None]]

    def publish(self, message: QueueMessage, confirm: bool = False
                ) -> asyncio.Future[None] | bool | None:
        message.persistent = True
        if self._replaying is not None:  # it goes after the replayed ones, once replayed
            waiter = asyncio.get_running_loop().create_future() if confirm else None
            self._held.append((message, confirm, waiter))
            return waiter
        return super().publish(message, confirm)

    async def replay(self) -> int:
        """Replay the journal into the queue without holding the event loop, then enqueue
        what was published meanwhile, in order; returns how many messages it replayed.
        Delivers nothing before; cancelled if the queue steps down or goes."""
        assert self.journal is not None
        self._replaying, self._held = asyncio.get_running_loop().create_future(), []
        self._replay_task = asyncio.current_task()
        try:
            replay = await self.journal.replay_yielding()
        except BaseException:
            self._end_replay(NotHere(f"quorum queue '{self.name}' stopped replaying here"))
            raise
        finally:
            self._replay_task = None
        self.restore(replay)
        self._end_replay(None)
        self.dispatch()
        return len(replay.offsets)

    def _end_replay(self, failure: NotHere | None) -> None:
        """Publishes held during the replay: enqueued now, or refused with `failure`."""
        replaying, self._replaying = self._replaying, None
        held, self._held = self._held, []
        for message, confirm, waiter in held:
            written = super().publish(message, confirm) if failure is None else False
            if waiter is not None:
                _follow(waiter, written, failure or NotHere(
                    f"quorum queue '{self.name}' refused the message"))
        if replaying is not None and not replaying.done():
            replaying.set_result(None)

    def _stop_replay(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()

    @property
    def replaying(self) -> asyncio.Future[None] | None:
        """While the journal replays: done once the queue holds its messages."""
        return self._replaying

    @property
    def backlog(self) -> asyncio.Future[None] | None:
        return self._replaying or super().backlog

    def purge(self) -> int:
        if self._replaying is not None:
            raise NotHere(f"quorum queue '{self.name}' is being made live on this node: "
                          "retry")
        return super().purge()

    def restore(self, replay: Replay) -> None:
        super().restore(replay)
        self._replayed_through = self._seq

    def _take(self) -> QueueMessage | None:
        if self._replaying is not None or not self._head_committed():
            return None
        message = super()._take()
        if message is not None and message.seq <= self._replayed_through \
                and not message.delivery_count:
            # The old leader may have delivered it (the journal records settles, not
            # deliveries): it goes out as redelivered, as RabbitMQ returns unacked ones.
            message.delivery_count = 1
        return message

    def _head_committed(self) -> bool:
        """Whether the next message may go out: its enqueue is committed, as RabbitMQ's
        quorum queues deliver only what Raft committed (a message the new leader could
        lack is never delivered). If not, dispatching resumes once it is."""
        level = self._ready.top_level()
        head = None if level is None else self._ready.head(level)
        journal = self.journal
        if head is None or journal is None:
            return True
        service = journal.service
        if head.log_offset is not None and head.log_offset < service.committed_offset:
            return True
        if self._commit_wait is None:
            self._commit_wait = asyncio.get_running_loop().create_task(
                self._dispatch_when_committed(service))
        return False

    async def _dispatch_when_committed(self, service: PartitionService) -> None:
        try:
            await service.appender.settled()  # all written so far (this turn's included)
        except (PartitionClosed, OSError):
            return  # stepped down or the disk failed: nothing more goes out from here
        finally:
            self._commit_wait = None
        self.dispatch()

    def step_down(self) -> None:
        """This node no longer leads the journal: consumers are cancelled (basic.cancel),
        and acks of what it delivered settle nothing here (the new leader redelivers)."""
        self.deleted = True
        self._stop_replay()
        self.journal = None
        self.stop_timers()
        for consumer in list(self.consumers):
            consumer.cancelled_by_server()
        self.consumers.clear()
        self._ready.close()

    def delete_storage(self) -> None:
        self._stop_replay()
        self._ready.close()  # the journal is the cluster's to close and remove

    async def close(self) -> None:
        self._stop_replay()
        self.stop_timers()
        self._ready.close()  # the cluster closes the journal


def _follow(waiter: asyncio.Future[None], written: asyncio.Future[None] | bool | None,
            refused: Exception) -> None:
    """A held publish's confirm follows its write (or its refusal)."""
    if isinstance(written, asyncio.Future):
        written.add_done_callback(lambda done: pass_on(done, waiter))
    elif written is False:
        waiter.set_exception(refused)
    else:
        waiter.set_result(None)


class QuorumStandby(RemoteQueue):
    """A replicated quorum queue on a node that does not lead its journal: it exists
    (declarations succeed, bindings hold); its home is the journal's leader."""

    kind = "quorum"
    placing: Awaitable[None] | None = None  # a declaration the cluster is making

    def whereabouts(self) -> str:
        if self.home() is None:
            return "has no leader at the moment (an election is under way): retry"
        return super().whereabouts()


REPLICATED_QUEUES = (QuorumQueue, QuorumStandby)
