"""Tiering in the broker (issue 32): sealed segments past a stream's local bounds move to a
directory tier, are recorded, leave local disk, and read back through a real client as if
local, across a restart; retention deletes them from the tier too."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

import aiohttp
import pytest
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

from mainstem import Broker
from mainstem.broker.catalog import Catalog
from mainstem.broker.tiering import MARKER, OWNER
from mainstem.config import ServerConfig, TieringConfig
from tests.support.s3_servers import S3Server
from tests.support.waiting import wait_until

BODY = 400  # bytes per message: a 20 KB segment holds about 45
BATCH = 20


def tiered_config(data: Path, tier: Path | str, **tiering: object) -> ServerConfig:
    """A broker on ephemeral loopback ports with `tier` (a directory or an s3:// URL),
    checked every 50 ms, with small cache blocks, deleting objects whose record went at
    once (unless `delete_grace_ms` says otherwise)."""
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data)
    tiering = {"delete_grace_ms": 0, **tiering}
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
        tiering = broker.core.tiering
        assert tiering is not None

        def settled() -> bool:  # each recorded segment swapped in, none waiting
            records = broker.core.catalog.tiered("/", "history", 0)
            return (tiering.upload_lag_bytes() == 0 and bool(records)
                    and records[-1].next_offset == service.local_first_offset)

        await wait_until(settled, what="every segment past the bound tiered")
        assert service.size_bytes - service.tiered_bytes <= 45_000 + 20_000
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
        tiering = broker.core.tiering
        assert tiering is not None
        # every upload done first: retention counting a backlog of local segments would
        # take every tiered one (a loaded machine's uploads lag)
        await wait_until(lambda: len(objects(tier)) >= 10 and tiering.upload_lag_bytes() == 0,
                         what="segments tiered")
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


async def test_an_s3_tier_holds_the_history_and_a_restart_with_no_cache_reads_it(
        tmp_path: Path, s3: S3Server) -> None:
    """The same through each S3 server on loopback: after a restart with the local cache
    gone, indexes and chunks come from the bucket again."""
    data = tmp_path / "data"
    config = tiered_config(data, s3.url("history"), endpoint=s3.endpoint, **s3.keys)
    async with Broker(config=config) as broker:
        await publish(broker, "s3", 600, {"stream-max-segment-size-bytes": 20_000,
                                          "tier-local-max-bytes": 30_000})
        tiering = broker.core.tiering
        assert tiering is not None
        await wait_until(lambda: tiering.stats.uploads >= 5
                         and tiering.upload_lag_bytes() == 0, what="segments in S3")
        keys = await tiering.tier.list("")
        records = broker.core.catalog.tiered("/", "s3", 0)
        named = {key for r in records for key in (r.key, r.index_key)}
        assert named == set(keys) - {MARKER, OWNER}
    shutil.rmtree(data / "tier-cache")
    async with Broker(config=config) as broker:
        got = await consume(broker, "s3", 600, ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got == [(i, body(i)) for i in range(600)]


async def test_a_second_broker_on_a_used_s3_tier_is_refused_by_its_owner_mark(
        tmp_path: Path, s3: S3Server) -> None:
    """The owner mark is claimed by a create-only put: a second broker (another node
    identity) pointed at the same bucket prefix uploads nothing there and says whose it is."""
    tier, reach = s3.tier("shared"), {"endpoint": s3.endpoint, **s3.keys}
    await tiered_broker_stopped(tmp_path / "one", s3.url("shared"), uploads=1, **reach)
    owner = (await tier.get(OWNER)).decode().strip()
    before = set(await tier.list(""))
    async with Broker(config=tiered_config(tmp_path / "two", s3.url("shared"),
                                           **reach)) as second:
        await publish(second, "other", 200, {"stream-max-segment-size-bytes": 20_000,
                                             "tier-local-max-bytes": 30_000})
        stranger = second.core.tiering
        assert stranger is not None
        await wait_until(lambda: f"belongs to {owner}" in (stranger.stats.last_error or ""),
                         what="the second broker's rounds failing on the owner mark")
        assert stranger.stats.uploads == 0
    assert set(await tier.list("")) == before


async def test_an_empty_mount_point_takes_no_upload_until_the_store_is_back(
        tmp_path: Path) -> None:
    """A directory tier whose store is not mounted shows an empty directory: uploads must
    not go there (they would be hidden, and lost, once the store is mounted again)."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    arguments = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
    async with Broker(config=tiered_config(data, tier)) as broker:
        tiering = broker.core.tiering
        assert tiering is not None
        await publish(broker, "mounted", 1000, arguments)
        await wait_until(lambda: tiering.stats.uploads >= 5 and tiering.upload_lag_bytes() == 0,
                         what="segments tiered")
        await publish(broker, "doomed", 300, arguments)
        await wait_until(lambda: tiering.upload_lag_bytes() == 0, what="doomed tiered")
        doomed = tier / broker.core.streams.get("/", "doomed").directory.name
        assert objects(doomed)
        uploads = tiering.stats.uploads
        tier.rename(tmp_path / "store")
        tier.mkdir()  # the mount point, with nothing mounted on it
        await broker.core.streams.delete("/", "doomed")  # its objects wait for the store
        await publish(broker, "mounted", 1000, arguments)
        await wait_until(lambda: tiering.stats.last_error is not None
                         and "marker" in tiering.stats.last_error, what="the missing marker")
        assert objects(tier) == [] and tiering.stats.uploads == uploads
        assert tiering.upload_lag_bytes() > 0  # the local segments stay
        tier.rmdir()
        (tmp_path / "store").rename(tier)  # mounted again
        assert objects(doomed)
        await wait_until(lambda: tiering.upload_lag_bytes() == 0, what="uploads resumed")
        await wait_until(lambda: not objects(doomed), what="the deleted stream's objects gone")
        got = await consume(broker, "mounted", 2000, ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got == [(i, body(i % 1000)) for i in range(2000)]


def tier_files(tier: Path) -> list[Path]:
    return sorted(path for path in tier.rglob("*") if path.is_file())


async def tiered_broker_stopped(data: Path, tier: Path | str, stream: str = "kept",
                                uploads: int = 2, **tiering: object) -> None:
    """Run a broker until `uploads` segments of `stream` are tiered, then stop it."""
    async with Broker(config=tiered_config(data, tier, **tiering)) as broker:
        await publish(broker, stream, 200 * uploads, {"stream-max-segment-size-bytes": 20_000,
                                                      "tier-local-max-bytes": 30_000})
        tiering = broker.core.tiering
        assert tiering is not None
        await wait_until(lambda: tiering.stats.uploads >= uploads
                         and tiering.upload_lag_bytes() == 0, what="segments tiered")


async def test_a_start_deletes_what_an_upload_cut_short_left_and_nothing_else(
        tmp_path: Path) -> None:
    """An upload is noted before it begins: one a crash left unrecorded (its objects, or a
    put's temporary file) is deleted at the next start, one by one and logged. An object
    nobody noted is never deleted for being unnamed."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    await tiered_broker_stopped(data, tier)
    kept = tier_files(tier)
    prefix = next(tier.glob("*/0"))
    cut_short = f"{prefix.relative_to(tier)}/00000000000000099999-1-cafe.segment"
    left = [tier / cut_short, tier / (cut_short + "#0"),
            tier / cut_short.replace(".segment", ".index")]
    for path in left:
        path.write_bytes(b"half an upload")
    unnamed = prefix / "00000000000000088888-1-beef.segment"  # not this node's: stays
    unnamed.write_bytes(b"someone else's")
    with Catalog.open(data / "catalog.sqlite") as catalog:
        catalog.begin_upload(cut_short)
    async with Broker(config=tiered_config(data, tier)) as broker:
        await wait_until(lambda: not any(path.exists() for path in left), what="deleted")
        assert broker.core.catalog.uploads() == []
    assert tier_files(tier) == sorted([*kept, unnamed])


async def test_a_second_broker_on_a_used_tier_deletes_nothing_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 39, item 2: a second broker (its own data directory) pointed at the tier
    another uses finds the tier marked as the other's: it uploads and deletes nothing
    there, and its round's error says whose the tier is."""
    tier = tmp_path / "tier"
    await tiered_broker_stopped(tmp_path / "first", tier)
    kept = {path: path.stat().st_ino for path in tier_files(tier)}
    assert len(kept) >= 5
    async with Broker(config=tiered_config(tmp_path / "second", tier)) as second:
        for stream in ("kept", "other"):  # the first's stream's name, and one of its own
            await publish(second, stream, 400, {"stream-max-segment-size-bytes": 20_000,
                                                "tier-local-max-bytes": 30_000})
        tiering = second.core.tiering
        assert tiering is not None
        await wait_until(lambda: tiering.stats.last_error is not None, what="a refusal")
        assert "belongs to" in tiering.stats.last_error
        assert tiering.stats.uploads == 0 and tiering.upload_lag_bytes() > 0
        await asyncio.sleep(0.3)  # rounds every 50 ms: several went by
    assert {path: path.stat().st_ino for path in tier_files(tier)} == kept  # none replaced
    assert any("belongs to" in str(getattr(r, "error", "")) for r in caplog.records)


async def test_a_node_restored_from_an_old_backup_deletes_nothing_it_does_not_know(
        tmp_path: Path) -> None:
    """Issue 39, item 2: a data directory restored from a backup taken before later
    uploads does not know their objects: they stay (the tier is still its own)."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    await tiered_broker_stopped(data, tier, uploads=2)
    shutil.copytree(data, tmp_path / "backup")
    await tiered_broker_stopped(data, tier, "later", uploads=2)
    later = tier_files(tier)
    shutil.rmtree(data)
    shutil.copytree(tmp_path / "backup", data)
    async with Broker(config=tiered_config(data, tier)) as broker:
        tiering = broker.core.tiering
        assert tiering is not None
        for _ in range(5):
            await tiering.round()
        assert tiering.stats.last_error is None and tiering.stats.deleted == 0
        got = await consume(broker, "kept", 400, ConsumerOffsetSpecification(OffsetType.FIRST))
        assert got == [(i, body(i)) for i in range(400)]
    assert tier_files(tier) == later


async def test_objects_whose_record_went_stay_for_the_grace_period(tmp_path: Path) -> None:
    """A deleted stream's objects are not deleted at once: readers that planned on them
    (a Spark job) have the grace period; then each goes, logged."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier, delete_grace_ms=1500)) as broker:
        await publish(broker, "brief", 400, {"stream-max-segment-size-bytes": 20_000,
                                             "tier-local-max-bytes": 30_000})
        tiering = broker.core.tiering
        assert tiering is not None
        await wait_until(lambda: tiering.stats.uploads >= 2 and tiering.upload_lag_bytes() == 0,
                         what="segments tiered")
        before = objects(tier)
        await broker.core.streams.delete("/", "brief")
        assert tiering.stats.deletes_pending == 2 * len(before)
        for _ in range(5):
            await tiering.round()
        assert objects(tier) == before  # within the grace period
        await wait_until(lambda: tiering.stats.deleted == 2 * len(before),  # segments, indexes
                         what="deleted after the grace period")
        assert not objects(tier) and tiering.stats.deletes_pending == 0


async def test_a_policy_sets_the_local_bound_of_streams_already_there(tmp_path: Path) -> None:
    """RabbitMQ's way to change a stream's settings without redeclaring it: a policy's
    `tier-local-max-bytes` applies at once to the streams it matches."""
    async with Broker(config=tiered_config(tmp_path / "data", tmp_path / "tier")) as broker:
        await publish(broker, "policed", 600, {"stream-max-segment-size-bytes": 20_000})
        service = broker.core.streams.service("/", "policed")
        tiering = broker.core.tiering
        assert tiering is not None
        await tiering.round()
        assert service.tiered_bytes == 0  # no bound: everything stays local
        policy = {"pattern": "^policed$", "apply-to": "streams",
                  "definition": {"tier-local-max-bytes": 30_000}}
        url = f"http://127.0.0.1:{broker.ports['admin']}/api/policies/%2F/archive"
        guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
        async with aiohttp.ClientSession(headers=guest) as http, \
                http.put(url, json=policy) as response:
            assert response.status == 201, await response.text()
        await wait_until(lambda: service.tiered_bytes > 0 and tiering.upload_lag_bytes() == 0,
                         what="the policy's bound applied")
        assert service.size_bytes - service.tiered_bytes <= 30_000 + 20_000


async def test_partitions_removed_from_a_stream_leave_the_tier_too(tmp_path: Path) -> None:
    """Iggy's DELETE_PARTITIONS shrinks a stream from its end: the removed partitions'
    tiered objects go with their local files."""
    data, tier = tmp_path / "data", tmp_path / "tier"
    async with Broker(config=tiered_config(data, tier)) as broker:
        broker.core.streams.create("/", "wide", 3, {"x-stream-max-segment-size-bytes": 20_000,
                                                    "x-tier-local-max-bytes": 30_000})
        for index in (1, 2):  # each partition answers to its own name
            await publish(broker, f"wide-{index}", 300, {})
        tiering = broker.core.tiering
        assert tiering is not None
        prefix = tier / broker.core.streams.get("/", "wide").directory.name
        await wait_until(lambda: bool(objects(prefix / "1")) and bool(objects(prefix / "2"))
                         and tiering.upload_lag_bytes() == 0, what="both partitions tiered")
        kept = objects(prefix / "1")
        await broker.core.streams.remove_partitions("/", "wide", 2)
        await wait_until(lambda: not objects(prefix / "2"), what="the removed partition's objects")
        assert objects(prefix / "1") == kept


async def test_closing_ends_the_rounds_even_as_a_change_wakes_them(tmp_path: Path) -> None:
    """Python 3.11's `asyncio.wait_for` drops a cancellation that meets the event it waits
    on being set: the rounds' task, woken by a change as the broker closed, went on with a
    round every interval and the close waited for it forever (seen as a rare hang of the
    tests above)."""
    config = tiered_config(tmp_path / "data", tmp_path / "tier")
    assert config.tiering is not None
    config = dataclasses.replace(config, tiering=dataclasses.replace(
        config.tiering, check_interval_ms=60_000))
    async with Broker(config=config) as broker:
        tiering = broker.core.tiering
        assert tiering is not None
        await asyncio.sleep(0.5)  # the first round (nothing to do) is over: rounds wait
        tiering.pending_changed()  # wakes them, and in the same turn:
        async with asyncio.timeout(10):
            await tiering.close()
