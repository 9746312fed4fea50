"""Tiering in the broker (issue 32): sealed segments past a stream's local bounds move to a
directory tier, are recorded, leave local disk, and read back through a real client as if
local, across a restart; retention deletes them from the tier too."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

from mainstem import Broker
from mainstem.config import ServerConfig, TieringConfig
from tests.support.waiting import wait_until

BODY = 400  # bytes per message: a 20 KB segment holds about 45
BATCH = 20


def tiered_config(data: Path, tier: Path, **tiering: object) -> ServerConfig:
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data)
    return dataclasses.replace(
        config, workers=0,
        tiering=TieringConfig(url=str(tier), check_interval_ms=50, block_bytes=16384,
                              cache_bytes=256 * 1024, **tiering))  # type: ignore[arg-type]


def connect(broker: Broker) -> dict[str, object]:
    return {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}


def body(i: int) -> bytes:
    return f"{i:08d}".encode() * (BODY // 8)


async def publish(broker: Broker, stream: str, count: int, arguments: dict[str, object]) -> None:
    """`count` messages in batches of 20, each confirmed before the next is sent (so each
    is a chunk of about 8 KB)."""
    async with Producer(**connect(broker)) as producer:  # type: ignore[arg-type]
        await producer.create_stream(stream, arguments=arguments, exists_ok=True)
        confirmed = 0
        progress = asyncio.Event()

        async def on_confirm(confirmation: object) -> None:
            nonlocal confirmed
            confirmed += 1
            progress.set()

        for start in range(0, count, BATCH):
            await producer.send_batch(stream, [body(i) for i in range(start, start + BATCH)],
                                      on_publish_confirm=on_confirm)
            while confirmed < start + BATCH:
                progress.clear()
                await asyncio.wait_for(progress.wait(), 30)


async def consume(broker: Broker, stream: str, count: int,
                  spec: ConsumerOffsetSpecification) -> list[tuple[int, bytes]]:
    received: list[tuple[int, bytes]] = []
    enough = asyncio.Event()

    async def on_message(message: bytes, context: object) -> None:
        received.append((context.offset, bytes(message)))  # type: ignore[attr-defined]
        if len(received) >= count:
            enough.set()

    async with Consumer(**connect(broker)) as consumer:  # type: ignore[arg-type]
        await consumer.start()
        await consumer.subscribe(stream, on_message, offset_specification=spec)
        await asyncio.wait_for(enough.wait(), 30)
    return received


def objects(tier: Path) -> list[Path]:
    return sorted(tier.rglob("*.segment"))


async def test_sealed_segments_move_to_the_tier_and_read_back_as_local(tmp_path: Path) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    arguments = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
    count = 2000
    async with Broker(config=tiered_config(data, tier)) as broker:
        await publish(broker, "history", count, arguments)
        service = broker.core.streams.service("/", "history")
        await wait_until(lambda: service.tiered_bytes > 0 and service.size_bytes
                         - service.tiered_bytes <= 45_000 + 20_000, what="segments tiered")
        local_files = sorted(service.partition.directory.glob("*.segment"))
        records = broker.core.catalog.tiered("/", "history", 0)
        assert len(records) >= 10
        assert [r.key for r in records] == [str(p.relative_to(tier)) for p in objects(tier)]
        assert records[-1].next_offset == service.local_first_offset
        assert int(local_files[0].stem) == service.local_first_offset  # the rest went
        got = await consume(broker, "history", count,
                            ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got == [(i, body(i)) for i in range(count)]
        middle = records[3].first_chunk_id + 1  # from inside a tiered segment
        got = await consume(broker, "history", count - middle,
                            ConsumerOffsetSpecification(OffsetType.OFFSET, middle))
        assert got[0] == (middle, body(middle)) and len(got) == count - middle
    async with Broker(config=tiered_config(data, tier)) as broker:  # tiered across a restart
        got = await consume(broker, "history", count,
                            ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got == [(i, body(i)) for i in range(count)]
        assert broker.core.streams.service("/", "history").first_offset == 0


async def test_retention_deletes_tiered_segments_from_the_tier(tmp_path: Path) -> None:
    data, tier = tmp_path / "data", tmp_path / "tier"
    arguments = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
    async with Broker(config=tiered_config(data, tier)) as broker:
        await publish(broker, "short", 2000, arguments)
        service = broker.core.streams.service("/", "short")
        await wait_until(lambda: len(objects(tier)) >= 10, what="segments tiered")
        before = objects(tier)
        # the size limit now counts tiered bytes too: the oldest go, from the tier as well
        await publish(broker, "short", 0, {})
        broker.core.streams.get("/", "short").partitions[0].retention = dataclasses.replace(
            service.partition.retention, max_bytes=200_000)
        service.partition.apply_retention()
        await wait_until(lambda: len(objects(tier)) < len(before), what="tiered objects deleted")
        assert objects(tier)[0] not in before[:1]
        assert service.first_offset == broker.core.catalog.tiered("/", "short", 0)[0].first_chunk_id
        assert service.size_bytes <= 200_000
        got = await consume(broker, "short", 2000 - service.first_offset,
                            ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got[0] == (service.first_offset, body(service.first_offset))
