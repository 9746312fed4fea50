"""A virtual host's exchanges, bindings and queue definitions as a cluster shares them.

In a cluster every node knows every exchange, binding and (non-exclusive) queue of every
virtual host, wherever it was declared. `SharedTopology` turns a vhost into records, one
per object, and finds what a change did by comparing the vhost's snapshot with the one
before; each record changed is a catalog change (`broker.replicated`) of kind
"amqp_exchange", "amqp_queue" or "amqp_binding" keyed by vhost and name (a binding by a
digest), and the vhost's client is answered once the cluster holds them. A deleted
object's key goes (no tombstone: a node that was away takes the cluster's view at its
restart, and queues named anew by every client, as celery's are, leave nothing behind).
Records made on other nodes are applied to the local vhost; a binding whose exchange or
queue has not arrived yet waits for it. Of two nodes declaring one queue at once, the one
etcd holds first keeps it (`keep_home`): the other's goes remote.

A classic queue is live on one node, its home (the node it was declared on, as RabbitMQ
places classic queues client-local); every other node holds a `RemoteQueue` naming that
home. An exclusive queue is shared too (its home is its connection's node): other
connections, on any node, are refused it but may publish to it, as RPC replies do.
Quorum queues and streams are shared by the replication of their logs, not here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from mainstem.broker.amqp.metadata import decode_table, encode_table
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.remote import RemoteQueue
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.routing import PREDECLARED, Binding
from mainstem.broker.amqp.routing.exchanges import binding_record, exchange_record
from mainstem.broker.amqp.routing.model import Exchange, ExchangeType
from mainstem.broker.catalog import ChangeNotifier, held_everywhere
from mainstem.broker.errors import BrokerError

if TYPE_CHECKING:
    from mainstem.broker.amqp.queues.manager import QueueManager

log = logging.getLogger("mainstem.broker")

EXCHANGES, QUEUES, BINDINGS = "exchanges", "queues", "bindings"
KINDS = {EXCHANGES: "amqp_exchange", QUEUES: "amqp_queue", BINDINGS: "amqp_binding"}
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


def keep_home(held: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """The merge rule of queue records: a queue another node holds keeps its home."""
    return written if held["home"] == written["home"] else held


class SharedTopology(ChangeNotifier):
    """What the vhosts tell of their changes; shares nothing until told where
    (`on_change`, set in a cluster)."""

    def __init__(self, queues: QueueManager) -> None:
        self.queues = queues
        self.applier = Applier("", lambda _: False)
        self.last: dict[str, Snapshot] = {}  # vhost -> its objects as last shared or applied
        # vhost -> records to apply later (bindings before their ends, or a vhost's objects
        # before its namespace); None: a deletion
        self.waiting: dict[str, dict[str, str | None]] = {}
        self._written: dict[str, Awaitable[None]] = {}  # vhost -> its last change shared
        self._loaded: dict[str, Snapshot] | None = None  # what the cluster held at start

    def join(self, node: str, live: Callable[[str], bool]) -> None:
        """This node joins a cluster: what etcd holds is applied next (`loaded` ends it)."""
        self.applier = Applier(node, live)
        self._loaded = {}

    # -- changes made here -------------------------------------------------------------

    def changed(self, vhost: VirtualHost) -> None:
        if self._applying or self.on_change is None:
            return  # applying what the cluster holds: nothing to share back
        current = snapshot(vhost, self.applier.node)
        before = self.last.get(vhost.name, {})
        self.last[vhost.name] = current
        for object_key, record in current.items():
            if before.get(object_key) != record:
                self._share(vhost.name, object_key, json.loads(record))
        for object_key in before.keys() - current.keys():
            self._share(vhost.name, object_key, None)

    def _share(self, vhost: str, object_key: str, row: dict[str, Any] | None) -> None:
        assert self.on_change is not None
        kind, _, name = object_key.partition("/")
        shared = self.on_change(KINDS[kind], (vhost, name), row)
        if shared is not None:
            self._written[vhost] = shared

    async def written(self, vhost: str) -> None:
        shared = self._written.get(vhost)
        if shared is not None:
            await held_everywhere(shared)

    # -- changes from the cluster --------------------------------------------------------

    def apply(self, kind: str, key: Sequence[str],
              row: dict[str, Any] | None) -> None:
        """A record made on another node (None: deleted); `kind` one of KINDS' keys."""
        vhost_name, name = key
        object_key = f"{kind}/{name}"
        record = None if row is None else json.dumps(row, sort_keys=True,
                                                     separators=(",", ":"))
        if self._loaded is not None and record is not None:
            self._loaded.setdefault(vhost_name, {})[object_key] = record
        vhost = self._vhost(vhost_name)
        waiting = self.waiting.setdefault(vhost_name, {})
        if vhost is None:  # its namespace's record is still to come
            waiting[object_key] = record
            return
        previous = self.last.get(vhost_name, {}).get(object_key)
        with self._applying_to(vhost):
            try:
                if not self.applier.apply(vhost, object_key, record, previous):
                    waiting[object_key] = record
                else:
                    waiting.pop(object_key, None)
                    self._retry_waiting(vhost, waiting)
            except BrokerError as error:
                log.error("amqp_topology.apply_failed", extra={"key": object_key,
                                                               "error": str(error)})
        if self._loaded is None:
            self.queues.save()

    @contextlib.contextmanager
    def _applying_to(self, vhost: VirtualHost) -> Iterator[None]:
        """Apply what the cluster holds (nothing is shared back), then take the vhost's
        objects as shared; at start `loaded` takes them once, after the last object."""
        with self.applying():
            try:
                yield
            finally:
                if self._loaded is None:
                    self.last[vhost.name] = snapshot(vhost, self.applier.node)

    def _vhost(self, name: str) -> VirtualHost | None:
        try:
            return self.queues.vhost(name)
        except BrokerError:
            return None

    def vhost_added(self, name: str) -> None:
        """A namespace arrived: what waited for it is applied."""
        vhost = self._vhost(name)
        waiting = self.waiting.get(name)
        if vhost is not None and waiting:
            with self._applying_to(vhost):
                self._retry_waiting(vhost, waiting)

    def _retry_waiting(self, vhost: VirtualHost, waiting: dict[str, str | None]) -> None:
        """Apply what waited (in the order it came), until a pass applies nothing more."""
        progress = True
        while progress and waiting:
            progress = False
            for object_key, record in list(waiting.items()):
                if self.applier.apply(vhost, object_key, record, None):
                    del waiting[object_key]
                    progress = True

    def node_gone(self, name: str) -> None:
        """A node's lease lapsed: its transient queues are gone everywhere (every node
        deletes the same keys; one would do)."""
        for vhost in list(self.queues.vhosts.values()):
            if self.applier.node_gone(vhost, name):
                self.changed(vhost)

    def loaded(self, returning: bool) -> None:
        """What the cluster held at start is applied. A data directory that was a member
        of this cluster before takes the cluster's view (what was deleted while it was
        away goes); one joining for the first time shares what it has."""
        held, self._loaded = self._loaded or {}, None
        for vhost in list(self.queues.vhosts.values()):
            stored = held.get(vhost.name, {})
            if returning:
                with self._applying_to(vhost):
                    for object_key, record in snapshot(vhost, self.applier.node).items():
                        if object_key not in stored:
                            self.applier.apply(vhost, object_key, None, record)
            self.last[vhost.name] = stored
            self.changed(vhost)  # what only this node has, it shares
        self.queues.save()
