"""Forwarding appends between nodes: a replica's appends go to the partition's leader.

Every protocol may be used on any node (issue: AMQP, Iggy, BSON events and segments
connect anywhere). On a replica, the partition's Appender hands each append call to a
`PartitionForwarder`, which sends it over one connection per leader node to that node's
replication listener; the leader runs it on its own Appender and answers once it is
committed. While a partition has no leader (an election), appends wait for one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from typing import TYPE_CHECKING

from mainstem.broker.stream_service.forwarding import ForwardedAppend
from mainstem.cluster import wire
from mainstem.cluster.leader import read_frame
from mainstem.log.partition import NotWritable

if TYPE_CHECKING:
    from mainstem.cluster.node import ClusterNode
    from mainstem.cluster.replica import PartitionRole

log = logging.getLogger("mainstem.cluster")

LEADER_WAIT_S = 15.0  # an append waits this long for a partition to have a leader
MAX_ANSWER = 64 * 1024


class ForwardFailed(NotWritable):
    """The leader could not take a forwarded append (it is not the leader any more, or
    the connection to it broke before it answered)."""


class _Link:
    """One connection to a leader node, carrying forwarded appends and their answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pending: dict[int, asyncio.Future[int]] = {}
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
                    future.set_exception(ForwardFailed(str(answer["error"])))
                else:
                    future.set_result(int(answer["offset"]))
        except (OSError, asyncio.IncompleteReadError, wire.WireError, ValueError) as error:
            self._fail(ForwardFailed(f"the leader's connection broke: {error}"))
        finally:
            self.writer.close()

    def _fail(self, error: Exception) -> None:
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()

    def send(self, stream: str, partition: int, append: ForwardedAppend) -> asyncio.Future[int]:
        request = next(self.ids)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pending[request] = future
        self.writer.write(wire.encode_forward(request, stream, partition, append))
        return future

    @property
    def closed(self) -> bool:
        return self.task.done()


class Forwarding:
    """This node's links to leader nodes."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._links: dict[str, _Link] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def link(self, leader: str) -> _Link:
        lock = self._opening.setdefault(leader, asyncio.Lock())
        async with lock:
            link = self._links.get(leader)
            if link is None or link.closed:
                address = self.node.nodes[leader]
                port = self.node.replication_ports[leader]
                reader, writer = await asyncio.open_connection(address.host, port)
                hello = {"secret": self.node.secret, "node": self.node.node_name}
                writer.write(wire.frame(wire.FrameType.FORWARD_HELLO, json.dumps(hello).encode()))
                link = self._links[leader] = _Link(reader, writer)
            return link

    def close(self) -> None:
        for link in self._links.values():
            link.task.cancel()
        self._links.clear()


class PartitionForwarder:
    """What a replica's Appender forwards through: to the leader of its partition."""

    def __init__(self, node: ClusterNode, role: PartitionRole) -> None:
        self.node = node
        self.role = role

    def forward(self, append: ForwardedAppend) -> asyncio.Future[int]:
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._run(append))

        def done(task: asyncio.Task[int]) -> None:
            if answer.done():
                return
            if task.cancelled():
                answer.set_exception(ForwardFailed("the append was cancelled"))
            elif task.exception() is not None:
                answer.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                answer.set_result(task.result())

        task.add_done_callback(done)
        return answer

    async def _run(self, append: ForwardedAppend) -> int:
        role = self.role
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT_S
        while loop.time() < deadline:
            leader = role.leader_node
            if leader == self.node.node_name and role.service.partition.writable:
                receipt = role.service.appender.run_forwarded(append)
                await receipt.durable
                return receipt.first_offset
            if leader is None or leader == self.node.node_name or leader not in self.node.nodes:
                await role.wait_changed(0.1)
                continue
            try:
                link = await self.node.forwarding.link(leader)
            except OSError:
                await role.wait_changed(0.2)
                continue
            return await link.send(role.storage, role.index, append)
        raise ForwardFailed(f"partition {role.index} of a stream has had no leader for "
                            f"{LEADER_WAIT_S:.0f} s")
