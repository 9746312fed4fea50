"""What the parts of a cluster node need of it, handed to them instead of the node."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from mainstem.broker.cluster_view import NodeAddress
from mainstem.broker.core import BrokerCore
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.replication.wire import FrameType, frame


@dataclass(frozen=True, slots=True)
class NodeContext:
    core: BrokerCore
    etcd: EtcdClient
    node_name: str
    spawn: Callable[[Coroutine[Any, Any, object]], None]  # a task stopped with the node
    lease: Callable[[], int]  # this node's current lease


class Peers:
    """The nodes etcd lists (this one too), and connections to their replication
    listeners, opened with the cluster's secret."""

    def __init__(self, me: str) -> None:
        self.me = me
        self.secret = ""  # the cluster's, once read from etcd
        self.nodes: dict[str, NodeAddress] = {}
        self.replication_ports: dict[str, int] = {}

    async def dial(self, peer: str, hello: FrameType
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `peer` that opens with `hello` (KeyError: etcd lists no such
        node)."""
        address, port = self.nodes[peer], self.replication_ports[peer]
        reader, writer = await asyncio.open_connection(address.host, port)
        fields = {"secret": self.secret, "node": self.me}
        writer.write(frame(hello, json.dumps(fields).encode()))
        return reader, writer
