"""Publishing into a real `mainstem serve` until it is SIGKILLed: rstream with confirms,
numbered bodies, and the set of publishing ids the server confirmed before it died."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess

from rstream import AMQPMessage, ConfirmationStatus, Producer

from tests.support.server_process import kill

BATCH = 100
CONFIRMED_BEFORE_KILL = 5_000
IN_FLIGHT_AT_KILL = 20  # batches published and not yet confirmed when the kill lands


def credentials(port: int) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": port, "username": "guest", "password": "guest"}


def numbered(first: int) -> list[AMQPMessage]:
    """A batch whose publishing ids are the numbers in the bodies, so a confirm names
    exactly which body must survive."""
    batch = []
    for i in range(first, first + BATCH):
        message = AMQPMessage(body=f"m{i}".encode())
        message.publishing_id = i
        batch.append(message)
    return batch


async def publish_until_killed(port: int, server: subprocess.Popen,
                               stream: str = "crash") -> set[int]:
    """Publish numbered messages; SIGKILL the server once enough are confirmed, with more
    batches in flight. Returns the publishing ids the server confirmed."""
    confirmed: set[int] = set()

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.add(status.message_id)

    producer = Producer(**credentials(port))
    await producer.start()
    await producer.create_stream(stream)
    next_id = 1
    for _ in range(10_000):  # bounded: normally ends far sooner
        await producer.send_batch(stream, numbered(next_id), on_publish_confirm=on_confirm)
        next_id += BATCH
        if len(confirmed) >= CONFIRMED_BEFORE_KILL:
            break
        await asyncio.sleep(0)
    for _ in range(IN_FLIGHT_AT_KILL):
        with contextlib.suppress(Exception):
            await producer.send_batch(stream, numbered(next_id), on_publish_confirm=on_confirm)
        next_id += BATCH
    kill(server)
    survivors = set(confirmed)  # confirms cannot arrive after the kill
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.close(), 5)
    return survivors


def assert_each_confirmed_once(bodies: list[bytes], confirmed: set[int]) -> None:
    """Every confirmed message among `bodies` (all read back after a restart), none twice."""
    assert len(bodies) == len(set(bodies)), "a message was stored twice"
    stored = set(bodies)
    missing = [i for i in sorted(confirmed) if f"m{i}".encode() not in stored]
    assert not missing, f"{len(missing)} confirmed messages lost, first {missing[:5]}"
