"""What the tier tests share: a partition with small segments, its sealed segments
uploaded and loaded back as tiered segments, the cache's bytes on disk, and moto's S3
server (an emulator of S3, run in this process on a loopback port)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

from mainstem.log.descriptors import DescriptorCache
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode, RetentionPolicy
from mainstem.log.segment_file import Segment
from mainstem.log.tier import Tier
from mainstem.log.tier_cache import TierCache
from mainstem.log.tier_upload import TieredRecord, segment_key, upload_segment
from mainstem.log.tiered_segment import TieredSegment
from mainstem.testing_cluster import free_port

BUCKET = "mainstem-tier"
KEYS = {"access_key_id": "testing", "secret_access_key": "testing"}


def written_partition(directory: Path, batches: Sequence[Sequence[bytes]],
                      segment_bytes: int) -> Partition:
    """A partition holding each batch as a chunk, in segments of about `segment_bytes`,
    everything durable."""
    partition = Partition.open(directory, durability=DurabilityPolicy(FsyncMode.NEVER),
                               retention=RetentionPolicy(max_segment_bytes=segment_bytes),
                               descriptors=DescriptorCache(64))
    for batch in batches:
        partition.write_records(batch)
    partition.flush()
    return partition


def sealed(partition: Partition) -> list[Segment]:
    """Every segment but the active one, found as a reader finds them."""
    segments: list[Segment] = []
    offset = partition.first_offset
    while (found := partition.find_committed(offset)) is not None:
        segments.append(found[0])
        offset = found[0].next_offset
    return segments[:-1]


@dataclass
class Tiered:
    local: Segment
    record: TieredRecord
    segment: TieredSegment


async def tier_all(tier: Tier, partition: Partition, cache: TierCache,
                   prefix: str = "stream/0") -> list[Tiered]:
    """Upload every sealed segment and load each back through the cache."""
    out = []
    for local in sealed(partition):
        record = await upload_segment(tier, local, segment_key(prefix, local.first_chunk_id, 1))
        out.append(Tiered(local, record, await TieredSegment.load(tier, record, cache)))
    return out


def disk_bytes(directory: Path) -> int:
    """Bytes the file system allocated to the cache's segment files."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*.segment"))


@contextmanager
def moto_s3() -> Iterator[tuple[ThreadedMotoServer, str]]:
    """moto's S3 emulator on a free loopback port, with the bucket made: (server,
    endpoint). Not a real S3: it checks the requests obstore sends, not S3's service."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        # moto keeps its buckets in the process, across servers: a test starts from none
        # (a tier's owner mark left by an earlier test would make this broker a stranger)
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset",
                                                      method="POST"), timeout=10).close()
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
        yield server, endpoint
    finally:
        server.stop()


def s3_tier(endpoint: str, timeout: float = 10.0) -> Tier:
    return Tier.s3(f"s3://{BUCKET}/tiered", endpoint=endpoint, timeout=timeout, **KEYS)
