"""The one feed of cluster-wide metadata: the broker's changes to etcd and back.

Every change a store makes on this node (`broker.replicated`) is one key,
`/mainstem/catalog/KIND/KEY...` (each key part percent-encoded), written in the order
made, so every node applies them in that order (a user before its permissions). A
deletion is a tombstone (null), since etcd reports no event for deleting a key it never
had, unless the kind has none: then its key goes. A kind with a merge rule is written by
compare-and-swap, so etcd keeps the merge of what it held and what is written.

A change comes in two ways. Most stores make it here first and tell it after (`held_here`,
the AMQP topology, segment states...): the client's answer waits for etcd. A change a
client asked for through the catalog (`Catalog.*_everywhere`: policies, limits, users,
permissions, new namespaces, offsets stored on request) is *etcd first*: this node
takes it only once etcd holds it, as every other node does, so no node ever holds a value
the cluster does not, and a node killed before the write leaves nothing behind. Such a
change not written within ANSWER_WAIT_S fails its waiter (`Unavailable`): one never sent
is withdrawn (made nowhere); one sent, perhaps received, stays on its way and its waiter
is told the outcome is unknown (made everywhere or nowhere, once etcd answers).

Which value a node ends on is decided by etcd's revisions, not by comparing values
(`key_order.py`): an event no newer than what the node has seen of its key is skipped (its
own echo), events of a key the node has a write of in flight wait for etcd's answer, and
then the newest value wins, on every node as in etcd. For a merged kind the newest value is
the merge etcd kept (or what it held, when the merge changes nothing), so the writing node
ends on the merge too. We chose revisions over the alternatives: echoes told apart by
value (as before) went wrong when a peer's write came between this node's change and the
registration of its write (the node ended on the peer's value while etcd held its own),
and taking every change from etcd only would make a stream's or a queue's own metadata
wait for etcd before the node could use it.

At start the node applies what etcd holds in the order it was written, then `loaded` shares
what only this node holds (from before it joined) of the kinds that list theirs.

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
from dataclasses import dataclass
from typing import Any

from mainstem.broker.catalog import TABLE_FILE, TIERED_SEGMENT
from mainstem.broker.errors import BrokerError, Unavailable
from mainstem.broker.fence import Fence
from mainstem.broker.replicated import Row
from mainstem.cluster.context import NodeContext
from mainstem.cluster.etcd import (
    MAX_TXN_OPS,
    Compare,
    EtcdError,
    KeyValue,
    delete,
    delete_prefix,
    put,
)
from mainstem.cluster.etcd_keys import path, prefix, segments
from mainstem.cluster.metadata.key_order import KeyOrder

log = logging.getLogger("mainstem.cluster")

AREA = "catalog"
ROOT = prefix(AREA)
RETRY_S = 0.5
ANSWER_WAIT_S = 5.0  # an etcd-first change waits this long for etcd (one call's timeout)
Applied = Callable[[str, tuple[str, ...], Row | None], None]
NOT_MADE = ("the cluster's metadata store did not answer: the change was not made, "
            "on any node")
OUTCOME_UNKNOWN = ("the cluster's metadata store did not answer in time: the outcome is "
                   "unknown (the change is made on every node or on none once it answers)")


def partition_records_deleted(namespace: str, stream: str, index: int
                              ) -> list[dict[str, Any]]:
    """The etcd deletes of the tiered segments' and table files' records of partition
    `index` of a stream, for the transaction that removes (or makes anew) the partition's
    keys: its leader key fences every write of such a record, so none lands after it."""
    return [delete_prefix(prefix(AREA, kind, namespace, stream, index))
            for kind in (TIERED_SEGMENT, TABLE_FILE)]


def _value(row: Row | None) -> bytes:
    return json.dumps(row, sort_keys=True, separators=(",", ":")).encode()


@dataclass(eq=False, slots=True)
class Change:
    at: str  # its etcd key
    kind: str
    key: tuple[Any, ...]
    row: Row | None  # as etcd holds it (encoded)
    written: asyncio.Future[None]
    held_here: bool  # made here already; else taken here once etcd holds it
    tried: bool = False  # sent to etcd at least once: it may be there


class CatalogFeed:
    def __init__(self, context: NodeContext, applied: Applied) -> None:
        self.context = context
        self.kinds = context.core.kinds
        self._applied = applied  # the node's own follow-up of a change applied
        self._changes: deque[Change] = deque()
        self._queued = asyncio.Event()
        self._order = KeyOrder()

    # -- changes made here -------------------------------------------------------------

    def changed(self, kind: str, key: tuple[Any, ...], row: Row | None, *,
                held_here: bool = True) -> asyncio.Future[None]:
        """A store's `on_change`: done once etcd holds the change. `held_here` False: an
        etcd-first change, taken here once etcd holds it (and failed with `Unavailable`
        if etcd does not answer within ANSWER_WAIT_S)."""
        encode = self.kinds.of(kind).encode
        loop = asyncio.get_running_loop()
        change = Change(path(AREA, kind, *key), kind, key,
                        row if row is None or encode is None else encode(row),
                        loop.create_future(), held_here)
        self._order.made(change.at, change, held_here=held_here)
        if not held_here:
            loop.call_later(ANSWER_WAIT_S, self._expire, change)
        self._changes.append(change)
        self._queued.set()
        return change.written

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
            written = (await self._retried(self._write_plain, batch)
                       and await self._retried(self._write_merged, merged))
            for change in batch + merged:
                self._answered(change, written)

    def _batch(self) -> list[Change]:
        """The next changes to write: plain ones up to the first merged one, at most
        MAX_TXN_OPS and each key once (etcd refuses a transaction naming a key twice)."""
        batch = [self._changes.popleft()]
        keys = {batch[0].at}
        while (self._plain(batch[-1]) and self._changes and len(batch) < MAX_TXN_OPS
               and self._changes[0].at not in keys):
            batch.append(self._changes.popleft())
            keys.add(batch[-1].at)
        for change in batch:
            change.tried = True
        return batch

    def _plain(self, change: Change) -> bool:
        return change.row is None or self.kinds.of(change.kind).merge is None

    @staticmethod
    async def _retried(write: Callable[[list[Change]], Any], changes: list[Change]) -> bool:
        """Write, again while etcd does not answer; False after a bug, which is logged,
        and the feed goes on (no client waits for it forever)."""
        while changes:
            try:
                await write(changes)
                return True
            except EtcdError as error:
                log.warning("catalog.write_failed", extra={"error": str(error)})
                await asyncio.sleep(RETRY_S)
            except Exception:
                log.exception("catalog.write_broken")
                return False
        return True

    async def _write_plain(self, changes: list[Change]) -> None:
        operations = []
        for change in changes:
            gone = change.row is None and not self.kinds.of(change.kind).tombstones
            operations.append(delete(change.at) if gone
                              else put(change.at, _value(change.row)))
        revision = await self.context.etcd.committed([], operations)
        assert revision is not None  # no comparison: it always holds
        for change in changes:
            self._order.written(change.at, change, revision, change.row, own=True)

    async def _write_merged(self, changes: list[Change]) -> None:
        [change] = changes
        merge = self.kinds.of(change.kind).merge
        assert merge is not None and change.row is not None
        held: KeyValue | None = None  # first tried as absent: a new key costs one call
        while True:
            current: Row | None = held.json() if held is not None else None
            merged = change.row if current is None else merge(current, change.row)
            if held is not None and merged == current:  # etcd keeps what it held
                self._order.written(change.at, change, held.mod_revision, current, own=False)
                return
            revision = await self.context.etcd.committed(
                [Compare(change.at, "MOD", held.mod_revision if held is not None else 0)],
                [put(change.at, _value(merged))])
            if revision is not None:
                self._order.written(change.at, change, revision, merged,
                                    own=merged == change.row)
                return
            held = await self.context.etcd.get(change.at)

    def _answered(self, change: Change, written: bool) -> None:
        """The write of `change` is over: settle its key, then answer its waiter."""
        self._settle(change.at)
        if change.written.done():  # expired: its waiter was answered already
            return
        if written or change.held_here:
            change.written.set_result(None)
        else:
            change.written.set_exception(Unavailable(NOT_MADE))

    def _expire(self, change: Change) -> None:
        """An etcd-first change not written in time: withdrawn if never sent."""
        if change.written.done():
            return
        if change.tried:
            change.written.set_exception(Unavailable(OUTCOME_UNKNOWN))
            return
        self._changes.remove(change)
        self._settle(change.at)
        change.written.set_exception(Unavailable(NOT_MADE))

    def _settle(self, at: str) -> None:
        """One change of `at` is answered or withdrawn: take what `KeyOrder` says."""
        taken = self._order.settled(at)
        if taken is None:
            return
        try:
            self._take(at, taken[0])
        except (BrokerError, OSError, ValueError, KeyError) as error:  # as the watch does
            log.error("cluster.change_failed", extra={"key": at, "error": repr(error)})

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
        """One try of `fenced`, an etcd-first change (taken here once etcd holds it);
        None: the key changed meanwhile, try again."""
        held = await self.context.etcd.get(at)
        gone = held is None or held.value == b"null"
        if row is not None and not gone:
            assert held is not None
            return held.value == value  # written once (an earlier try of ours counts)
        if row is None and gone:
            return True
        change, revision = object(), None
        self._order.made(at, change, held_here=False)
        try:
            revision = await self.context.etcd.committed(
                [*(Compare(k, "VALUE", v) for k, v in fence.holds),
                 Compare(at, "MOD", held.mod_revision if held is not None else 0)],
                [put(at, value)])
            if revision is not None:
                self._order.written(at, change, revision, row, own=True)
        finally:
            self._settle(at)
        if revision is not None:
            return True
        for fenced_key, fenced_value in fence.holds:
            current = await self.context.etcd.get(fenced_key)
            if current is None or current.value != fenced_value:
                return False
        return None

    # -- changes etcd reports ------------------------------------------------------------

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        """A change etcd reports (or held at start): taken unless no newer than what this
        node has seen of the key; kept for later while the key has changes unsettled."""
        row = None if deleted else kv.json()
        if self._order.seen(kv.key, kv.mod_revision, row):
            self._take(kv.key, row)

    def _take(self, at: str, row: Row | None) -> None:
        _, kind, *key = segments(at)
        self.kinds.apply(kind, key, row)
        self._applied(kind, tuple(key), row)

    def loaded(self, held: set[str]) -> None:
        """What etcd held at start (its keys) is applied: share what only this node
        holds."""
        for kind, key, row in self.kinds.local_rows():
            if path(AREA, kind, *key) not in held:
                self.changed(kind, key, row)
