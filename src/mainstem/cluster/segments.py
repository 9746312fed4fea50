"""Sealing and truncation of segments, the same on every node (`SegmentSharing`).

`/mainstem/segments/NAMESPACE/STREAM/NUMBER/sealed` (`true`) and `.../truncated` (the
truncation point, a segment byte) are written before the client is answered; every node
merges them into its segment store through the watch (a seal is for good, a truncation
point only moves forward, so two nodes changing one segment at once cannot undo each
other). Deleting a stream's segments deletes its keys. At start, the state a node has
that etcd lacks (from before it joined) is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from mainstem.broker.segment_store import SegmentName, SegmentStore
from mainstem.cluster.etcd import EtcdClient, KeyValue, delete_prefix
from mainstem.cluster.metadata_keys import path, prefix, written

AREA = "segments"
SEALED, TRUNCATED = "sealed", "truncated"
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class SharedSegments:
    def __init__(self, etcd: EtcdClient, store: SegmentStore, spawn: Spawn) -> None:
        self.etcd = etcd
        self.store = store
        self.spawn = spawn
        self._seen: set[SegmentName] | None = set()  # while etcd is read at start

    # -- SegmentSharing ----------------------------------------------------------------

    async def seal(self, namespace: str, stream: str, number: int) -> None:
        key = path(AREA, namespace, stream, number, SEALED)
        await written(partial(self.etcd.put, key, b"true"))

    async def truncate(self, namespace: str, stream: str, number: int, offset: int) -> None:
        key = path(AREA, namespace, stream, number, TRUNCATED)
        await written(partial(self.etcd.put, key, str(offset).encode()))

    async def forget(self, namespace: str, stream: str) -> None:
        operation = delete_prefix(prefix(AREA, namespace, stream))
        await written(partial(self.etcd.txn, [], [operation]))

    # -- the watch ---------------------------------------------------------------------

    def apply(self, parts: list[str], kv: KeyValue | None) -> None:
        """A change of `/mainstem/segments/...` (`parts` after `segments`)."""
        namespace, stream, number, field = parts
        if kv is None:
            self.store.forget(namespace, stream)
            return
        name = SegmentName(namespace, stream, int(number))
        if self._seen is not None:
            self._seen.add(name)
        if field == SEALED:
            self.store.apply(name, sealed=True, truncated=0)
        elif field == TRUNCATED:
            self.store.apply(name, sealed=False, truncated=int(kv.value))

    def loaded(self) -> None:
        """Everything etcd held at start is applied: share what only this node has."""
        seen, self._seen = self._seen or set(), None
        for name, (sealed, truncated) in self.store.states().items():
            if name in seen:
                continue
            if sealed:
                self.spawn(self.seal(name.namespace, name.stream, name.number))
            if truncated:
                self.spawn(self.truncate(name.namespace, name.stream, name.number, truncated))
