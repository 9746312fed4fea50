"""Tiering's operations surface (issue 32, item 5): the mainstem_tier_* series on both
scrape ports, the extents in /api/queues, /api/streams, /api/iggy/streams and
/api/tiering, StreamStats' own keys and the console's streams table (in headless
Chromium), all read with real clients from a broker whose stream moved to a directory
tier; and a broker without a tier shows no tier series."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from mainstem import Broker
from mainstem.client.stream import Endpoint, StreamClient
from tests.admin import test_console
from tests.admin.test_console import Console, assert_screenshot, call
from tests.admin.test_prometheus import Samples, names, scrape
from tests.broker.test_tiering import objects, publish, tiered_config
from tests.support.waiting import wait_until

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
STREAM = "history"
ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
COUNT = 600  # about 12 segments of 20 KB: most go to the tier
browser = test_console.browser  # the console tests' headless Chromium, for this module too
downloads = test_console.downloads  # where it saves downloads (the browser fixture needs it)


@contextlib.asynccontextmanager
async def tiered_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker whose stream `history` has moved to its tier as far as its bounds say."""
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        await publish(broker, STREAM, COUNT, ARGUMENTS)
        tiering = broker.core.tiering
        assert tiering is not None
        await wait_until(lambda: len(objects(tmp_path / "tier")) >= 5
                         and tiering.upload_lag_bytes() == 0, what="segments tiered")
        yield broker


async def get(broker: Broker, path: str, auth: str = ADMIN["Authorization"]
              ) -> tuple[int, Any]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}",
                                     headers={"Authorization": auth}) as http, \
            http.get(path) as response:
        return response.status, await response.json(content_type=None)


def tier_bytes(tier: Path, suffix: str) -> int:
    return sum(path.stat().st_size for path in tier.rglob("*" + suffix))


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


async def test_the_tier_series_on_both_ports_follow_uploads_errors_and_deletes(tmp_path):
    tier = tmp_path / "tier"
    async with tiered_broker(tmp_path) as broker:
        partition = broker.core.streams.get("/", STREAM).partitions[0]
        tiered = tier_bytes(tier, ".segment")
        assert partition.tiered_bytes == tiered
        per_object = await scrape(broker.ports["prometheus"], "/metrics/per-object")
        labels = {"vhost": "/", "stream": STREAM}
        assert sample(per_object, "mainstem_tier_tiered_bytes", **labels) == tiered
        assert sample(per_object, "mainstem_tier_local_bytes", **labels) == (
            partition.size_bytes - tiered)
        assert sample(per_object, "mainstem_tier_uploads_total") == len(objects(tier))
        assert sample(per_object, "mainstem_tier_uploaded_bytes_total") == (
            tiered + tier_bytes(tier, ".index"))
        assert sample(per_object, "mainstem_tier_upload_lag_bytes") == 0
        assert sample(per_object, "mainstem_tier_errors_total") == 0
        assert sample(per_object, "mainstem_tier_deletes_pending") == 0
        async with aiohttp.ClientSession(headers=ADMIN) as http, http.get(
                f"http://127.0.0.1:{broker.ports['admin']}/metrics") as response:
            assert response.status == 200
            management = await response.text()
        assert f"\nmainstem_tier_tiered_bytes {float(tiered)}\n" in management  # summed

        # The tier broken (its path no longer a directory: listing fails, where a missing
        # directory lists as empty): new candidates wait (upload lag), each round counts
        # an error, and a deleted stream's objects wait to be deleted.
        tier.rename(tmp_path / "unmounted")
        tier.write_bytes(b"")
        await publish(broker, STREAM, 200, ARGUMENTS)
        tiering = broker.core.tiering
        assert tiering is not None
        await wait_until(lambda: tiering.stats.errors >= 1 and tiering.upload_lag_bytes() > 0,
                         what="an upload failed")
        aggregated = await scrape(broker.ports["prometheus"], "/metrics")
        assert sample(aggregated, "mainstem_tier_errors_total") >= 1
        assert sample(aggregated, "mainstem_tier_upload_lag_bytes") > 0
        assert sample(aggregated, "mainstem_tier_uploads_total") == len(
            objects(tmp_path / "unmounted"))
        await broker.core.streams.delete("/", STREAM)
        await wait_until(lambda: tiering.stats.deletes_pending >= 1, what="a delete waits")
        aggregated = await scrape(broker.ports["prometheus"], "/metrics")
        assert sample(aggregated, "mainstem_tier_deletes_pending") >= 1
        assert sample(aggregated, "mainstem_tier_tiered_bytes") == 0  # no stream left


async def test_api_rows_tiering_endpoint_and_stream_stats_show_the_extents(tmp_path):
    async with tiered_broker(tmp_path) as broker:
        partition = broker.core.streams.get("/", STREAM).partitions[0]
        records = partition.tiered_records
        extent = {"tiered_bytes": partition.tiered_bytes,
                  "local_bytes": partition.size_bytes - partition.tiered_bytes,
                  "tiered_segments": len(records), "local_first_offset": records[-1].next_offset,
                  "damaged_chunks": 0}
        assert extent["tiered_bytes"] == tier_bytes(tmp_path / "tier", ".segment")
        status, queues = await get(broker, "/api/queues")
        assert status == 200
        assert [{k: q[k] for k in extent} for q in queues if q["name"] == STREAM] == [extent]
        status, stream = await get(broker, f"/api/streams/%2F/{STREAM}")
        assert status == 200
        assert {k: stream[k] for k in extent} == extent
        assert {k: stream["partitions"][0][k] for k in extent} == extent
        status, iggy = await get(broker, "/api/iggy/streams")
        assert [{k: t[k] for k in extent} for s in iggy for t in s["topics"]] == [extent]

        status, tiering = await get(broker, "/api/tiering/%2F")
        assert status == 200
        assert tiering["url"] == str(tmp_path / "tier")
        assert tiering["stats"]["uploads"] == len(records)
        assert tiering["stats"]["upload_lag_bytes"] == 0
        [row] = tiering["partitions"]
        assert {k: row[k] for k in extent} == extent
        assert [r["key"] for r in row["records"]] == [r.key for r in records]
        assert row["records"][0]["first_chunk_id"] == 0

        await create_user(broker, "watcher", "monitoring")
        await create_user(broker, "manager", "management")
        assert (await get(broker, "/api/tiering", basic("watcher")))[0] == 200
        assert (await get(broker, "/api/tiering", basic("manager")))[0] == 401
        assert (await get(broker, "/api/tiering/nowhere"))[0] == 404

        endpoint = Endpoint("127.0.0.1", broker.ports["stream"], "guest", "guest", "/")
        stats = await asyncio.to_thread(stream_stats, endpoint, STREAM)
        assert stats["tiered_bytes"] == extent["tiered_bytes"]
        assert stats["local_first_offset"] == extent["local_first_offset"] > 0
        assert stats["first_chunk_id"] == 0  # RabbitMQ's keys still count the tier


async def test_the_console_streams_table_shows_local_and_tiered_bytes(tmp_path, browser):
    async with tiered_broker(tmp_path) as broker:
        service = broker.core.streams.service("/", STREAM)
        shots = tmp_path / "screenshots"
        shots.mkdir()
        page = Console(browser, broker.ports["admin"], shots)
        await call(page.log_in, "streams")
        shown = await call(page.wait_for_row, "streams-table", STREAM)

        def as_shown(size: int) -> str:  # the console's own formatting of a size
            return str(browser.execute_script("return bytes(arguments[0])", size))

        assert shown["local"] == await call(as_shown, service.size_bytes - service.tiered_bytes)
        assert shown["tiered"] == await call(as_shown, service.tiered_bytes)
        assert shown["tiered"].endswith("KiB") and shown["tiered"] != shown["local"]
        assert shown["tiered segments"] == str(len(service.tiered_records))
        assert_screenshot(await call(page.screenshot, "streams-tiered"))


def stream_stats(endpoint: Endpoint, stream: str) -> dict[str, int]:
    with StreamClient(endpoint) as client:
        return client.stats(stream)


def basic(user: str) -> str:
    return aiohttp.encode_basic_auth(user, "pw")


async def create_user(broker: Broker, name: str, tags: str) -> None:
    async with aiohttp.ClientSession(headers=ADMIN) as http, http.put(
            f"http://127.0.0.1:{broker.ports['admin']}/api/users/{name}",
            json={"password": "pw", "tags": tags}) as response:
        assert response.status in (201, 204)


async def test_without_a_tier_no_tier_series_and_all_bytes_local(broker):
    await publish(broker, "plain", 40, {})
    for path in ("/metrics/per-object", "/metrics"):
        samples = await scrape(broker.ports["prometheus"], path)
        assert "mainstem_stream_size_bytes" in names(samples)
        assert not {n for n in names(samples) if n.startswith("mainstem_tier")}
    status, tiering = await get(broker, "/api/tiering")
    assert status == 200
    assert (tiering["url"], tiering["stats"]) == (None, None)
    [row] = [r for r in tiering["partitions"] if r["stream"] == "plain"]
    assert row["tiered_bytes"] == row["tiered_segments"] == row["local_first_offset"] == 0
    assert row["local_bytes"] == broker.core.streams.get("/", "plain").partitions[0].size_bytes
