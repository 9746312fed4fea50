"""One Iggy TCP connection: login, then commands mapped onto the broker model.

An Iggy stream is a namespace, an Iggy topic a stream of the log engine. The first
frame tells the generation the client speaks: the 2024 length-prefixed requests
(iggy-py 0.4) or the replicated framing of apache-iggy 0.9 (vsr.py), whose bodies
differ where layouts.py says. The protocol's rules (the framing choice, login and
logout, how each framing answers) live in `state.IggyState` and each request body is read
by `requests.py`; this moves bytes, runs the commands against the broker and carries out
the state's actions. Requests are answered in order; every complete request in the read
buffer is handled before the next read.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import struct
import time
import zlib

from mainstem import __version__
from mainstem.broker.auth import ADMINISTRATOR_TAG, User
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    LimitReached,
    NotAllowed,
    NotFound,
    storage_failure,
)
from mainstem.broker.iggy.model import STREAM, TOPIC, Group, IdTaken, rebalance
from mainstem.broker.retention import MAX_AGE, MAX_LENGTH_BYTES
from mainstem.broker.stream_service import (
    ChunkDamaged,
    PartitionClosed,
    PartitionService,
    TierUnavailable,
    WritesHeld,
)
from mainstem.broker.streams import Stream, TooManyPartitions
from mainstem.logging_setup import describe_error
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import requests as rq
from mainstem.protocols.iggy import vsr
from mainstem.protocols.iggy.codec import Code, ErrorCode, IggyError
from mainstem.protocols.iggy.commands import (
    CLIENT_GROUP,
    CLIENT_INFO,
    GROUP_INFO,
    OFFSET_INFO,
    STATS,
)
from mainstem.protocols.iggy.layouts import SeedLayout
from mainstem.protocols.iggy.records import Stored, read_chunk
from mainstem.protocols.iggy.requests import Handler, route
from mainstem.protocols.iggy.state import Execute, IggyState, Login, Logout, user_id

READ_SIZE = 256 * 1024
# A poll reply stops growing past this many payload bytes (the count is a wish).
# What one poll answers at most (a poll asking for more gets fewer messages, as at the end of
# the data), and how much of a read's answers wait for the socket together: a client that
# pipelines polls and stops reading holds about one poll's answer in the broker.
MAX_POLL_BYTES = 1024 * 1024
OUTPUT_STEP = 256 * 1024
EXPIRY_ARG = "x-iggy-message-expiry-us"
NEVER = 2**64 - 1
NODE_INFO = struct.Struct("<HHHHBB")  # tcp, quic, http and websocket ports, role, status
LEADER, HEALTHY = 0, 0
# Iggy's global read_servers / manage_servers permissions: RabbitMQ's monitoring and
# administrator tags. Stats and client lists show every peer's address and the host's kernel.
SERVER_READER_TAGS = frozenset((ADMINISTRATOR_TAG, "monitoring"))

class IggyConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.model = ctx.core.iggy
        self.user: User | None = None
        self.client_id = self.model.new_client_id()
        peer = ctx.writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.handlers: dict[int, Handler] = {
            Code.PING: route(rq.read_nothing, self.on_ping),
            Code.GET_STATS: route(rq.read_nothing, self.on_get_stats),
            Code.GET_CLUSTER_METADATA: route(rq.read_nothing, self.on_get_cluster_metadata),
            Code.GET_ME: route(rq.read_nothing, self.on_get_me),
            Code.GET_CLIENT: route(rq.read_client, self.on_get_client),
            Code.GET_CLIENTS: route(rq.read_nothing, self.on_get_clients),
            Code.POLL_MESSAGES: route(rq.read_poll, self.on_poll),
            Code.SEND_MESSAGES: route(rq.read_send, self.on_send),
            Code.GET_CONSUMER_OFFSET: route(rq.read_get_offset, self.on_get_offset),
            Code.STORE_CONSUMER_OFFSET: route(rq.read_store_offset, self.on_store_offset),
            Code.GET_STREAM: route(rq.read_stream, self.on_get_stream),
            Code.GET_STREAMS: route(rq.read_nothing, self.on_get_streams),
            Code.CREATE_STREAM: route(rq.read_new_stream, self.on_create_stream),
            Code.DELETE_STREAM: route(rq.read_stream, self.on_delete_stream),
            Code.GET_TOPIC: route(rq.read_topic, self.on_get_topic),
            Code.GET_TOPICS: route(rq.read_stream, self.on_get_topics),
            Code.CREATE_TOPIC: route(rq.read_new_topic, self.on_create_topic),
            Code.DELETE_TOPIC: route(rq.read_topic, self.on_delete_topic),
            Code.CREATE_PARTITIONS: route(rq.read_partitions, self.on_create_partitions),
            Code.DELETE_PARTITIONS: route(rq.read_partitions, self.on_delete_partitions),
            Code.GET_CONSUMER_GROUP: route(rq.read_group, self.on_get_group),
            Code.GET_CONSUMER_GROUPS: route(rq.read_topic, self.on_get_groups),
            Code.CREATE_CONSUMER_GROUP: route(rq.read_new_group, self.on_create_group),
            Code.DELETE_CONSUMER_GROUP: route(rq.read_group, self.on_delete_group),
            Code.JOIN_CONSUMER_GROUP: route(rq.read_group, self.on_join_group),
            Code.LEAVE_CONSUMER_GROUP: route(rq.read_group, self.on_leave_group),
            Code.SYNC_CONSUMER_GROUP: route(rq.read_group, self.on_sync_group),
        }
        self.state = IggyState(self.client_id,
                               {*self.handlers, Code.LOGIN_USER, Code.LOGOUT_USER},
                               f"mainstem-{__version__}")

    @property
    def layout(self) -> SeedLayout:
        return self.state.layout

    async def run(self) -> None:
        self.model.clients[self.client_id] = (self.address, None)
        try:
            await self._serve()
        finally:
            del self.model.clients[self.client_id]
            counts = {(s.namespace, s.name): len(s.services) for s in self.core.streams.list()}
            await self.model.disconnect(self.client_id, counts)

    async def _serve(self) -> None:
        reader = self.ctx.reader
        rest: bytes | None = b""
        closing = asyncio.ensure_future(self.ctx.closing.wait())
        try:
            while True:
                read = asyncio.ensure_future(reader.read(READ_SIZE))
                await asyncio.wait((read, closing), return_when=asyncio.FIRST_COMPLETED)
                if not read.done():  # the server shuts down: stop between requests
                    read.cancel()
                    return
                data = read.result()
                if not data:
                    return
                rest = await self._handle(rest + data if rest else data)
                if rest is None:
                    return
        finally:
            closing.cancel()

    async def _handle(self, buf: bytes) -> bytes | None:
        """Answer every complete request in `buf`; return the incomplete rest, or
        None when the connection must close."""
        if not self.state.tell_framing(buf):
            return buf
        # Requests are views into this immutable buffer: payloads are never copied.
        try:
            requests, used = self.state.parse(buf, self.ctx.limits.max_frame_size)
        except c.FramingError as exc:
            self.ctx.log.warning("frame.invalid", extra={"layout": self.layout.name,
                                                        "reason": str(exc)})
            self.ctx.writer.write(self.state.framing_failed())
            return None
        writer, answers, pending = self.ctx.writer, [], 0
        for request in requests:
            answers.append(await self.answer(request))
            pending += len(answers[-1])
            if pending >= OUTPUT_STEP:  # pipelined polls wait for the socket, not memory
                writer.writelines(answers)
                answers, pending = [], 0
                await writer.drain()
        writer.writelines(answers)
        await writer.drain()
        return buf[used:]

    async def answer(self, request: c.Request | vsr.Frame) -> bytes:
        """The reply to one request, as the state directs."""
        action = self.state.receive(request)
        if isinstance(action, Execute):
            try:
                return self.state.executed(action, await self.execute(action.code,
                                                                      action.payload))
            except IggyError as exc:
                return self.state.refused(action, exc)
        if isinstance(action, Login):
            return await self.login(action)
        if isinstance(action, Logout):
            self.ctx.leave()
            self._logged_in(None)
        elif action.note:
            self.ctx.log.info("request.refused", extra={"reason": action.note})
        return action.data

    async def login(self, login: Login) -> bytes:
        try:
            user = await self.ctx.login(login.username, login.password)
        except AuthenticationFailed:
            return self.state.login_refused(login)
        try:
            self.ctx.admit(user.name)  # Iggy has no vhost: the user's limit only
        except NotAllowed:
            self._logged_in(None)  # a user logged in before gave its place up for this login
            return self.state.login_refused(login)
        self._logged_in(user)
        return self.state.logged_in(login, user.name)

    async def execute(self, code: int, payload: memoryview) -> bytes:
        """The reply body of one command the state let through; a failure raises
        IggyError."""
        try:
            return await self.handlers[code](self.layout, c.Reader(payload))
        except AuthenticationFailed:
            raise IggyError(ErrorCode.INVALID_CREDENTIALS, "invalid credentials") from None
        except AccessRefused as exc:
            raise IggyError(ErrorCode.UNAUTHORIZED, str(exc)) from None
        except TooManyPartitions as exc:
            raise IggyError(ErrorCode.TOO_MANY_PARTITIONS, str(exc)) from None
        except LimitReached as exc:  # the vhost's max-queues: Iggy's limit on topics
            raise IggyError(ErrorCode.TOO_MANY_TOPICS, str(exc)) from None
        except (BrokerError, ValueError) as exc:  # NotFound and AlreadyExists among them
            raise IggyError(ErrorCode.ERROR, str(exc)) from None
        except TierUnavailable as exc:  # a poll of a tiered range: Iggy's reply has no text
            self.ctx.log.warning("tier.unavailable", extra={"error": str(exc)})
            raise IggyError(ErrorCode.CANNOT_READ_MESSAGE, str(exc)) from None
        except ChunkDamaged as exc:  # a poll starting at a damaged chunk (already reported)
            raise IggyError(ErrorCode.INVALID_MESSAGE_CHECKSUM,
                            f"messages from offset {exc.chunk_id} are damaged") from None

    def _logged_in(self, user: User | None) -> None:
        self.user = user
        if user is not None:
            self.ctx.identify(user.name)
        self.model.clients[self.client_id] = (self.address, user.name if user else None)

    # -- system --------------------------------------------------------------------

    async def on_ping(self, _: None) -> bytes:
        return b""

    async def on_get_cluster_metadata(self, _: None) -> bytes:
        """One node, the leader of everything, at the listener's advertised address; the
        configured cluster name."""
        host, port = self.ctx.advertised_address()
        node = c.encode_long_string(socket.gethostname()) + c.encode_long_string(host)
        node += NODE_INFO.pack(port, 0, 0, 0, LEADER, HEALTHY)
        return c.encode_long_string(self.ctx.identity.cluster_name) + c.U32.pack(1) + node

    def _require_read_servers(self) -> None:
        assert self.user is not None
        if SERVER_READER_TAGS.isdisjoint(self.user.tags):
            raise IggyError(ErrorCode.UNAUTHORIZED,
                            "reading server details takes the administrator or monitoring tag")

    async def on_get_stats(self, _: None) -> bytes:
        self._require_read_servers()
        streams = self.core.streams.list()
        partitions = [p for s in streams for p in s.services]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        free = os.sysconf("SC_AVPHYS_PAGES") * page
        uname = os.uname()
        head = STATS.pack(
            os.getpid(), 0.0, 0.0, usage.ru_maxrss * 1024, total, free,
            int(time.monotonic() * 1e6), int(time.time() * 1e6), 0, 0,
            sum(p.size_bytes for p in partitions), len(self.core.catalog.list_namespaces()),
            len(streams), len(partitions), sum(p.segment_count for p in partitions),
            sum(p.committed_offset - p.first_offset for p in partitions),
            len(self.model.clients), len(self.model.groups))
        return head + b"".join(c.encode_long_string(s) for s in (
            socket.gethostname(), uname.sysname, uname.release, uname.version))

    async def on_get_me(self, _: None) -> bytes:
        return self._client_info(self.client_id, details=True)

    async def on_get_client(self, client_id: int) -> bytes:
        self._require_read_servers()
        if client_id not in self.model.clients:
            raise IggyError(ErrorCode.CLIENT_NOT_FOUND, f"client {client_id} not found")
        return self._client_info(client_id, details=True)

    async def on_get_clients(self, _: None) -> bytes:
        self._require_read_servers()
        return b"".join(self._client_info(i, details=False) for i in sorted(self.model.clients))

    def _client_info(self, client_id: int, details: bool) -> bytes:
        address, name = self.model.clients[client_id]
        uid = user_id(name) if name else 0
        groups = self.model.groups_of(client_id)
        out = CLIENT_INFO.pack(client_id, uid, 1) + c.encode_long_string(address)
        out += c.U32.pack(len(groups))
        if details:
            for g in groups:
                out += CLIENT_GROUP.pack(self.model.id_of(STREAM, "", g.namespace),
                                         self.model.id_of(TOPIC, g.namespace, g.topic), g.id)
        return out

    # -- resolving identifiers -------------------------------------------------------

    def _namespace(self, ident: int | str) -> str:
        name = self.model.name_of(STREAM, "", ident) if isinstance(ident, int) else ident
        if name is None or self.core.catalog.get_namespace(name) is None:
            code = ErrorCode.STREAM_ID_NOT_FOUND if isinstance(ident, int) else \
                ErrorCode.STREAM_NAME_NOT_FOUND
            raise IggyError(code, f"stream {ident} not found")
        assert self.user is not None
        self.core.open_namespace(self.user, name)
        return name

    def _topic(self, namespace: str, ident: int | str) -> Stream:
        name = self.model.name_of(TOPIC, namespace, ident) if isinstance(ident, int) else ident
        stream = None if name is None else self.core.streams.find(namespace, name)
        if stream is None:
            code = ErrorCode.TOPIC_ID_NOT_FOUND if isinstance(ident, int) else \
                ErrorCode.TOPIC_NAME_NOT_FOUND
            raise IggyError(code, f"topic {ident} not found")
        return stream

    def _stream_and_topic(self, ref: rq.TopicRef) -> Stream:
        return self._topic(self._namespace(ref.stream), ref.topic)

    def _check(self, kind: str, stream: Stream) -> None:
        assert self.user is not None
        self.core.auth.check(self.user, stream.namespace, kind, stream.name)  # type: ignore[arg-type]

    def _partition(self, stream: Stream, index: int | None) -> PartitionService:
        """The partition at `index`, counted from 0 whatever the client counts from."""
        if index is None:
            raise IggyError(ErrorCode.PARTITION_NOT_FOUND, "no partition given")
        if not 0 <= index < len(stream.services):
            raise IggyError(ErrorCode.PARTITION_NOT_FOUND,
                            f"partition {index + self.layout.partition_base} not found")
        return stream.services[index]

    # -- streams ----------------------------------------------------------------------

    def _stream_info(self, namespace: str) -> tuple[bytes, list[Stream]]:
        topics = self.core.streams.list(namespace)
        parts = [p for t in topics for p in t.services]
        record = self.core.catalog.get_namespace(namespace)
        created = _micros(getattr(record, "created_at", 0))
        info = self.layout.stream_info(
            self.model.id_of(STREAM, "", namespace), created, len(topics),
            sum(p.size_bytes for p in parts), sum(_count(p) for p in parts), namespace)
        return info, topics

    async def on_get_stream(self, ident: rq.Ident) -> bytes:
        namespace = self._namespace(ident)
        info, topics = self._stream_info(namespace)
        return info + b"".join(self._topic_info(t) for t in topics)

    async def on_get_streams(self, _: None) -> bytes:
        assert self.user is not None
        out = []
        for record in self.core.catalog.list_namespaces():
            if self.core.catalog.get_permissions(self.user.name, record.name) is not None:
                out.append(self._stream_info(record.name)[0])
        return b"".join(out)

    async def on_create_stream(self, new: tuple[int, str]) -> bytes:
        wanted, name = new
        self._require_admin()
        if wanted and self.model.taken(STREAM, "", wanted):
            raise IggyError(ErrorCode.STREAM_ID_ALREADY_EXISTS, f"stream {wanted} exists")
        if self.core.catalog.get_namespace(name) is not None:
            raise IggyError(ErrorCode.STREAM_NAME_ALREADY_EXISTS, f"stream {name} exists")
        await self._claim(STREAM, "", name, wanted, ErrorCode.STREAM_ID_ALREADY_EXISTS,
                          ErrorCode.STREAM_NAME_ALREADY_EXISTS)
        try:
            await self.core.catalog.add_namespace_everywhere(name)
        except BrokerError:
            await self.model.forget(STREAM, "", name)
            raise
        assert self.user is not None
        await self.core.catalog.set_permissions_everywhere(self.user.name, name, ".*", ".*",
                                                           ".*")
        self.ctx.audit("vhosts.create", name=name)
        return self._stream_info(name)[0]

    async def on_delete_stream(self, ident: rq.Ident) -> bytes:
        namespace = self._namespace(ident)
        self._require_admin()
        await self.core.delete_namespace(namespace)
        await self.model.forget(TOPIC, namespace)
        await self.model.forget(STREAM, "", namespace)
        self.ctx.audit("vhosts.delete", name=namespace)
        return b""

    async def _claim(self, kind: str, namespace: str, name: str, wanted: int,
                     id_taken: ErrorCode, name_taken: ErrorCode) -> None:
        """Claim the id of a new stream or topic before making it: in a cluster, of two
        nodes creating one at once, one wins and the other answers that it exists."""
        try:
            await self.model.claim(kind, namespace, name, wanted or None)
        except IdTaken:
            raise IggyError(id_taken, f"{kind} {wanted} exists") from None
        except AlreadyExists:
            raise IggyError(name_taken, f"{kind} {name} exists") from None

    def _require_admin(self) -> None:
        assert self.user is not None
        if not self.user.is_administrator:
            raise IggyError(ErrorCode.UNAUTHORIZED, "only administrators manage streams")

    # -- topics -----------------------------------------------------------------------

    def _topic_info(self, stream: Stream) -> bytes:
        args = stream.record.arguments
        parts = stream.services
        return self.layout.topic_info(
            self.model.id_of(TOPIC, stream.namespace, stream.name),
            _micros(stream.record.created_at), len(parts), args.get(EXPIRY_ARG, 0),
            args.get(MAX_LENGTH_BYTES, 0), sum(p.size_bytes for p in parts),
            sum(_count(p) for p in parts), stream.name)

    def _topic_details(self, stream: Stream) -> bytes:
        created = _micros(stream.record.created_at)
        return self._topic_info(stream) + b"".join(
            self.layout.partition_info(i, created, p.segment_count,
                                        max(p.committed_offset - 1, 0), p.size_bytes, _count(p))
            for i, p in enumerate(stream.services))

    async def on_get_topic(self, ref: rq.TopicRef) -> bytes:
        stream = self._stream_and_topic(ref)
        return self._topic_details(stream)

    async def on_get_topics(self, ident: rq.Ident) -> bytes:
        namespace = self._namespace(ident)
        return self.layout.topic_list([self._topic_info(t)
                                       for t in self.core.streams.list(namespace)])

    async def on_create_topic(self, request: rq.CreateTopic) -> bytes:
        namespace, topic = self._namespace(request.stream), request.topic
        wanted, partitions, name = topic.wanted, topic.partitions, topic.name
        expiry_us, max_size = topic.expiry_us, topic.max_size
        assert self.user is not None
        self.core.auth.check(self.user, namespace, "configure", name)
        if not 1 <= partitions <= 1000:
            raise IggyError(ErrorCode.TOO_MANY_PARTITIONS, "1 to 1000 partitions")
        if wanted and self.model.taken(TOPIC, namespace, wanted):
            raise IggyError(ErrorCode.TOPIC_ID_ALREADY_EXISTS, f"topic {wanted} exists")
        if self.core.streams.find(namespace, name) is not None:
            raise IggyError(ErrorCode.TOPIC_NAME_ALREADY_EXISTS, f"topic {name} exists")
        arguments: dict[str, object] = {}
        if expiry_us not in (0, NEVER):
            arguments[EXPIRY_ARG] = expiry_us
            arguments[MAX_AGE] = f"{max(1, expiry_us // 1_000_000)}s"
        if max_size not in (0, NEVER):
            arguments[MAX_LENGTH_BYTES] = max_size
        await self._claim(TOPIC, namespace, name, wanted, ErrorCode.TOPIC_ID_ALREADY_EXISTS,
                          ErrorCode.TOPIC_NAME_ALREADY_EXISTS)
        try:
            stream = self.core.create_stream(namespace, name, partitions, arguments)
        except BrokerError:
            await self.model.forget(TOPIC, namespace, name)
            raise
        self.ctx.audit("streams.create", vhost=namespace, name=name)
        return self._topic_details(stream)

    async def on_delete_topic(self, ref: rq.TopicRef) -> bytes:
        stream = self._stream_and_topic(ref)
        self._check("configure", stream)
        await self.core.streams.delete(stream.namespace, stream.name)
        await self.model.forget(TOPIC, stream.namespace, stream.name)
        self.ctx.audit("streams.delete", vhost=stream.namespace, name=stream.name)
        return b""

    async def on_create_partitions(self, request: rq.Partitions) -> bytes:
        stream, count = self._stream_and_topic(request.topic), request.count
        self._check("configure", stream)
        if not 1 <= count <= 1000:
            raise IggyError(ErrorCode.TOO_MANY_PARTITIONS, "1 to 1000 partitions")
        self.core.streams.add_partitions(stream.namespace, stream.name,
                                         len(stream.services) + count)
        self._rebalance_topic(stream)
        return b""

    async def on_delete_partitions(self, request: rq.Partitions) -> bytes:
        stream, count = self._stream_and_topic(request.topic), request.count
        self._check("configure", stream)
        if not 1 <= count < len(stream.services):
            raise IggyError(ErrorCode.TOO_MANY_PARTITIONS, "a topic keeps at least one partition")
        await self.core.streams.remove_partitions(stream.namespace, stream.name,
                                                  len(stream.services) - count)
        self._rebalance_topic(stream)
        return b""

    def _rebalance_topic(self, stream: Stream) -> None:
        for group in self.model.list_groups(stream.namespace, stream.name):
            rebalance(group, len(stream.services))

    # -- messages ---------------------------------------------------------------------

    async def on_send(self, send: rq.Send) -> bytes:
        stream, entries = self._stream_and_topic(send.topic), send.entries
        if not entries:
            raise IggyError(ErrorCode.INVALID_MESSAGES_COUNT, "no messages")
        self._check("write", stream)
        try:
            self.core.write_gate.check()
        except WritesHeld as held:
            raise IggyError(ErrorCode.CANNOT_APPEND_MESSAGE, str(held)) from None
        index = self._choose(stream, send.partitioning, send.value)
        receipt = stream.services[index].appender.append_simple_entries(entries)
        try:
            await receipt.durable
        except PartitionClosed as failed:  # deleted meanwhile, or no leader took it
            raise IggyError(ErrorCode.CANNOT_APPEND_MESSAGE, str(failed)) from None
        except OSError as failed:  # disk full, file too big: these messages, not the link
            self.ctx.log.warning("write.failed", extra={"error": describe_error(failed)})
            raise IggyError(ErrorCode.CANNOT_APPEND_MESSAGE, storage_failure(failed)) from None
        return self.layout.sent(self.model.id_of(STREAM, "", stream.namespace),
                                 self.model.id_of(TOPIC, stream.namespace, stream.name), index,
                                 receipt.first_offset)

    def _choose(self, stream: Stream, kind: int, value: bytes) -> int:
        count = len(stream.services)
        if kind == 1:
            return self.model.next_turn(stream.namespace, stream.name) % count
        if kind == 2 and len(value) == 4:
            index: int = c.U32.unpack(value)[0] - self.layout.partition_base
            self._partition(stream, index)
            return index
        if kind == 3 and value:
            return zlib.crc32(value) % count
        raise IggyError(ErrorCode.INVALID_FORMAT, f"bad partitioning kind {kind}")

    async def on_poll(self, poll: rq.Poll) -> bytes:
        stream = self._stream_and_topic(poll.topic)
        self._check("read", stream)
        reference, index = self._consumer(stream, poll.consumer, poll.index)
        partition = self._partition(stream, index)
        start = self._start(stream, partition, index, reference, poll)
        chunks, polled, last = await self._read(stream, partition, start, poll.count)
        if poll.auto_commit and polled:
            self.core.store_offset(stream.namespace, stream.name, index, reference, last)
        return self.layout.polled(index, max(partition.committed_offset - 1, 0), polled,
                                   chunks)

    def _consumer(self, stream: Stream, consumer: c.Consumer, index: int | None
                  ) -> tuple[str, int]:
        """The offset reference and the partition a poll reads."""
        if consumer.kind == c.CONSUMER:
            chosen = self.layout.default_partition if index is None else index
            if chosen is None:
                raise IggyError(ErrorCode.PARTITION_NOT_FOUND, "no partition given")
            return f"iggy-consumer:{consumer.id}", chosen
        group = self._group(stream, consumer.id)
        index = self.state.member_partition(group.members.get(self.client_id), index)
        return f"iggy-group:{group.id}", index

    def _start(self, stream: Stream, partition: PartitionService, index: int, reference: str,
               poll: rq.Poll) -> int:
        kind, value, count = poll.polling, poll.value, poll.count
        if kind == 1:
            return value
        if kind == 2:
            return partition.offset_for_timestamp(value // 1000)
        if kind == 3:
            return partition.first_offset
        if kind == 4:
            return max(partition.first_offset, partition.committed_offset - count)
        if kind == 5:
            stored = self.core.query_offset(stream.namespace, stream.name, index, reference)
            return partition.first_offset if stored is None else stored + 1
        raise IggyError(ErrorCode.INVALID_FORMAT, f"bad polling kind {kind}")

    async def _read(self, stream: Stream, partition: PartitionService, start: int, count: int
              ) -> tuple[list[tuple[int, list[Stored]]], int, int]:
        """Up to `count` messages from `start`, by chunk with its store time (µs); how many,
        and the last offset read."""
        expiry_us = stream.record.arguments.get(EXPIRY_ARG)
        oldest_ms = time.time() * 1000 - expiry_us / 1000 if expiry_us else 0
        reader = partition.subscribe(start)
        out: list[tuple[int, list[Stored]]] = []
        n = last = size = 0
        while n < count and size < MAX_POLL_BYTES:
            try:
                chunk = await reader.next_whole_chunk()
            except ChunkDamaged:
                if out:
                    break  # the messages before it; the poll from there answers the error
                raise
            if chunk is None:
                break
            timestamp = chunk.header.timestamp
            if timestamp < oldest_ms:
                continue
            messages, taken = read_chunk(chunk, start, count - n, MAX_POLL_BYTES - size)
            if messages:
                out.append((timestamp * 1000, messages))
                n, last, size = n + len(messages), messages[-1][0], size + taken
        return out, n, last

    # -- consumer offsets -------------------------------------------------------------

    async def on_get_offset(self, request: rq.OffsetRef) -> bytes:
        stream, index = self._stream_and_topic(request.topic), request.index
        self._check("read", stream)
        reference = self._offset_reference(stream, request.consumer)
        partition = self._partition(stream, index)
        assert index is not None
        stored = self.core.query_offset(stream.namespace, stream.name, index, reference)
        if stored is None:
            return b""
        return OFFSET_INFO.pack(index + self.layout.partition_base,
                                max(partition.committed_offset - 1, 0), stored)

    async def on_store_offset(self, request: rq.StoreOffset) -> bytes:
        stream, index = self._stream_and_topic(request.topic), request.index
        self._check("read", stream)
        reference = self._offset_reference(stream, request.consumer)
        self._partition(stream, index)
        assert index is not None
        await self.core.catalog.store_offset_everywhere(stream.namespace, stream.name, index,
                                                        reference, request.offset)
        return b""

    def _offset_reference(self, stream: Stream, consumer: c.Consumer) -> str:
        if consumer.kind == c.CONSUMER:
            return f"iggy-consumer:{consumer.id}"
        return f"iggy-group:{self._group(stream, consumer.id).id}"

    # -- consumer groups --------------------------------------------------------------

    def _group(self, stream: Stream, ident: int | str) -> Group:
        try:
            return self.model.group(stream.namespace, stream.name, ident)
        except NotFound:
            raise IggyError(ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND,
                            f"consumer group {ident} not found") from None


    def _group_info(self, group: Group, stream: Stream, details: bool) -> bytes:
        out = GROUP_INFO.pack(group.id, len(stream.services), len(group.members))
        out += c.encode_name(group.name)
        if details:
            for member, partitions in group.members.items():
                out += struct.pack(f"<II{len(partitions)}I", member, len(partitions),
                                   *(p + self.layout.partition_base for p in partitions))
        return out

    async def on_get_group(self, request: rq.GroupRef) -> bytes:
        stream = self._stream_and_topic(request.topic)
        group = self._group(stream, request.group)
        self._check("read", stream)
        return self._group_info(group, stream, details=True)

    async def on_get_groups(self, ref: rq.TopicRef) -> bytes:
        stream = self._stream_and_topic(ref)
        self._check("read", stream)
        return b"".join(self._group_info(g, stream, details=False)
                        for g in self.model.list_groups(stream.namespace, stream.name))

    async def on_create_group(self, request: rq.CreateGroup) -> bytes:
        stream = self._stream_and_topic(request.topic)
        wanted, name = request.wanted, request.name
        self._check("configure", stream)
        try:
            group = await self.model.create_group(stream.namespace, stream.name, wanted or None,
                                                  name)
        except AlreadyExists:
            raise IggyError(ErrorCode.CONSUMER_GROUP_ID_ALREADY_EXISTS, "group exists") from None
        self.ctx.audit("consumer_groups.create", vhost=stream.namespace, stream=stream.name,
                       name=name)
        return self._group_info(group, stream, details=True)

    async def on_delete_group(self, request: rq.GroupRef) -> bytes:
        stream = self._stream_and_topic(request.topic)
        group = self._group(stream, request.group)
        self._check("configure", stream)
        await self.model.delete_group(group)
        return b""

    async def on_join_group(self, request: rq.GroupRef) -> bytes:
        stream = self._stream_and_topic(request.topic)
        group = self._group(stream, request.group)
        self._check("read", stream)
        await self.model.join(group, self.client_id, len(stream.services))
        return b""

    async def on_leave_group(self, request: rq.GroupRef) -> bytes:
        stream = self._stream_and_topic(request.topic)
        group = self._group(stream, request.group)
        try:
            await self.model.leave(group, self.client_id, len(stream.services))
        except NotFound:
            raise IggyError(ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND, "not a member") from None
        return b""

    async def on_sync_group(self, request: rq.GroupRef) -> bytes:
        """This member's partitions and the group's generation; nothing for a non-member."""
        stream = self._stream_and_topic(request.topic)
        group = self._group(stream, request.group)
        self._check("read", stream)
        assigned = group.members.get(self.client_id)
        if assigned is None:
            return b""
        return struct.pack(f"<QI{len(assigned)}I", group.generation, len(assigned),
                           *(p + self.layout.partition_base for p in assigned))


def _count(partition: PartitionService) -> int:
    return partition.committed_offset - partition.first_offset


def _micros(created_at: object) -> int:
    return int(float(created_at or 0) * 1e6) if isinstance(created_at, int | float) else 0


async def handle(ctx: ConnectionContext) -> None:
    await IggyConnection(ctx).run()
