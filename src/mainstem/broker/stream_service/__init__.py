"""The stream service: the one way protocols write to and read from a stream's partitions.

`PartitionService` gives each partition one `Appender` (batching, chunk bounds, writer
sequences, durability, the write gate) and `Subscription`s (credit, waiting for new
data, sending chunks from the files). Below it lies the log; protocols see only this,
and take the Osiris entry layout a stream Publish carries from here.
"""

from mainstem.broker.stream_service.appender import Appender, ChunkLimits, Receipt
from mainstem.broker.stream_service.gate import WriteGate, WritesHeld
from mainstem.broker.stream_service.service import PartitionService
from mainstem.broker.stream_service.subscription import Subscription
from mainstem.log.chunk import HEADER_SIZE as CHUNK_HEADER_SIZE
from mainstem.log.chunk import (
    MAX_CHUNK_ENTRIES,
    SIMPLE_ENTRY,
    SUB_BATCH_BIT,
    SUB_BATCH_ENTRY,
    Chunk,
)
from mainstem.log.partition import DataRemoved, PartitionClosed
from mainstem.log.transfer import ChunkView

__all__ = [
    "CHUNK_HEADER_SIZE", "MAX_CHUNK_ENTRIES", "SIMPLE_ENTRY", "SUB_BATCH_BIT", "SUB_BATCH_ENTRY",
    "Appender", "Chunk", "ChunkLimits", "ChunkView", "DataRemoved", "PartitionClosed",
    "PartitionService", "Receipt", "Subscription", "WriteGate", "WritesHeld",
]
