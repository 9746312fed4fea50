"""Partition counts of replicated streams changing after creation (Iggy's
CREATE_PARTITIONS and DELETE_PARTITIONS).

The node that changes a stream's count writes the stream's record with the new count and,
per new partition, the same keys a new stream's partitions get (in-sync set, first epoch,
and its leader key when this node is the replica set's first), with any tiered segments'
or table files' records an earlier partition of that index left deleted; or, once the
record is written, deletes the keys of the partitions removed with those records (a
stream grown again later must find none of the old ones). etcd takes at most 128
operations in a transaction, so this takes as many transactions as the partitions need,
each under a compare of the stream's record (its revision as read): new partitions' keys
before the record that names them, removed ones' after the record that no longer does,
so no transaction ever touches a partition the record names, and one refused (the record
changed) is read again and finished, whatever count came between. The other nodes see the
record change through the watch and grow or shrink their own copy to match; each new
partition then has its election, leader and followers like any other. The last count
written wins: two nodes changing one stream's count at once are not reconciled.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from mainstem.broker import layout
from mainstem.broker.iggy.model import rebalance
from mainstem.broker.streams import Stream
from mainstem.cluster.etcd import MAX_TXN_OPS, Compare, EtcdClient, EtcdError, put
from mainstem.cluster.etcd_keys import path
from mainstem.cluster.metadata.catalog_feed import partition_records_deleted
from mainstem.cluster.replication.replica import PartitionRole, ReplicaContext
from mainstem.cluster.replication.replicated_streams import ReplicatedStreams, dropped

log = logging.getLogger("mainstem.cluster")

RETRY_S = 0.5


async def in_batches(etcd: EtcdClient, guard: Compare,
                     groups: list[list[dict[str, Any]]]) -> bool:
    """Run each group of operations, in order, whole, in transactions of at most
    MAX_TXN_OPS operations (etcd refuses more than 128), each under `guard`; False at the
    first one refused."""
    batch: list[dict[str, Any]] = []
    for group in groups:
        if batch and len(batch) + len(group) > MAX_TXN_OPS:
            if not await etcd.txn([guard], batch):
                return False
            batch = []
        batch += group
    return not batch or await etcd.txn([guard], batch)


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
        count, held = record["partitions"], None
        while True:
            try:
                if held is None:  # written once: a later count is another node's to keep
                    held = await self._write_count(stream, storage, record)
                if max(held, before) > count:
                    await self._drop_keys(stream, storage, range(count, max(held, before)))
                break
            except EtcdError:
                await asyncio.sleep(RETRY_S)
        for role in added:
            if role.task is None:  # the watch may have started it, seeing the record
                role.start()

    async def _write_count(self, stream: Stream, storage: str, record: dict[str, Any]) -> int:
        """Make etcd's record of the stream say this node's count (the last count written
        wins), with the keys of the partitions it adds; the count it said before (0: the
        stream was deleted meanwhile, and its keys with it). Each transaction holds only
        while the record is as read: added partitions' keys go first (no node has a
        replica of them before the record names them), the record last."""
        key, count = path("streams", storage), record["partitions"]
        while True:
            held, revision = await self.context.etcd.get_at(key)
            if held is None:
                return 0
            said = held.json()
            current: int = said["partitions"]
            if said == record:
                return current  # written already (a try etcd answered too late)
            made = [[*self.replicated.made(storage, record["replicas"], index, revision),
                     *partition_records_deleted(stream.namespace, stream.name, index)]
                    for index in range(current, count)]
            if await in_batches(self.context.etcd, Compare(key, "MOD", held.mod_revision),
                                 [*made, [put(key, json.dumps(record).encode())]]):
                return current

    async def _drop_keys(self, stream: Stream, storage: str, removed: range) -> None:
        """Delete the keys and records of the partitions `removed`, in as many transactions
        as it takes, each holding only while the stream's record names none of them (one
        grown back meanwhile was made anew by the node that grew it, and is left)."""
        key = path("streams", storage)
        while True:
            held, _ = await self.context.etcd.get_at(key)
            if held is None:
                return  # the stream was deleted: every key of it went
            count: int = held.json()["partitions"]
            gone = [index for index in removed if index >= count]
            dropped_keys = [[*dropped(storage, index),
                             *partition_records_deleted(stream.namespace, stream.name, index)]
                            for index in gone]
            if await in_batches(self.context.etcd, Compare(key, "MOD", held.mod_revision),
                                 dropped_keys):
                # their keys and tiered segments' and table files' records are gone
                log.info("cluster.partitions_removed",
                         extra={"stream": storage, "partitions": gone})
                return

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
