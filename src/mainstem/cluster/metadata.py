"""The protocols' own metadata made cluster-wide: Iggy ids and consumer groups
(`iggy_ids`), segment sealing and truncation (`segments`), BSON binders and projections
(`binders`). This wires them to the broker's stores and routes the watch's events to
them; the node calls it from its one watch, so they change in etcd's order.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from mainstem.broker.catalog import ChangeListener
from mainstem.broker.core import BrokerCore
from mainstem.cluster import binders, iggy_ids, segments
from mainstem.cluster.etcd import EtcdClient, KeyValue
from mainstem.cluster.metadata_keys import segments as key_segments

AREAS = (iggy_ids.AREA, segments.AREA)  # their keys: /mainstem/AREA/...
CATALOG_KINDS = binders.KINDS  # theirs: /mainstem/catalog/KIND/...


class SharedMetadata:
    def __init__(self, core: BrokerCore, etcd: EtcdClient, share: ChangeListener,
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 lease: Callable[[], int]) -> None:
        self.core = core
        self.iggy = iggy_ids.IggyIds(etcd, core.iggy, core.streams, spawn, lease)
        self.segments = segments.SharedSegments(etcd, core.segments, spawn)
        self.binders = binders.SharedBinders(core.projections, share)
        self._unwatch: Callable[[], None] | None = None
        self._share_catalog: ChangeListener | None = None  # the node's, wrapped

    async def install(self, node_name: str) -> None:
        """From now on, changes made on this node are made in the cluster."""
        await self.iggy.number_clients(node_name)
        self.core.iggy.registry = self.iggy
        self._unwatch = self.core.streams.watch(self.iggy.stream_deleted)
        self._share_catalog = self.core.catalog.on_change
        self.core.catalog.on_change = self._catalog_changed
        self.core.segments.sharing = self.segments
        self.core.binders.on_change = self.binders.changed

    def uninstall(self) -> None:
        """Back to what the node had (it stops sharing catalog changes itself)."""
        if self._unwatch is not None:
            self._unwatch()
        self.core.iggy.registry = None
        self.core.segments.sharing = None
        self.core.binders.on_change = None

    def _catalog_changed(self, kind: str, key: tuple[Any, ...],
                         row: dict[str, Any] | None) -> None:
        """Catalog changes go on to be shared; a namespace deleted here (whichever node
        asked) also ends its Iggy ids."""
        if self._share_catalog is not None:
            self._share_catalog(kind, key, row)
        if kind == "namespace" and row is None:
            self.iggy.namespace_deleted(key[0])

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        """A change of `/mainstem/AREA/...` for an AREA of AREAS."""
        area, *parts = key_segments(kv.key)
        changed = None if deleted else kv
        if area == iggy_ids.AREA:
            self.iggy.apply(parts, changed)
        else:
            self.segments.apply(parts, changed)

    def apply_catalog(self, kind: str, key: list[str], row: dict[str, Any] | None) -> None:
        """A catalog change of a kind in CATALOG_KINDS."""
        self.binders.apply(kind, key, row)

    def loaded(self) -> None:
        """Called once what etcd held at start has been applied."""
        self.iggy.loaded()
        self.segments.loaded()
        self.binders.loaded()
