"""What the parts of a cluster node need of it, handed to them instead of the node."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from mainstem.broker.core import BrokerCore
from mainstem.cluster.etcd import EtcdClient


@dataclass(frozen=True, slots=True)
class NodeContext:
    core: BrokerCore
    etcd: EtcdClient
    node_name: str
    spawn: Callable[[Coroutine[Any, Any, None]], None]  # a task stopped with the node
    lease: Callable[[], int]  # this node's current lease
