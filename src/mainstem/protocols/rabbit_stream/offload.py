"""Publish frames decoded in another process: both ends of the exchange, sans-IO.

Decoding a Publish frame (a Python loop over its messages) is most of the broker's CPU
for a stream publish, and the only part that needs nothing but the frame's bytes. With
worker processes (`mainstem.workers`), the codec leaves Publish frames undecoded
(`Undecoded`, for the pairs in `DEFERRED`); the connection sends the wire bytes of one
read's Publish frames to a worker, which decodes them with the very parser used
in-process and answers with each `PublishBlock` (its ids and its entries in one block
each), so that taking the answer apart costs the broker's loop the same whatever the
number of messages. Everything else (dedup, chunking, CRC, writing,
fsync, confirms) stays with the partition's one writer in the main process.

Request: the frames' wire bytes, size prefixes included. Response: marshal of one item
per frame, a PublishBlock's fields or the message of the MalformedFrame its parser raised.
"""

from __future__ import annotations

import dataclasses
import marshal
from typing import Any

from mainstem.protocols.rabbit_stream.codec import parse_frame
from mainstem.protocols.rabbit_stream.constants import Key
from mainstem.protocols.rabbit_stream.frames import PublishBlock
from mainstem.protocols.rabbit_stream.wire import U32, FrameError, MalformedFrame

# (key, version) pairs left undecoded; any other version is parsed (and refused) inline.
DEFERRED = frozenset({(Key.PUBLISH, 1), (Key.PUBLISH, 2)})
_FIELDS = tuple(field.name for field in dataclasses.fields(PublishBlock))


def decode_publishes(request: bytes) -> bytes:
    """The worker's side: every frame of `request` parsed, as the response."""
    view, pos = memoryview(request), 0
    items: list[object] = []
    while pos < len(view):
        (size,) = U32.unpack_from(view, pos)
        body = view[pos + 4:pos + 4 + size]
        pos += 4 + size
        try:
            frame = parse_frame(body)
        except FrameError as error:
            items.append(error.message)
            continue
        assert isinstance(frame, PublishBlock)  # DEFERRED holds Publish versions only
        items.append(tuple(getattr(frame, name) for name in _FIELDS))
    return marshal.dumps(items)


def decoded_frames(response: bytes) -> list[PublishBlock | FrameError]:
    """The connection's side: the frames (or their errors) a worker answered with."""
    return [_frame(item) for item in marshal.loads(response)]


def _frame(item: Any) -> PublishBlock | FrameError:
    if isinstance(item, str):
        return MalformedFrame(item)
    return PublishBlock(*item)
