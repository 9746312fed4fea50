"""Partition counts of replicated streams changing after creation (Iggy's
CREATE_PARTITIONS and DELETE_PARTITIONS).

The node that changes a stream's count writes, in one transaction, the stream's record
with the new count and, per new partition, the same keys a new stream's partitions get
(in-sync set, epoch 1, and its leader key when this node is the replica set's first),
or deletes the keys of the partitions removed with their tiered segments' records (a
stream grown again later must find none of the old ones). The other nodes see the record change
through the watch and grow or shrink their own copy to match; each new partition then
has its election, leader and followers like any other. The last count written wins:
two nodes changing one stream's count at once are not reconciled.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from mainstem.broker import layout
from mainstem.broker.iggy.model import rebalance
from mainstem.broker.streams import Stream
from mainstem.cluster.etcd import EtcdError, put
from mainstem.cluster.etcd_keys import path
from mainstem.cluster.metadata.catalog_feed import partition_records_deleted
from mainstem.cluster.replication.replica import PartitionRole, ReplicaContext
from mainstem.cluster.replication.replicated_streams import ReplicatedStreams, dropped

log = logging.getLogger("mainstem.cluster")


class PartitionCounts:
    def __init__(self, context: ReplicaContext, replicated: ReplicatedStreams) -> None:
        self.context, self.replicated = context, replicated
        # Counts this node wrote whose record the watch has not brought back yet: records
        # the watch brings meanwhile are older (the stream's creation, say), not news.
        self._pending: dict[str, int] = {}

    def settled(self, storage: str, record: dict[str, Any]) -> dict[str, Any]:
        """The record to go by, given one the watch brought."""
        pending = self._pending.get(storage)
        if pending is None:
            return record
        if record["partitions"] == pending:
            del self._pending[storage]
            return record
        return {**record, "partitions": pending}

    def resized(self, stream: Stream, before: int) -> None:
        """A protocol changed a stream's count on this node: change it in the cluster."""
        storage = layout.storage_name("stream", stream.namespace, stream.name)
        record = self.replicated.records.get(storage)
        count = len(stream.services)
        if record is None or record["partitions"] == count:
            return  # not the cluster's, or the cluster's own change being followed here
        record = self.replicated.records[storage] = {**record, "partitions": count}
        self._pending[storage] = count
        self.replicated.stop_roles(storage, count)  # any removed
        added = [self.replicated.add_role(storage, index, stream.services[index], record)
                 for index in range(before, count)]
        self.context.spawn(self._share(stream, storage, record, before, added))

    async def _share(self, stream: Stream, storage: str, record: dict[str, Any], before: int,
                     added: list[PartitionRole]) -> None:
        count = record["partitions"]
        removed = range(count, before)
        operations = [put(path("streams", storage), json.dumps(record).encode()),
                      *self.replicated.made(storage, record["replicas"], range(before, count)),
                      *dropped(storage, removed),
                      *partition_records_deleted(stream.namespace, stream.name, removed)]
        while True:
            try:
                await self.context.etcd.txn([], operations)
                break
            except EtcdError:
                await asyncio.sleep(0.5)
        if removed:
            # their keys and tiered segments' records are gone from etcd
            log.info("cluster.partitions_removed",
                     extra={"stream": storage, "partitions": list(removed)})
        for role in added:
            if role.task is None:  # the watch may have started it, seeing the record
                role.start()

    def follow(self, storage: str, stream: Stream, record: dict[str, Any]) -> None:
        """Another node changed a stream's count: change this node's copy to match (its
        roles for new partitions are started by the node, as for a new stream)."""
        count, before = record["partitions"], len(stream.services)
        if count > before:
            self.context.core.streams.add_partitions(stream.namespace, stream.name, count)
        else:
            self.replicated.stop_roles(storage, count)
            self.context.spawn(self.context.core.streams.remove_partitions(
                stream.namespace, stream.name, count))
        for group in self.context.core.iggy.list_groups(stream.namespace, stream.name):
            rebalance(group, count)  # as the node that made the change did
