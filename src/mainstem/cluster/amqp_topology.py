"""AMQP exchanges, bindings and queue definitions shared by every node through etcd.

Each object of a virtual host is one etcd key, `/mainstem/amqp/VHOST/KIND/NAME` (see
`broker.amqp.shared_topology` for the records), so two nodes changing different objects
never conflict, and a vhost of thousands of bindings is not one large value. A node finds
what it changed by comparing the vhost's snapshot after a change with the one before, and
writes the difference to etcd before the client's `-ok`; a deleted object's key goes (no
tombstone: a node that was away takes etcd's view at its restart, and queues named anew
by every client, as celery's are, leave nothing behind). Changes made elsewhere arrive
through the node's watch and are applied to the local vhost; a binding whose exchange or
queue has not arrived yet waits for it. A queue's key is claimed (create-if-absent), so a
queue declared on two nodes at once gets one home.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from mainstem.broker.amqp import shared_topology
from mainstem.broker.amqp.queues.virtual_host import VirtualHost
from mainstem.broker.amqp.shared_topology import BINDINGS, QUEUES, Applier, Snapshot
from mainstem.broker.errors import BrokerError, PreconditionFailed
from mainstem.cluster.etcd import Compare, EtcdError, KeyValue, delete, put

if TYPE_CHECKING:
    from mainstem.cluster.node import ClusterNode

log = logging.getLogger("mainstem.cluster")

ROOT = "amqp"
MAX_TXN_OPS = 100  # etcd refuses a transaction of more than 128 operations by default
WRITE_WAIT_S = 30.0  # a client's -ok waits this long for etcd
MEMBER_FILE = "cluster-member"  # this data directory has been a member of that cluster


class SharedTopology:
    """Implements `broker.cluster_view.TopologyReplication`."""

    def __init__(self, node: ClusterNode, prefix: str) -> None:
        self.node = node
        self.prefix = prefix + ROOT + "/"
        self.applier = Applier(node.node_name, lambda name: name in node.nodes)
        self.stored: dict[str, bytes] = {}  # etcd key -> value, as this node last saw it
        self.revisions: dict[str, int] = {}  # etcd key -> mod revision
        self.last: dict[str, Snapshot] = {}  # vhost -> its objects as last shared or applied
        # vhost -> records to apply later (bindings before their ends, or a vhost's objects
        # before its namespace); None: a deletion
        self.waiting: dict[str, dict[str, str | None]] = {}
        # our writes the watch has yet to show (None: a deletion)
        self._echoes: dict[str, deque[bytes | None]] = {}
        self._writes: asyncio.Queue[tuple[str, list[tuple[str, bytes | None]],
                                          asyncio.Future[None]]] = asyncio.Queue()
        self._written: dict[str, asyncio.Future[None]] = {}
        self._applying = False
        self._loading = False

    # -- keys ------------------------------------------------------------------------

    def key(self, vhost: str, object_key: str) -> str:
        kind, _, name = object_key.partition("/")
        return f"{self.prefix}{quote(vhost, safe='')}/{kind}/{quote(name, safe='')}"

    def parse(self, key: str) -> tuple[str, str] | None:
        """(vhost, object key) of an etcd key under the root; None if malformed."""
        parts = key[len(self.prefix):].split("/")
        if len(parts) != 3:
            return None
        return unquote(parts[0]), f"{parts[1]}/{unquote(parts[2])}"

    # -- changes made here -------------------------------------------------------------

    def changed(self, vhost: VirtualHost) -> None:
        if self._applying:
            return  # applying what etcd holds: nothing to write back
        current = shared_topology.snapshot(vhost, self.node.node_name)
        before = self.last.get(vhost.name, {})
        self.last[vhost.name] = current
        writes: list[tuple[str, bytes | None]] = [
            (k, v.encode()) for k, v in current.items() if before.get(k) != v]
        writes += [(k, None) for k in before if k not in current]
        if writes:
            done = asyncio.get_running_loop().create_future()
            self._written[vhost.name] = done
            self._writes.put_nowait((vhost.name, writes, done))

    async def written(self, vhost: str) -> None:
        done = self._written.get(vhost)
        if done is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(done), WRITE_WAIT_S)
        except TimeoutError:
            raise PreconditionFailed(
                "the cluster's store (etcd) did not answer: the change holds on this node "
                "and reaches the others once etcd answers") from None

    async def share(self) -> None:
        """Write the changes in the order they were made, each batch in transactions."""
        while True:
            vhost, writes, done = await self._writes.get()
            while True:
                try:
                    await self._write(vhost, writes)
                    break
                except EtcdError as error:
                    log.warning("amqp_topology.write_failed", extra={"error": str(error)})
                    await asyncio.sleep(0.5)
                except Exception:  # a bug: logged, and no client waits for it forever
                    log.exception("amqp_topology.write_broken")
                    break
            if not done.done():
                done.set_result(None)

    async def _write(self, vhost: str, writes: list[tuple[str, bytes | None]]) -> None:
        for object_key, value in writes:
            if value is not None and self._claims(object_key):
                await self._claim(vhost, object_key, value)
        others = [(k, v) for k, v in writes if v is None or not self._claims(k)]
        for start in range(0, len(others), MAX_TXN_OPS):
            chunk = [(self.key(vhost, k), v) for k, v in others[start:start + MAX_TXN_OPS]]
            for key, value in chunk:
                self._echoes.setdefault(key, deque()).append(value)
            await self.node.etcd.txn([], [delete(key) if value is None else put(key, value)
                                          for key, value in chunk])

    @staticmethod
    def _claims(object_key: str) -> bool:
        """A queue declared here: its key must not hold another node's queue."""
        return object_key.startswith(QUEUES + "/")

    async def _claim(self, vhost: str, object_key: str, value: bytes) -> None:
        key = self.key(vhost, object_key)
        while True:
            found = self.stored.get(key)
            if found is not None and found != value and _home(found) != self.node.node_name:
                self._apply(vhost, object_key, found)  # theirs stands: ours goes remote
                return
            self._echoes.setdefault(key, deque()).append(value)
            if await self.node.etcd.txn([Compare(key, "MOD", self.revisions.get(key, 0))],
                                        [put(key, value)]):
                return
            self._echoes[key].pop()
            kv = await self.node.etcd.get(key)  # changed meanwhile: read it and look again
            self._store(key, kv.value if kv else None, kv.mod_revision if kv else 0)

    # -- changes etcd reports -------------------------------------------------------------

    def event(self, kv: KeyValue, deleted: bool) -> None:
        """A change under `/mainstem/amqp/` (one of ours, echoed, changes nothing)."""
        parsed = self.parse(kv.key)
        if parsed is None:
            return
        vhost, object_key = parsed
        value = None if deleted else kv.value
        echoes = self._echoes.get(kv.key)
        if echoes and echoes[0] == value:
            echoes.popleft()
            self._store(kv.key, value, kv.mod_revision)
            return
        self._store(kv.key, value, kv.mod_revision)
        self._apply(vhost, object_key, value)
        if not self._loading:
            self.node.core.queues.save()

    def _store(self, key: str, value: bytes | None, revision: int) -> None:
        """What etcd holds at `key`; a deleted key compares as revision 0."""
        if value is None:
            self.stored.pop(key, None)
            self.revisions.pop(key, None)
        else:
            self.stored[key] = value
            self.revisions[key] = revision

    def _apply(self, vhost_name: str, object_key: str, value: bytes | None) -> None:
        vhost = self._vhost(vhost_name)
        waiting = self.waiting.setdefault(vhost_name, {})
        record = None if value is None else value.decode()
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

    @contextlib.contextmanager
    def _applying_to(self, vhost: VirtualHost) -> Iterator[None]:
        """Apply what etcd holds (nothing is written back), then take the vhost's objects
        as shared; at start `load` takes them once, after the last object."""
        self._applying = True
        try:
            yield
        finally:
            self._applying = False
            if not self._loading:
                self.last[vhost.name] = shared_topology.snapshot(vhost, self.node.node_name)

    def _vhost(self, name: str) -> VirtualHost | None:
        try:
            return self.node.core.queues.vhost(name)
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
        for vhost in list(self.node.core.queues.vhosts.values()):
            if self.applier.node_gone(vhost, name):
                self.changed(vhost)

    # -- at start ------------------------------------------------------------------------

    def load(self, kvs: Iterable[KeyValue]) -> None:
        """Apply the cluster's topology read at start. A data directory that was a member
        of this cluster before takes the cluster's view (what was deleted while it was
        away goes); one joining for the first time shares what it has."""
        self._loading = True
        try:  # exchanges and queues before the bindings between them: none has to wait
            for kv in sorted(kvs, key=lambda kv: kv.key.split("/")[-2] == BINDINGS):
                self.event(kv, deleted=False)
        finally:
            self._loading = False
        member = self.node.core.data_dir / MEMBER_FILE
        returning = member.exists() and member.read_text() == self._cluster_id()
        for vhost in list(self.node.core.queues.vhosts.values()):
            stored = self._stored_objects(vhost.name)
            if returning:
                self._forget_unshared(vhost, stored)
            self.last[vhost.name] = stored
            self.changed(vhost)  # what only this node has, it shares
        self.node.core.queues.save()
        member.write_text(self._cluster_id())

    def _stored_objects(self, vhost: str) -> Snapshot:
        """The objects etcd holds of `vhost`, as this node saw them."""
        objects: Snapshot = {}
        for key, value in self.stored.items():
            parsed = self.parse(key)
            if parsed is not None and parsed[0] == vhost:
                objects[parsed[1]] = value.decode()
        return objects

    def _forget_unshared(self, vhost: VirtualHost, stored: Snapshot) -> None:
        with self._applying_to(vhost):
            for object_key, record in shared_topology.snapshot(
                    vhost, self.node.node_name).items():
                if object_key not in stored:
                    self.applier.apply(vhost, object_key, None, record)

    def _cluster_id(self) -> str:
        return hashlib.sha256(self.node.secret.encode()).hexdigest()


def _home(value: bytes) -> str | None:
    try:
        return str(json.loads(value)["home"])
    except (ValueError, KeyError, TypeError):
        return None
