"""BSON event protocol durability under SIGKILL: a transaction killed before COMMITTX leaves
nothing, one killed during COMMITTX leaves all or nothing, a projection applies every stored
event exactly once, and confirmed publishes survive."""

from __future__ import annotations

import asyncio
import contextlib
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


def restart(data: Path, log: Path):
    server = start_server(data, log)
    return server, started_ports(server, log)["bson"]


async def test_transactions_are_all_or_nothing_across_sigkill(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server, port = restart(data, log)
    try:
        client = await connect(port)
        await client.create_channel("tx")
        await client.publish("tx", {"kind": "confirmed"})
        await client.start_tx(1)  # killed between STARTTX and COMMITTX
        for i in range(50):
            await client.publish("tx", {"kind": "open", "i": i}, session=1)
        kill(server)
    finally:
        kill(server)
    for delay in (0.0, 0.002, 0.01):  # killed during COMMITTX, at different points
        server, port = restart(data, log)
        try:
            client = await connect(port)
            await client.start_tx(2)
            for i in range(TX_EVENTS):
                await client.publish("tx", {"kind": f"commit-{delay}", "i": i}, session=2)
            committing = asyncio.ensure_future(client.commit_tx(2))
            await asyncio.sleep(delay)
            kill(server)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(committing, 5)
        finally:
            kill(server)
    server, port = restart(data, log)
    try:
        events = await read_all(await connect(port), "tx")
    finally:
        kill(server)
    kinds = [e["kind"] for e in events]
    assert kinds.count("confirmed") == 1
    assert "open" not in kinds  # never committed: never visible
    for delay in (0.0, 0.002, 0.01):
        assert kinds.count(f"commit-{delay}") in (0, TX_EVENTS)


async def test_projection_applies_each_event_exactly_once_across_sigkill(tmp_path: Path
                                                                          ) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server, port = restart(data, log)
    try:
        client = await connect(port)
        await client.create_channel("clicks")
        await client.create_projection("count", "clicks", "counters", "page", fold="increment")

        async def publish_forever() -> None:
            while True:
                await client.publish_many("clicks", [{"page": "home", "n": 1}] * 50)

        publishing = asyncio.ensure_future(publish_forever())
        await asyncio.sleep(1.0)  # the projection folds while events keep arriving
        kill(server)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(publishing, 5)
    finally:
        kill(server)
    server, port = restart(data, log)
    try:
        client = await connect(port)
        stored = len(await read_all(client, "clicks"))
        assert stored > 0
        document = await wait_for_document(client, "counters", "home",
                                           lambda d: d["n"] >= stored)
        assert document["n"] == stored  # no event twice, none lost
    finally:
        kill(server)


async def test_a_hand_over_killed_midway_leaves_the_old_binder_or_the_new(tmp_path: Path
                                                                         ) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    server, port = restart(data, log)
    try:
        client = await connect(port)
        await client.create_channel("views")
        await client.create_projection("count", "views", "pages", "page", fold="increment")
        await client.publish_many("views", [{"page": f"p{i % 10}", "n": 1} for i in range(100)])
        await wait_for_document(client, "pages", "p9", lambda d: d["n"] == 10)
    finally:
        kill(server)
    current = {f"p{i}": {"page": f"p{i}", "n": 10} for i in range(10)}
    for round_, delay in enumerate((0.0, 0.003, 0.01, 0.03)):
        new = {f"x{round_}-{i}": {"page": f"x{round_}-{i}", "n": 1000} for i in range(5_000)}
        server, port = restart(data, log)
        try:
            client = await connect(port)
            load = await client.begin_load("pages")
            documents = list(new.items())
            for start in range(0, len(documents), 1_000):
                await client.load_documents(load, documents[start:start + 1_000])
            handing = asyncio.ensure_future(client.hand_over(
                load, "count", "views", "pages", "page", "increment", None, 100))
            await asyncio.sleep(delay)
            kill(server)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handing, 5)
        finally:
            kill(server)
        server, port = restart(data, log)
        try:
            client = await connect(port)
            contents = {d["page"]: d async for d in client.query("pages")}
            assert contents in (current, new), f"a mixed binder after a kill at {delay}s"
            if contents == new:  # the position came with it: nothing is folded again
                await asyncio.sleep(0.3)
                assert await client.find_by_id("pages", "p0") is None
            current = contents
            await client.close()
        finally:
            kill(server)
