"""Iggy's numeric ids, the same on every node of a cluster (`broker.cluster_view.IdRegistry`).

A claimed id is two keys, written by one transaction that succeeds only if neither
exists: `/mainstem/iggy/names/KIND/SCOPE.../NAME` holding the id and the reverse key
`/mainstem/iggy/ids/KIND/SCOPE.../ID` holding the name. So of two nodes claiming at once,
one wins a name and one an id; the other learns which it lost. KIND is `stream` (no
scope), `topic` (scope: the stream's namespace), `group` (scope: namespace and topic) or
`node` (each node's number, which numbers its Iggy clients apart from other nodes').
Every node mirrors the names keys into its Iggy model through the watch; at start the
model keeps only what etcd holds (ids given while a node was away, or alone, are the
cluster's to give again).

A consumer group's members are `/mainstem/iggy/members/NAMESPACE/TOPIC/GROUP/CLIENT`,
under the lease of the member's node (a dead node's members leave with it); every node
deals the group's partitions over all of them in the order of their keys' creation
revisions, so each member gets the same partitions on every node.

A stream or namespace deleted through any protocol takes its Iggy id (and its topics'
and groups') with it: each node that deletes it locally drops the name's keys with a
transaction that holds only if the name's key is still the one it knew (its revision),
so a name claimed again meanwhile keeps its new id, and, for a stream, only if the
cluster no longer has it (a node also drops its copy of a stream it does not replicate).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from mainstem.broker import layout
from mainstem.broker.errors import AlreadyExists, BrokerError
from mainstem.broker.iggy.model import (
    GROUP,
    STREAM,
    TOPIC,
    Group,
    IdTaken,
    IggyModel,
    scope_of,
)
from mainstem.broker.streams import Stream
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import Compare, EtcdError, KeyValue, delete, delete_prefix, put
from mainstem.cluster.etcd_keys import path, prefix, segments, written

AREA = "iggy"
NAMES, IDS, MEMBERS = "names", "ids", "members"
NODE = "node"
CLIENT_BITS = 22  # a node numbers 4M clients; u32 client ids leave room for 1023 nodes

log = logging.getLogger("mainstem.cluster")


class IggyIds:
    def __init__(self, context: NodeContext) -> None:
        self.context = context
        self.etcd = context.etcd
        self.model: IggyModel = context.core.iggy
        self.streams = context.core.streams
        self.spawn = context.spawn
        self.lease = context.lease
        self._unwatch: Callable[[], None] | None = None
        # What etcd held at start, while it is being read (None afterwards), and the
        # members read then (their groups' keys sort after theirs).
        self._seen: set[tuple[str, tuple[str, ...], str]] | None = set()
        self._members_read: list[tuple[list[str], KeyValue]] = []
        # (kind, scope, name) -> (revision of its key, id), as the watch last said.
        self._known: dict[tuple[str, tuple[str, ...], str], tuple[int, int]] = {}

    async def install(self) -> None:
        """From now on, Iggy ids given on this node are the cluster's."""
        node = self.context.node_name  # its Iggy clients numbered apart from others'
        found = await written(partial(self.etcd.get, path(AREA, NAMES, NODE, node)))
        number = int(found.value) if found else await self.claim(NODE, (), node, None)
        self.model.number_clients_from(number << CLIENT_BITS)
        self.model.registry = self
        self._unwatch = self.streams.watch(self.stream_deleted)

    def uninstall(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
        self.model.registry = None

    # -- IdRegistry ------------------------------------------------------------------

    async def claim(self, kind: str, scope: tuple[str, ...], name: str,
                    wanted: int | None) -> int:
        by_name = path(AREA, NAMES, kind, *scope, name)
        while True:
            number = wanted if wanted else await written(partial(self._next_free, kind,
                                                                  scope))
            if await written(partial(self._try, kind, scope, name, number)):
                return number
            if await written(partial(self.etcd.get, by_name)):
                raise AlreadyExists(f"{kind} {name} already exists")
            if wanted:
                raise IdTaken(f"{kind} id {wanted} already exists")
            # another name took the next id meanwhile: try the one after

    def claim_later(self, kind: str, scope: tuple[str, ...], name: str, proposed: int) -> None:
        self.spawn(self._claim_first_sight(kind, scope, name, proposed))

    async def _claim_first_sight(self, kind: str, scope: tuple[str, ...], name: str,
                                 proposed: int) -> None:
        try:
            try:
                await self.claim(kind, scope, name, proposed)
            except IdTaken:
                await self.claim(kind, scope, name, None)
        except AlreadyExists:
            return  # another node named it: the watch brings its id
        except BrokerError as error:
            log.warning("iggy.claim_failed", extra={"name": name, "error": str(error)})

    async def release(self, kind: str, scope: tuple[str, ...], name: str | None) -> None:
        if name is None:
            operations = [delete_prefix(prefix(AREA, table, kind, *scope))
                          for table in (NAMES, IDS)]
        else:
            by_name = path(AREA, NAMES, kind, *scope, name)
            found = await written(partial(self.etcd.get, by_name))
            if found is None:
                return
            operations = [delete(by_name), delete(path(AREA, IDS, kind, *scope,
                                                       int(found.value)))]
        if kind == GROUP:
            named = () if name is None else (name,)
            operations.append(delete_prefix(prefix(AREA, MEMBERS, *scope, *named)))
        await written(partial(self.etcd.txn, [], operations))

    async def join(self, namespace: str, topic: str, group: str, client_id: int) -> None:
        key = path(AREA, MEMBERS, namespace, topic, group, client_id)
        await written(partial(self.etcd.put, key, b"{}", self.lease()))

    async def leave(self, namespace: str, topic: str, group: str, client_id: int) -> None:
        """Never fails: a member etcd keeps goes with this node's lease at the latest."""
        try:
            await self.etcd.delete(path(AREA, MEMBERS, namespace, topic, group, client_id))
        except EtcdError as error:
            log.warning("iggy.leave_failed", extra={"group": group, "error": str(error)})

    async def _next_free(self, kind: str, scope: tuple[str, ...]) -> int:
        taken, _ = await self.etcd.get_prefix(prefix(AREA, IDS, kind, *scope))
        return 1 + max((int(kv.key.rpartition("/")[2]) for kv in taken), default=0)

    async def _try(self, kind: str, scope: tuple[str, ...], name: str, number: int) -> bool:
        by_name, by_id = path(AREA, NAMES, kind, *scope, name), path(AREA, IDS, kind, *scope,
                                                                     number)
        return await self.etcd.txn(
            [Compare(by_name, "CREATE", 0), Compare(by_id, "CREATE", 0)],
            [put(by_name, str(number).encode()), put(by_id, name.encode())])

    # -- the watch -------------------------------------------------------------------

    def event(self, kv: KeyValue, deleted: bool) -> None:
        """A change of `/mainstem/iggy/...`."""
        self._apply(segments(kv.key)[1:], None if deleted else kv)

    def _apply(self, parts: list[str], kv: KeyValue | None) -> None:
        if parts[0] == MEMBERS:
            self._apply_member(parts[1:], kv)
            return
        table, kind, *scope, name = parts
        if table != NAMES or kind == NODE:
            return  # the reverse keys only guard ids; node numbers are for clients
        claimed = (kind, tuple(scope), name)
        if self._seen is not None:
            self._seen.add(claimed)
        if kv is None:
            self._known.pop(claimed, None)
        else:
            self._known[claimed] = (kv.mod_revision, int(kv.value))
        if kind == GROUP:
            namespace, topic = scope
            if kv is None:
                self.model.drop_group(namespace, topic, name)
            else:
                self.model.record_group(namespace, topic, int(kv.value), name)
            return
        namespace = "" if kind == STREAM else scope[0]
        if kv is None:
            self.model.drop(kind, namespace, name)
        else:
            self.model.record(kind, namespace, name, int(kv.value))

    # -- deletions through any protocol -----------------------------------------------

    def stream_deleted(self, stream: Stream) -> None:
        """A stream was deleted on this node: its topic id and groups go."""
        scope = (stream.namespace, stream.name)
        storage = layout.storage_name("stream", stream.namespace, stream.name)
        gone = Compare(path("streams", storage), "CREATE", 0)
        self.spawn(self._release_gone(TOPIC, (stream.namespace,), stream.name,
                                      [prefix(AREA, t, GROUP, *scope) for t in (NAMES, IDS)]
                                      + [prefix(AREA, MEMBERS, *scope)], gone))

    def namespace_deleted(self, namespace: str) -> None:
        """A namespace was deleted on this node: its stream id, topics and groups go."""
        self.spawn(self._release_gone(STREAM, (), namespace,
                                      [prefix(AREA, t, k, namespace) for t in (NAMES, IDS)
                                       for k in (TOPIC, GROUP)]
                                      + [prefix(AREA, MEMBERS, namespace)]))

    async def _release_gone(self, kind: str, scope: tuple[str, ...], name: str,
                            below: list[str], *conditions: Compare) -> None:
        known = self._known.get((kind, scope, name))
        if known is None:
            return
        revision, number = known
        by_name = path(AREA, NAMES, kind, *scope, name)
        operations = [delete(by_name), delete(path(AREA, IDS, kind, *scope, number)),
                      *(delete_prefix(p) for p in below)]
        try:
            await written(partial(self.etcd.txn,
                                  [Compare(by_name, "MOD", revision), *conditions],
                                  operations))
        except BrokerError as error:
            log.warning("iggy.release_failed", extra={"name": name, "error": str(error)})

    def _apply_member(self, parts: list[str], kv: KeyValue | None) -> None:
        if self._seen is not None and kv is not None:
            self._members_read.append((parts, kv))
            return
        namespace, topic, name, client = parts
        group = self._group(namespace, topic, name)
        if group is None:
            return
        stream = self.streams.find(namespace, topic)
        partitions = len(stream.services) if stream else 0
        if kv is None:
            self.model.remove_member(group, int(client), partitions)
        else:
            self.model.add_member(group, int(client), kv.create_revision, partitions)

    def _group(self, namespace: str, topic: str, name: str) -> Group | None:
        return next((g for g in self.model.list_groups(namespace, topic) if g.name == name),
                    None)

    def loaded(self) -> None:
        """Everything etcd held at start is applied: drop what it lacks."""
        seen, self._seen = self._seen or set(), None
        for kind, namespace, name in self.model.known_ids():
            if (kind, scope_of(kind, namespace), name) not in seen:
                self.model.drop(kind, namespace, name)
        for group in list(self.model.groups.values()):
            if (GROUP, (group.namespace, group.topic), group.name) not in seen:
                self.model.drop_group(group.namespace, group.topic, group.name)
        for parts, kv in self._members_read:
            self._apply_member(parts, kv)
        self._members_read.clear()
