"""Publishing into a real `mainstem serve` (or a cluster's leader) until it is SIGKILLed:
rstream with confirms, numbered bodies, and the set of publishing ids confirmed before it
died."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from rstream import AMQPMessage, ConfirmationStatus, Producer

BATCH = 100
CONFIRMED_BEFORE_KILL = 5_000
IN_FLIGHT_AT_KILL = 20  # batches published and not yet confirmed when the kill lands


def credentials(port: int) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": port, "username": "guest", "password": "guest"}


def numbered(first: int, last: int) -> list[AMQPMessage]:
    """Messages whose publishing ids are the numbers in their bodies, so a confirm names
    exactly which body must survive."""
    batch = []
    for i in range(first, last + 1):
        message = AMQPMessage(body=f"m{i}".encode())
        message.publishing_id = i
        batch.append(message)
    return batch


async def publish_until_killed(port: int, kill: Callable[[], None], stream: str = "crash",
                               publisher: str | None = None,
                               confirmed_before_kill: int = CONFIRMED_BEFORE_KILL,
                               arguments: dict[str, object] | None = None
                               ) -> tuple[set[int], int]:
    """Create `stream` (with `arguments`) and publish numbered messages (deduplicated under
    `publisher` if given); call `kill` once enough are confirmed, with more batches in
    flight. Returns the publishing ids confirmed before the kill and the last id sent."""
    confirmed: set[int] = set()

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.add(status.message_id)

    async def send(first: int) -> None:
        await producer.send_batch(stream, numbered(first, first + BATCH - 1), publisher,
                                  on_publish_confirm=on_confirm)

    producer = Producer(**credentials(port))
    await producer.start()
    await producer.create_stream(stream, arguments=arguments)
    sent = 0
    for _ in range(10_000):  # bounded: normally ends far sooner
        await send(sent + 1)
        sent += BATCH
        if len(confirmed) >= confirmed_before_kill:
            break
        await asyncio.sleep(0)
    for _ in range(IN_FLIGHT_AT_KILL):
        with contextlib.suppress(Exception):
            await send(sent + 1)
        sent += BATCH
    kill()
    survivors = set(confirmed)  # confirms cannot arrive after the kill
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.close(), 5)
    return survivors, sent


def assert_each_confirmed_once(bodies: list[bytes], confirmed: set[int]) -> None:
    """Every confirmed message among `bodies` (all read back after a restart), none twice."""
    assert len(bodies) == len(set(bodies)), "a message was stored twice"
    stored = set(bodies)
    missing = [i for i in sorted(confirmed) if f"m{i}".encode() not in stored]
    assert not missing, f"{len(missing)} confirmed messages lost, first {missing[:5]}"
