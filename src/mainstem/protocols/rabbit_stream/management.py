"""A stream connection's management and metadata commands: CreateStream, DeleteStream,
their super stream forms, Metadata, Route, Partitions, StreamStats, and mainstem's own
TieredSegments."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any

from mainstem.broker.cluster_view import ClusterView, NodeAddress
from mainstem.broker.errors import BrokerError, NotFound
from mainstem.broker.streams import BINDING_KEYS, PARTITION_NAMES
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.commands import (
    CommandFailed,
    response_code,
    stream_arguments,
)
from mainstem.protocols.rabbit_stream.constants import Key, ResponseCode
from mainstem.protocols.rabbit_stream.session import Session


class Management:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.core = session.core

    async def on_create_stream(self, frame: f.CreateStream) -> None:
        await self._answer(Key.CREATE_STREAM, frame.correlation_id, self._create_stream(frame))

    async def _create_stream(self, frame: f.CreateStream) -> None:
        self.session.check("configure", frame.stream)
        await self._create(frame.stream, 1, stream_arguments(frame.arguments))

    async def _answer(self, key: int, correlation_id: int, create: Awaitable[None]) -> None:
        """Run a create command and answer it with its outcome's code."""
        try:
            await create
        except BrokerError as error:
            self.session.respond(key, correlation_id, response_code(error))
        except CommandFailed as failed:
            self.session.respond(key, correlation_id, failed.code)
        else:
            self.session.respond(key, correlation_id)

    async def _create(self, name: str, partitions: int, arguments: dict[str, Any]) -> None:
        """Create here, or in the cluster, which places the stream's replicas."""
        namespace = self.session.namespace
        if self.core.streams.find(namespace, name) is None:  # a new one: max-queues
            self.core.limits.check_queue(namespace, name)
        if self.core.cluster is None:
            self.core.streams.create(namespace, name, partitions, arguments)
        else:
            await self.core.cluster.create_stream(namespace, name, partitions, arguments)
        self.session.ctx.audit("streams.create", vhost=namespace, name=name)

    async def on_delete_stream(self, frame: f.DeleteStream) -> None:
        code = await self._delete(frame.stream, single_partition=True)
        self.session.respond(Key.DELETE_STREAM, frame.correlation_id, code)

    async def _delete(self, name: str, *, single_partition: bool) -> int:
        namespace = self.session.namespace
        try:
            self.session.check("configure", name)
            stream = self.core.streams.get(namespace, name)
            if (len(stream.services) == 1) != single_partition:
                kind = "stream" if single_partition else "super stream"
                raise NotFound(f"'{name}' is not a {kind}")
            if self.core.cluster is None:
                await self.core.streams.delete(namespace, name)
            else:
                await self.core.cluster.delete_stream(namespace, name)
        except BrokerError as error:
            return response_code(error)
        self.session.ctx.audit("streams.delete", vhost=namespace, name=name)
        return ResponseCode.OK

    async def on_create_super_stream(self, frame: f.CreateSuperStream) -> None:
        await self._answer(Key.CREATE_SUPER_STREAM, frame.correlation_id,
                           self._create_super_stream(frame))

    async def _create_super_stream(self, frame: f.CreateSuperStream) -> None:
        self.session.check("configure", frame.name)
        arguments = stream_arguments(frame.arguments)
        arguments[PARTITION_NAMES] = frame.partitions
        arguments[BINDING_KEYS] = frame.binding_keys
        for partition_name in frame.partitions:
            self.session.check("configure", partition_name)
        if not frame.partitions:
            raise CommandFailed(ResponseCode.PRECONDITION_FAILED)
        await self._create(frame.name, len(frame.partitions), arguments)

    async def on_delete_super_stream(self, frame: f.DeleteSuperStream) -> None:
        code = await self._delete(frame.name, single_partition=False)
        self.session.respond(Key.DELETE_SUPER_STREAM, frame.correlation_id, code)

    def on_metadata(self, frame: f.Metadata) -> None:
        if self.core.cluster is not None:
            self._cluster_metadata(frame, self.core.cluster)
            return
        host, port = self.session.ctx.advertised_address()
        streams = []
        for name in frame.streams:
            try:
                self.session.resolve(name)
            except NotFound:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST, None))
            else:
                streams.append(r.StreamMetadata(name, ResponseCode.OK, 0))
        self.session.send(r.MetadataResponse(frame.correlation_id, [r.Broker(0, host, port)],
                                             streams))

    def _cluster_metadata(self, frame: f.Metadata, cluster: ClusterView) -> None:
        """Each stream's leader and replicas with the host and port clients reach them at,
        as RabbitMQ answers: publishers go to the leader, consumers to any of them."""
        ctx = self.session.ctx
        brokers: dict[str, r.Broker] = {}

        def reference(node: NodeAddress) -> int:
            if node.name not in brokers:
                if node.name == cluster.node_name:
                    host, port = ctx.advertised_address()
                else:
                    host, port = node.host, int(node.ports.get(ctx.listener, 0))
                brokers[node.name] = r.Broker(len(brokers), host, port)
            return brokers[node.name].reference

        streams = []
        for name in frame.streams:
            try:
                stream, index = self.core.streams.resolve(self.session.namespace, name)
                placement = cluster.placement(self.session.namespace, stream.name, index)
            except NotFound:
                placement = None
            if placement is None:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST, None))
                continue
            if placement.leader is None:
                streams.append(r.StreamMetadata(name, ResponseCode.STREAM_NOT_AVAILABLE, None))
                continue
            leader = reference(placement.leader)
            replicas = [reference(n) for n in placement.replicas if n != placement.leader]
            streams.append(r.StreamMetadata(name, ResponseCode.OK, leader, replicas))
        self.session.send(r.MetadataResponse(frame.correlation_id, list(brokers.values()),
                                             streams))

    def on_route(self, frame: f.Route) -> None:
        stream = self.core.streams.find(self.session.namespace, frame.super_stream)
        if stream is None:
            self.session.send(r.RouteResponse(frame.correlation_id,
                                              ResponseCode.STREAM_DOES_NOT_EXIST, []))
            return
        routed = [name for name, key in zip(stream.partition_names, stream.binding_keys,
                                            strict=True) if key == frame.routing_key]
        self.session.send(r.RouteResponse(frame.correlation_id, ResponseCode.OK, routed))

    def on_partitions(self, frame: f.Partitions) -> None:
        stream = self.core.streams.find(self.session.namespace, frame.super_stream)
        if stream is None:
            self.session.send(r.PartitionsResponse(frame.correlation_id,
                                                   ResponseCode.STREAM_DOES_NOT_EXIST, []))
            return
        self.session.send(r.PartitionsResponse(frame.correlation_id, ResponseCode.OK,
                                               stream.partition_names))

    def on_stream_stats(self, frame: f.StreamStats) -> None:
        try:
            _, partition = self.session.resolve(frame.stream, checking="read")
        except BrokerError as error:
            self.session.send(r.StreamStatsResponse(frame.correlation_id, response_code(error),
                                                    {}))
            return
        empty = partition.committed_chunk_id < 0
        self.session.send(r.StreamStatsResponse(frame.correlation_id, ResponseCode.OK, {
            "first_chunk_id": -1 if empty else partition.first_offset,
            "committed_chunk_id": partition.committed_chunk_id,
            # The last committed offset (-1: empty), as osiris names it: readers that want an
            # exact end (Spark's offset ranges) need it, the chunk id alone does not give it.
            "committed_offset": partition.committed_offset - 1,
            "first_offset": partition.first_offset,
            # mainstem's own (the map is free; RabbitMQ's clients ignore unknown keys): what of
            # the stream is in the tier, and where local disk starts
            "tiered_bytes": partition.tiered_bytes,
            "local_first_offset": partition.local_first_offset,
        }))

    def on_tiered_segments(self, frame: f.TieredSegments) -> None:
        """Where the tier is and the partition's segments that live only there, for Spark's
        executors to read them from the store; the read permission is checked as for a
        Subscribe. No tier: OK and none. Credentials are the reader's own."""
        try:
            _, partition = self.session.resolve(frame.stream, checking="read")
        except BrokerError as error:
            self.session.send(r.TieredSegmentsResponse(frame.correlation_id,
                                                       response_code(error)))
            return
        tiering = self.core.tiering
        if tiering is None:
            self.session.send(r.TieredSegmentsResponse(frame.correlation_id, ResponseCode.OK))
            return
        where = tiering.location
        # what an executor reads a segment with; epochs stay in the broker
        wire_fields = [field.name for field in dataclasses.fields(r.TieredSegment)]
        segments = [r.TieredSegment(**{name: getattr(record, name) for name in wire_fields})
                    for record in partition.tiered_records]
        self.session.send(r.TieredSegmentsResponse(frame.correlation_id, ResponseCode.OK,
                                                   where.url, where.endpoint, where.region,
                                                   segments))
