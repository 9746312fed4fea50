"""The binder store on its own (on a catalog of its own): a bulk load swapped in by
repointing the binder, garbage collected a slice at a time but never under a running query,
and binders made before storages existed still read once moved into the catalog."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import bson

from mainstem.broker.catalog import Catalog
from mainstem.broker.events.binders import BinderStore


def stored_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM binder_documents").fetchone()[0]


def open_store(path: Path) -> BinderStore:
    with Catalog.open(path) as catalog:
        return BinderStore(catalog.connect())


def test_a_hand_over_repoints_the_binder_and_garbage_goes_slice_by_slice(
        tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    store = open_store(path)
    store.create("/", "totals")
    with store.transaction() as db:
        for i in range(100):
            store.put(db, "/", "totals", i, {"i": i, "old": True})
    running = store.query("/", "totals", {})
    first = next(running)  # a query that began before the hand-over
    load = store.begin_load("/", "totals")
    store.stage("/", load, [(i, {"i": i, "new": True}) for i in range(30)])
    assert store.hand_over("/", load, "p", {"binder": "totals", "name": "p"}, 7) == 30
    assert store.get("/", "totals", 5) == {"i": 5, "new": True}
    assert store.get("/", "totals", 50) is None
    assert store.position("/", "p") == 7
    assert store.counts("/") == [("/", "totals", 30)]
    assert store.collect_garbage(10) is False  # the old documents are still being read
    assert [bson.decode(d.raw) for d in (first, *running)] == [
        {"i": i, "old": True} for i in sorted(range(100), key=str)]
    slices = 0
    while store.has_garbage():
        assert store.collect_garbage(10)
        slices += 1
    assert slices == 11  # ten full slices, then the empty one that ends it
    assert stored_rows(path) == 30
    store.close()
    reopened = open_store(path)
    assert reopened.get("/", "totals", 29) == {"i": 29, "new": True}
    reopened.close()


def test_discarded_loads_and_deleted_binders_are_garbage(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    store = open_store(path)
    abandoned = store.begin_load("/", "b")
    store.stage("/", abandoned, [(i, {"i": i}) for i in range(10)])
    store.begin_load("/", "b")
    store.delete("/", "b")
    while store.has_garbage():
        store.collect_garbage(4)
    assert stored_rows(path) == 0
    assert store.names("/") == []
    store.close()


def test_binders_made_before_storages_existed_still_read(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    with sqlite3.connect(tmp_path / "binders.sqlite") as db:  # the first release's layout
        db.executescript("""
            CREATE TABLE binders (namespace TEXT NOT NULL, name TEXT NOT NULL,
                                  PRIMARY KEY (namespace, name));
            CREATE TABLE documents (namespace TEXT NOT NULL, binder TEXT NOT NULL,
                                    id TEXT NOT NULL, body BLOB NOT NULL,
                                    PRIMARY KEY (namespace, binder, id));""")
        db.execute("INSERT INTO binders VALUES ('/', 'old')")
        db.execute("INSERT INTO documents VALUES ('/', 'old', 'a', ?)",
                   (bson.encode({"id": "a"}),))
    store = open_store(path)
    assert not (tmp_path / "binders.sqlite").exists()
    assert store.get("/", "old", "a") == {"id": "a"}
    assert store.counts() == [("/", "old", 1)]
    load = store.begin_load("/", "old")
    store.stage("/", load, [("b", {"id": "b"})])
    store.hand_over("/", load, "p", {"binder": "old", "name": "p"}, 0)
    while store.has_garbage():
        store.collect_garbage(100)
    assert [d["id"] for d in store.query("/", "old", None)] == ["b"]
    assert stored_rows(path) == 1
    store.close()
