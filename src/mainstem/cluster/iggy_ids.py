"""Iggy's numeric ids, the same on every node of a cluster (`broker.cluster_view.IdRegistry`).

A claimed id is two keys, written by one transaction that succeeds only if neither
exists: `/mainstem/iggy/names/KIND/SCOPE.../NAME` holding the id and the reverse key
`/mainstem/iggy/ids/KIND/SCOPE.../ID` holding the name. So of two nodes claiming at once,
one wins a name and one an id; the other learns which it lost. KIND is `stream` (no
scope), `topic` (scope: the stream's namespace) or `group` (scope: namespace and topic).
Every node mirrors the names keys into its Iggy model through the watch; at start the
model keeps only what etcd holds (ids given while a node was away, or alone, are the
cluster's to give again).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from mainstem.broker.errors import AlreadyExists, BrokerError
from mainstem.broker.iggy.model import GROUP, STREAM, IdTaken, IggyModel, scope_of
from mainstem.cluster.etcd import Compare, EtcdClient, KeyValue, delete, delete_prefix, put
from mainstem.cluster.metadata_keys import path, prefix, written

AREA = "iggy"
NAMES, IDS = "names", "ids"
Spawn = Callable[[Coroutine[Any, Any, None]], None]

log = logging.getLogger("mainstem.cluster")


class IggyIds:
    def __init__(self, etcd: EtcdClient, model: IggyModel, spawn: Spawn) -> None:
        self.etcd = etcd
        self.model = model
        self.spawn = spawn
        # What etcd held at start, while it is being read (None afterwards).
        self._seen: set[tuple[str, tuple[str, ...], str]] | None = set()

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
        with contextlib.suppress(AlreadyExists):  # another node named it: the watch says
            try:
                await self.claim(kind, scope, name, proposed)
            except IdTaken:
                await self.claim(kind, scope, name, None)
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
        await written(partial(self.etcd.txn, [], operations))

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

    def apply(self, parts: list[str], kv: KeyValue | None) -> None:
        """A change of `/mainstem/iggy/...` (`parts` after `iggy`; kv None: deleted)."""
        table, kind, *scope, name = parts
        if table != NAMES:
            return  # the reverse keys only guard ids
        if self._seen is not None:
            self._seen.add((kind, tuple(scope), name))
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

    def loaded(self) -> None:
        """Everything etcd held at start is applied: drop what it lacks."""
        seen, self._seen = self._seen or set(), None
        for kind, namespace, name in self.model.known_ids():
            if (kind, scope_of(kind, namespace), name) not in seen:
                self.model.drop(kind, namespace, name)
        for group in list(self.model.groups.values()):
            if (GROUP, (group.namespace, group.topic), group.name) not in seen:
                self.model.drop_group(group.namespace, group.topic, group.name)
