"""Binders: named, durable document collections in a namespace (the BSON protocol's query
side), in SQLite keyed by document id. Projections store their channel position in the same
database, so a document change and the position it came from commit together."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bson

from mainstem.broker.errors import NotFound
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
