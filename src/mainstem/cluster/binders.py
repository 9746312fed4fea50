"""BSON binders and projection definitions, the same on every node.

They travel as catalog changes (`/mainstem/catalog/binder/NAMESPACE/NAME`, a JSON `{}`,
and `/mainstem/catalog/projection/NAMESPACE/NAME`, the definition as base64 BSON since a
matcher may hold BSON types), shared in order with the other catalog changes and deleted
as tombstones (null). Every node runs each projection on its own replica of the channel
into its own binder, so documents themselves never travel. At start, binders and
projections a node has that etcd has never seen (from before it joined, or declared by
its configuration) are shared; those etcd holds a tombstone for are deleted.
"""

from __future__ import annotations

import base64
from typing import Any

import bson

from mainstem.broker.catalog import ChangeListener
from mainstem.broker.events.binders import BINDER, PROJECTION
from mainstem.broker.events.projections import Projections

KINDS = (BINDER, PROJECTION)


def encode(kind: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    if kind == PROJECTION and row is not None:
        return {"bson": base64.b64encode(bson.encode(row)).decode()}
    return row


def decode(kind: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    if kind == PROJECTION and row is not None:
        return bson.decode(base64.b64decode(row["bson"]))
    return row


class SharedBinders:
    def __init__(self, projections: Projections, share: ChangeListener) -> None:
        self.projections = projections
        self._share = share
        self._seen: set[tuple[str, str, str]] | None = set()  # while etcd is read at start

    def changed(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None) -> None:
        """The binder store's `on_change`: a change made here, for every node."""
        self._share(kind, key, encode(kind, row))

    def apply(self, kind: str, key: list[str], row: dict[str, Any] | None) -> None:
        """A change from etcd (made here or on another node)."""
        namespace, name = key
        if self._seen is not None:
            self._seen.add((kind, namespace, name))
        self.projections.apply(kind, namespace, name, decode(kind, row))

    def loaded(self) -> None:
        """Everything etcd held at start is applied: share what only this node has."""
        seen, self._seen = self._seen or set(), None
        binders = self.projections.binders
        for namespace, name, _ in binders.counts():
            if (BINDER, namespace, name) not in seen:
                self.changed(BINDER, (namespace, name), {})
        for namespace, definition, _ in binders.projections():
            if (PROJECTION, namespace, definition["name"]) not in seen:
                self.changed(PROJECTION, (namespace, definition["name"]), definition)
