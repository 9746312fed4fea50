"""A channel's bookkeeping of what it sent and what it was sent, as pure objects.

- ``DeliveryTags``: the deliveries awaiting basic.ack/nack/reject, by delivery tag.
- ``PublisherConfirms``: confirm mode's publish numbering, and the basic.ack/basic.nack
  answers once the writes of a read's publishes are over.
- ``Transaction``: tx mode's publishes and acknowledgements held until tx.commit.
- ``ConsumerTags``: the channel's consumers by tag, and the cancel notifications held
  while its own queue.delete runs.
- ``QueueNames``: the names a queue method means: the last declared queue for an empty
  one, a server-named queue, the reserved prefix.

The asyncio channel (``channel.py``) feeds them methods and the outcome of writes, and
sends what they return; what they hold of a write or a delivery is opaque to them.
"""

from __future__ import annotations

import base64
import os
from collections import deque
from collections.abc import Callable, Collection, Iterator
from typing import Generic, TypeVar

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.errors import AmqpCodecError, ChannelError
from mainstem.protocols.amqp091.events import ContentMessage
from mainstem.protocols.amqp091.methods import ReplyCode
from mainstem.protocols.amqp091.wire import Method

D = TypeVar("D")  # what a delivery holds (its consumer, queue and message)
W = TypeVar("W")  # a write a publish waits for
C = TypeVar("C")  # a consumer

Settle = m.BasicAck | m.BasicNack | m.BasicReject


class DeliveryTags(Generic[D]):
    """Tags count the channel's deliveries from 1, no-ack ones included (those are not
    kept), so the kept ones are in increasing tag order."""

    def __init__(self) -> None:
        self._kept: dict[int, D] = {}
        self._last = 0

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self) -> Iterator[D]:
        return iter(self._kept.values())

    def deliver(self, kept: D | None) -> int:
        """The next delivery's tag; `kept` waits for its acknowledgement (None: no-ack)."""
        self._last += 1
        if kept is not None:
            self._kept[self._last] = kept
        return self._last

    def tags_of(self, method: Settle) -> list[int]:
        """The tags a basic.ack/nack/reject settles: with multiple=true every kept tag up
        to its own (all of them for tag 0), else its own, which must be kept."""
        tag = method.delivery_tag
        if getattr(method, "multiple", False):
            if not tag:
                return list(self._kept)
            tags = []
            for kept in self._kept:  # in increasing order
                if kept > tag:
                    break
                tags.append(kept)
            return tags
        if tag not in self._kept:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}",
                               method)
        return [tag]

    def take(self, tags: Collection[int]) -> list[D]:
        """The deliveries of those tags still kept, no longer kept."""
        return [self._kept.pop(tag) for tag in tags if tag in self._kept]

    def take_all(self) -> list[D]:
        taken = list(self._kept.values())
        self._kept.clear()
        return taken


class PublisherConfirms(Generic[W]):
    """Each publish in confirm mode gets the next sequence number. The publishes of one
    read form a batch; batches are answered in read order, each once its writes are over
    (a later read waits for the ones before it): basic.ack multiple=true for each run of
    publishes whose writes all succeeded, basic.nack for one refused or with a failed
    write."""

    def __init__(self) -> None:
        self.enabled = False
        self._last_seq = 0
        self._answered_seq = 0
        self._read: list[tuple[int, list[W], bool]] = []  # this read's publishes
        # Reads' publishes waiting for their writes, oldest first, with those writes.
        self._waiting: deque[tuple[list[tuple[int, list[W], bool]], set[W]]] = deque()

    def select(self, method: m.ConfirmSelect, transactional: bool) -> m.ConfirmSelectOk | None:
        if transactional:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED,
                               "cannot switch from tx to confirm mode", method)
        self.enabled = True
        return None if method.nowait else m.ConfirmSelectOk()

    def published(self, writes: list[W], refused: bool) -> None:
        """A publish of this read, waiting for `writes` (refused: to be nacked)."""
        self._last_seq += 1
        self._read.append((self._last_seq, writes, refused))

    def end_read(self) -> set[W] | None:
        """This read's publishes become one batch; the writes it waits for (None: the read
        published nothing)."""
        if not self._read:
            return None
        batch, self._read = self._read, []
        writes = {write for _, waits, _ in batch for write in waits}
        self._waiting.append((batch, writes))
        return writes

    @property
    def waiting(self) -> bool:
        """Some batch is not answered yet."""
        return bool(self._waiting)

    def answer_over(self, over: Callable[[W], bool], failed: Callable[[W], bool]
                    ) -> tuple[list[Method], int]:
        """The answers to the oldest batches whose writes are all `over` (those that
        `failed` nacked), and how many publishes they acknowledge."""
        answers: list[Method] = []
        confirmed = 0
        waiting = self._waiting
        while waiting and all(over(write) for write in waiting[0][1]):
            batch, writes = waiting.popleft()
            more, count = self._answer(batch, {write for write in writes if failed(write)})
            answers += more
            confirmed += count
        return answers, confirmed

    def _answer(self, batch: list[tuple[int, list[W], bool]], failed: Collection[W]
                ) -> tuple[list[Method], int]:
        answers: list[Method] = []
        run_end = confirmed = 0
        for seq, writes, refused in batch:
            if refused or any(write in failed for write in writes):
                if run_end:
                    answers.append(m.BasicAck(run_end, True))
                    run_end = 0
                answers.append(m.BasicNack(seq, False, False))
            else:
                confirmed += 1
                run_end = seq
        if run_end:
            answers.append(m.BasicAck(run_end, True))  # everything before is answered
        if batch:
            self._answered_seq = batch[-1][0]
        return answers, confirmed

    @property
    def unconfirmed(self) -> int:
        """Publishes not yet answered."""
        return self._last_seq - self._answered_seq


class Transaction:
    """tx mode: publishes and acknowledgements wait for tx.commit (or go on rollback)."""

    def __init__(self) -> None:
        self.enabled = False
        self.publishes: list[ContentMessage] = []
        self.settles: list[tuple[Settle, list[int]]] = []

    def select(self, method: m.TxSelect, confirming: bool) -> m.TxSelectOk:
        if confirming:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED,
                               "cannot switch from confirm to tx mode", method)
        self.enabled = True
        return m.TxSelectOk()

    def hold_publish(self, content: ContentMessage) -> bool:
        """Whether the transaction takes this publish, to apply at commit."""
        if self.enabled:
            self.publishes.append(content)
        return self.enabled

    def hold_settle(self, method: Settle, tags: list[int]) -> bool:
        """Whether the transaction takes this acknowledgement, to apply at commit."""
        if self.enabled:
            self.settles.append((method, tags))
        return self.enabled

    def commit(self, method: m.TxCommit
               ) -> tuple[list[ContentMessage], list[tuple[Settle, list[int]]]]:
        """What the transaction did, to apply now; it starts over empty."""
        self._require(method)
        done = self.publishes, self.settles
        self.publishes, self.settles = [], []
        return done

    def rollback(self, method: m.TxRollback) -> m.TxRollbackOk:
        self._require(method)
        self.publishes, self.settles = [], []
        return m.TxRollbackOk()

    def _require(self, method: Method) -> None:
        if not self.enabled:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional",
                               method)


class ConsumerTags(Generic[C]):
    """A channel's consumers by tag. A tag is unique on its channel; one the client leaves
    empty is made here (amq.ctag-…, as RabbitMQ names them). While the channel's own
    queue.delete runs, the basic.cancel notices it causes wait for its delete-ok, as in
    RabbitMQ."""

    def __init__(self) -> None:
        self._by_tag: dict[str, C] = {}
        self._held: list[str] | None = None

    def __len__(self) -> int:
        return len(self._by_tag)

    def __iter__(self) -> Iterator[C]:
        return iter(list(self._by_tag.values()))  # a copy: delivering may cancel one

    def tag_for(self, method: m.BasicConsume) -> str:
        """The tag of a new consumer; reusing one on the channel is a connection error."""
        tag = method.consumer_tag or server_named("amq.ctag-")
        if tag in self._by_tag:
            raise AmqpCodecError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'",
                                 method=method)
        return tag

    def add(self, tag: str, consumer: C) -> None:
        self._by_tag[tag] = consumer

    def remove(self, tag: str) -> C | None:
        return self._by_tag.pop(tag, None)

    def take_all(self) -> list[C]:
        taken = list(self._by_tag.values())
        self._by_tag.clear()
        return taken

    def notices(self, tag: str) -> list[str]:
        """The server cancelled `tag`: the tags to notify the client of now."""
        if self._held is None:
            return [tag]
        self._held.append(tag)
        return []

    def hold_notices(self) -> None:
        self._held = []

    def release_notices(self) -> list[str]:
        """The held notices, to send now; notices go out at once from here on."""
        held, self._held = self._held or [], None
        return held


class QueueNames:
    """What a queue method's name means: empty is the queue the channel declared last
    (AMQP 0-9-1's current queue); a declared one may be left to the server (amq.gen-…)
    but not take the reserved amq. prefix."""

    def __init__(self) -> None:
        self.last = ""

    def resolve(self, name: str, method: Method) -> str:
        if name:
            return name
        if not self.last:
            raise ChannelError(ReplyCode.NOT_FOUND, "no previously declared queue", method)
        return self.last

    def declared(self, name: str) -> None:
        self.last = name

    def to_declare(self, name: str, method: Method) -> str:
        """The name a queue.declare creates."""
        if not name:
            return server_named("amq.gen-")
        if name.startswith("amq."):
            raise ChannelError(ReplyCode.ACCESS_REFUSED,
                               f"queue name '{name}' contains reserved prefix 'amq.*'", method)
        require_utf8("queue", name, method)
        return name


def server_named(prefix: str) -> str:
    """A name nobody else holds: 128 random bits, as RabbitMQ makes them."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode()[:22]


def require_utf8(kind: str, name: str, method: Method) -> None:
    """Names are kept and shown as text: bytes that are not UTF-8 are a syntax error."""
    try:
        name.encode()
    except UnicodeEncodeError:
        raise AmqpCodecError(ReplyCode.SYNTAX_ERROR, f"{kind} name is not valid UTF-8",
                             method=method) from None
