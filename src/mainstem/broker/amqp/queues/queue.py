"""A classic queue: ready messages in order (per priority), consumers served round robin
within their credit, TTL, length limits, dead-lettering and single active consumer.

Messages waiting for an ack belong to the channel that received them; the queue only counts
them. A durable queue writes its persistent messages to a ``QueueJournal``; past its memory
bound, ready messages wait on disk (``ReadyMessages``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from mainstem.broker.amqp.queues.arguments import QueueArguments
from mainstem.broker.amqp.queues.journal import QueueJournal, Replay
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.paging import MemoryBound, ReadyMessages
from mainstem.broker.errors import AccessRefused
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.policies import NONE_APPLIED, Applied

DeadLetter = Callable[["ClassicQueue", QueueMessage, str], None]


class Consumer(Protocol):
    tag: str
    no_ack: bool
    exclusive: bool
    prefetch: int  # its own unacked limit (0: none)

    def has_credit(self) -> bool: ...

    def deliver(self, queue: ClassicQueue, message: QueueMessage) -> None: ...

    def cancelled_by_server(self) -> None: ...


class ClassicQueue:
    kind = "classic"

    def __init__(self, name: str, *, durable: bool, auto_delete: bool, owner: object | None,
                 arguments: dict[str, Any], settings: QueueArguments, journal: QueueJournal | None,
                 dead_letter: DeadLetter, on_unused: Callable[[ClassicQueue], None],
                 memory: MemoryBound, spill_root: Path) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.owner = owner  # the connection of an exclusive queue
        self.arguments = arguments
        self.declared = settings  # from its arguments alone
        self.settings = settings  # what it runs with: with the policies that apply
        self.applied: Applied = NONE_APPLIED
        self.journal = journal
        self._dead_letter = dead_letter
        self._on_unused = on_unused  # x-expires elapsed or the last auto-delete consumer left
        self._ready = ReadyMessages(settings.max_priority + 1, memory, journal, spill_root)
        if journal is not None:
            journal.on_refused = self._withdraw
        self._bounded = settings.max_length is not None or settings.max_length_bytes is not None
        self._seq = 0
        self.ready_count = 0
        self.ready_bytes = 0
        self.unacked_count = 0
        self.stats = MessageStats()
        self.consumers: list[Consumer] = []
        self._next_consumer = 0
        self._had_consumers = False
        self._dispatching = False
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._unused_timer: asyncio.TimerHandle | None = None
        self.deleted = False
        self.touch()

    # -- publishing ----------------------------------------------------------

    def publish(self, message: QueueMessage, confirm: bool = False
                ) -> asyncio.Future[None] | bool | None:
        """Enqueue; returns False when refused (x-overflow reject-publish), else the
        durability future of a journaled message (fsynced if `confirm`) or None."""
        settings = self.settings
        if self._bounded and self._is_full(message) and settings.overflow != "drop-head":
            if settings.overflow == "reject-publish-dlx":
                self._dead_letter(self, message, "maxlen")
            return False
        ttl = settings.message_ttl_ms
        if ttl is not None:
            expires = time.monotonic() + ttl / 1000
            if message.expires_at is None or expires < message.expires_at:
                message.expires_at = expires
        self._seq += 1
        self.stats.publish += 1
        message.seq = self._seq
        durable_write = None
        if self.journal is not None and message.persistent:
            durable_write = self.journal.enqueue(message, confirm)
        self._push(message)
        if self._bounded:
            self._enforce_drop_head()
        if self.consumers:
            self.dispatch()
        if message.expires_at is not None:
            self._arm_expiry()
        return durable_write

    def reconfigure(self, settings: QueueArguments, applied: Applied) -> None:
        """A policy changed what the queue runs with: a lower length limit drops the
        oldest at once (drop-head), a new x-expires restarts its timer. A new TTL counts
        for messages published from now on, as in RabbitMQ."""
        self.applied = applied
        if settings == self.settings:
            return
        expires_changed = settings.expires_ms != self.settings.expires_ms
        self.settings = settings
        self._bounded = settings.max_length is not None or settings.max_length_bytes is not None
        if self._bounded and settings.overflow == "drop-head":
            self._enforce_drop_head()
        if expires_changed:
            self.touch()

    def _withdraw(self, messages: list[QueueMessage]) -> None:
        """The journal refused these (their publishers get a nack): those still waiting
        here leave the queue. One already delivered stays with its consumer."""
        for message in messages:
            if self._ready.withdraw(message):
                self.ready_count -= 1
                self.ready_bytes -= len(message.body)

    def _is_full(self, message: QueueMessage) -> bool:
        limit, limit_bytes = self.settings.max_length, self.settings.max_length_bytes
        return ((limit is not None and self.ready_count >= limit)
                or (limit_bytes is not None
                    and self.ready_bytes + len(message.body) > limit_bytes))

    def _enforce_drop_head(self) -> None:
        limit, limit_bytes = self.settings.max_length, self.settings.max_length_bytes
        while self.ready_count and (
                (limit is not None and self.ready_count > limit)
                or (limit_bytes is not None and self.ready_bytes > limit_bytes)):
            self._discard(self._pop(), "maxlen")

    # -- ready messages ------------------------------------------------------

    @property
    def in_memory(self) -> int:
        """Ready messages held in memory (the rest are paged out to disk)."""
        return self._ready.in_memory

    @property
    def backlog(self) -> asyncio.Future[None] | None:
        """While the pager is behind: done once it caught up (publishers wait for it)."""
        return self._ready.backlog

    def _push(self, message: QueueMessage) -> None:
        self.ready_count += 1
        self.ready_bytes += len(message.body)
        self._ready.push(message)

    def _pop(self) -> QueueMessage:
        level = self._ready.top_level()
        assert level is not None
        message = self._ready.popleft(level)
        self.ready_count -= 1
        self.ready_bytes -= len(message.body)
        return message

    def _take(self) -> QueueMessage | None:
        """The next live ready message; expired ones at the head are dead-lettered."""
        now = time.monotonic()
        while self.ready_count:
            message = self._pop()
            if message.expires_at is not None and message.expires_at <= now:
                self._discard(message, "expired")
                continue
            return message
        return None

    def _discard(self, message: QueueMessage, reason: str) -> None:
        self.settle(message)
        self._dead_letter(self, message, reason)

    def requeue(self, messages: Iterable[QueueMessage]) -> None:
        """Put delivered messages back where they were (by publish order); one returned
        more often than the delivery limit is dead-lettered instead."""
        limit = self.settings.delivery_limit
        for message in sorted(messages, key=lambda m: m.seq, reverse=True):
            self.unacked_count -= 1
            if limit is not None and message.delivery_count > limit:
                self._discard(message, "delivery_limit")
                continue
            self._ready.requeue(message)
            self.ready_count += 1
            self.ready_bytes += len(message.body)
        self._arm_expiry()
        self.dispatch()

    # -- settling ------------------------------------------------------------

    def settle(self, message: QueueMessage) -> None:
        if self.journal is not None and message.persistent:
            self.journal.settle(message)

    def ack(self, message: QueueMessage) -> None:
        self.unacked_count -= 1
        self.stats.ack += 1
        self.settle(message)

    def reject(self, message: QueueMessage) -> None:
        """Negatively acknowledged without requeue: dead-lettered if configured."""
        self.unacked_count -= 1
        self._discard(message, "rejected")

    def purge(self) -> int:
        count = self.ready_count
        self._ready.clear(self.settle)
        self.ready_count = self.ready_bytes = 0
        return count

    # -- consumers -----------------------------------------------------------

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def add_consumer(self, consumer: Consumer) -> None:
        if consumer.exclusive and self.consumers:
            raise AccessRefused(f"queue '{self.name}' in vhost has consumers; "
                                "cannot consume exclusively")
        if any(c.exclusive for c in self.consumers):
            raise AccessRefused(f"queue '{self.name}' in exclusive use")
        self.consumers.append(consumer)
        self._had_consumers = True
        self._cancel_unused_timer()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if not self.consumers:
            if self.auto_delete and self._had_consumers:
                self._on_unused(self)
                return
            self.touch()
        else:
            self.dispatch()

    def active_consumers(self) -> list[Consumer]:
        if self.settings.single_active_consumer:
            return self.consumers[:1]
        return self.consumers

    def dispatch(self) -> None:
        """Hand ready messages to consumers with credit, round robin."""
        if self._dispatching or self.deleted:
            return
        self._dispatching = True
        try:
            consumers = self.active_consumers()
            while self.ready_count and consumers:
                consumer = self._next_with_credit(consumers)
                if consumer is None:
                    break
                message = self._take()
                if message is None:
                    break
                message.delivery_count += 1
                consumer.deliver(self, message)
                if consumer.no_ack:
                    self.settle(message)
                else:
                    self.unacked_count += 1
        finally:
            self._dispatching = False

    def _next_with_credit(self, consumers: list[Consumer]) -> Consumer | None:
        count = len(consumers)
        for i in range(count):
            consumer = consumers[(self._next_consumer + i) % count]
            if consumer.has_credit():
                self._next_consumer = (self._next_consumer + i + 1) % count
                return consumer
        return None

    def get(self) -> QueueMessage | None:
        """basic.get: the next ready message, delivery counted."""
        self.touch()
        message = self._take()
        if message is not None:
            message.delivery_count += 1
        return message

    # -- timers: per-message expiry and x-expires ----------------------------

    def _arm_expiry(self) -> None:
        if self._expiry_timer is not None or self.deleted:
            return
        expiries = (self._ready.first_expiry(level) for level in self._ready.levels)
        heads = [expiry for expiry in expiries if expiry is not None]
        if heads:
            loop = asyncio.get_running_loop()
            when = min(heads) - time.monotonic() + loop.time()
            self._expiry_timer = loop.call_at(when, self._expire_heads)

    def _expire_heads(self) -> None:
        self._expiry_timer = None
        now = time.monotonic()
        for level in self._ready.levels:
            while (head := self._ready.head(level)) is not None \
                    and head.expires_at is not None and head.expires_at <= now:
                message = self._ready.popleft(level)
                self.ready_count -= 1
                self.ready_bytes -= len(message.body)
                self._discard(message, "expired")
        self._arm_expiry()

    def touch(self) -> None:
        """The queue was used (declared, consumed from, polled): restart x-expires."""
        self._cancel_unused_timer()
        expires = self.settings.expires_ms
        if expires is not None and not self.consumers and not self.deleted:
            loop = asyncio.get_running_loop()
            self._unused_timer = loop.call_later(expires / 1000, self._on_unused, self)

    def _cancel_unused_timer(self) -> None:
        if self._unused_timer is not None:
            self._unused_timer.cancel()
            self._unused_timer = None

    def stop_timers(self) -> None:
        self._cancel_unused_timer()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def restore(self, replay: Replay) -> None:
        """Messages replayed from the journal after a restart (TTL counts again)."""
        ttl = self.settings.message_ttl_ms
        expires = None if ttl is None else time.monotonic() + ttl / 1000
        self._ready.restore(replay, self._seq + 1, expires)
        self._seq += len(replay.offsets)
        self.ready_count += len(replay.offsets)
        self.ready_bytes += sum(replay.sizes)

    async def close(self) -> None:
        """The broker stops: the journal is flushed, the spill removed."""
        self.stop_timers()
        self._ready.close()
        if self.journal is not None:
            await self.journal.close()

    def delete_storage(self) -> None:
        """The queue was deleted: its journal and spill go."""
        self._ready.close()
        if self.journal is not None:
            self.journal.delete()
