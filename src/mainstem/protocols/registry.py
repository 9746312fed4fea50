"""The live connections of every protocol, as the management API lists and closes them.

The server registers each accepted socket's ConnectionContext with the task serving it;
the protocol handler fills in who logged in (`ctx.identify`). Closing asks the handler
to close politely when it can (`ctx.on_close_request`), and cancels the task otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mainstem.protocols.base import ConnectionContext

_POLITE_CLOSE_S = 2.0  # how long a handler gets to close by its protocol before cancellation

# struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, both u64.
_TCP_INFO_TRAFFIC = struct.Struct("=120xQQ")


def socket_traffic(writer: asyncio.StreamWriter) -> dict[str, int]:
    """Bytes out and in, from the kernel's TCP counters (Linux; empty elsewhere).

    One syscall per connection, and unlike counting in Python it includes sendfile().
    The counts are TCP sequence space, so they may include one for each side's FIN.
    """
    sock = writer.get_extra_info("socket")
    tcp_info = getattr(socket, "TCP_INFO", None)
    if sock is None or tcp_info is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return {}
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_TRAFFIC.size)
    except (OSError, ValueError):  # ValueError: the socket was closed (its fd is -1)
        return {}
    if len(info) < _TCP_INFO_TRAFFIC.size:
        return {}  # a kernel older than 4.2 has no byte counters
    bytes_out, bytes_in = _TCP_INFO_TRAFFIC.unpack(info)
    return {"bytes_in": bytes_in, "bytes_out": bytes_out}


@dataclass(slots=True)
class Connection:
    conn_id: int
    ctx: ConnectionContext
    task: asyncio.Task[None]
    local: str
    opened_at_ms: int

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: "peer -> local"."""
        return f"{self.ctx.peer} -> {self.local}"

    def describe(self) -> dict[str, Any]:
        """The connection as RabbitMQ's /api/connections shows one."""
        ctx = self.ctx
        traffic = socket_traffic(ctx.writer)
        peer_host, _, peer_port = ctx.peer.rpartition(":")
        host, _, port = self.local.rpartition(":")
        return {
            "name": self.name,
            "id": self.conn_id,
            "protocol": ctx.listener,
            "ssl": ctx.tls,
            "user": ctx.user,
            "vhost": ctx.namespace,
            "peer_host": peer_host.strip("[]"),
            "peer_port": int(peer_port) if peer_port.isdigit() else None,
            "host": host.strip("[]"),
            "port": int(port) if port.isdigit() else None,
            "connected_at": self.opened_at_ms,
            "state": "running",
            "recv_oct": traffic.get("bytes_in", 0),
            "send_oct": traffic.get("bytes_out", 0),
            "channels": len(ctx.channels),
            "client_properties": dict(ctx.client_properties),
            "user_provided_name": ctx.client_properties.get("connection_name"),
        }


def consumers_per_queue(connections: Iterable[Connection]) -> Counter[tuple[str | None, str]]:
    """How many consumers the protocol handlers recorded (`ctx.add_consumer`) on each
    (vhost, queue or stream): a stream's count includes its stream-protocol subscriptions,
    as RabbitMQ counts them."""
    return Counter((connection.ctx.namespace, str(consumer.get("queue", "")))
                   for connection in connections
                   for consumer in connection.ctx.consumers.values())


class ConnectionRegistry:
    def __init__(self) -> None:
        self._connections: dict[int, Connection] = {}

    def add(self, conn_id: int, ctx: ConnectionContext, task: asyncio.Task[None], local: str
            ) -> None:
        self._connections[conn_id] = Connection(
            conn_id, ctx, task, local, int(time.time() * 1000)
        )

    def remove(self, conn_id: int) -> None:
        self._connections.pop(conn_id, None)

    def __len__(self) -> int:
        return len(self._connections)

    def list(self) -> list[Connection]:
        return list(self._connections.values())

    def find(self, name: str) -> Connection | None:
        """By RabbitMQ-style name, by numeric id, or by the client-given `connection_name`
        (AMQP client_properties, stream PeerProperties); several connections may share a
        client-given name, the oldest of them is the one found."""
        for connection in self._connections.values():
            if name in (connection.name, str(connection.conn_id)):
                return connection
        for connection in self._connections.values():  # in the order they were added
            if connection.ctx.client_properties.get("connection_name") == name:
                return connection
        return None

    def per_protocol(self) -> Counter[str]:
        return Counter(connection.ctx.listener for connection in self._connections.values())

    async def close(self, connection: Connection, reason: str) -> None:
        """Close one connection: politely by its protocol if it can, by cancellation if not."""
        request = connection.ctx.on_close_request
        if request is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_POLITE_CLOSE_S):
                    await request(reason)
            await asyncio.wait({connection.task}, timeout=_POLITE_CLOSE_S)
        if not connection.task.done():
            connection.task.cancel()
            await asyncio.wait({connection.task}, timeout=_POLITE_CLOSE_S)
