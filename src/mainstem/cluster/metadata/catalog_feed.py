"""The one feed of cluster-wide metadata: the broker's changes to etcd and back.

Every change a store makes on this node (`broker.replicated`) is one key,
`/mainstem/catalog/KIND/KEY...` (each key part percent-encoded), written in the order
made, so every node applies them in that order (a user before its permissions). A
deletion is a tombstone (null), since etcd reports no event for deleting a key it never
had, unless the kind has none: then its key goes. A kind with a merge rule is written by
compare-and-swap, so etcd keeps the merge of what it held and what is written; when that
is what etcd held, nothing is written and this node takes it.

Every node applies each key as the watch reports it, its own writes excepted: an echo of
what this node wrote and holds already is skipped, unless another node wrote the key in
between (then it is applied again, so this node ends where etcd's order ends). At start
the node applies what etcd holds in the order it was written, then `loaded` shares what
only this node holds (from before it joined) of the kinds that list theirs.

A fenced change (`fenced`: a tiered segment's record) is not queued with the others: it
is one transaction that holds only while the writer's fence does (its leader key) and the
key is as read, and whose outcome the writer waits for, since it acts on it (keeps or
deletes objects). A record is created once: a key that holds another record stays.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from mainstem.broker.fence import Fence
from mainstem.broker.replicated import Row
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import Compare, EtcdError, KeyValue, delete, put
from mainstem.cluster.etcd_keys import path, prefix, segments

log = logging.getLogger("mainstem.cluster")

AREA = "catalog"
ROOT = prefix(AREA)
RETRY_S = 0.5
MAX_TXN_OPS = 100  # etcd refuses a transaction of more than 128 operations by default
Applied = Callable[[str, tuple[str, ...], Row | None], None]
Change = tuple[str, str, tuple[Any, ...], Row | None, asyncio.Future[None]]  # path first


def _value(row: Row | None) -> bytes:
    return json.dumps(row, sort_keys=True, separators=(",", ":")).encode()


class CatalogFeed:
    def __init__(self, context: NodeContext, applied: Applied) -> None:
        self.context = context
        self.kinds = context.core.kinds
        self._applied = applied  # the node's own follow-up of a change applied
        self._changes: deque[Change] = deque()
        self._queued = asyncio.Event()
        self._echoes: dict[str, deque[bytes | None]] = {}  # written, not yet watched
        self._contended: set[str] = set()  # of those, keys another node wrote meanwhile

    # -- changes made here -------------------------------------------------------------

    def changed(self, kind: str, key: tuple[Any, ...], row: Row | None) -> asyncio.Future[None]:
        """A store's `on_change`: done once etcd holds the change."""
        encode = self.kinds.of(kind).encode
        written = asyncio.get_running_loop().create_future()
        self._changes.append((path(AREA, kind, *key), kind, key,
                              row if row is None or encode is None else encode(row), written))
        self._queued.set()
        return written

    async def share(self) -> None:
        """Write the changes in the order made: the plain ones in batches, each in one
        transaction, the merged ones one at a time."""
        while True:
            if not self._changes:
                self._queued.clear()
                await self._queued.wait()
                continue
            batch = self._batch()
            merged = [] if self._plain(batch[-1]) else [batch.pop()]
            await self._retried(self._write_plain, batch)
            await self._retried(self._write_merged, merged)
            for *_, written in batch + merged:
                if not written.done():
                    written.set_result(None)

    def _batch(self) -> list[Change]:
        """The next changes to write: plain ones up to the first merged one, at most
        MAX_TXN_OPS and each key once (etcd refuses a transaction naming a key twice)."""
        batch = [self._changes.popleft()]
        keys = {batch[0][0]}
        while (self._plain(batch[-1]) and self._changes and len(batch) < MAX_TXN_OPS
               and self._changes[0][0] not in keys):
            batch.append(self._changes.popleft())
            keys.add(batch[-1][0])
        return batch

    def _plain(self, change: Change) -> bool:
        _, kind, _, row, _ = change
        return row is None or self.kinds.of(kind).merge is None

    @staticmethod
    async def _retried(write: Callable[[list[Change]], Any], changes: list[Change]) -> None:
        """Write, again while etcd does not answer; a bug is logged and the feed goes on
        (no client waits for it forever)."""
        while changes:
            try:
                await write(changes)
                return
            except EtcdError as error:
                log.warning("catalog.write_failed", extra={"error": str(error)})
                await asyncio.sleep(RETRY_S)
            except Exception:
                log.exception("catalog.write_broken")
                return

    async def _write_plain(self, changes: list[Change]) -> None:
        operations = []
        for at, kind, _, row, _ in changes:
            gone = row is None and not self.kinds.of(kind).tombstones
            value = None if gone else _value(row)
            operations.append(delete(at) if value is None else put(at, value))
            self._echoes.setdefault(at, deque()).append(value)
        try:
            await self.context.etcd.txn([], operations)
        except EtcdError:
            for at, *_ in changes:
                self._unexpect(at)
            raise

    async def _write_merged(self, changes: list[Change]) -> None:
        [(at, kind, key, row, _)] = changes
        merge = self.kinds.of(kind).merge
        assert merge is not None and row is not None
        held: KeyValue | None = None  # first tried as absent: a new key costs one call
        while True:
            current: Row | None = held.json() if held is not None else None
            merged = row if current is None else merge(current, row)
            if merged == current:  # etcd keeps what it held: this node takes it
                self.kinds.apply(kind, [str(part) for part in key], current)
                return
            if merged == row:  # this node holds it already: its echo changes nothing
                self._echoes.setdefault(at, deque()).append(_value(row))
            revision = held.mod_revision if held is not None else 0
            if await self.context.etcd.txn([Compare(at, "MOD", revision)],
                                           [put(at, _value(merged))]):
                return
            if merged == row:
                self._unexpect(at)
            held = await self.context.etcd.get(at)

    def _unexpect(self, at: str) -> None:
        """The last write to `at` did not happen: no echo of it comes."""
        echoes = self._echoes[at]
        echoes.pop()
        if not echoes:
            del self._echoes[at]

    async def fenced(self, kind: str, key: tuple[Any, ...], row: Row | None,
                     fence: Fence) -> bool:
        """A change only under `fence` (creating a record, or deleting one): True once
        etcd holds it, False if the fence no longer holds or a different record is
        there. Tried again while etcd does not answer: the outcome must be known."""
        at = path(AREA, kind, *key)
        value = _value(row)  # a deletion leaves a tombstone, as every catalog kind does
        while True:
            try:
                done = await self._write_fenced(at, row, value, fence)
            except EtcdError as error:
                log.warning("catalog.write_failed", extra={"error": str(error)})
                await asyncio.sleep(RETRY_S)
                continue
            if done is not None:
                return done

    async def _write_fenced(self, at: str, row: Row | None, value: bytes, fence: Fence
                            ) -> bool | None:
        """One try of `fenced`; None: the key changed meanwhile, try again."""
        held = await self.context.etcd.get(at)
        gone = held is None or held.value == b"null"
        if row is not None and not gone:
            assert held is not None
            return held.value == value  # written once (an earlier try of ours counts)
        if row is None and gone:
            return True
        self._echoes.setdefault(at, deque()).append(value)
        try:
            written = await self.context.etcd.txn(
                [*(Compare(k, "VALUE", v) for k, v in fence.holds),
                 Compare(at, "MOD", held.mod_revision if held is not None else 0)],
                [put(at, value)])
        except BaseException:
            self._unexpect(at)
            raise
        if written:
            return True
        self._unexpect(at)
        for fenced_key, fenced_value in fence.holds:
            current = await self.context.etcd.get(fenced_key)
            if current is None or current.value != fenced_value:
                return False
        return None

    # -- changes etcd reports ------------------------------------------------------------

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        if self._echo(kv.key, None if deleted else kv.value):
            return
        _, kind, *key = segments(kv.key)
        row = None if deleted else kv.json()
        self.kinds.apply(kind, key, row)
        self._applied(kind, tuple(key), row)

    def _echo(self, key: str, value: bytes | None) -> bool:
        """True if this is this node's own write, which it holds already."""
        echoes = self._echoes.get(key)
        if not echoes:
            return False
        mine = echoes[0] == value
        if mine:
            echoes.popleft()
        else:
            self._contended.add(key)
        contended = key in self._contended
        if not echoes:
            del self._echoes[key]
            self._contended.discard(key)
        return mine and not contended

    def loaded(self, held: set[str]) -> None:
        """What etcd held at start (its keys) is applied: share what only this node
        holds."""
        for kind, key, row in self.kinds.local_rows():
            if path(AREA, kind, *key) not in held:
                self.changed(kind, key, row)
