"""The metadata stores that had files of their own, moved into the catalog once.

Before the catalog held all metadata, a data directory also had `amqp-metadata.pickle`
(AMQP exchanges, queues and bindings), `iggy.sqlite` (Iggy ids and consumer groups),
`segments.json` (sealed and truncated segments) and `binders.sqlite` (binders, their
documents, projection positions, loads). Catalog migration 6 reads whichever of them exist
and writes their content into the catalog inside the migration's transaction, which also
bumps the schema version. Only after that commit are the old files removed, on this and
every later open:

- killed before the commit, the catalog has neither the rows nor the new version, and the
  old files are untouched: the next start imports them again, from scratch;
- killed after it, the catalog has everything and says so by its version: the old files
  still there are leftovers, removed without being read again.

So either the old files or the catalog is the state, never parts of both.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import io
import json
import pickle
import sqlite3
from pathlib import Path
from typing import Any

from mainstem.broker.amqp import metadata as amqp_metadata
from mainstem.log.segments import fsync_directory

AMQP_FILE = "amqp-metadata.pickle"
IGGY_FILE = "iggy.sqlite"
SEGMENTS_FILE = "segments.json"
BINDERS_FILE = "binders.sqlite"
# With the files their writers left beside them: temporaries of an interrupted atomic
# replace, SQLite's journals.
_OLD_FILES = (AMQP_FILE, "amqp-metadata.tmp", SEGMENTS_FILE, "segments.tmp",
              *(name + suffix for name in (IGGY_FILE, BINDERS_FILE)
                for suffix in ("", "-wal", "-shm", "-journal")))
DEFAULT_SCOPE = "/"  # an empty scope in a segment name is the default namespace


def import_old_stores(db: sqlite3.Connection, directory: Path) -> None:
    """Within the migration's transaction: copy the old stores' content into the catalog."""
    if (directory / AMQP_FILE).exists():
        amqp_metadata.StoredObjects.read(db).write(db, _read_amqp(directory / AMQP_FILE))
    if (directory / SEGMENTS_FILE).exists():
        _import_segments(db, json.loads((directory / SEGMENTS_FILE).read_text()))
    for name, copy in ((IGGY_FILE, _IGGY_COPIES), (BINDERS_FILE, _BINDER_COPIES)):
        if (directory / name).exists():
            _import_sqlite(db, directory / name, copy)


def remove_old_stores(directory: Path) -> None:
    """Remove the old stores' files: call only once their content is committed."""
    removed = False
    for name in _OLD_FILES:
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
            removed = True
    if removed:
        fsync_directory(directory)


class _Records(pickle.Unpickler):
    """The AMQP file held only plain containers and the field values of arguments: any
    other class in it is refused rather than run."""

    _ALLOWED = {("decimal", "Decimal"): decimal.Decimal,
                ("datetime", "datetime"): datetime.datetime,
                ("datetime", "timezone"): datetime.timezone,
                ("datetime", "timedelta"): datetime.timedelta}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not AMQP metadata") from None


def _read_amqp(path: Path) -> amqp_metadata.Records:
    records: amqp_metadata.Records = _Records(io.BytesIO(path.read_bytes())).load()
    return records


def _import_segments(db: sqlite3.Connection, states: dict[str, dict[str, Any]]) -> None:
    for key, state in states.items():
        scope, stream, number = key.rsplit("/", 2)
        db.execute("INSERT INTO segment_states VALUES (?, ?, ?, ?, ?)",
                   (scope or DEFAULT_SCOPE, stream, int(number),
                    bool(state.get("sealed", False)), int(state.get("truncated", 0))))


# (old table, SELECT of its rows in the new table's columns, new table). A table the old
# file lacks (binders of the first release had only the first two) is skipped.
_IGGY_COPIES = (
    ("ids", "SELECT kind, namespace, name, id FROM ids", "iggy_ids"),
    ("groups", "SELECT namespace, topic, id, name FROM groups", "iggy_groups"),
)
_BINDER_COPIES = (
    # A binder made before storages existed kept its documents under its own name.
    ("binders", "SELECT namespace, name, {storage} FROM binders", "binders"),
    ("documents", "SELECT namespace, binder, id, body FROM documents", "binder_documents"),
    ("projections", "SELECT namespace, name, definition, position FROM projections",
     "binder_projections"),
    ("loads", "SELECT id, namespace, binder FROM loads", "binder_loads"),
    ("garbage", "SELECT namespace, storage FROM garbage", "binder_garbage"),
)


def _import_sqlite(db: sqlite3.Connection, path: Path,
                   copies: tuple[tuple[str, str, str], ...]) -> None:
    old = sqlite3.connect(path)  # read-write: a hot journal left by a crash is rolled back
    try:
        tables = {row[0] for row in old.execute("SELECT name FROM sqlite_master")}
        columns = {row[1] for row in old.execute("PRAGMA table_info(binders)")}
        storage = "COALESCE(storage, name)" if "storage" in columns else "name"
        for table, select, target in copies:
            if table in tables:
                rows = old.execute(select.format(storage=storage))
                width = len(rows.description)
                db.executemany(f"INSERT INTO {target} VALUES ({', '.join('?' * width)})",
                               rows)
    finally:
        old.close()
