"""Spark reads a stream's tiered history straight from the tier: a broker with a directory
tier and a stream that keeps little locally, data published with rstream and tiered, then a
batch read returns every row once with its offset, and the broker delivered only the local
offsets (its stream protocol counts every record it sends); the same holds for a streaming
query, and read through the broker (`tier.direct=false`) the rows are the same. An object
the tasks cannot read fails the read naming the tier and the key."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from pathlib import Path

import pytest
import requests
from rstream import AMQPMessage, Producer

from mainstem.client.stream import StreamClient
from mainstem.config import ServerConfig, TieringConfig
from mainstem.spark.options import SourceOptions
from mainstem.spark.source import BatchReader, OffsetRange, TieredRange
from mainstem.testing import ThreadedBroker
from tests.broker.test_tiering import tiered_config
from tests.log.tiering import BUCKET, KEYS, moto_s3

pytestmark = pytest.mark.spark

COUNT = 3000
ARGUMENTS = {"stream-max-segment-size-bytes": 20_000, "tier-local-max-bytes": 45_000}
DELIVERED = re.compile(r'rabbitmq_global_messages_delivered_total\{protocol="stream"\} (\S+)')


def body(i: int) -> bytes:
    return b"%08d" % i * 25


def publish(port: int) -> None:
    """A chunk of 50 messages per batch: each confirmed before the next goes (the broker
    makes one chunk of what arrives in one read)."""
    async def run() -> None:
        async with Producer("127.0.0.1", port=port, username="guest",
                            password="guest") as producer:
            await producer.create_stream("history", arguments=ARGUMENTS)
            confirmed = asyncio.Queue[object]()
            for start in range(0, COUNT, 50):
                await producer.send_batch("history", [AMQPMessage(body=body(i)) for i in
                                                      range(start, start + 50)],
                                          on_publish_confirm=confirmed.put)
                for _ in range(50):
                    await asyncio.wait_for(confirmed.get(), 30)
    asyncio.run(run())


def tiered_end(url: str) -> int:
    """Where the tiered offsets end (the first local one) once tiering settled."""
    seen, since = -1, time.monotonic()
    deadline = since + 60
    with StreamClient.connect(url) as client:
        while time.monotonic() < deadline:
            segments = client.tiered_segments("history").segments
            end = segments[-1].next_offset if segments else 0
            if end != seen:
                seen, since = end, time.monotonic()
            elif end > COUNT // 2 and time.monotonic() - since > 0.5:
                return end
            time.sleep(0.05)
    raise AssertionError(f"tiering did not settle: tiered up to {seen}")


def delivered(broker: ThreadedBroker) -> float:
    text = requests.get(f"http://127.0.0.1:{broker.ports['admin']}/metrics",
                        auth=("guest", "guest"), timeout=10).text
    found = DELIVERED.search(text)
    assert found is not None, "the stream protocol's delivered counter"
    return float(found.group(1))


def test_a_batch_read_takes_tiered_history_from_the_tier(spark, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"), workers=0,
        tiering=TieringConfig(url=str(tier), check_interval_ms=50, block_bytes=16384,
                              cache_bytes=1 << 20))
    with ThreadedBroker(tmp_path / "data", config=config) as broker:
        publish(broker.ports["stream"])
        url = broker.urls["stream"]
        boundary = tiered_end(url)
        with StreamClient.connect(url) as client:
            answer = client.tiered_segments("history")
        assert answer.url == str(tier) and answer.endpoint is None
        assert [s.key for s in answer.segments] == \
            [str(p.relative_to(tier)) for p in sorted(tier.rglob("*.segment"))]

        options = {"url": url, "stream": "history", "maxRecordsPerPartition": "1000"}
        planned = BatchReader(SourceOptions.parse(options)).partitions()
        assert {(type(p), p.start < boundary) for p in planned} == \
            {(TieredRange, True), (OffsetRange, False)}
        assert min(p.start for p in planned if isinstance(p, OffsetRange)) == boundary

        before = delivered(broker)
        rows = spark.read.format("mainstem").options(**options).load() \
            .select("offset", "value").collect()
        through_broker = delivered(broker) - before
        assert sorted((r.offset, r.value) for r in rows) == [(i, body(i)) for i in range(COUNT)]
        # the tiered rows came from the tier (ranges are cut at chunk bounds here: the
        # broker counts each chunk it sends whole)
        assert through_broker == COUNT - boundary

        before = delivered(broker)
        plain = spark.read.format("mainstem").options(**options, **{"tier.direct": "false"}) \
            .load().select("offset", "value").collect()
        assert sorted(plain) == sorted(rows)
        assert delivered(broker) - before == COUNT

        before = delivered(broker)  # a streaming query plans its micro-batches alike
        query = (spark.readStream.format("mainstem").option("url", url)
                 .option("stream", "history").option("startingOffsets", "earliest").load()
                 .select("offset", "value").writeStream.format("memory")
                 .queryName("tiered_history").trigger(availableNow=True).start())
        query.awaitTermination()
        assert sorted(spark.table("tiered_history").collect()) == sorted(rows)
        assert delivered(broker) - before == COUNT - boundary

        key = answer.segments[1].key  # a task cannot read it: it fails naming tier and key
        (tier / key).rename(tmp_path / "aside")
        with pytest.raises(Exception, match=re.escape(f"tier {tier}: {key}")):
            spark.read.format("mainstem").options(**options).load().collect()
        (tmp_path / "aside").rename(tier / key)


def test_an_s3_tier_without_credentials_fails_when_the_query_is_planned(
        spark, tmp_path: Path, monkeypatch) -> None:
    """Before: the tasks' reads went to the cloud's instance metadata service for
    credentials (a non-loopback address) and failed with a 403; now the query is refused
    when planned, saying what to give, and runs with the keys as options."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    with moto_s3() as (_, endpoint):
        config = tiered_config(tmp_path / "data", f"s3://{BUCKET}/tier", endpoint=endpoint,
                               **KEYS)
        with ThreadedBroker(tmp_path / "data", config=config) as broker:
            publish(broker.ports["stream"])
            url = broker.urls["stream"]
            tiered_end(url)
            options = {"url": url, "stream": "history"}
            with pytest.raises(Exception) as refused:  # as Spark raises the source's error
                spark.read.format("mainstem").options(**options).load().count()
            assert "no credentials to read it: give options 'tier.accessKeyId'" in \
                str(refused.value)
            keys = {"tier.accessKeyId": KEYS["access_key_id"],
                    "tier.secretAccessKey": KEYS["secret_access_key"]}
            rows = spark.read.format("mainstem").options(**options, **keys).load()
            assert sorted(r.offset for r in rows.select("offset").collect()) == \
                list(range(COUNT))
