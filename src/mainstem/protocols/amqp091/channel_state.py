"""A channel's bookkeeping of what it sent and what it was sent, as pure objects.

- ``DeliveryTags``: the deliveries awaiting basic.ack/nack/reject, by delivery tag.
- ``PublisherConfirms``: confirm mode's publish numbering, and the basic.ack/basic.nack
  answers once the writes of a read's publishes are over.
- ``Transaction``: tx mode's publishes and acknowledgements held until tx.commit.

The asyncio channel (``channel.py``) feeds them methods and the outcome of writes, and
sends what they return; what they hold of a write or a delivery is opaque to them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Generic, TypeVar

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.errors import ChannelError
from mainstem.protocols.amqp091.events import ContentMessage
from mainstem.protocols.amqp091.methods import ReplyCode
from mainstem.protocols.amqp091.wire import Method

D = TypeVar("D")  # what a delivery holds (its consumer, queue and message)
W = TypeVar("W")  # a write a publish waits for

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
    read form a batch; once its writes are over the batch is answered in publish order:
    basic.ack multiple=true for each run of publishes whose writes all succeeded,
    basic.nack for one refused or with a failed write."""

    def __init__(self) -> None:
        self.enabled = False
        self._last_seq = 0
        self._answered_seq = 0
        self._read: list[tuple[int, list[W], bool]] = []  # this read's publishes

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

    def end_read(self) -> list[tuple[int, list[W], bool]]:
        """This read's publishes, as one batch to answer once its writes are over."""
        batch, self._read = self._read, []
        return batch

    def answer(self, batch: list[tuple[int, list[W], bool]], failed: Collection[W]
               ) -> tuple[list[Method], int]:
        """The answers to a batch whose writes are over (`failed`: those that failed), and
        how many publishes they acknowledge."""
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
