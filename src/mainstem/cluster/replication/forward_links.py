"""Forwarding appends between nodes: a replica's appends go to the partition's leader.

Every protocol may be used on any node (issue: AMQP, Iggy, BSON events and segments
connect anywhere). On a replica, the partition's Appender hands each append call to a
`PartitionForwarder`, which sends it over one connection per leader node to that node's
replication listener; the leader runs it on its own Appender and answers once it is
committed. While a partition has no leader (an election), appends wait for one; those
sent to a node etcd no longer names as leader, and not answered, go to the next one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from mainstem.broker.stream_service import Appender, NotWritable, PartitionService, Receipt
from mainstem.broker.stream_service.forwarding import ForwardedAppend
from mainstem.cluster.context import Peers
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.leader import read_frame

log = logging.getLogger("mainstem.cluster")

LEADER_WAIT_S = 15.0  # an append waits this long for a partition to have a leader
MAX_ANSWER = 64 * 1024
LEADER_CHECK_S = 0.1  # how often a forwarder waiting for answers looks who leads


class ForwardFailed(NotWritable):
    """The leader could not take a forwarded append (it is not the leader any more, or
    the connection to it broke before it answered)."""


class NotRun(ForwardFailed):
    """The node asked is not the leader: it ran nothing, so the append may go elsewhere."""


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer:
    """A leader's answer to a forwarded append."""

    offset: int  # of the append's first record
    sequence: int | None  # the writer's, when the append named one


class _Link:
    """One connection to a leader node, carrying forwarded appends and their answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pending: dict[int, asyncio.Future[Answer]] = {}
        self.ids = itertools.count(1)
        self.task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                kind, body = await read_frame(reader, MAX_ANSWER)
                if kind != wire.FrameType.FORWARDED:
                    raise wire.WireError(f"unexpected frame {kind} on a forwarding link")
                answer = json.loads(body)
                future = self.pending.pop(int(answer["id"]), None)
                if future is None or future.done():
                    continue
                if "error" in answer:
                    failure = NotRun if answer.get("retry") else ForwardFailed
                    future.set_exception(failure(str(answer["error"])))
                else:
                    future.set_result(Answer(int(answer["offset"]), answer.get("sequence")))
        except (OSError, asyncio.IncompleteReadError, wire.WireError, ValueError) as error:
            self._fail(ForwardFailed(f"the leader's connection broke: {error}"))
        finally:
            self.writer.close()

    def _fail(self, error: Exception) -> None:
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()

    def send(self, stream: str, partition: int, append: ForwardedAppend
             ) -> asyncio.Future[Answer]:
        request = next(self.ids)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending[request] = future
        self.writer.write(wire.encode_forward(request, stream, partition, append))
        return future

    @property
    def closed(self) -> bool:
        return self.task.done()


class Forwarding:
    """This node's links to leader nodes."""

    def __init__(self, peers: Peers) -> None:
        self.peers = peers
        self._links: dict[str, _Link] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def link(self, leader: str) -> _Link:
        lock = self._opening.setdefault(leader, asyncio.Lock())
        async with lock:
            link = self._links.get(leader)
            if link is None or link.closed:
                reader, writer = await self.peers.dial(leader, wire.FrameType.FORWARD_HELLO)
                link = self._links[leader] = _Link(reader, writer)
            return link

    def close(self) -> None:
        for link in self._links.values():
            link.task.cancel()
        self._links.clear()


class Replica(Protocol):
    """What a forwarder asks of the replica it forwards for (a `PartitionRole`)."""

    storage: str
    index: int
    service: PartitionService

    @property
    def leader_node(self) -> str | None: ...

    async def wait_changed(self, timeout: float) -> None: ...


@dataclass(eq=False, slots=True)
class _Pending:
    append: ForwardedAppend
    answer: asyncio.Future[Answer]


class PartitionForwarder:
    """What a replica's Appender forwards through: to the leader of its partition.

    Appends leave in the order they were made (a publisher's messages stay in order): one
    pump sends whatever has queued up to the leader, waits for the answers, and puts any
    the node asked did not run (it was not the leader, or not yet) back at the head of
    the queue for the next leader. Once another node leads (or none), appends sent and
    not answered are recalled to the head of the queue too and go to the new leader: a
    frozen old leader holds no one (issue 39). The new leader drops those a named writer
    had stored already; an unnamed one may be stored twice, as if its publisher had
    republished after a nack (see docs/cluster.md, Guarantees)."""

    def __init__(self, links: Forwarding, role: Replica) -> None:
        self.links = links
        self.role = role
        self._queue: deque[_Pending] = deque()
        self._in_flight: deque[tuple[_Pending, asyncio.Future[Answer]]] = deque()
        self._pump: asyncio.Task[None] | None = None

    def forward(self, append: ForwardedAppend) -> asyncio.Future[int]:
        return _chain(self._enqueue(append), lambda ran: ran.offset)

    def sequence(self, writer: str) -> asyncio.Future[int | None]:
        """The writer's sequence as its leader has it committed: appending nothing under
        its name, the answer comes once everything before is committed."""
        return _chain(self._enqueue(ForwardedAppend((), False, writer=writer)),
                      lambda ran: ran.sequence)

    def _enqueue(self, append: ForwardedAppend) -> asyncio.Future[Answer]:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(append, answer))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())
        return answer

    async def _run(self) -> None:
        role = self.role
        loop, me, nodes = asyncio.get_running_loop(), self.links.peers.me, self.links.peers.nodes
        waited_since = loop.time()
        while self._queue:
            leader = role.leader_node
            if leader == me and role.service.takes_writes:  # run here now, in order
                await self._answer_all(self.stage_here())
                continue
            if leader is None or leader == me or leader not in nodes:
                if loop.time() - waited_since > LEADER_WAIT_S:
                    self._fail_all(ForwardFailed(f"partition {role.index} of a stream has had "
                                                 f"no leader for {LEADER_WAIT_S:.0f} s"))
                    return
                await role.wait_changed(0.1)
                continue
            try:
                link = await self.links.link(leader)
            except OSError:
                await role.wait_changed(0.2)
                continue
            if await self._send_all(link, leader):
                waited_since = loop.time()
            else:
                await role.wait_changed(0.1)  # not the leader (any more, or yet)

    async def _send_all(self, link: _Link, leader: str) -> bool:
        """Send everything queued; True unless the node ran none of it. The first goes
        alone: a node just elected may refuse it and take the next, which would reorder
        them; once it took one, it refuses only a suffix (if it stops leading)."""
        if not self._queue:
            return True  # this node was elected meanwhile: it staged them
        self._send(link, self._queue.popleft())
        if not await self._collect(leader):
            return False
        while self._queue:
            self._send(link, self._queue.popleft())
        await self._collect(leader)
        return True

    def _send(self, link: _Link, item: _Pending) -> None:
        answer = link.send(self.role.storage, self.role.index, item.append)
        self._in_flight.append((item, answer))

    async def _collect(self, leader: str) -> bool:
        """Pass the leader's answers on, in order, until none is in flight. What the node
        ran none of (it was not the leader) goes back to the head of the queue, and so
        does all that is in flight once `leader` no longer leads: False if any did."""
        not_run: list[_Pending] = []
        recalled = False
        while self._in_flight:
            item, answer = self._in_flight[0]
            if self.role.leader_node != leader:
                self._recall()
                recalled = True
                break
            await asyncio.wait({answer}, timeout=LEADER_CHECK_S)
            if not self._in_flight or self._in_flight[0][0] is not item:
                recalled = True  # this node leads now: it staged them
                break
            if answer.done():
                self._in_flight.popleft()
                if not _settle(item, answer):
                    not_run.append(item)
        self._queue.extendleft(reversed(not_run))
        return not (not_run or recalled)

    def _recall(self) -> None:
        """What is in flight, unanswered, goes back to the head of the queue; a late
        answer from the node it went to is ignored."""
        for _, answer in self._in_flight:
            answer.cancel()
        self._queue.extendleft(reversed([item for item, _ in self._in_flight]))
        self._in_flight.clear()

    def stage_here(self) -> list[tuple[_Pending, Receipt]]:
        """Stage what is queued or in flight on this node's appender, in order, at once:
        called as this node starts leading, before any append made here can go ahead of
        them."""
        self._recall()
        batch, self._queue = list(self._queue), deque()
        appender = self.role.service.appender
        return [(item, appender.run_forwarded(item.append)) for item in batch]

    def answer_staged(self, staged: list[tuple[_Pending, Receipt]]) -> None:
        if staged:
            asyncio.get_running_loop().create_task(self._answer_all(staged))

    async def _answer_all(self, staged: list[tuple[_Pending, Receipt]]) -> None:
        appender = self.role.service.appender
        for item, receipt in staged:
            try:
                item.answer.set_result(await committed(appender, receipt, item.append.writer))
            except Exception as error:
                item.answer.set_exception(error)

    def _fail_all(self, error: Exception) -> None:
        while self._queue:
            self._queue.popleft().answer.set_exception(error)


def _settle(item: _Pending, answer: asyncio.Future[Answer]) -> bool:
    """Pass the leader's answer on; False when it ran nothing (not the leader)."""
    error = answer.exception()
    if isinstance(error, NotRun):
        return False
    if error is not None:  # the leader failed it, or the link broke
        item.answer.set_exception(error)
    else:
        item.answer.set_result(answer.result())
    return True


def _chain(source: asyncio.Future[Answer], pick: Callable[[Answer], T]) -> asyncio.Future[T]:
    """What `pick` takes of the answer, once it comes (its error if it fails)."""
    target: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def done(source: asyncio.Future[Answer]) -> None:
        if target.done():
            return
        if source.cancelled():
            target.set_exception(ForwardFailed("the append was cancelled"))
        elif (error := source.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(pick(source.result()))

    source.add_done_callback(done)
    return target


async def committed(appender: Appender, receipt: Receipt, writer: str | None) -> Answer:
    """What a leader answers for an append it staged: its first offset and the writer's
    sequence, once committed."""
    await receipt.durable
    return Answer(receipt.first_offset, None if writer is None else appender.sequence(writer))
