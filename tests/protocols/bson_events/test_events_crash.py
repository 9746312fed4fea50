"""BSON event protocol durability under SIGKILL: a transaction killed before COMMITTX leaves
nothing, one killed during COMMITTX leaves all or nothing, a projection applies every stored
event exactly once, and confirmed publishes survive."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Awaitable, Iterator
from pathlib import Path

from mainstem.client.events import EventsClient
from tests.support.binder_waits import wait_for_document
from tests.support.server_process import kill, start_server, started_ports

TX_EVENTS = 500


async def connect(port: int) -> EventsClient:
    return await EventsClient.connect("127.0.0.1", port, "guest", "guest")


async def read_all(client: EventsClient, channel: str) -> list[dict]:
    subscription = await client.subscribe(channel, start_pos=0)
    events = []
    with contextlib.suppress(TimeoutError):
        while True:
            events.append((await subscription.next(timeout=0.5)).event)
            if len(events) % 500 == 0:
                await subscription.ack()
    return events


@contextlib.contextmanager
def serving(data: Path, log: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """A server on `data` for the block, and its BSON port; SIGKILLed when the block ends."""
    server = start_server(data, log)
    try:
        yield server, started_ports(server, log)["bson"]
    finally:
        kill(server)


async def kill_during(server: subprocess.Popen, work: Awaitable[object], after: float) -> None:
    """SIGKILL the server `after` seconds into `work`, which may then fail as it will."""
    running = asyncio.ensure_future(work)
    await asyncio.sleep(after)
    kill(server)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(running, 5)


async def test_transactions_are_all_or_nothing_across_sigkill(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    with serving(data, log) as (_, port):
        client = await connect(port)
        await client.create_channel("tx")
        await client.publish("tx", {"kind": "confirmed"})
        await client.start_tx(1)  # killed between STARTTX and COMMITTX
        for i in range(50):
            await client.publish("tx", {"kind": "open", "i": i}, session=1)
    for delay in (0.0, 0.002, 0.01):  # killed during COMMITTX, at different points
        with serving(data, log) as (server, port):
            client = await connect(port)
            await client.start_tx(2)
            for i in range(TX_EVENTS):
                await client.publish("tx", {"kind": f"commit-{delay}", "i": i}, session=2)
            await kill_during(server, client.commit_tx(2), delay)
    with serving(data, log) as (_, port):
        events = await read_all(await connect(port), "tx")
    kinds = [e["kind"] for e in events]
    assert kinds.count("confirmed") == 1
    assert "open" not in kinds  # never committed: never visible
    for delay in (0.0, 0.002, 0.01):
        assert kinds.count(f"commit-{delay}") in (0, TX_EVENTS)


async def test_projection_applies_each_event_exactly_once_across_sigkill(tmp_path: Path
                                                                          ) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    with serving(data, log) as (server, port):
        client = await connect(port)
        await client.create_channel("clicks")
        await client.create_projection("count", "clicks", "counters", "page", fold="increment")

        async def publish_forever() -> None:
            while True:
                await client.publish_many("clicks", [{"page": "home", "n": 1}] * 50)

        # The projection folds while events keep arriving.
        await kill_during(server, publish_forever(), 1.0)
    with serving(data, log) as (_, port):
        client = await connect(port)
        stored = len(await read_all(client, "clicks"))
        assert stored > 0
        document = await wait_for_document(client, "counters", "home",
                                           lambda d: d["n"] >= stored)
        assert document["n"] == stored  # no event twice, none lost


async def test_a_hand_over_killed_midway_leaves_the_old_binder_or_the_new(tmp_path: Path
                                                                         ) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    with serving(data, log) as (_, port):
        client = await connect(port)
        await client.create_channel("views")
        await client.create_projection("count", "views", "pages", "page", fold="increment")
        await client.publish_many("views", [{"page": f"p{i % 10}", "n": 1} for i in range(100)])
        await wait_for_document(client, "pages", "p9", lambda d: d["n"] == 10)
    current = {f"p{i}": {"page": f"p{i}", "n": 10} for i in range(10)}
    for round_, delay in enumerate((0.0, 0.003, 0.01, 0.03)):
        new = {f"x{round_}-{i}": {"page": f"x{round_}-{i}", "n": 1000} for i in range(5_000)}
        with serving(data, log) as (server, port):
            client = await connect(port)
            load = await client.begin_load("pages")
            documents = list(new.items())
            for start in range(0, len(documents), 1_000):
                await client.load_documents(load, documents[start:start + 1_000])
            await kill_during(server, client.hand_over(
                load, "count", "views", "pages", "page", "increment", None, 100), delay)
        with serving(data, log) as (_, port):
            client = await connect(port)
            contents = {d["page"]: d async for d in client.query("pages")}
            assert contents in (current, new), f"a mixed binder after a kill at {delay}s"
            if contents == new:  # the position came with it: nothing is folded again
                await asyncio.sleep(0.3)
                assert await client.find_by_id("pages", "p0") is None
            current = contents
            await client.close()
