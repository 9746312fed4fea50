"""Tiering under SIGKILL (issue 32): a real `mainstem serve` with a directory tier, small
segments tiering continuously while rstream publishes with confirms, killed during the
uploads and again during a tiered read. After each restart every confirmed message reads
back once, in order, from offset 0; no local segment with a catalog record is left (the
record is the commit point), and what uploads the crash cut short left is deleted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

from mainstem.broker.layout import storage_name
from mainstem.broker.tiering import MARKER, OWNER
from tests.support.rstream_reads import read_with_rstream
from tests.support.server_process import kill, start_server, started_ports
from tests.support.stream_crash import assert_each_confirmed_once, publish_until_killed

ARGUMENTS = {"stream-max-segment-size-bytes": 16_000, "tier-local-max-bytes": 32_000}
CONFIRMED_BEFORE_KILL = 20_000  # ~30 segments: uploads go on when the kill lands
DIRECTORY = storage_name("stream", "/", "crash")


def serve(data: Path, tier: Path, log: Path) -> subprocess.Popen:
    return start_server(data, log, "--tier-url", str(tier), "--tier-check-interval-ms", "10",
                        "--tier-block-bytes", "16384", "--tier-cache-bytes", "262144")


def kill_while_uploading(server: subprocess.Popen, log: Path) -> None:
    """SIGKILL once the third segment was tiered, the others still going (the test's
    loop waits here: the server is another process)."""
    for _ in range(500):
        if uploads(log) >= 3:
            break
        time.sleep(0.01)
    kill(server)


def uploads(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines()
               if json.loads(line)["event"] == "tier.uploaded")


def records(data: Path) -> dict[int, str]:
    """first chunk id -> object key, of every recorded tiered segment (the catalog)."""
    with sqlite3.connect(f"file:{data / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT first_chunk_id, record FROM tiered_segments").fetchall()
    return {first: json.loads(record)["key"] for first, record in rows}


def local_segments(data: Path) -> list[int]:
    return sorted(int(p.stem) for p in (data / "streams" / DIRECTORY / "0").glob("*.segment"))


def files(tier: Path) -> set[str]:
    """Every file in the tier but its marks: objects, and a put's temporary files."""
    return {str(p.relative_to(tier)) for p in tier.rglob("*") if p.is_file()} - {MARKER, OWNER}


def numbers(bodies: list[bytes]) -> list[int]:
    return [int(body[1:]) for body in bodies]


def assert_recovered(bodies: list[bytes], confirmed: set[int], data: Path) -> None:
    """Each confirmed message once, in order; no recorded segment kept a local copy."""
    assert_each_confirmed_once(bodies, confirmed)
    assert numbers(bodies) == sorted(numbers(bodies))
    recorded = records(data)
    assert recorded and not set(recorded) & set(local_segments(data))
    assert min(local_segments(data)) > max(recorded)


async def test_sigkill_during_uploads_keeps_every_confirmed_message_once(tmp_path: Path
                                                                         ) -> None:
    data, tier, log = tmp_path / "data", tmp_path / "tier", tmp_path / "server.log"
    server = serve(data, tier, log)
    try:
        confirmed, _ = await publish_until_killed(
            started_ports(server, log)["stream"], lambda: kill_while_uploading(server, log),
            confirmed_before_kill=CONFIRMED_BEFORE_KILL, arguments=ARGUMENTS)
    finally:
        kill(server)
    # The kill landed once uploads were under way, rounds every 10 ms while publishing went
    # on (on a loaded machine the rounds may have caught up: then it lands between rounds)
    assert uploads(log) >= 3 and len(local_segments(data)) >= 2
    # an upload the crash left without its record, as a kill between put and record does:
    # noted as begun, put, not recorded
    recorded_key = next(iter(records(data).values()))
    orphan_key = recorded_key.replace(recorded_key.rsplit("/", 1)[1],
                                      "99999999999999999999-1-orphan.segment")
    orphan = tier / orphan_key
    shutil.copyfile(tier / recorded_key, orphan)
    with sqlite3.connect(data / "catalog.sqlite") as db:
        db.execute("INSERT INTO tier_uploads (key, started_ms) VALUES (?, 0)", (orphan_key,))

    restarted = serve(data, tier, log)
    try:
        bodies = await read_with_rstream(started_ports(restarted, log)["stream"], "crash")
        for _ in range(250):  # the deletes run in the background
            if not orphan.exists():
                break
            await asyncio.sleep(0.02)
    finally:
        kill(restarted)
    assert_recovered(bodies, confirmed, data)
    assert not orphan.exists()
    named = {key for k in records(data).values() for key in (k, k.replace(".segment", ".index"))}
    assert files(tier) == named  # neither unrecorded objects nor a put's leftovers


async def test_sigkill_during_a_tiered_read_loses_nothing(tmp_path: Path) -> None:
    data, tier, log = tmp_path / "data", tmp_path / "tier", tmp_path / "server.log"
    server = serve(data, tier, log)
    try:
        confirmed, _ = await publish_until_killed(
            started_ports(server, log)["stream"], lambda: None,
            confirmed_before_kill=CONFIRMED_BEFORE_KILL, arguments=ARGUMENTS)
        for _ in range(500):
            if uploads(log) >= 10:
                break
            await asyncio.sleep(0.02)
        read = await read_until_killed(started_ports(server, log)["stream"], server)
    finally:
        kill(server)
    assert 0 < len(read) < len(confirmed)  # killed mid-read, in the tiered range
    assert numbers(read) == sorted(numbers(read))

    restarted = serve(data, tier, log)  # a cold cache
    try:
        bodies = await read_with_rstream(started_ports(restarted, log)["stream"], "crash")
    finally:
        kill(restarted)
    assert_recovered(bodies, confirmed, data)


async def read_until_killed(port: int, server: subprocess.Popen) -> list[bytes]:
    """Read the stream from its first offset; SIGKILL the server once 2000 arrived."""
    bodies: list[bytes] = []
    enough = asyncio.Event()

    async def on_message(message: AMQPMessage, context: object) -> None:
        bodies.append(bytes(message.body))
        if len(bodies) >= 2000:
            enough.set()

    consumer = Consumer("127.0.0.1", port, username="guest", password="guest")
    await consumer.start()
    await consumer.subscribe("crash", on_message, decoder=amqp_decoder,
                             offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    await asyncio.wait_for(enough.wait(), 10)
    kill(server)
    taken = list(bodies)
    with contextlib.suppress(Exception):  # the server is gone: the close may fail
        await asyncio.wait_for(consumer.close(), 5)
    return taken
