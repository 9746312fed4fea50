"""Topic exchange matching: a trie over binding-key words, walked as an NFA.

Keys are split on "." exactly as RabbitMQ does: the empty key has no words,
and "a..b" or "a." have empty words ("a", "", "b" and "a", ""). In a binding
key "*" matches exactly one word (possibly empty) and "#" zero or more.

Each binding key is a path in the trie; "*" and "#" are edges of their own.
Routing keeps the set of trie nodes reachable after each word of the routing
key, so its cost grows with the key length and the few nodes that match, not
with the number of bindings, and pathological keys like "#.a.#.a.#" cannot
make it exponential (a node is in the set at most once per word).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from mainstem.broker.amqp.routing.matchers import Matcher, forget_one
from mainstem.broker.amqp.routing.model import Binding, Destination


def split_topic_key(key: str) -> list[str]:
    return key.split(".") if key else []


class _Node:
    __slots__ = ("destinations", "hash", "is_hash", "star", "words")

    def __init__(self, is_hash: bool = False) -> None:
        self.words: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        # A node reached by a "#" edge may swallow any number of further words.
        self.is_hash = is_hash
        self.destinations: Counter[Destination] = Counter()

    def child(self, word: str) -> _Node | None:
        if word == "*":
            return self.star
        if word == "#":
            return self.hash
        return self.words.get(word)

    def add_child(self, word: str) -> _Node:
        existing = self.child(word)
        if existing is not None:
            return existing
        node = _Node(is_hash=word == "#")
        if word == "*":
            self.star = node
        elif word == "#":
            self.hash = node
        else:
            self.words[word] = node
        return node

    def remove_child(self, word: str) -> None:
        if word == "*":
            self.star = None
        elif word == "#":
            self.hash = None
        else:
            del self.words[word]

    def is_empty(self) -> bool:
        return not (self.destinations or self.words or self.star or self.hash)


class TopicMatcher(Matcher):
    def __init__(self) -> None:
        self._root = _Node()

    def add_binding(self, binding: Binding) -> None:
        node = self._root
        for word in split_topic_key(binding.routing_key):
            node = node.add_child(word)
        node.destinations[binding.target] += 1

    def remove_binding(self, binding: Binding) -> None:
        path: list[tuple[_Node, str]] = []
        node = self._root
        for word in split_topic_key(binding.routing_key):
            path.append((node, word))
            child = node.child(word)
            if child is None:
                raise KeyError(f"no topic binding {binding.routing_key!r}")
            node = child
        forget_one(node.destinations, binding.target)
        self._prune(node, path)

    @staticmethod
    def _prune(node: _Node, path: list[tuple[_Node, str]]) -> None:
        """Remove the now-empty tail of the path so the trie does not only grow."""
        for parent, word in reversed(path):
            if not node.is_empty():
                return
            parent.remove_child(word)
            node = parent

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Destination]:
        states = _with_hash_children((self._root,))
        for word in split_topic_key(routing_key):
            states = _with_hash_children(_step(states, word))
            if not states:
                return set()
        matched: set[Destination] = set()
        for node in states:
            matched.update(node.destinations)
        return matched


def _step(states: Iterable[_Node], word: str) -> list[_Node]:
    """The nodes reached from `states` by consuming one word."""
    reached = []
    for node in states:
        child = node.words.get(word)
        if child is not None:
            reached.append(child)
        if node.star is not None:
            reached.append(node.star)
        if node.is_hash:
            reached.append(node)
    return reached


def _with_hash_children(nodes: Iterable[_Node]) -> set[_Node]:
    """Add the nodes behind "#" edges: "#" may match zero words."""
    closed: set[_Node] = set()
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node in closed:
            continue
        closed.add(node)
        if node.hash is not None:
            pending.append(node.hash)
    return closed
