"""The metadata every node of a cluster holds alike, as one table of kinds.

A store of such metadata is a `ChangeNotifier`: each change made here goes to its
`on_change` as (kind, key, row), row None when deleted; in a cluster, to etcd through one
feed (`cluster/metadata/catalog_feed.py`), and every node applies it through `Kinds.apply`. So a
new kind is a store's table and `_changed` calls; a row in `declare` below, for a kind
that needs one, says:

- `apply`: how this node takes a row (or a deletion) made elsewhere; applying a row it
  holds already must change nothing;
- `merge`: how etcd keeps two rows written to one key by nodes that did not see each
  other's; None, the default, is last writer wins in etcd's order;
- `tombstones`: whether a deletion stays as a null row (False: its key goes, for kinds
  whose keys are often new names and that take the cluster's view at a restart);
- `encode`/`decode`: a row that is not plain JSON (a BSON definition);
- `rows`: what this node may hold from before it joined, shared when etcd lacks it.

The catalog's own kinds (namespaces, users, permissions, offsets, and any table added to
`Catalog._apply`) need no row: they apply through `Catalog.apply`, last writer wins.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import bson

from mainstem.broker import segment_store
from mainstem.broker.amqp.shared_topology import KINDS as AMQP_KINDS
from mainstem.broker.amqp.shared_topology import QUEUES, SharedTopology, keep_home
from mainstem.broker.catalog import Catalog
from mainstem.broker.events.binders import BINDER, PROJECTION
from mainstem.broker.events.projections import Projections
from mainstem.broker.segment_store import SEGMENT, SegmentStore

Row = dict[str, Any]
Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Kind:
    apply: Callable[[Sequence[str], Row | None], None]
    merge: Callable[[Row, Row], Row] | None = None  # (row etcd holds, row written)
    tombstones: bool = True
    encode: Callable[[Row], Row] | None = None
    decode: Callable[[Row], Row] | None = None
    rows: Callable[[], Iterable[tuple[Key, Row]]] | None = None


class Kinds:
    """The declared kinds; a kind not declared is one of the catalog's own."""

    def __init__(self, catalog: Catalog, declared: Mapping[str, Kind]) -> None:
        self.catalog = catalog
        self.declared = dict(declared)

    def of(self, kind: str) -> Kind:
        return self.declared.get(kind) or Kind(partial(self.catalog.apply, kind))

    def apply(self, kind: str, key: Sequence[str], row: Row | None) -> None:
        """A change from the cluster (made here or on another node)."""
        declared = self.of(kind)
        declared.apply(key, row if row is None or declared.decode is None
                       else declared.decode(row))

    def local_rows(self) -> Iterator[tuple[str, Key, Row]]:
        """(kind, key, row) of what this node holds of the kinds that list theirs."""
        for kind, declared in self.declared.items():
            if declared.rows is not None:
                yield from ((kind, key, row) for key, row in declared.rows())


def _bson_out(row: Row) -> Row:
    return {"bson": base64.b64encode(bson.encode(row)).decode()}


def _bson_in(row: Row) -> Row:
    return bson.decode(base64.b64decode(row["bson"]))


def _amqp(topology: SharedTopology, objects: str) -> Kind:
    return Kind(lambda key, row: topology.apply(objects, key, row), tombstones=False,
                merge=keep_home if objects == QUEUES else None)


def declare(catalog: Catalog, projections: Projections, segments: SegmentStore,
            topology: SharedTopology) -> Kinds:
    """The table of kinds beyond the catalog's own."""
    binders = projections.binders
    return Kinds(catalog, {
        # AMQP exchanges, queues and bindings: a queue declared on two nodes at once
        # keeps the home etcd holds first.
        **{kind: _amqp(topology, objects) for objects, kind in AMQP_KINDS.items()},
        # Binders and projection definitions (documents never travel: every node runs
        # each projection into its own binder).
        BINDER: Kind(lambda key, row: projections.apply(BINDER, key[0], key[1], row),
                     rows=lambda: (((ns, name), {}) for ns, name, _ in binders.counts())),
        PROJECTION: Kind(lambda key, row: projections.apply(PROJECTION, key[0], key[1], row),
                         encode=_bson_out, decode=_bson_in,
                         rows=lambda: (((ns, d["name"]), d)
                                       for ns, d, _ in binders.projections())),
        # A segment's seal and truncation point: merged, never undone.
        SEGMENT: Kind(segments.apply, merge=segment_store.merge, rows=segments.rows),
    })
