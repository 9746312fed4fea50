"""Iggy's view of the broker model: numeric ids and consumer groups.

An Iggy stream is a namespace and an Iggy topic is a stream of the log engine.
Iggy also names them by number, so the ids are tables of the catalog (`iggy_ids`,
`iggy_groups`) and survive restarts. Consumer groups are durable (id, name); their
members are connections, rebalanced on join, leave and disconnect: partitions are dealt
round robin over the members in join order. The numbers a broker hands out while it runs
(client ids, the round-robin turn of each topic) are kept here too, per broker.

In a cluster, ids and groups are claimed through `registry` (the cluster's
`IdRegistry`), so every node gives a name the same id; the tables here then mirror
what the cluster holds, kept current by `record` and `drop`. Group members are the
cluster's too: each node deals a group's partitions over every member of every node,
in the order they joined the cluster (`add_member`, `remove_member`), and client ids are
numbered apart per node (`number_clients_from`).
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from dataclasses import dataclass, field

from mainstem.broker.cluster_view import IdRegistry
from mainstem.broker.errors import AlreadyExists, NotFound

STREAM = "stream"
TOPIC = "topic"
GROUP = "group"


class IdTaken(AlreadyExists):
    """The id asked for belongs to another name."""


@dataclass(slots=True)
class Group:
    namespace: str
    topic: str
    id: int
    name: str
    members: dict[int, list[int]] = field(default_factory=dict)  # client id -> partitions
    generation: int = 0  # counts rebalances, so a member sees its assignment changed
    # In a cluster: the order members joined in, the same on every node (client id ->
    # etcd revision); a member joined here and not yet confirmed comes last.
    joined: dict[int, int] = field(default_factory=dict)


class IggyModel:
    def __init__(self, db: sqlite3.Connection) -> None:
        """`db`: a connection of its own to the catalog (`Catalog.connect`), closed by
        `close`."""
        self._db = db
        self._lock = threading.Lock()
        self.groups: dict[tuple[str, str, int], Group] = {}
        # Live Iggy connections: client id -> (address, user name or None).
        self.clients: dict[int, tuple[str, str | None]] = {}
        self._client_ids = itertools.count(1)
        self._turns: dict[tuple[str, str], int] = {}  # (namespace, topic) -> last turn
        self.registry: IdRegistry | None = None  # set by a node that joins a cluster
        for namespace, topic, gid, name in self._db.execute(
                "SELECT namespace, topic, id, name FROM iggy_groups"):
            self.groups[(namespace, topic, gid)] = Group(namespace, topic, gid, name)

    def close(self) -> None:
        self._db.close()

    def new_client_id(self) -> int:
        """An id for a new connection, unique in this broker."""
        return next(self._client_ids)

    def number_clients_from(self, first: int) -> None:
        """Give new connections ids from `first` on (ids unique in a cluster)."""
        self._client_ids = itertools.count(first)

    def next_turn(self, namespace: str, topic: str) -> int:
        """0, 1, 2...: a topic's round-robin counter for balanced sends."""
        turn = self._turns[(namespace, topic)] = self._turns.get((namespace, topic), -1) + 1
        return turn

    # -- ids ---------------------------------------------------------------------

    def id_of(self, kind: str, namespace: str, name: str) -> int:
        """The id of a stream or topic, assigned on first sight when it has none
        (namespaces and streams made by other protocols get one when listed)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id FROM iggy_ids WHERE kind=? AND namespace=? AND name=?",
                (kind, namespace, name)).fetchone()
            if row:
                known: int = row[0]
                return known
            number = self._assign(kind, namespace, name, None)
        if self.registry is not None:
            self.registry.claim_later(kind, scope_of(kind, namespace), name, number)
        return number

    async def claim(self, kind: str, namespace: str, name: str, wanted: int | None) -> int:
        """The id of a new stream or topic: `wanted` or the next free one, the same on
        every node of a cluster."""
        if self.registry is None:
            return self.assign(kind, namespace, name, wanted)
        number = await self.registry.claim(kind, scope_of(kind, namespace), name, wanted)
        self.record(kind, namespace, name, number)
        return number

    def record(self, kind: str, namespace: str, name: str, number: int) -> None:
        """Take the id the cluster gave a name (it replaces any other this node had
        for that name or that id)."""
        with self._lock:
            self._db.execute("DELETE FROM iggy_ids WHERE kind=? AND namespace=? AND "
                             "(name=? OR id=?)", (kind, namespace, name, number))
            self._db.execute("INSERT INTO iggy_ids VALUES (?, ?, ?, ?)",
                             (kind, namespace, name, number))

    def drop(self, kind: str, namespace: str, name: str) -> None:
        """The cluster dropped a name's id."""
        with self._lock:
            self._db.execute("DELETE FROM iggy_ids WHERE kind=? AND namespace=? AND name=?",
                             (kind, namespace, name))

    def known_ids(self) -> list[tuple[str, str, str]]:
        """(kind, namespace, name) of every id held here."""
        return list(self._db.execute("SELECT kind, namespace, name FROM iggy_ids"))

    def assign(self, kind: str, namespace: str, name: str, wanted: int | None) -> int:
        """Record a new stream or topic under `wanted` (or the next free id)."""
        with self._lock:
            self._db.execute("DELETE FROM iggy_ids WHERE kind=? AND namespace=? AND name=?",
                             (kind, namespace, name))
            return self._assign(kind, namespace, name, wanted)

    def _assign(self, kind: str, namespace: str, name: str, wanted: int | None) -> int:
        if wanted is None:
            row = self._db.execute("SELECT MAX(id) FROM iggy_ids WHERE kind=? AND namespace=?",
                                   (kind, namespace)).fetchone()
            wanted = (row[0] or 0) + 1
        try:
            self._db.execute("INSERT INTO iggy_ids VALUES (?, ?, ?, ?)",
                             (kind, namespace, name, wanted))
        except sqlite3.IntegrityError:
            raise IdTaken(f"{kind} id {wanted} already exists") from None
        return wanted

    def taken(self, kind: str, namespace: str, wanted: int) -> bool:
        row = self._db.execute("SELECT 1 FROM iggy_ids WHERE kind=? AND namespace=? AND id=?",
                               (kind, namespace, wanted)).fetchone()
        return row is not None

    def name_of(self, kind: str, namespace: str, wanted: int) -> str | None:
        row = self._db.execute("SELECT name FROM iggy_ids WHERE kind=? AND namespace=? AND id=?",
                               (kind, namespace, wanted)).fetchone()
        return row[0] if row else None

    async def forget(self, kind: str, namespace: str, name: str | None = None) -> None:
        """Drop an id (a whole namespace's topics when `name` is None), with the consumer
        groups of the topics it names, on every node of a cluster."""
        self._forget(kind, namespace, name)
        if self.registry is None:
            return
        await self.registry.release(kind, scope_of(kind, namespace), name)
        if kind == TOPIC:
            await self.registry.release(GROUP, (namespace, *([name] if name else [])), None)

    def _forget(self, kind: str, namespace: str, name: str | None) -> None:
        with self._lock:
            if name is None:
                self._db.execute("DELETE FROM iggy_ids WHERE kind=? AND namespace=?",
                                 (kind, namespace))
                self._db.execute("DELETE FROM iggy_groups WHERE namespace=?", (namespace,))
                doomed = [k for k in self.groups if k[0] == namespace]
            else:
                self._db.execute("DELETE FROM iggy_ids WHERE kind=? AND namespace=? AND name=?",
                                 (kind, namespace, name))
                if kind == TOPIC:
                    self._db.execute("DELETE FROM iggy_groups WHERE namespace=? AND topic=?",
                                     (namespace, name))
                doomed = [k for k in self.groups if k[:2] == (namespace, name)]
        for key in doomed:
            del self.groups[key]

    # -- consumer groups ---------------------------------------------------------

    def group(self, namespace: str, topic: str, gid: int | str) -> Group:
        for key, group in self.groups.items():
            if key[:2] == (namespace, topic) and gid in (group.id, group.name):
                return group
        raise NotFound(f"consumer group {gid} not found")

    def list_groups(self, namespace: str, topic: str) -> list[Group]:
        return [g for k, g in sorted(self.groups.items()) if k[:2] == (namespace, topic)]

    async def create_group(self, namespace: str, topic: str, gid: int | None,
                           name: str) -> Group:
        existing = self.list_groups(namespace, topic)
        if gid is None and self.registry is None:
            gid = max((g.id for g in existing), default=0) + 1
        if any(g.id == gid or g.name == name for g in existing):
            raise AlreadyExists(f"consumer group {gid or name} already exists")
        if self.registry is not None:
            gid = await self.registry.claim(GROUP, (namespace, topic), name, gid)
        assert gid is not None
        return self.record_group(namespace, topic, gid, name)

    def record_group(self, namespace: str, topic: str, gid: int, name: str) -> Group:
        """Add a group (made here, or by another node of the cluster)."""
        group = self.groups.get((namespace, topic, gid))
        if group is not None and group.name == name:
            return group
        self.drop_group(namespace, topic, name)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO iggy_groups VALUES (?, ?, ?, ?)",
                             (namespace, topic, gid, name))
        group = self.groups[(namespace, topic, gid)] = Group(namespace, topic, gid, name)
        return group

    async def delete_group(self, group: Group) -> None:
        self.drop_group(group.namespace, group.topic, group.name)
        if self.registry is not None:
            await self.registry.release(GROUP, (group.namespace, group.topic), group.name)

    def drop_group(self, namespace: str, topic: str, name: str) -> None:
        """Remove the group of that name, if any (deleted here or by another node)."""
        for key, group in list(self.groups.items()):
            if key[:2] == (namespace, topic) and group.name == name:
                with self._lock:
                    self._db.execute("DELETE FROM iggy_groups WHERE namespace=? AND topic=? "
                                     "AND id=?", (namespace, topic, group.id))
                del self.groups[key]

    async def join(self, group: Group, client_id: int, partitions: int) -> None:
        group.members.setdefault(client_id, [])
        rebalance(group, partitions)
        if self.registry is not None:
            await self.registry.join(group.namespace, group.topic, group.name, client_id)

    async def leave(self, group: Group, client_id: int, partitions: int) -> None:
        if not self.remove_member(group, client_id, partitions):
            raise NotFound(f"client {client_id} is not a member of consumer group {group.id}")
        if self.registry is not None:
            await self.registry.leave(group.namespace, group.topic, group.name, client_id)

    async def disconnect(self, client_id: int,
                         partition_counts: dict[tuple[str, str], int]) -> None:
        """A member's connection closed: it leaves every group it was in."""
        for group in self.groups_of(client_id):
            await self.leave(group, client_id,
                             partition_counts.get((group.namespace, group.topic), 0))

    def add_member(self, group: Group, client_id: int, joined: int, partitions: int) -> None:
        """A member joined through some node of the cluster (`joined`: its place in the
        cluster's order)."""
        group.members.setdefault(client_id, [])
        group.joined[client_id] = joined
        rebalance(group, partitions)

    def remove_member(self, group: Group, client_id: int, partitions: int) -> bool:
        """A member left (here, or through another node); False if it was none."""
        group.joined.pop(client_id, None)
        if group.members.pop(client_id, None) is None:
            return False
        rebalance(group, partitions)
        return True

    def groups_of(self, client_id: int) -> list[Group]:
        return [g for g in self.groups.values() if client_id in g.members]


def scope_of(kind: str, namespace: str) -> tuple[str, ...]:
    """Where an id is unique: streams among streams, topics within their stream."""
    return () if kind == STREAM else (namespace,)


def rebalance(group: Group, partitions: int) -> None:
    """Deal partitions 0..n-1 round robin over the members in join order."""
    unconfirmed = 1 << 63  # joined here, not yet in the cluster's order: last
    members = sorted(group.members, key=lambda m: group.joined.get(m, unconfirmed))
    group.generation += 1
    for assigned in group.members.values():
        assigned.clear()
    for partition in range(partitions):
        if members:
            group.members[members[partition % len(members)]].append(partition)
