"""The broker core on real files: streams over the log, restart, deletion, retention
arguments, offsets and publisher sequences."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainstem.broker.core import BrokerCore
from mainstem.broker.errors import AlreadyExists, InvalidArgument, NotFound
from mainstem.broker.layout import storage_name
from mainstem.broker.retention import parse_age_ms
from mainstem.broker.settings import CoreSettings
from mainstem.log.errors import PartitionClosed
from mainstem.log.reader import PartitionReader


async def open_core(data_dir: Path) -> BrokerCore:
    return await BrokerCore.open(data_dir, CoreSettings())


async def test_streams_and_their_data_survive_restart(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    core.catalog.add_namespace("tenant")
    core.streams.create("/", "orders", arguments={"x-max-age": "7D"})
    core.streams.create("tenant", "events", partitions=3)
    await core.streams.partition("/", "orders").append([b"o1", b"o2"], sequences={"pub": 2})
    await core.streams.partition("tenant", "events", 2).append([b"e"])
    core.store_offset("/", "orders", 0, "reader", 1)
    await core.close()

    core = await open_core(tmp_path)
    assert [s.name for s in core.streams.list()] == ["orders", "events"]
    orders = core.streams.get("/", "orders")
    assert orders.retention.max_age_ms == 7 * 86_400_000
    assert orders.partitions[0].next_offset == 2
    events = core.streams.get("tenant", "events")
    assert [p.next_offset for p in events.partitions] == [0, 0, 1]
    assert core.query_offset("/", "orders", 0, "reader") == 1
    assert orders.partitions[0].sequences.get("pub") == 2
    assert orders.partitions[0].sequences.get("nobody") is None
    await core.close()


async def test_create_refuses_duplicates_and_bad_arguments(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    core.streams.create("/", "s")
    with pytest.raises(AlreadyExists):
        core.streams.create("/", "s")
    with pytest.raises(InvalidArgument):
        core.streams.create("/", "bad", arguments={"x-max-length-bytes": -5})
    with pytest.raises(InvalidArgument):
        core.streams.create("/", "bad", arguments={"x-max-age": "7 weeks"})
    assert core.streams.find("/", "bad") is None
    with pytest.raises(NotFound):
        core.streams.create("nowhere", "s")
    await core.close()


async def test_delete_stream_removes_files_and_a_new_one_starts_empty(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    stream = core.streams.create("/", "gone")
    partition = stream.partitions[0]
    await partition.append([b"old"])
    waiting = PartitionReader(partition, 1)
    await core.streams.delete("/", "gone")
    assert not stream.directory.exists()
    with pytest.raises(PartitionClosed):
        await waiting.next_chunk()
    with pytest.raises(NotFound):
        core.streams.get("/", "gone")
    again = core.streams.create("/", "gone")
    assert again.partitions[0].next_offset == 0
    await core.close()


async def test_leftover_files_of_a_crashed_delete_are_not_resurrected(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    stream = core.streams.create("/", "s")
    await stream.partitions[0].append([b"old"])
    directory = stream.directory
    await core.close()
    core = await open_core(tmp_path)
    core.catalog.delete_stream("/", "s")  # a crash right after the catalog changed
    await core.close()
    core = await open_core(tmp_path)
    assert directory.exists()
    fresh = core.streams.create("/", "s")
    assert fresh.partitions[0].next_offset == 0
    await core.close()


async def test_delete_namespace_deletes_its_streams(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    core.catalog.add_namespace("t")
    stream = core.streams.create("t", "s", partitions=2)
    await core.delete_namespace("t")
    assert not stream.directory.exists()
    assert core.streams.list("t") == []
    with pytest.raises(NotFound):
        await core.delete_namespace("t")
    await core.close()


async def test_partitions_grow(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    core.streams.create("/", "s")
    core.streams.add_partitions("/", "s", 4)
    await core.streams.partition("/", "s", 3).append([b"x"])
    with pytest.raises(NotFound):
        core.streams.partition("/", "s", 4)
    await core.close()
    core = await open_core(tmp_path)
    assert core.streams.partition("/", "s", 3).next_offset == 1
    await core.close()


async def test_retention_arguments_reach_the_log(tmp_path: Path) -> None:
    core = await open_core(tmp_path)
    stream = core.streams.create("/", "s", arguments={
        "x-max-length-bytes": 3_000, "x-stream-max-segment-size-bytes": 1_000})
    partition = stream.partitions[0]
    for _ in range(50):
        await partition.append([b"x" * 90] * 2)
    assert core.streams.apply_retention() >= 0
    assert partition.size_bytes <= 3_000 + 1_000
    assert partition.first_offset > 0
    await core.close()


def test_storage_names_are_safe_and_distinct() -> None:
    names = ["/", ".", "..", "a/b", "a%2Fb", "x" * 255, "x" * 254 + "y", "ünï", "\udcff"]
    dirs = [storage_name("stream", ns, name) for ns in ("/", "v") for name in names]
    assert len(set(dirs)) == 2 * len(names)
    assert storage_name("queue", "/", "a") != storage_name("stream", "/", "a")
    assert all(len(d) == 32 and all(ch in "0123456789abcdef" for ch in d) for d in dirs)


def test_age_parsing() -> None:
    assert parse_age_ms("7D") == 7 * 86_400_000
    assert parse_age_ms("12h") == 12 * 3_600_000
    assert parse_age_ms("1Y") == 365 * 86_400_000
    assert parse_age_ms(30) == 30_000
    assert parse_age_ms("45") == 45_000
    with pytest.raises(InvalidArgument):
        parse_age_ms("soon")
