"""The catalog feed's rule of which value a node takes (`KeyOrder`), against a model of
etcd and three nodes: hypothesis draws the interleavings of changes made on each node
(held there already, or etcd first; a merged key too), their writes, etcd's answers, the
watch events each node receives, and withdrawn changes. Once everything is delivered,
every node holds etcd's value of every key, and at no point does a node hold an etcd-first
change etcd does not."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.cluster.metadata.key_order import KeyOrder

KEYS = ("plain-a", "plain-b", "merged")
Row = dict[str, Any]


def merge(held: Row, written: Row) -> Row:
    """The merged key's rule, as a segment's truncation point: the larger stays."""
    return written if written["v"] > held["v"] else held


@dataclass(eq=False)
class Change:
    at: str
    row: Row
    held_here: bool


@dataclass
class Node:
    order: KeyOrder = field(default_factory=KeyOrder)
    local: dict[str, Row | None] = field(default_factory=dict)
    queue: deque[Change] = field(default_factory=deque)  # made, not sent yet
    answers: deque[tuple[Change, int, Row, bool]] = field(default_factory=deque)
    cursor: int = 0  # the next event of etcd's log this node's watch reports

    def take(self, at: str, taken: tuple[Row | None] | None) -> None:
        if taken is not None:
            self.local[at] = taken[0]


@dataclass
class Etcd:
    revision: int = 0
    held: dict[str, tuple[int, Row]] = field(default_factory=dict)
    log: list[tuple[str, int, Row]] = field(default_factory=list)

    def write(self, change: Change) -> tuple[int, Row, bool]:
        """(revision, row etcd holds, whether it is the change's own row)."""
        current = self.held.get(change.at)
        row = change.row
        if change.at == "merged" and current is not None:
            row = merge(current[1], change.row)
            if row == current[1]:  # nothing written: etcd keeps what it held
                return current[0], row, False
        self.revision += 1
        self.held[change.at] = (self.revision, row)
        self.log.append((change.at, self.revision, row))
        return self.revision, row, row == change.row


class Model:
    def __init__(self) -> None:
        self.etcd = Etcd()
        self.nodes = [Node() for _ in range(3)]
        self.values = 0

    def make(self, node: Node, at: str, held_here: bool) -> None:
        self.values += 1
        change = Change(at, {"v": self.values, "first": not held_here}, held_here)
        if held_here:
            node.local[at] = change.row
        node.order.made(at, change, held_here=held_here)
        node.queue.append(change)

    def send(self, node: Node) -> None:  # one write in flight per node, as the feed
        change = node.queue.popleft()
        node.answers.append((change, *self.etcd.write(change)))

    @staticmethod
    def answer(node: Node) -> None:
        change, revision, row, own = node.answers.popleft()
        node.order.written(change.at, change, revision, row, own=own)
        node.take(change.at, node.order.settled(change.at))

    def deliver(self, node: Node) -> None:
        at, revision, row = self.etcd.log[node.cursor]
        node.cursor += 1
        if node.order.seen(at, revision, row):
            node.local[at] = row

    @staticmethod
    def withdraw(node: Node) -> None:
        change = next(c for c in node.queue if not c.held_here)
        node.queue.remove(change)
        node.take(change.at, node.order.settled(change.at))

    def steps(self, node: Node) -> list[str]:
        """What may happen next at `node`."""
        possible = []
        if node.queue and not node.answers:
            possible.append("send")
        if node.answers:
            possible.append("answer")
        if node.cursor < len(self.etcd.log):
            possible.append("deliver")
        if any(not change.held_here for change in node.queue):
            possible.append("withdraw")
        return possible

    def check_no_value_etcd_lacks(self) -> None:
        written = [row for _, _, row in self.etcd.log]
        for node in self.nodes:
            for row in node.local.values():
                assert row is None or not row["first"] or row in written, row


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_node_ends_on_the_value_etcd_holds(data: st.DataObject) -> None:
    model = Model()
    for _ in range(data.draw(st.integers(10, 80))):
        node = data.draw(st.sampled_from(model.nodes))
        action = data.draw(st.sampled_from(["make", *model.steps(node)]))
        if action == "make":
            model.make(node, data.draw(st.sampled_from(KEYS)), data.draw(st.booleans()))
        else:
            getattr(model, action)(node)
        model.check_no_value_etcd_lacks()
    while any(set(model.steps(node)) - {"withdraw"} for node in model.nodes):
        for node in model.nodes:
            for action in model.steps(node):
                if action != "withdraw":
                    getattr(model, action)(node)
                    break
    model.check_no_value_etcd_lacks()
    for node in model.nodes:
        for at in KEYS:
            held = model.etcd.held.get(at)
            assert node.local.get(at) == (held[1] if held else None), (at, node.local,
                                                                        model.etcd.held)
