"""Binders: named, durable document collections in a namespace (the BSON protocol's query
side), as tables of the catalog keyed by document id. Projections store their channel
position in the same database, so a document change and the position it came from commit
together.

Documents are bulk data, yet they share the catalog's file rather than a database of their
own: a projection's position is metadata that must commit in one transaction with the
documents it produced, and a hand-over must swap a binder's content and that position
together; SQLite is atomic across attached databases only without WAL. Writers do not
contend: every write runs on the event loop in a short transaction, and a bulk load
arrives in batches, each its own transaction.

A binder's documents live under a *storage* name that the binder row points to. A bulk load
(a binder rebuilt elsewhere, by Spark) fills a storage of its own from any number of
writers; the hand-over then repoints the binder and sets the projection's position in one
small transaction, so the binder never shows half a rebuild and the swap costs the same
for ten documents or ten million. Storages no binder or load points to any more are
garbage, removed a slice at a time (`collect_garbage`) once no query reads them.

In a cluster, creating and deleting binders and (re)defining and deleting projections are
told to `on_change` ("binder" and "projection" changes, keyed by namespace and name) to
be made on every node; documents, positions and bulk loads stay each node's own.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument

from mainstem.broker.catalog import ChangeNotifier, transaction
from mainstem.broker.errors import InvalidArgument, NotFound
from mainstem.broker.events.document_matcher import compile_matcher


def document_key(value: Any) -> str:
    """Ids are compared as text, typed so that 1 and "1" stay different documents."""
    return value if isinstance(value, str) else f"{type(value).__name__}:{value}"


def _load_storage(load_id: str) -> str:
    return f"load:{load_id}"


BINDER = "binder"
PROJECTION = "projection"


class BinderStore(ChangeNotifier):
    def __init__(self, db: sqlite3.Connection) -> None:
        """`db`: a connection of its own to the catalog (`Catalog.connect`), closed by
        `close`."""
        self._db = db
        self._lock = threading.Lock()
        self._storages: dict[tuple[str, str], str] = {}  # (namespace, binder) -> storage
        self._reading: Counter[tuple[str, str]] = Counter()  # storages open queries read

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, transaction(self._db) as db:
            yield db

    # -- binders -----------------------------------------------------------------

    def create(self, namespace: str, name: str) -> bool:
        """Create a binder; True if it already existed."""
        with self.transaction() as db:
            existed = db.execute("INSERT OR IGNORE INTO binders VALUES (?, ?, ?)",
                                 (namespace, name, f"binder:{name}")).rowcount == 0
        if not existed:
            self._changed(BINDER, (namespace, name), {})
        return existed

    def names(self, namespace: str) -> list[str]:
        return [row[0] for row in self._db.execute(
            "SELECT name FROM binders WHERE namespace = ? ORDER BY name", (namespace,))]

    def counts(self, namespace: str | None = None) -> list[tuple[str, str, int]]:
        """(namespace, binder, documents), in one namespace or all."""
        return list(self._db.execute(
            "SELECT b.namespace, b.name, (SELECT COUNT(*) FROM binder_documents d WHERE "
            "d.namespace = b.namespace AND d.storage = b.storage) "
            "FROM binders b "
            "WHERE ?1 IS NULL OR b.namespace = ?1 ORDER BY b.namespace, b.name", (namespace,)))

    def delete(self, namespace: str, name: str) -> None:
        """Delete a binder, its documents, unfinished loads and the projections filling it
        (stop those first)."""
        storage = self._storage(namespace, name)
        filling = []
        with self.transaction() as db:
            self._discard_loads(db, namespace, name)
            db.execute("INSERT OR IGNORE INTO binder_garbage VALUES (?, ?)", (namespace, storage))
            for projection, definition in db.execute(
                    "SELECT name, definition FROM binder_projections WHERE namespace = ?",
                    (namespace,)).fetchall():
                if bson.decode(definition).get("binder") == name:
                    db.execute("DELETE FROM binder_projections WHERE namespace = ? AND name = ?",
                               (namespace, projection))
                    filling.append(projection)
            db.execute("DELETE FROM binders WHERE namespace = ? AND name = ?", (namespace, name))
        self._storages.pop((namespace, name), None)
        for projection in filling:
            self._changed(PROJECTION, (namespace, projection), None)
        self._changed(BINDER, (namespace, name), None)

    def _storage(self, namespace: str, binder: str) -> str:
        key = (namespace, binder)
        storage = self._storages.get(key)
        if storage is None:
            row = self._db.execute("SELECT storage FROM binders WHERE namespace = ? AND "
                                   "name = ?", key).fetchone()
            if row is None:
                raise NotFound(f"no binder '{binder}' in namespace '{namespace}'")
            storage = self._storages[key] = row[0]
        return storage

    # -- documents ---------------------------------------------------------------

    def get(self, namespace: str, binder: str, doc_id: Any) -> dict[str, Any] | None:
        return self.get_in(self._db, namespace, binder, doc_id)

    def get_in(self, db: sqlite3.Connection, namespace: str, binder: str, doc_id: Any
               ) -> dict[str, Any] | None:
        row = db.execute(
            "SELECT body FROM binder_documents WHERE namespace = ? AND storage = ? AND id = ?",
            (namespace, self._storage(namespace, binder), document_key(doc_id))).fetchone()
        return None if row is None else bson.decode(row[0])

    def put(self, db: sqlite3.Connection, namespace: str, binder: str, doc_id: Any,
            document: dict[str, Any]) -> None:
        """Within a `transaction()`: store a document."""
        db.execute("INSERT OR REPLACE INTO binder_documents VALUES (?, ?, ?, ?)",
                   (namespace, self._storage(namespace, binder), document_key(doc_id),
                    bson.encode(document)))

    def query(self, namespace: str, binder: str, matcher: dict[str, Any] | None
              ) -> Iterator[RawBSONDocument]:
        """Documents matching `matcher`, in id order (a scan: matchers are arbitrary), as
        their stored bytes. The documents are those of the binder when the query began,
        even across a hand-over."""
        storage = self._storage(namespace, binder)
        predicate = compile_matcher(matcher) if matcher else None
        return self._scan(namespace, storage, predicate)

    def _scan(self, namespace: str, storage: str, predicate: Any
              ) -> Iterator[RawBSONDocument]:
        key = (namespace, storage)
        self._reading[key] += 1  # keeps garbage collection off this storage
        try:
            cursor = self._db.execute(
                "SELECT body FROM binder_documents WHERE namespace = ? AND storage = ? ORDER BY id",
                key)
            while rows := cursor.fetchmany(512):
                for (body,) in rows:
                    if predicate is None or predicate(bson.decode(body)):
                        yield RawBSONDocument(body)
        finally:
            self._reading[key] -= 1

    def documents(self, namespace: str, binder: str, limit: int) -> list[dict[str, Any]]:
        """The first `limit` documents in id order."""
        return [bson.decode(body) for (body,) in self._db.execute(
            "SELECT body FROM binder_documents WHERE namespace = ? AND storage = ? ORDER BY id "
            "LIMIT ?", (namespace, self._storage(namespace, binder), limit))]

    # -- projection state -----------------------------------------------------------

    def save_projection(self, namespace: str, name: str, definition: dict[str, Any]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO binder_projections VALUES (?, ?, ?, 0) ON CONFLICT "
                       "(namespace, name) DO UPDATE SET definition = excluded.definition",
                       (namespace, name, bson.encode(definition)))
        self._changed(PROJECTION, (namespace, name), definition)

    def projections(self) -> list[tuple[str, dict[str, Any], int]]:
        return [(namespace, bson.decode(definition), position) for namespace, definition,
                position in self._db.execute(
                    "SELECT namespace, definition, position FROM binder_projections")]

    def set_position(self, db: sqlite3.Connection, namespace: str, name: str,
                     position: int) -> None:
        db.execute("UPDATE binder_projections SET position = ? WHERE namespace = ? AND name = ?",
                   (position, namespace, name))

    def position(self, namespace: str, name: str) -> int:
        row = self._db.execute("SELECT position FROM binder_projections WHERE namespace = ? AND "
                               "name = ?", (namespace, name)).fetchone()
        return 0 if row is None else row[0]

    def delete_projection(self, namespace: str, name: str) -> None:
        with self.transaction() as db:
            if db.execute("DELETE FROM binder_projections WHERE namespace = ? AND name = ?",
                          (namespace, name)).rowcount == 0:
                raise NotFound(f"no projection '{name}' in namespace '{namespace}'")
        self._changed(PROJECTION, (namespace, name), None)

    def projection(self, namespace: str, name: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT definition FROM binder_projections WHERE namespace = ? AND "
                               "name = ?", (namespace, name)).fetchone()
        return None if row is None else bson.decode(row[0])

    # -- bulk loads ---------------------------------------------------------------

    def begin_load(self, namespace: str, binder: str) -> str:
        """A new load into `binder` (created if needed); an unfinished earlier load of the
        same binder is discarded, so an abandoned rebuild leaves nothing behind."""
        load_id = uuid.uuid4().hex
        self.create(namespace, binder)
        with self.transaction() as db:
            self._discard_loads(db, namespace, binder)
            db.execute("INSERT INTO binder_loads VALUES (?, ?, ?)", (load_id, namespace, binder))
        return load_id

    def _discard_loads(self, db: sqlite3.Connection, namespace: str, binder: str) -> None:
        loads = db.execute("SELECT id FROM binder_loads WHERE namespace = ? AND binder = ?",
                           (namespace, binder)).fetchall()
        db.executemany("INSERT OR IGNORE INTO binder_garbage VALUES (?, ?)",
                       [(namespace, _load_storage(load_id)) for (load_id,) in loads])
        db.execute("DELETE FROM binder_loads WHERE namespace = ? AND binder = ?",
                   (namespace, binder))

    def load_binder(self, namespace: str, load_id: str) -> str:
        row = self._db.execute("SELECT binder FROM binder_loads WHERE id = ? AND namespace = ?",
                               (load_id, namespace)).fetchone()
        if row is None:
            raise NotFound(f"no load {load_id!r} in progress in namespace '{namespace}'")
        binder: str = row[0]
        return binder

    def stage(self, namespace: str, load_id: str, documents: list[tuple[Any, dict[str, Any]]]
              ) -> None:
        """Add documents to a load; a document staged again (a retried writer) replaces
        its earlier copy."""
        self.load_binder(namespace, load_id)
        storage = _load_storage(load_id)
        rows = [(namespace, storage, document_key(doc_id), bson.encode(document))
                for doc_id, document in documents]
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO binder_documents VALUES (?, ?, ?, ?)", rows)

    def hand_over(self, namespace: str, load_id: str, name: str, definition: dict[str, Any],
                  position: int) -> int:
        """Make the load the content of its binder and (re)define the projection `name` at
        `position`, atomically. Returns the number of documents."""
        binder = self.load_binder(namespace, load_id)
        if definition.get("binder") != binder:
            raise InvalidArgument(f"load {load_id!r} fills binder '{binder}', not "
                                  f"'{definition.get('binder')}'")
        old, new = self._storage(namespace, binder), _load_storage(load_id)
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO binder_garbage VALUES (?, ?)", (namespace, old))
            db.execute("UPDATE binders SET storage = ? WHERE namespace = ? AND name = ?",
                       (new, namespace, binder))
            db.execute("DELETE FROM binder_loads WHERE id = ?", (load_id,))
            db.execute("INSERT INTO binder_projections VALUES (?, ?, ?, ?) ON CONFLICT (namespace, "
                       "name) DO UPDATE SET definition = excluded.definition, "
                       "position = excluded.position",
                       (namespace, name, bson.encode(definition), position))
        self._storages[(namespace, binder)] = new
        self._changed(PROJECTION, (namespace, name), definition)
        documents: int = self._db.execute("SELECT COUNT(*) FROM binder_documents WHERE "
                                          "namespace = ? AND storage = ?",
                                          (namespace, new)).fetchone()[0]
        return documents

    # -- garbage ------------------------------------------------------------------

    def has_garbage(self) -> bool:
        return self._db.execute("SELECT 1 FROM binder_garbage LIMIT 1").fetchone() is not None

    def collect_garbage(self, limit: int) -> bool:
        """Delete up to `limit` documents of a storage nothing points to any more and no
        query reads; False when no such storage could be worked on now."""
        for namespace, storage in self._db.execute(
                "SELECT namespace, storage FROM binder_garbage").fetchall():
            if self._reading[(namespace, storage)]:
                continue
            with self.transaction() as db:
                deleted = db.execute(
                    "DELETE FROM binder_documents WHERE rowid IN (SELECT rowid FROM "
                    "binder_documents WHERE namespace = ? AND storage = ? LIMIT ?)",
                    (namespace, storage, limit)).rowcount
                if deleted < limit:
                    db.execute("DELETE FROM binder_garbage WHERE namespace = ? AND storage = ?",
                               (namespace, storage))
            return True
        return False
