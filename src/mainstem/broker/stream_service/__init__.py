"""The stream service: the one way protocols write to and read from a stream's partitions.

`PartitionService` gives each partition one `Appender` (batching, chunk bounds, writer
sequences, durability, the write gate) and `Subscription`s (credit, waiting for new
data, sending chunks from the files); in a cluster, its roles (`stand_by`, `lead`,
`follow`) are the only way replication changes it. Below it lies the log; protocols see only this,
and the Osiris layout itself is declared once, in `formats.osiris`.
"""

from mainstem.broker.stream_service.appender import Appender, ChunkLimits, Receipt
from mainstem.broker.stream_service.gate import WriteGate, WritesHeld
from mainstem.broker.stream_service.roles import Following, Leading
from mainstem.broker.stream_service.service import PartitionService
from mainstem.broker.stream_service.subscription import Subscription
from mainstem.broker.stream_service.tier_wait import waiting_out_tier
from mainstem.formats.chunk import Chunk
from mainstem.log.errors import (
    ChunkDamaged,
    DataRemoved,
    NotWritable,
    PartitionClosed,
    TierUnavailable,
)
from mainstem.log.partition import ChunkLocation
from mainstem.log.segment_file import Segment
from mainstem.log.tiered_segment import NotFetched, fetching
from mainstem.log.transfer import ChunkView, Transfer

__all__ = [
    "Appender", "Chunk", "ChunkDamaged", "ChunkLimits", "ChunkLocation", "ChunkView", "DataRemoved",
    "Following", "Leading", "NotFetched", "NotWritable", "PartitionClosed", "PartitionService",
    "Receipt",
    "Segment", "Subscription", "TierUnavailable", "Transfer", "WriteGate", "WritesHeld",
    "fetching", "waiting_out_tier",
]
