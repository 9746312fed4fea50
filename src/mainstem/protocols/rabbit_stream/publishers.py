"""A connection's publishers as a pure table: an id is declared once and deleted once,
a Publish must name a declared one, a deleted stream takes its publishers with it.

Each rule answers with the frame to send; the table keeps whatever the connection
publishes to (`target`, the partition's service) without looking into it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.constants import Key, ResponseCode

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class Publisher(Generic[T]):
    publisher_id: int
    name: str  # the stream or partition it publishes to
    target: T
    reference: str  # "" when the publisher does not deduplicate
    published: int = 0  # messages received from it, duplicates included


class Publishers(Generic[T]):
    def __init__(self) -> None:
        self.by_id: dict[int, Publisher[T]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_id)

    def declare(self, frame: f.DeclarePublisher, target: T) -> f.Frame:
        """A DeclarePublisher the broker allowed (the stream exists, the user may write)."""
        code = ResponseCode.OK
        if frame.publisher_id in self.by_id:
            code = ResponseCode.PRECONDITION_FAILED
        else:
            self.by_id[frame.publisher_id] = Publisher(frame.publisher_id, frame.stream, target,
                                                       frame.reference)
        return f.Response(Key.DECLARE_PUBLISHER, frame.correlation_id, code)

    def delete(self, frame: f.DeletePublisher) -> f.Frame:
        code = ResponseCode.OK
        if self.by_id.pop(frame.publisher_id, None) is None:
            code = ResponseCode.PUBLISHER_DOES_NOT_EXIST
        return f.Response(Key.DELETE_PUBLISHER, frame.correlation_id, code)

    def drop(self, gone: Callable[[T], bool]) -> set[str]:
        """Forget the publishers whose target is gone; the names they published to."""
        dropped = [publisher for publisher in self.by_id.values() if gone(publisher.target)]
        for publisher in dropped:
            del self.by_id[publisher.publisher_id]
        return {publisher.name for publisher in dropped}


def refusal(publisher_id: int, publishing_ids: list[int], code: int) -> f.Frame:
    """The PublishError for messages that will not be confirmed (an undeclared publisher,
    a stream deleted before the write, a failed write)."""
    return r.PublishError(publisher_id, [(pid, code) for pid in publishing_ids])
