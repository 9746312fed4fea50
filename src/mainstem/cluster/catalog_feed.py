"""The one feed of cluster-wide metadata: the broker's changes to etcd and back.

Every change a store makes on this node (`broker.replicated`) is one key,
`/mainstem/catalog/KIND/KEY...` (each key part percent-encoded), written one at a time
in the order made, so every node applies them in that order (a user before its
permissions). A deletion is a tombstone (null): etcd reports no event for deleting a key
it never had. A kind with a merge rule is written by compare-and-swap, so etcd keeps the
merge of what it held and what is written. Every node, this one included, applies each
key as the watch reports it (applying its own change again changes nothing, and keeps
every node in etcd's order when two change one thing). At start the node applies what
etcd holds in the order it was written, then `loaded` shares what only this node holds
(from before it joined) of the kinds that list theirs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

from mainstem.broker.replicated import Row
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import Compare, EtcdError, KeyValue, put

log = logging.getLogger("mainstem.cluster")

ROOT = "/mainstem/catalog/"
RETRY_S = 0.5
Applied = Callable[[str, tuple[str, ...], Row | None], None]


def path(kind: str, key: Iterable[object]) -> str:
    return ROOT + "/".join(quote(str(part), safe="") for part in (kind, *key))


class CatalogFeed:
    def __init__(self, context: NodeContext, applied: Applied) -> None:
        self.context = context
        self.kinds = context.core.kinds
        self._applied = applied  # the node's own follow-up of a change applied
        self._changes: asyncio.Queue[tuple[str, str, Row | None, asyncio.Future[None]]] = (
            asyncio.Queue())

    # -- changes made here -------------------------------------------------------------

    def changed(self, kind: str, key: tuple[Any, ...], row: Row | None) -> asyncio.Future[None]:
        """A store's `on_change`: done once etcd holds the change."""
        return self._queue(kind, key, self.kinds.encode(kind, row))

    def _queue(self, kind: str, key: tuple[Any, ...], row: Row | None) -> asyncio.Future[None]:
        written = asyncio.get_running_loop().create_future()
        self._changes.put_nowait((path(kind, key), kind, row, written))
        return written

    async def share(self) -> None:
        while True:
            key, kind, row, written = await self._changes.get()
            while True:
                try:
                    await self._write(key, kind, row)
                    break
                except EtcdError as error:
                    log.warning("catalog.write_failed", extra={"error": str(error)})
                    await asyncio.sleep(RETRY_S)
            if not written.done():
                written.set_result(None)

    async def _write(self, key: str, kind: str, row: Row | None) -> None:
        etcd = self.context.etcd
        merge = self.kinds.merge(kind)
        if merge is None or row is None:
            await etcd.put(key, json.dumps(row).encode())
            return
        while True:  # merged with what etcd holds, unless it changed meanwhile
            held = await etcd.get(key)
            current = held.json() if held is not None else None
            merged = row if current is None else merge(current, row)
            revision = held.mod_revision if held is not None else 0
            if await etcd.txn([Compare(key, "MOD", revision)],
                              [put(key, json.dumps(merged).encode())]):
                return

    # -- changes etcd reports ------------------------------------------------------------

    def apply(self, kv: KeyValue) -> None:
        kind, *key = (unquote(part) for part in kv.key[len(ROOT):].split("/"))
        row = kv.json()
        self.kinds.apply(kind, key, row)
        self._applied(kind, tuple(key), row)

    def loaded(self, held: set[str]) -> None:
        """What etcd held at start (its keys) is applied: share what only this node
        holds."""
        for kind, key, row in self.kinds.local_rows():
            if path(kind, key) not in held:
                self._queue(kind, key, row)
