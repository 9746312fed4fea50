"""Binders: named, durable document collections in a namespace (the BSON protocol's query
side), in SQLite keyed by document id. Projections store their channel position in the same
database, so a document change and the position it came from commit together.

A bulk load (a binder rebuilt elsewhere, by Spark) stages documents under a load id, from
any number of writers; the hand-over then swaps them in and sets the projection's position
in one transaction, so the binder never shows half a rebuild."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bson

from mainstem.broker.errors import InvalidArgument, NotFound
from mainstem.broker.matcher import compile_matcher

_SCHEMA = """
CREATE TABLE IF NOT EXISTS binders (
    namespace TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS documents (
    namespace TEXT NOT NULL, binder TEXT NOT NULL, id TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (namespace, binder, id));
CREATE TABLE IF NOT EXISTS projections (
    namespace TEXT NOT NULL, name TEXT NOT NULL, definition BLOB NOT NULL,
    position INTEGER NOT NULL, PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS loads (
    id TEXT PRIMARY KEY, namespace TEXT NOT NULL, binder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS staged (
    load TEXT NOT NULL, id TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (load, id));
"""


def document_key(value: Any) -> str:
    """Ids are compared as text, typed so that 1 and "1" stay different documents."""
    return value if isinstance(value, str) else f"{type(value).__name__}:{value}"


class BinderStore:
    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- binders -----------------------------------------------------------------

    def create(self, namespace: str, name: str) -> bool:
        """Create a binder; True if it already existed."""
        with self.transaction() as db:
            return db.execute("INSERT OR IGNORE INTO binders VALUES (?, ?)",
                              (namespace, name)).rowcount == 0

    def names(self, namespace: str) -> list[str]:
        return [row[0] for row in self._db.execute(
            "SELECT name FROM binders WHERE namespace = ? ORDER BY name", (namespace,))]

    def counts(self, namespace: str | None = None) -> list[tuple[str, str, int]]:
        """(namespace, binder, documents), in one namespace or all."""
        rows = self._db.execute(
            "SELECT b.namespace, b.name, (SELECT COUNT(*) FROM documents d WHERE "
            "d.namespace = b.namespace AND d.binder = b.name) FROM binders b "
            "WHERE ?1 IS NULL OR b.namespace = ?1 ORDER BY b.namespace, b.name", (namespace,))
        return list(rows)

    def delete(self, namespace: str, name: str) -> None:
        """Delete a binder, its documents, unfinished loads and the projections filling it
        (stop those first)."""
        self._require(namespace, name)
        with self.transaction() as db:
            db.execute("DELETE FROM documents WHERE namespace = ? AND binder = ?",
                       (namespace, name))
            db.execute("DELETE FROM staged WHERE load IN (SELECT id FROM loads WHERE "
                       "namespace = ? AND binder = ?)", (namespace, name))
            db.execute("DELETE FROM loads WHERE namespace = ? AND binder = ?", (namespace, name))
            for projection, definition in db.execute(
                    "SELECT name, definition FROM projections WHERE namespace = ?",
                    (namespace,)).fetchall():
                if bson.decode(definition).get("binder") == name:
                    db.execute("DELETE FROM projections WHERE namespace = ? AND name = ?",
                               (namespace, projection))
            db.execute("DELETE FROM binders WHERE namespace = ? AND name = ?", (namespace, name))

    def documents(self, namespace: str, binder: str, limit: int) -> list[dict[str, Any]]:
        """The first `limit` documents in id order."""
        self._require(namespace, binder)
        return [bson.decode(body) for (body,) in self._db.execute(
            "SELECT body FROM documents WHERE namespace = ? AND binder = ? ORDER BY id "
            "LIMIT ?", (namespace, binder, limit))]

    def _require(self, namespace: str, binder: str) -> None:
        if self._db.execute("SELECT 1 FROM binders WHERE namespace = ? AND name = ?",
                            (namespace, binder)).fetchone() is None:
            raise NotFound(f"no binder '{binder}' in namespace '{namespace}'")

    # -- documents ---------------------------------------------------------------

    def get(self, namespace: str, binder: str, doc_id: Any) -> dict[str, Any] | None:
        self._require(namespace, binder)
        row = self._db.execute(
            "SELECT body FROM documents WHERE namespace = ? AND binder = ? AND id = ?",
            (namespace, binder, document_key(doc_id))).fetchone()
        return None if row is None else bson.decode(row[0])

    def put(self, db: sqlite3.Connection, namespace: str, binder: str, doc_id: Any,
            document: dict[str, Any]) -> None:
        """Within a `transaction()`: store a document."""
        db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?)",
                   (namespace, binder, document_key(doc_id), bson.encode(document)))

    def get_in(self, db: sqlite3.Connection, namespace: str, binder: str, doc_id: Any
               ) -> dict[str, Any] | None:
        row = db.execute(
            "SELECT body FROM documents WHERE namespace = ? AND binder = ? AND id = ?",
            (namespace, binder, document_key(doc_id))).fetchone()
        return None if row is None else bson.decode(row[0])

    def query(self, namespace: str, binder: str, matcher: dict[str, Any] | None
              ) -> Iterator[dict[str, Any]]:
        """Documents matching `matcher`, in id order (a scan: matchers are arbitrary)."""
        self._require(namespace, binder)
        predicate = compile_matcher(matcher)
        cursor = self._db.execute(
            "SELECT body FROM documents WHERE namespace = ? AND binder = ? ORDER BY id",
            (namespace, binder))
        while rows := cursor.fetchmany(512):
            for (body,) in rows:
                document = bson.decode(body)
                if predicate(document):
                    yield document

    # -- projection state -----------------------------------------------------------

    def save_projection(self, namespace: str, name: str, definition: dict[str, Any]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO projections VALUES (?, ?, ?, 0) ON CONFLICT "
                       "(namespace, name) DO UPDATE SET definition = excluded.definition",
                       (namespace, name, bson.encode(definition)))

    def projections(self) -> list[tuple[str, dict[str, Any], int]]:
        return [(namespace, bson.decode(definition), position) for namespace, definition,
                position in self._db.execute(
                    "SELECT namespace, definition, position FROM projections")]

    def set_position(self, db: sqlite3.Connection, namespace: str, name: str,
                     position: int) -> None:
        db.execute("UPDATE projections SET position = ? WHERE namespace = ? AND name = ?",
                   (position, namespace, name))

    def position(self, namespace: str, name: str) -> int:
        row = self._db.execute("SELECT position FROM projections WHERE namespace = ? AND "
                               "name = ?", (namespace, name)).fetchone()
        return 0 if row is None else row[0]

    def delete_projection(self, namespace: str, name: str) -> None:
        with self.transaction() as db:
            if db.execute("DELETE FROM projections WHERE namespace = ? AND name = ?",
                          (namespace, name)).rowcount == 0:
                raise NotFound(f"no projection '{name}' in namespace '{namespace}'")

    def projection(self, namespace: str, name: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT definition FROM projections WHERE namespace = ? AND "
                               "name = ?", (namespace, name)).fetchone()
        return None if row is None else bson.decode(row[0])

    # -- bulk loads ---------------------------------------------------------------

    def begin_load(self, namespace: str, binder: str) -> str:
        """A new load into `binder` (created if needed); an unfinished earlier load of the
        same binder is discarded, so an abandoned rebuild leaves nothing behind."""
        load_id = uuid.uuid4().hex
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO binders VALUES (?, ?)", (namespace, binder))
            db.execute("DELETE FROM staged WHERE load IN (SELECT id FROM loads WHERE "
                       "namespace = ? AND binder = ?)", (namespace, binder))
            db.execute("DELETE FROM loads WHERE namespace = ? AND binder = ?",
                       (namespace, binder))
            db.execute("INSERT INTO loads VALUES (?, ?, ?)", (load_id, namespace, binder))
        return load_id

    def load_binder(self, namespace: str, load_id: str) -> str:
        row = self._db.execute("SELECT binder FROM loads WHERE id = ? AND namespace = ?",
                               (load_id, namespace)).fetchone()
        if row is None:
            raise NotFound(f"no load {load_id!r} in progress in namespace '{namespace}'")
        return row[0]

    def stage(self, namespace: str, load_id: str, documents: list[tuple[Any, dict[str, Any]]]
              ) -> None:
        """Add documents to a load; a document staged again (a retried writer) replaces
        its earlier copy."""
        self.load_binder(namespace, load_id)
        rows = [(load_id, document_key(doc_id), bson.encode(document))
                for doc_id, document in documents]
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO staged VALUES (?, ?, ?)", rows)

    def hand_over(self, namespace: str, load_id: str, name: str, definition: dict[str, Any],
                  position: int) -> int:
        """Replace the load's binder with the staged documents and (re)define the
        projection `name` at `position`, atomically. Returns the number of documents."""
        binder = self.load_binder(namespace, load_id)
        if definition.get("binder") != binder:
            raise InvalidArgument(f"load {load_id!r} fills binder '{binder}', not "
                                  f"'{definition.get('binder')}'")
        with self.transaction() as db:
            db.execute("DELETE FROM documents WHERE namespace = ? AND binder = ?",
                       (namespace, binder))
            count = db.execute("INSERT INTO documents SELECT ?, ?, id, body FROM staged "
                               "WHERE load = ?", (namespace, binder, load_id)).rowcount
            db.execute("DELETE FROM staged WHERE load = ?", (load_id,))
            db.execute("DELETE FROM loads WHERE id = ?", (load_id,))
            db.execute("INSERT INTO projections VALUES (?, ?, ?, ?) ON CONFLICT (namespace, "
                       "name) DO UPDATE SET definition = excluded.definition, "
                       "position = excluded.position",
                       (namespace, name, bson.encode(definition), position))
        return count
