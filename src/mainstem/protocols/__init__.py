"""Wire protocols: each subpackage holds a sans-IO codec and an asyncio connection.

Importing a codec loads this package: it imports nothing of the server until asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mainstem.protocols.base import ProtocolSpec


def all_protocols() -> list[ProtocolSpec]:
    """Every implemented protocol, in listener start order."""
    from mainstem.protocols.amqp091.connection import handle as amqp
    from mainstem.protocols.base import ProtocolSpec
    from mainstem.protocols.bson_events.connection import handle as bson_events
    from mainstem.protocols.iggy.connection import handle as iggy
    from mainstem.protocols.rabbit_stream.connection import handle as stream
    from mainstem.protocols.segment.connection import handle as segment

    return [
        ProtocolSpec("stream", 5552, stream),
        ProtocolSpec("amqp", 5672, amqp, answers_wrong_protocol=True),
        ProtocolSpec("iggy", 8090, iggy),
        ProtocolSpec("bson", 7451, bson_events),
        ProtocolSpec("segment", 12345, segment),
    ]
