"""Reading a whole stream with rstream, the way users consume: from the first offset,
until a number of messages arrived or none came for a while."""

from __future__ import annotations

import asyncio

from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder


async def read_with_rstream(port: int, stream: str, *, expected: int | None = None,
                            quiet_s: float = 1.0) -> list[bytes]:
    """Every message body of `stream` read through the node at `port` (rstream may follow
    the metadata to a replica), until `expected` arrived or `quiet_s` passed with none."""
    bodies: list[bytes] = []
    arrived = asyncio.Event()

    async def on_message(message: AMQPMessage, context: object) -> None:
        bodies.append(bytes(message.body))
        arrived.set()

    async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST, None))
        for _ in range(200):  # bounded: ends at the count or the first quiet spell
            if expected is not None and len(bodies) >= expected:
                break
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), quiet_s)
            except TimeoutError:
                break
    return bodies
