"""Projections: fold a channel's events into a binder's documents, inside the broker.

A projection names a channel, a matcher, a binder, the event field that gives the document
id, and a fold (``replace``, ``merge``, or ``increment`` of numeric fields). It reads the
channel from its stored position and applies each chunk's events in one SQLite transaction
together with the new position, so every event is applied exactly once across crashes.
``fold`` is a pure function: the Spark rebuild of a binder uses the same one.

In a cluster every node runs every projection on its own replica of the channel, into
its own binder: `apply` makes the definitions another node changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import bson

from mainstem.broker.errors import InvalidArgument, NotFound
from mainstem.broker.events.binders import BINDER, BinderStore
from mainstem.broker.events.document_matcher import compile_matcher
from mainstem.broker.stream_service import ChunkDamaged, PartitionClosed, waiting_out_tier
from mainstem.broker.streams import StreamStore

log = logging.getLogger("mainstem.projections")
FOLDS = ("replace", "merge", "increment")
POLL_S = 0.5  # how often a projection looks for its channel before it exists
GARBAGE_SLICE = 5_000  # documents of a replaced binder deleted per loop turn
GARBAGE_RETRY_S = 1.0  # when every garbage storage is still being read by a query


@dataclass(frozen=True)
class Projection:
    name: str
    channel: str
    binder: str
    id_field: str
    fold: str = "merge"
    matcher: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fold not in FOLDS:
            raise InvalidArgument(f"fold must be one of {', '.join(FOLDS)}, not {self.fold!r}")
        compile_matcher(self.matcher)  # refuse a bad matcher at declaration


def fold(current: Mapping[str, Any] | None, event: Mapping[str, Any], how: str
         ) -> dict[str, Any]:
    """The document after applying one event."""
    if how == "replace" or current is None:
        return dict(event)
    document = dict(current)
    if how == "merge":
        document.update(event)
        return document
    for key, value in event.items():  # increment: numbers add up, anything else is set
        old = document.get(key)
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if numeric and isinstance(old, int | float) and not isinstance(old, bool):
            document[key] = old + value
        else:
            document[key] = value
    return document


def document_id(event: Mapping[str, Any], id_field: str) -> Any:
    value: Any = event
    for part in id_field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


class Projections:
    def __init__(self, streams: StreamStore, binders: BinderStore) -> None:
        self.streams = streams
        self.binders = binders
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._collector: asyncio.Task[None] | None = None

    def start_all(self) -> None:
        for namespace, definition, _ in self.binders.projections():
            self._start(namespace, Projection(**definition))
        self.collect_garbage()

    def collect_garbage(self) -> None:
        """Remove replaced and deleted binders' documents in the background, a slice per
        loop turn, so a swap of millions of documents never stalls the broker."""
        if self._collector is None or self._collector.done():
            self._collector = asyncio.get_running_loop().create_task(self._collect())

    async def _collect(self) -> None:
        while self.binders.has_garbage():
            worked = self.binders.collect_garbage(GARBAGE_SLICE)
            await asyncio.sleep(0 if worked else GARBAGE_RETRY_S)

    def declare(self, namespace: str, projection: Projection) -> None:
        """Create (or redefine) a projection and start it; its binder is created too."""
        self.binders.create(namespace, projection.binder)
        self.binders.save_projection(namespace, projection.name, asdict(projection))
        self._cancel(namespace, projection.name)
        self._start(namespace, projection)

    async def delete(self, namespace: str, name: str) -> None:
        """Stop a projection and forget it (its binder stays)."""
        await self._stop(namespace, name)
        self.binders.delete_projection(namespace, name)

    async def delete_binder(self, namespace: str, binder: str) -> None:
        """Delete a binder with the projections that fill it."""
        for ns, definition, _ in self.binders.projections():
            if ns == namespace and definition.get("binder") == binder:
                await self._stop(namespace, definition["name"])
        self.binders.delete(namespace, binder)
        self.collect_garbage()

    def apply(self, kind: str, namespace: str, name: str,
              definition: dict[str, Any] | None) -> None:
        """A binder (`definition` {} or None) or projection created, redefined or
        deleted on another node; a deleted projection's task is cancelled, not awaited
        (it stops at its next wait, between chunks)."""
        with self.binders.applying(), contextlib.suppress(NotFound):
            if kind == BINDER and definition is not None:
                self.binders.create(namespace, name)
            elif kind == BINDER:
                for ns, stored, _ in self.binders.projections():
                    if ns == namespace and stored.get("binder") == name:
                        self._cancel(namespace, stored["name"])
                self.binders.delete(namespace, name)
                self.collect_garbage()
            elif definition is None:
                self._cancel(namespace, name)
                self.binders.delete_projection(namespace, name)
            elif self.binders.projection(namespace, name) != definition:
                self.declare(namespace, Projection(**definition))

    def _cancel(self, namespace: str, name: str) -> None:
        running = self._tasks.pop((namespace, name), None)
        if running is not None:
            running.cancel()

    async def _stop(self, namespace: str, name: str) -> None:
        running = self._tasks.pop((namespace, name), None)
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    def hand_over(self, namespace: str, projection: Projection, load_id: str,
                  position: int) -> int:
        """Take a binder rebuilt up to `position` (a completed bulk load) and go on live from
        there: the running projection stops, the binder and position swap in one
        transaction, and the projection starts again from the position."""
        self.binders.load_binder(namespace, load_id)  # refuse an unknown load up front
        # Cancelled, it never folds again (a fold runs between two waits), so nothing is
        # awaited here: the caller's checks of the definition replaced still hold.
        self._cancel(namespace, projection.name)
        try:
            return self.binders.hand_over(namespace, load_id, projection.name,
                                          asdict(projection), position)
        finally:
            self.collect_garbage()
            stored = self.binders.projection(namespace, projection.name)
            if stored is not None:
                self._start(namespace, Projection(**stored))

    def _start(self, namespace: str, projection: Projection) -> None:
        task = asyncio.get_running_loop().create_task(self._run(namespace, projection))
        self._tasks[(namespace, projection.name)] = task

    async def _run(self, namespace: str, projection: Projection) -> None:
        matcher = compile_matcher(projection.matcher)
        while True:
            stream = self.streams.find(namespace, projection.channel)
            if stream is None:
                await asyncio.sleep(POLL_S)
                continue
            start = self.binders.position(namespace, projection.name)
            reader = stream.services[0].subscribe(start)
            try:
                while True:
                    chunk = await waiting_out_tier(reader.next_chunk, log)
                    self._apply(namespace, projection, matcher, chunk, start)
            except PartitionClosed:
                await asyncio.sleep(POLL_S)  # the channel was deleted: wait for a new one
            except ChunkDamaged:  # reported (logged once, counted): its lag shows it stuck
                await asyncio.sleep(POLL_S)  # folds on once the chunk is repaired

    def _apply(self, namespace: str, projection: Projection, matcher: Any, chunk: Any,
               start: int) -> None:
        with self.binders.transaction() as db:
            for offset, record in chunk.records():
                if offset < start:
                    continue  # a hand-over's position may fall inside a chunk
                try:
                    event = bson.decode(bytes(record))
                except Exception:
                    continue  # not a BSON event: nothing to fold
                doc_id = document_id(event, projection.id_field)
                if doc_id is None or not matcher(event):
                    continue
                current = self.binders.get_in(db, namespace, projection.binder, doc_id)
                self.binders.put(db, namespace, projection.binder, doc_id,
                                 fold(current, event, projection.fold))
            self.binders.set_position(db, namespace, projection.name, chunk.next_offset)

    async def stop(self) -> None:
        tasks = [*self._tasks.values(), *([self._collector] if self._collector else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
