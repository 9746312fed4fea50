"""This node's part in a cluster coordinated by etcd.

etcd holds what must be agreed on (see docs/cluster.md): the live nodes (keys under
this node's lease, with the listeners it advertises), the replicated streams and their
replica sets, and per partition its leader (a key under the leader's lease, so it
lapses with the leader), its epoch and its in-sync replica set. Each node keeps its own
catalog and log for the streams it replicates, kept current by one watch on etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any

from mainstem.broker import layout
from mainstem.broker.catalog import TABLE_FILE, TABLE_HEAD, TIERED_SEGMENT
from mainstem.broker.cluster_view import NodeAddress, PartitionStatus, Placement, ReplicaLog
from mainstem.broker.core import BrokerCore
from mainstem.broker.errors import AlreadyExists, BrokerError, NotFound
from mainstem.broker.stream_service import PartitionClosed
from mainstem.broker.stream_service.forwarding import ForwardedAppend
from mainstem.broker.streams import Stream
from mainstem.cluster.amqp_relay.relay import Relay
from mainstem.cluster.amqp_relay.relay_home import HomeLink
from mainstem.cluster.context import Peers
from mainstem.cluster.etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    Event,
    KeyValue,
    delete_prefix,
    put,
)
from mainstem.cluster.etcd_keys import ROOT, path, prefix, segments
from mainstem.cluster.metadata.catalog_feed import AREA as CATALOG_AREA
from mainstem.cluster.metadata.catalog_feed import ROOT as CATALOG_ROOT
from mainstem.cluster.metadata.catalog_feed import CatalogFeed
from mainstem.cluster.metadata.iggy_ids import AREA as IGGY_AREA
from mainstem.cluster.metadata.iggy_ids import IggyIds
from mainstem.cluster.replication import wire
from mainstem.cluster.replication.forward_links import Answer, Forwarding, committed
from mainstem.cluster.replication.leader import LeaderLog, read_frame
from mainstem.cluster.replication.partition_counts import PartitionCounts
from mainstem.cluster.replication.quorum_journals import QUORUM, QuorumQueues
from mainstem.cluster.replication.quorum_journals import storage_of as quorum_storage
from mainstem.cluster.replication.repair import ReplicaRepair, copy_answer
from mainstem.cluster.replication.replica import ReplicaContext
from mainstem.cluster.replication.replicated_streams import ReplicatedStreams

log = logging.getLogger("mainstem.cluster")

REPLICATED = "x-mainstem-replicated"  # argument marking a local copy of a cluster stream
MAX_FORWARD_FRAME = 64 * 1024 * 1024  # one forwarded append: bounded as a client frame is
FORWARD_LEAD_WAIT_S = 2.0  # a forward reaching a node just elected waits for it to lead
COMMIT_POINT_EVERY_S = 1.0  # how stale a restarted replica's commit point may be
ETCD_RETRY_S = 0.25  # how often a node without etcd asks it again
JOINING = "joining the cluster"
MEMBER_FILE = "cluster-member"  # this data directory has been a member of that cluster


class ClusterNode:
    """Implements `broker.cluster_view.ClusterView` for the protocols."""

    def __init__(self, core: BrokerCore, endpoints: list[str], node_name: str | None,
                 advertise_host: str, listener_ports: Mapping[str, int],
                 replication_host: str, replication_port: int, lease_ttl: int) -> None:
        self.core = core
        self.etcd = EtcdClient(endpoints)
        self.node_name = node_name or socket.gethostname()
        self.advertise_host = advertise_host
        self.listener_ports = dict(listener_ports)
        self.lease_ttl = lease_ttl
        self._replication_host, self._replication_port = replication_host, replication_port
        self.lease = 0
        self.not_ready: str | None = JOINING  # why it takes no clients; None once joined
        self.peers = Peers(self.node_name)
        self.nodes = self.peers.nodes
        self.lease_lost = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._feeds: set[asyncio.StreamWriter] = set()  # followers' connections
        self.forwarding = Forwarding(self.peers)
        self.relay = Relay(self.peers)
        self._tasks: set[asyncio.Task[None]] = set()
        self._revision = 0
        context = ReplicaContext(core, self.etcd, self.node_name, self.spawn, lambda: self.lease,
                                 self.peers, self.forwarding, self.lease_lost,
                                 lag_timeout=max(2.0, lease_ttl * 0.8))
        self.replicated = ReplicatedStreams(context)
        self.quorum = QuorumQueues(context, self.replicated)
        self.partition_counts = PartitionCounts(context, self.replicated)
        self.catalog = CatalogFeed(context, self._catalog_applied)
        self.iggy = IggyIds(context)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve_follower, self._replication_host,
                                                  self._replication_port)
        self.replication_port = self._server.sockets[0].getsockname()[1]
        kvs = await self._first_read()
        self.core.queues.replication = self.quorum
        self.core.queues.relay = self.relay
        self.core.topology.join(self.node_name, lambda name: name in self.nodes)
        await self._load(kvs)
        self.core.tell_changes(self._changed)
        self.core.catalog.on_fenced = self.catalog.fenced
        self.core.scrubber.repair = ReplicaRepair(self.replicated, self.peers)
        self._take_topology()
        self.spawn(self._keep_alive())
        self.spawn(self._watch())
        self.spawn(self.catalog.share())
        self.spawn(self._save_commit_points())
        await self.iggy.install()
        if self.core.tiering is not None:  # only now: this node knows the cluster's records
            self.core.tiering.start(self.identity)
        self.not_ready = None
        log.info("cluster.joined", extra={"node": self.node_name, "nodes": sorted(self.nodes),
                                          "replication_port": self.replication_port})

    async def stop(self) -> None:
        self.core.tell_changes(None)
        self.core.catalog.on_fenced = None
        self.core.scrubber.repair = None
        self.iggy.uninstall()
        roles = self.replicated.roles.values()
        for role in roles:
            role.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *(r.task for r in roles if r.task),
                             return_exceptions=True)
        await self.replicated.save_commit_points()
        await self.quorum.close()
        self.core.queues.replication = None
        self.core.queues.relay = None
        self.relay.close()
        if self._server is not None:
            self._server.close()
        for writer in self._feeds:
            writer.close()
        self.forwarding.close()
        with contextlib.suppress(EtcdError):
            if self.lease:
                await self.etcd.revoke(self.lease)  # let others take over at once
        await self.etcd.close()

    async def _save_commit_points(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_POINT_EVERY_S)
            await self.replicated.save_commit_points()

    def spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _first_read(self) -> list[KeyValue]:
        """The cluster's secret, this node registered, and what etcd holds: asked again
        every ETCD_RETRY_S until etcd answers (a node started while etcd is away waits
        for it; its health check says so)."""
        while True:
            try:
                self.peers.secret = await self._shared_secret()
                await self._register()
                kvs, self._revision = await self.etcd.get_prefix(ROOT)
                return kvs
            except EtcdError as error:
                if self.not_ready == JOINING:  # logged once, not at every attempt
                    log.warning("cluster.waiting_for_etcd", extra={
                        "node": self.node_name, "error": str(error)})
                self.not_ready = f"waiting for etcd: {error}"
            await asyncio.sleep(ETCD_RETRY_S)

    async def _shared_secret(self) -> str:
        """The cluster's replication secret: made by the first node, read by the others."""
        await self.etcd.txn([Compare(path("secret"), "CREATE", 0)],
                            [put(path("secret"), secrets.token_hex(32).encode())])
        found = await self.etcd.get(path("secret"))
        assert found is not None
        return found.value.decode()

    async def _register(self) -> None:
        self.lease = await self.etcd.grant(self.lease_ttl)
        self.lease_lost.clear()
        me = {"host": self.advertise_host, "ports": self.listener_ports,
              "replication_port": self.replication_port}
        await self.etcd.put(path("nodes", self.node_name), json.dumps(me).encode(), self.lease)

    async def _keep_alive(self) -> None:
        """Renew the lease; without etcd for a whole TTL, this node's leaderships have
        lapsed (etcd lets others take them): it stops taking writes, then registers again
        once etcd answers."""
        interval = self.lease_ttl / 4
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            try:
                if await self.etcd.keep_alive(self.lease) > 0:
                    renewed = time.monotonic()
                    continue
                expired = True  # etcd says the lease is gone
            except EtcdError:
                expired = time.monotonic() - renewed >= self.lease_ttl
            if expired:
                await self._replace_lease()
                renewed = time.monotonic()

    async def _replace_lease(self) -> None:
        """Step down everywhere, register with a new lease as soon as etcd answers, and
        revoke the old one: etcd restarted restores its leases with a fresh TTL, and the
        leader keys under it would hold every election for that long (issue 39)."""
        log.warning("cluster.lease_lost", extra={"node": self.node_name})
        self.lease_lost.set()
        for role in self.replicated.roles.values():
            role.changed.set()
        lapsed = self.lease
        while True:
            try:
                await self._register()
                break
            except EtcdError:
                await asyncio.sleep(ETCD_RETRY_S)
        with contextlib.suppress(EtcdError):  # lapsed anyway, if etcd let it
            await self.etcd.revoke(lapsed)
        log.info("cluster.lease_replaced", extra={"node": self.node_name})
        for role in self.replicated.roles.values():
            role.changed.set()

    # -- what etcd holds ------------------------------------------------------------------

    async def _load(self, kvs: list[KeyValue]) -> None:
        catalog = [kv for kv in kvs if kv.key.startswith(CATALOG_ROOT)]
        for kv in kvs:
            if not kv.key.startswith(CATALOG_ROOT):
                self._apply_logged(Event("PUT", kv))
        self.iggy.loaded()
        self._forget_deleted_streams()
        self.quorum.forget_deleted()
        # Last, in the order written: the streams and queues AMQP bindings name are known.
        for kv in sorted(catalog, key=lambda kv: kv.mod_revision):
            self._apply_logged(Event("PUT", kv))
        self.catalog.loaded({kv.key for kv in catalog})

    @property
    def identity(self) -> str:
        """The cluster's own name for itself (a digest of its secret): a tier it uses is
        marked as its own with it."""
        return hashlib.sha256(self.peers.secret.encode()).hexdigest()

    def _take_topology(self) -> None:
        """The AMQP objects etcd held are applied: a data directory that was a member of
        this cluster before takes the cluster's view, one new to it shares its own."""
        member = self.core.data_dir / MEMBER_FILE
        cluster = self.identity
        self.core.topology.loaded(member.exists() and member.read_text() == cluster)
        member.write_text(cluster)

    async def _watch(self) -> None:
        while True:
            try:
                async for event in self.etcd.watch_prefix(ROOT, self._revision + 1):
                    self._revision = max(self._revision, event.kv.mod_revision)
                    self._apply_logged(event)
            except (EtcdError, OSError, ValueError) as error:
                log.warning("cluster.watch_failed", extra={"error": str(error)})
            except Exception as error:  # aiohttp's errors: the watch restarts from where it was
                log.warning("cluster.watch_failed", extra={"error": repr(error)})
            await asyncio.sleep(0.5)

    def _apply_logged(self, event: Event) -> None:
        """Apply one change; one that fails is logged and skipped, never stops the watch."""
        try:
            self._apply(event)
        except (BrokerError, OSError, ValueError, KeyError) as error:
            log.error("cluster.change_failed", extra={"key": event.kv.key,
                                                      "error": repr(error)})

    def _apply(self, event: Event) -> None:
        parts = segments(event.kv.key)
        kind, deleted = parts[0], event.kind == "DELETE"
        if kind == "nodes" and len(parts) == 2:
            self._apply_node(parts[1], None if deleted else event.kv.json())
        elif kind == "streams" and len(parts) == 2:
            if deleted and self.quorum.is_quorum(parts[1]):
                self.quorum.drop(parts[1])
            elif deleted:
                self._drop_stream(parts[1])
            elif event.kv.json().get("kind") == QUORUM:
                self.quorum.add(parts[1], event.kv.json())
            else:
                self._add_stream(parts[1], event.kv.json())
        elif kind == IGGY_AREA:
            self.iggy.event(event.kv, deleted)
        elif event.kv.key.startswith(CATALOG_ROOT):
            self.catalog.apply(event.kv, deleted)
        elif kind in ("leaders", "isr", "epochs") and len(parts) == 3:
            role = self.replicated.roles.get((parts[1], int(parts[2])))
            if role is not None:
                role.update(kind, None if deleted else event.kv)
            elif kind == "leaders":
                self.quorum.note_leader(parts[1], int(parts[2]),
                                        None if deleted else event.kv)

    def _changed(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None, *,
                 held_here: bool = True) -> Awaitable[None]:
        """A change made here, for every node; a namespace deleted here (whichever node
        asked) also ends its Iggy ids."""
        if kind == "namespace" and row is None:
            self.iggy.namespace_deleted(key[0])
        return self.catalog.changed(kind, key, row, held_here=held_here)

    def _catalog_applied(self, kind: str, key: tuple[str, ...],
                         row: dict[str, Any] | None) -> None:
        """What follows a catalog change here: a namespace deleted goes through the core
        (its streams close first); one added lets its AMQP objects in."""
        if kind == "namespace" and row is None:
            self.spawn(self._delete_namespace(key[0]))
        elif kind == "namespace":
            self.core.topology.vhost_added(key[0])

    async def _delete_namespace(self, name: str) -> None:
        with contextlib.suppress(BrokerError):
            await self.core.delete_namespace(name)

    def _apply_node(self, name: str, info: dict[str, Any] | None) -> None:
        if info is None:
            self.nodes.pop(name, None)
            self.core.topology.node_gone(name)
            self.relay.node_left(name)
            return
        self.nodes[name] = NodeAddress(name, info["host"], info.get("ports", {}))
        self.peers.replication_ports[name] = int(info["replication_port"])

    def _add_stream(self, storage: str, record: dict[str, Any]) -> None:
        record = self.replicated.records[storage] = self.partition_counts.settled(storage, record)
        if self.node_name not in record["replicas"]:
            return
        streams = self.core.streams
        stream = streams.find(record["namespace"], record["name"])
        if stream is None:
            # Its namespace's own change may come later: the stream's creator made both.
            self.core.catalog.apply("namespace", (record["namespace"],), {})
            arguments = {**record["arguments"], REPLICATED: True}
            stream = streams.create(record["namespace"], record["name"], record["partitions"],
                                    arguments)
        elif len(stream.services) != record["partitions"]:
            self.partition_counts.follow(storage, stream, record)
        for index, service in enumerate(stream.services[:record["partitions"]]):
            role = self.replicated.roles.get((storage, index)) \
                or self.replicated.add_role(storage, index, service, record)
            if role.task is None:
                role.start()

    def _drop_stream(self, storage: str) -> None:
        record = self.replicated.records.pop(storage, None)
        self.replicated.stop_roles(storage)
        if record is None:
            return
        if self.core.streams.find(record["namespace"], record["name"]) is not None:
            self.spawn(self.core.streams.delete(record["namespace"], record["name"]))

    def _forget_deleted_streams(self) -> None:
        """Local copies of cluster streams deleted while this node was away go; streams
        this node had before it joined (from single-node mode) become the cluster's."""
        for stream in self.core.streams.list():
            storage = layout.storage_name("stream", stream.namespace, stream.name)
            if storage in self.replicated.records:
                continue
            if stream.record.arguments.get(REPLICATED):
                self.spawn(self.core.streams.delete(stream.namespace, stream.name))
            else:
                self.adopt(stream)

    # -- ClusterView -----------------------------------------------------------------------

    async def create_stream(self, namespace: str, name: str, partitions: int,
                            arguments: Mapping[str, Any]) -> None:
        arguments = dict(arguments)
        self.core.streams.check_new(namespace, name, partitions, arguments)
        storage = layout.storage_name("stream", namespace, name)
        if storage in self.replicated.records:
            raise AlreadyExists(f"stream '{name}' already exists in namespace '{namespace}'")
        record = await self.replicated.place(namespace, name, partitions, arguments)
        if not await self.replicated.claim(storage, record):
            raise AlreadyExists(f"stream '{name}' already exists in namespace '{namespace}'")
        self._add_stream(storage, record)
        await self._await_leaders(namespace, name, partitions)

    # -- StreamReplication: streams any protocol creates or deletes on this node ---------

    def adopt(self, stream: Stream) -> None:
        """A stream was created here by a protocol: make it the cluster's. Its partitions
        write nothing locally (appends wait for a leader) until etcd has it."""
        storage = layout.storage_name("stream", stream.namespace, stream.name)
        if storage in self.replicated.records:
            return  # one the cluster made: _add_stream created it here
        record = self.replicated.new_record(stream.namespace, stream.name, len(stream.services),
                                            stream.record.arguments, list(self.nodes))
        self.replicated.records[storage] = record
        for index, service in enumerate(stream.services):
            self.replicated.add_role(storage, index, service, record)
        self.spawn(self._claim_adopted(storage, record))

    async def _claim_adopted(self, storage: str, record: dict[str, Any]) -> None:
        while True:
            try:
                won = await self.replicated.claim(storage, record)
                existing = None if won else await self.etcd.get(path("streams", storage))
                break
            except EtcdError:
                await asyncio.sleep(0.5)
        if existing is not None:  # another node made it first: theirs stands
            record = self.replicated.records[storage] = existing.json()
        roles = [role for (s, _), role in self.replicated.roles.items() if s == storage]
        if self.node_name not in record["replicas"]:
            self._drop_stream(storage)
            return
        for role in roles:
            role.replicas = list(record["replicas"])
            if role.task is None:
                role.start()

    def resized(self, stream: Stream, before: int) -> None:
        """A stream's partition count was changed here by a protocol: on every node."""
        self.partition_counts.resized(stream, before)

    def forget(self, stream: Stream) -> None:
        """A stream was deleted here by a protocol: delete it on every node."""
        storage = layout.storage_name("stream", stream.namespace, stream.name)
        record = self.replicated.records.pop(storage, None)
        if record is None:
            return  # the cluster deleted it: _drop_stream is deleting it here
        self.replicated.stop_roles(storage)
        self.spawn(self.replicated.unclaim(storage))

    async def _await_leaders(self, namespace: str, name: str, partitions: int) -> None:
        storage = layout.storage_name("stream", namespace, name)
        for _ in range(200):
            if all(self.replicated.leader_of(storage, i) is not None for i in range(partitions)):
                return
            await asyncio.sleep(0.05)

    async def delete_stream(self, namespace: str, name: str) -> None:
        storage = layout.storage_name("stream", namespace, name)
        record = self.replicated.records.get(storage)
        if record is None:
            raise NotFound(f"stream '{name}' not found in namespace '{namespace}'")
        # Its tiered segments' and table files' records go with it: a stream made again
        # under its name records its own (its objects' keys are new ones).
        await self.replicated.unclaim(storage, *(
            delete_prefix(prefix(CATALOG_AREA, kind, namespace, name))
            for kind in (TIERED_SEGMENT, TABLE_FILE, TABLE_HEAD)))
        self._drop_stream(storage)

    def placement(self, namespace: str, name: str, index: int) -> Placement | None:
        storage = layout.storage_name("stream", namespace, name)
        record = self.replicated.records.get(storage)
        if record is None or not 0 <= index < record["partitions"]:
            return None
        leader = self.replicated.leader_of(storage, index)
        replicas = tuple(self.nodes[n] for n in record["replicas"] if n in self.nodes)
        return Placement(self.nodes.get(leader) if leader else None, replicas)

    def status(self, namespace: str, name: str, index: int) -> PartitionStatus | None:
        return self._status(layout.storage_name("stream", namespace, name), index)

    def quorum_status(self, namespace: str, queue: str) -> PartitionStatus | None:
        return self._status(quorum_storage(namespace, queue), 0)

    def _status(self, storage: str, index: int) -> PartitionStatus | None:
        record = self.replicated.records.get(storage)
        role = self.replicated.roles.get((storage, index))
        if record is None or not 0 <= index < record["partitions"]:
            return None
        if role is None:  # a partition this node holds no replica of
            return PartitionStatus(self.quorum.leader(storage, index), 0,
                                   tuple(record["replicas"]), ())
        leading = self.replicated.leading.get((storage, index))
        service = role.service
        return PartitionStatus(role.leader_node, role.epoch, tuple(role.replicas),
                               tuple(role.isr), leading.lag() if leading else {},
                               ReplicaLog(service.first_offset, service.committed_offset,
                                          service.next_offset))

    # -- the replication listener -----------------------------------------------------------

    async def _serve_follower(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        self._feeds.add(writer)
        try:
            while True:  # HELLO again after each TRUNCATE
                kind, body = await read_frame(reader, wire.MAX_CONTROL_FRAME)
                if kind == wire.FrameType.FORWARD_HELLO:
                    await self._serve_forwards(body, reader, writer)
                    return
                if kind == wire.FrameType.RELAY_HELLO:
                    await self._serve_relay(body, reader, writer)
                    return
                if kind == wire.FrameType.REPAIR_HELLO:
                    await self._serve_repair(body, reader, writer)
                    return
                if kind != wire.FrameType.HELLO:
                    raise wire.WireError(f"a follower opens with HELLO, not {kind}")
                hello = wire.Hello.decode(body)
                leader = self.replicated.leading.get((hello.stream, hello.partition))
                refusal = self._refusal(hello, leader)
                if refusal is not None or leader is None:
                    writer.write(wire.frame(wire.FrameType.REFUSE, (refusal or "").encode()))
                    await writer.drain()
                    return
                answer = await leader.handshake(hello)
                writer.write(answer)
                await writer.drain()
                if answer[wire.FRAME.size - 1] == wire.FrameType.START:
                    await leader.feed(hello.node, hello.next_offset, reader, writer)
                    return
        except (asyncio.IncompleteReadError, ConnectionError, wire.WireError) as error:
            log.debug("replication.closed", extra={"error": str(error)})
        except PartitionClosed:
            pass  # the stream was deleted, or this node is stopping
        finally:
            self._feeds.discard(writer)
            writer.close()

    async def _serve_forwards(self, hello: bytes, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        """Run the appends another node forwards to partitions this node leads."""
        if self._from_elsewhere(hello, writer) is None:
            return
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                _, body = await read_frame(reader, MAX_FORWARD_FRAME)
                request, storage, index, append = wire.decode_forward(body)
                # Staged here, in the order they came: only their answers run apart.
                answering = await self._run_forward(request, storage, index, append, writer)
                task = asyncio.get_running_loop().create_task(answering)
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            for task in running:
                task.cancel()

    async def _serve_relay(self, hello: bytes, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        """Serve another node's clients using queues live here (see `relay_home`)."""
        peer = self._from_elsewhere(hello, writer)
        if peer is not None:
            await self.relay.serve(HomeLink(self.core.queues, self.node_name, peer, writer),
                                   reader)

    async def _serve_repair(self, hello: bytes, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        """Send another replica this node's copy of a chunk damaged there (`repair`)."""
        if self._from_elsewhere(hello, writer) is None:
            return
        kind, request = await read_frame(reader, wire.MAX_CONTROL_FRAME)
        if kind != wire.FrameType.REPAIR:
            raise wire.WireError(f"a REPAIR_HELLO is followed by REPAIR, not {kind}")
        writer.write(copy_answer(self.replicated, request))
        await writer.drain()

    def _from_elsewhere(self, hello: bytes, writer: asyncio.StreamWriter) -> str | None:
        """The node a FORWARD_HELLO or RELAY_HELLO names, if it holds the cluster's
        secret; None (and REFUSE sent) otherwise."""
        try:
            fields = json.loads(hello)
            secret, peer = str(fields["secret"]), str(fields.get("node", "?"))
        except (ValueError, KeyError, TypeError) as error:
            raise wire.WireError(f"bad hello: {error}") from error
        if not hmac.compare_digest(secret.encode(), self.peers.secret.encode()):
            writer.write(wire.frame(wire.FrameType.REFUSE, b"wrong cluster secret"))
            return None
        return peer

    async def _run_forward(self, request: int, storage: str, index: int,
                           append: ForwardedAppend, writer: asyncio.StreamWriter
                           ) -> Coroutine[Any, Any, None]:
        """Stage a forwarded append on this node's appender; returns the work that
        answers it once committed."""
        answer: dict[str, object] = {"id": request}
        role = self.replicated.roles.get((storage, index))
        if role is not None and role.leader_node == self.node_name:
            await role.leading(FORWARD_LEAD_WAIT_S)  # elected, maybe not yet taking writes
        if role is None or (storage, index) not in self.replicated.leading:
            answer["error"] = f"{self.node_name} does not lead partition {index} of the stream"
            answer["retry"] = True  # not run: the sender may try the leader it finds next
            return _answer(writer, answer, None)
        appender = role.service.appender
        try:
            receipt = appender.run_forwarded(append)
        except (BrokerError, PartitionClosed, OSError) as error:
            answer["error"] = str(error)
            return _answer(writer, answer, None)
        return _answer(writer, answer, committed(appender, receipt, append.writer))

    def _refusal(self, hello: wire.Hello, leader: LeaderLog | None) -> str | None:
        if not hmac.compare_digest(hello.secret.encode(), self.peers.secret.encode()):
            return "wrong cluster secret"
        if leader is None:
            return f"{self.node_name} does not lead {hello.stream}/{hello.partition}"
        if hello.node not in leader.replicas:
            return f"{hello.node} is not a replica of {hello.stream}/{hello.partition}"
        return None


async def _answer(writer: asyncio.StreamWriter, answer: dict[str, object],
                  running: Awaitable[Answer] | None) -> None:
    """Send a FORWARDED frame, once the append (if it ran) is committed or failed."""
    if running is not None:
        try:
            ran = await running
            answer.update(offset=ran.offset, sequence=ran.sequence)
        except (BrokerError, PartitionClosed, OSError) as error:
            answer["error"] = str(error)
    if not writer.is_closing():
        writer.write(wire.frame(wire.FrameType.FORWARDED, json.dumps(answer).encode()))
