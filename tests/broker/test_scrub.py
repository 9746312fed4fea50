"""The background scrub on one node (issue 40, item 2): bytes flipped in a stored chunk
of a stream written by a real stream client are found within a bound, reported by the
management API, `mainstem ctl streams verify` and /metrics, and the scrub keeps to its
rate; with the scrub off, a POST verify finds the same damage at once."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import aiohttp

from mainstem import Broker
from mainstem.config import ServerConfig, StorageConfig
from mainstem.formats.osiris import HEADER_SIZE
from mainstem.log.index import SegmentIndex
from tests.admin.test_admin_ctl import ctl
from tests.admin.test_prometheus import scrape
from tests.broker.test_tiering import publish
from tests.support.waiting import wait_until

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
STREAM = "ledger"
ARGUMENTS = {"stream-max-segment-size-bytes": 20_000}
COUNT = 400  # in chunks of 20 messages, about 8 KB each: some 8 segments
FOUND_WITHIN_S = 20.0  # a pass over 160 KB at 16 MiB/s takes well under a second


def scrub_config(data: Path, rate: int) -> ServerConfig:
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data)
    return dataclasses.replace(config, workers=0,
                               storage=dataclasses.replace(StorageConfig(), scrub_rate=rate))


def flip_a_chunk(broker: Broker, segment_number: int = 1, chunk: int = 1) -> int:
    """Flip a byte in the data of a chunk of a sealed segment; its chunk id."""
    directory = broker.core.streams.service("/", STREAM).partition.directory
    segment = sorted(directory.glob("*.segment"))[segment_number]
    entry = SegmentIndex.load(segment.with_suffix(".index")).entry(chunk)
    with open(segment, "r+b") as file:
        file.seek(entry.file_pos + HEADER_SIZE + 100)
        byte = file.read(1)
        file.seek(entry.file_pos + HEADER_SIZE + 100)
        file.write(bytes([byte[0] ^ 0xFF]))
    return entry.chunk_id


async def verify(broker: Broker, method: str = "GET") -> dict[str, Any]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{broker.ports['admin']}",
                                     headers=ADMIN) as http, \
            http.request(method, f"/api/streams/%2F/{STREAM}/verify") as response:
        assert response.status == 200, await response.text()
        report: dict[str, Any] = await response.json()
        return report


async def test_flipped_bytes_are_found_by_the_scrub_and_reported(tmp_path: Path) -> None:
    async with Broker(config=scrub_config(tmp_path / "data", 16 << 20)) as broker:
        await publish(broker, STREAM, COUNT, ARGUMENTS)
        damaged = flip_a_chunk(broker)
        began = time.monotonic()
        latest: dict[str, Any] = {}

        async def poll() -> bool:
            latest.update(await verify(broker))
            return damaged in latest["partitions"][0]["damaged_chunk_ids"]

        deadline = began + FOUND_WITHIN_S
        while not await poll():
            assert time.monotonic() < deadline, f"not found within {FOUND_WITHIN_S} s"
        (partition,) = latest["partitions"]
        assert latest["scrub_rate"] == 16 << 20
        assert partition["damaged_chunk_ids"] == [damaged]
        assert "CRC" in partition["damaged"][0]["damage"]
        await wait_until(lambda: broker.core.streams.service("/", STREAM)
                         .integrity.passes >= 2, what="a full pass done after the damage")
        passed = (await verify(broker))["partitions"][0]
        assert passed["last_full_pass"] is not None
        assert passed["chunks_checked"] >= COUNT // 20
        assert passed["verified_offset"] == damaged  # below the damage, all intact

        code, rows, err = await ctl(broker, "streams", "verify", STREAM, json_output=True)
        assert code == 0, err
        assert [(row["name"], row["damaged_chunk_ids"]) for row in rows] == [
            (STREAM, str(damaged))]
        code, table, _ = await ctl(broker, "streams", "verify", STREAM)
        assert code == 0 and str(damaged) in table.splitlines()[1].split()
        samples = await scrape(broker.ports["prometheus"], "/metrics")
        assert samples["mainstem_chunks_damaged_total", frozenset()] == 1
        assert samples["mainstem_chunks_repaired_total", frozenset()] == 0  # one node: none


async def test_with_the_scrub_off_a_post_verify_finds_the_damage_now(tmp_path: Path) -> None:
    async with Broker(config=scrub_config(tmp_path / "data", 0)) as broker:
        await publish(broker, STREAM, COUNT, ARGUMENTS)
        damaged = flip_a_chunk(broker, segment_number=2, chunk=0)
        assert (await verify(broker))["partitions"][0]["chunks_checked"] == 0  # no scrub
        (partition,) = (await verify(broker, "POST"))["partitions"]
        assert partition["damaged_chunk_ids"] == [damaged]
        assert partition["chunks_checked"] == COUNT // 20
        assert partition["passes"] == 1
        code, rows, err = await ctl(broker, "streams", "verify", STREAM, "--now",
                                    json_output=True)
        assert code == 0, err
        assert rows[0]["damaged_chunk_ids"] == str(damaged)
        assert rows[0]["chunks_checked"] == 2 * (COUNT // 20)


async def test_the_scrub_keeps_to_its_rate(tmp_path: Path) -> None:
    rate = 100_000  # bytes a second
    async with Broker(config=scrub_config(tmp_path / "data", rate)) as broker:
        await publish(broker, STREAM, COUNT, ARGUMENTS)
        service = broker.core.streams.service("/", STREAM)
        size = service.size_bytes
        first = service.integrity.passes
        began = time.monotonic()
        # The pass that starts after `began` is whole: two passes more.
        await wait_until(lambda: service.integrity.passes >= first + 2,
                         what="a whole pass", timeout_s=60)
        took = time.monotonic() - began
        slack = rate * 0.1 + 20_000  # a pace step and one run of a segment's chunks
        assert took >= (size - slack) / rate, (took, size)
