"""A virtual host's exchanges, bindings and queue definitions as a cluster shares them.

In a cluster every node knows every exchange, binding and (non-exclusive) queue of every
virtual host, wherever it was declared. This module turns a vhost into records — one per
object, under a key such as ``exchanges/NAME``, ``queues/NAME`` or ``bindings/DIGEST`` —
and applies the records other nodes made. The cluster (`mainstem.cluster.amqp_topology`)
stores them in etcd and diffs one snapshot against the next to find what changed.

A classic queue is live on one node, its home (the node it was declared on, as RabbitMQ
places classic queues client-local); every other node holds a `RemoteQueue` naming that
home. An exclusive queue is shared too (its home is its connection's node): other
connections, on any node, are refused it but may publish to it, as RPC replies do.
Quorum queues and streams are shared by the replication of their logs, not here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from mainstem.broker.amqp.metadata import decode_table, encode_table
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.remote import RemoteQueue
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.routing import PREDECLARED, Binding
from mainstem.broker.amqp.routing.exchanges import binding_record, exchange_record
from mainstem.broker.amqp.routing.model import Exchange, ExchangeType

EXCHANGES, QUEUES, BINDINGS = "exchanges", "queues", "bindings"
# key ("kind/name") -> the object's record, canonical JSON (equal objects, equal text)
Snapshot = dict[str, str]


def _canonical(record: dict[str, Any]) -> str:
    """A record with its field-table arguments typed (`metadata.encode_table`), as
    canonical JSON."""
    typed = {**record, "arguments": encode_table(record["arguments"])}
    return json.dumps(typed, sort_keys=True, separators=(",", ":"))


def _binding_key(record: str) -> str:
    """Bindings have no name: one is keyed by a digest of everything that makes it one."""
    return f"{BINDINGS}/{hashlib.sha256(record.encode()).hexdigest()[:32]}"


def _home_of(queue: ClassicQueue, node: str) -> str | None:
    """The node a queue is live on, if the cluster shares it here; None if not shared."""
    if isinstance(queue, RemoteQueue):
        return queue.home_node if queue.kind == "classic" else None
    if type(queue) is ClassicQueue:
        return node
    return None  # a quorum queue: shared with its journal


def _queue_record(queue: ClassicQueue, home: str) -> dict[str, Any]:
    return {"durable": queue.durable, "auto_delete": queue.auto_delete,
            "exclusive": queue.owner is not None, "arguments": queue.arguments,
            "home": home}


# Records made once per object: a snapshot is taken on every change, and a vhost may
# hold thousands of bindings (values that never change) and queues (whose shared fields
# never change either).
_binding_records: WeakKeyDictionary[Binding, tuple[str, str]] = WeakKeyDictionary()
_queue_records: WeakKeyDictionary[ClassicQueue, str] = WeakKeyDictionary()


def snapshot(vhost: VirtualHost, node: str) -> Snapshot:
    """Every object of `vhost` this node shares with the cluster."""
    objects: Snapshot = {}
    for exchange in vhost.graph.exchanges():
        if exchange.name not in PREDECLARED:
            objects[f"{EXCHANGES}/{exchange.name}"] = _canonical(exchange_record(exchange))
    for queue in vhost.queues.values():
        home = _home_of(queue, node)
        if home is not None:
            record = _queue_records.get(queue)
            if record is None:
                record = _queue_records[queue] = _canonical(_queue_record(queue, home))
            objects[f"{QUEUES}/{queue.name}"] = record
    for binding in vhost.graph.bindings():
        keyed = _binding_records.get(binding)
        if keyed is None:
            record = _canonical(binding_record(binding))
            keyed = _binding_records[binding] = (_binding_key(record), record)
        objects[keyed[0]] = keyed[1]
    return objects


class Applier:
    """Applies records made on other nodes (and, at a restart, the cluster's view of
    this node's own) to the local vhosts; saving them is the caller's (once for many)."""

    def __init__(self, node: str, live: Callable[[str], bool]) -> None:
        self.node = node
        self._live = live

    def apply(self, vhost: VirtualHost, key: str, record: str | None,
              previous: str | None) -> bool:
        """Make the object at `key` match `record` (None: deleted; `previous` is what it
        was); False if it cannot be applied yet (a binding whose queue or exchange is
        still to come)."""
        kind, _, name = key.partition("/")
        if kind == EXCHANGES:
            self._exchange(vhost, name, None if record is None else json.loads(record))
        elif kind == QUEUES:
            self._queue(vhost, name, None if record is None else json.loads(record))
        elif kind == BINDINGS and record is not None:
            return self._bind(vhost, _binding(json.loads(record)))
        elif kind == BINDINGS and previous is not None:
            self._unbind(vhost, _binding(json.loads(previous)))
        return True

    def _exchange(self, vhost: VirtualHost, name: str, fields: dict[str, Any] | None) -> None:
        graph = vhost.graph
        if fields is None:
            graph.delete_exchange(name, by_client=False)
            return
        wanted = Exchange(name, ExchangeType(fields["type"]), fields["durable"],
                          fields["auto_delete"], fields["internal"],
                          decode_table(fields["arguments"]))
        if graph.has_exchange(name):
            if graph.get_exchange(name) == wanted:
                return
            graph.delete_exchange(name, by_client=False)  # redeclared differently elsewhere
        graph.declare_exchange(name, wanted.type, durable=wanted.durable,
                               auto_delete=wanted.auto_delete, internal=wanted.internal,
                               arguments=wanted.arguments, by_client=False)

    def _queue(self, vhost: VirtualHost, name: str, fields: dict[str, Any] | None) -> None:
        known = vhost.queues.get(name)
        if fields is None:
            if known is not None and _home_of(known, self.node) is not None:
                vhost.remove_queue(known, everywhere=False)
            return
        home = str(fields["home"])
        arguments = decode_table(fields["arguments"])
        if home == self.node:
            # Ours by the cluster's record but not here: a durable one lost with a wiped
            # disk comes back empty; a transient or exclusive one ended with this node's
            # last run (its key goes once this node has loaded the cluster's view).
            if known is None and fields["durable"] and not fields["exclusive"]:
                vhost.declare_queue(name, durable=fields["durable"], exclusive=False,
                                    auto_delete=fields["auto_delete"], arguments=arguments,
                                    owner=None)
            return
        if isinstance(known, RemoteQueue) and known.home_node == home:
            return
        if known is not None:  # declared here too at the same moment: the cluster chose
            vhost.remove_queue(known, everywhere=False)
        remote = vhost.add_remote(name, fields["durable"], fields["auto_delete"],
                                  fields["exclusive"], arguments)
        remote.home_node = home
        remote.home = lambda: home if self._live(home) else None

    def _bind(self, vhost: VirtualHost, binding: Binding) -> bool:
        graph = vhost.graph
        if not graph.has_exchange(binding.source):
            return False
        if binding.destination_kind == "exchange":
            if not graph.has_exchange(binding.destination):
                return False
        elif binding.destination not in vhost.queues and vhost.stream(binding.destination) \
                is None:
            return False
        graph.bind(binding)
        return True

    @staticmethod
    def _unbind(vhost: VirtualHost, binding: Binding) -> None:
        graph = vhost.graph
        if graph.has_exchange(binding.source) and binding in graph.bindings(binding.source):
            graph.unbind(binding)

    def node_gone(self, vhost: VirtualHost, node: str) -> bool:
        """A node left the cluster (its lease lapsed): its transient and exclusive queues
        went with it, as RabbitMQ deletes a down node's. True if any were here."""
        gone = [q for q in vhost.queues.values() if isinstance(q, RemoteQueue)
                and q.home_node == node and (not q.durable or q.owner is not None)]
        for queue in gone:
            vhost.remove_queue(queue, everywhere=False)
        return bool(gone)


def _binding(fields: dict[str, Any]) -> Binding:
    return Binding(**{**fields, "arguments": decode_table(fields["arguments"])})
