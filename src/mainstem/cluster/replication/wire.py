"""The replication listener's frames, sans-IO: how a follower and its leader talk.

    frame: length u32 (of what follows) | type u8 | body

A follower opens with HELLO (JSON: the cluster secret, the partition, who it is and
where its log ends). The leader answers TRUNCATE (cut your log at this offset, then say
HELLO again), START (your log agrees with mine: chunks follow) or REFUSE (a reason).
A node that forwards appends to partitions this node leads opens with FORWARD_HELLO
instead, then sends FORWARD frames; each is answered by a FORWARDED frame once the
append is committed (or failed), in whatever order they complete.
A node that relays AMQP traffic to queues this node is home to opens with RELAY_HELLO
(the frames that follow are in `relay_wire`).
A node whose copy of a chunk is damaged opens with REPAIR_HELLO, then asks for the chunk
with REPAIR (JSON: stream, partition, chunk id); it is answered REPAIR_CHUNK, the chunk as
this node holds it (checked, in the current layout), or REFUSE (`repair.py`).
Then the leader sends CHUNK frames — whether the chunk opens a segment, the commit
point, and the chunk itself as it lies on disk, trailer included — and COMMIT frames
when only the commit point moved; the follower answers ACK with the offset below which
its disk holds everything durably.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import asdict, dataclass, fields
from typing import Any

from mainstem.broker.stream_service.forwarding import ForwardedAppend

FRAME = struct.Struct(">IB")  # length (type and body), type
OFFSET = struct.Struct(">Q")
CHUNK_PREFIX = struct.Struct(">BQ")  # opens a segment, commit point
MAX_CONTROL_FRAME = 64 * 1024  # a HELLO, REFUSE, ACK...: chunks have their own bound


class FrameType(enum.IntEnum):
    HELLO = 1
    ACK = 2
    TRUNCATE = 3
    START = 4
    CHUNK = 5
    COMMIT = 6
    REFUSE = 7
    FORWARD_HELLO = 8  # a node that forwards appends: JSON secret and node
    FORWARD = 9  # one append, see encode_forward
    FORWARDED = 10  # JSON id and offset, or id and error
    # AMQP traffic relayed to queues' home nodes: see relay_wire
    RELAY_HELLO = 11
    RELAY_PUBLISH = 12
    RELAY_CONFIRM = 13
    RELAY_CALL = 14
    RELAY_REPLY = 15
    RELAY_DELIVER = 16
    RELAY_GOT = 17
    RELAY_SETTLE = 18
    RELAY_CANCELLED = 19
    # A damaged chunk's intact copy, from another replica: see repair.py
    REPAIR_HELLO = 20
    REPAIR = 21
    REPAIR_CHUNK = 22


class WireError(Exception):
    """The peer sent something this protocol does not allow."""


@dataclass(frozen=True, slots=True)
class Hello:
    secret: str
    stream: str  # the stream's storage name: the same on every node
    partition: int
    node: str
    epoch: int  # the leader epoch the follower expects
    # Where the follower's log ends (`follower.follow` says it in each HELLO it sends).
    next_offset: int = 0
    last_chunk_id: int = -1  # -1 for an empty log
    last_epoch: int = 0

    def encode(self) -> bytes:
        return frame(FrameType.HELLO, json.dumps(asdict(self)).encode())

    @classmethod
    def decode(cls, body: bytes) -> Hello:
        try:
            fields: dict[str, Any] = json.loads(body)
            return cls(**fields)
        except (ValueError, TypeError) as error:
            raise WireError(f"bad HELLO: {error}") from error


def frame(kind: FrameType, body: bytes = b"") -> bytes:
    return FRAME.pack(len(body) + 1, kind) + body


def offset_frame(kind: FrameType, offset: int) -> bytes:
    return frame(kind, OFFSET.pack(offset))


def chunk_frame_header(chunk_size: int, opens_segment: bool, commit: int) -> bytes:
    """What goes before a chunk's bytes in a CHUNK frame."""
    return (FRAME.pack(1 + CHUNK_PREFIX.size + chunk_size, FrameType.CHUNK)
            + CHUNK_PREFIX.pack(opens_segment, commit))


def read_offset(body: bytes) -> int:
    if len(body) != OFFSET.size:
        raise WireError(f"an offset is {OFFSET.size} bytes, got {len(body)}")
    value: int = OFFSET.unpack(body)[0]
    return value


ENTRY_LENGTH = struct.Struct(">I")
_APPEND_FIELDS = [f.name for f in fields(ForwardedAppend) if f.name != "entries"]


def encode_forward(request: int, stream: str, partition: int, append: ForwardedAppend) -> bytes:
    """FORWARD: header length u32 | JSON header | entries, each length u32 | bytes."""
    header = {name: getattr(append, name) for name in _APPEND_FIELDS}
    header.update(id=request, stream=stream, partition=partition)
    encoded = json.dumps(header).encode()
    parts = [ENTRY_LENGTH.pack(len(encoded)), encoded]
    for entry in append.entries:
        parts += [ENTRY_LENGTH.pack(len(entry)), bytes(entry)]
    return frame(FrameType.FORWARD, b"".join(parts))


def decode_forward(body: bytes) -> tuple[int, str, int, ForwardedAppend]:
    """(request id, stream, partition, the append) of a FORWARD frame's body."""
    try:
        size = ENTRY_LENGTH.unpack_from(body)[0]
        header = json.loads(body[4:4 + size])
        view, position, entries = memoryview(body), 4 + size, []
        while position < len(body):
            length = ENTRY_LENGTH.unpack_from(body, position)[0]
            position += 4
            if position + length > len(body):
                raise WireError("an entry runs past the frame")
            entries.append(view[position:position + length])
            position += length
        append = ForwardedAppend(entries, **{name: header[name] for name in _APPEND_FIELDS})
        return int(header["id"]), str(header["stream"]), int(header["partition"]), append
    except (struct.error, ValueError, KeyError, TypeError) as error:
        raise WireError(f"bad FORWARD: {error}") from error
