"""Which value of each catalog key a node takes, by etcd's revisions (no I/O here).

The catalog feed (`catalog_feed.py`) tells it what happens to a key: a change made on this
node (`made`; held here already, or to be taken once etcd holds it), etcd's answer to its
write (`written`), an event the watch reports (`seen`), and a change answered or withdrawn
(`settled`). It answers what the node must take, so that every node ends on the value etcd
holds, the newest revision:

- each key's newest revision seen is known (this node's own writes' revisions come with
  etcd's answer); an event no newer is skipped (the echo of its own write, or a value
  overtaken already);
- while the node has changes of a key etcd has not answered, events of that key are kept
  aside (the newest), since only the answer tells whether they are older or newer than the
  node's own;
- once the key's last change is answered or withdrawn, the node takes the newest value
  known unless it holds it already.

Rows are opaque here; a merged kind's "written" row is the merge etcd kept. It keeps one
revision per catalog key the node has seen (consumer offsets included): some bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Row = dict[str, Any] | None


@dataclass(slots=True)
class Unsettled:
    """A key with changes made here that etcd has not answered yet."""

    here: object  # what this node holds: its own change not written yet, or a revision
    changes: int = 0
    newest: tuple[int, Row] | None = None  # the newest (revision, row) etcd holds


class KeyOrder:
    def __init__(self) -> None:
        self._revisions: dict[str, int] = {}  # key -> the newest revision seen of it
        self._unsettled: dict[str, Unsettled] = {}

    def made(self, at: str, change: object, *, held_here: bool) -> None:
        """A change of `at` made on this node (`held_here`: this node holds it already)."""
        unsettled = self._unsettled.setdefault(at, Unsettled(self._revisions.get(at, 0)))
        unsettled.changes += 1
        if held_here:
            unsettled.here = change

    def written(self, at: str, change: object, revision: int, row: Row, *, own: bool) -> None:
        """etcd holds `row` at `revision` after writing `change` (`own`: the row is the
        change's, not a merge nor what etcd held already)."""
        self._revisions[at] = max(self._revisions.get(at, 0), revision)
        unsettled = self._unsettled[at]
        if unsettled.newest is None or revision > unsettled.newest[0]:
            unsettled.newest = (revision, row)
        if own and unsettled.here is change:
            unsettled.here = revision

    def seen(self, at: str, revision: int, row: Row) -> bool:
        """An event of the watch (or a key read at start): True if the node takes `row`
        now."""
        if revision <= self._revisions.get(at, 0):
            return False
        self._revisions[at] = revision
        unsettled = self._unsettled.get(at)
        if unsettled is None:
            return True
        if unsettled.newest is None or revision > unsettled.newest[0]:
            unsettled.newest = (revision, row)
        return False

    def settled(self, at: str) -> tuple[Row] | None:
        """One change of `at` answered or withdrawn: after the last, (row,) if the node
        takes a row, None if it holds the newest already (or nothing newer is known)."""
        unsettled = self._unsettled[at]
        unsettled.changes -= 1
        if unsettled.changes:
            return None
        del self._unsettled[at]
        if unsettled.newest is None or unsettled.here == unsettled.newest[0]:
            return None
        return (unsettled.newest[1],)
