"""One BSON event protocol connection: CONNECT, then channels (streams of one partition),
transactions, subscriptions, binders, queries and projections.

The protocol's rules (the CONNECT handshake, which frames are answered, the flow control
of subscriptions and queries) live in `state.EventsState`; this moves bytes, serves the
requests with the broker and carries out the state's actions. Publishes of one read are
appended as one chunk per channel and answered once durable; a subscriber only ever reads
committed (durable) chunks. Bad fields get a failed RESPONSE with an ``errCode`` and the
connection goes on; framing errors close it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import bson

from mainstem.broker.auth import User
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    BrokerError,
    InvalidArgument,
    LimitReached,
    NotFound,
    StorageFailed,
    storage_failure,
)
from mainstem.broker.events.document_matcher import compile_matcher
from mainstem.broker.events.projections import Projection
from mainstem.broker.stream_service import (
    ChunkDamaged,
    PartitionClosed,
    PartitionService,
    TierUnavailable,
    WritesHeld,
)
from mainstem.logging_setup import describe_error
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.bson_events import requests as rq
from mainstem.protocols.bson_events.codec import (
    EVENT_TAIL,
    Event,
    EventCodec,
    Frame,
    FramingError,
    RecevEncoder,
    encode_frame,
    encode_ok,
)
from mainstem.protocols.bson_events.outbox import Outbox
from mainstem.protocols.bson_events.state import (
    STAGE,
    Action,
    Close,
    EventsState,
    Flush,
    FrameFailed,
    Login,
    QueryFlow,
    Send,
    Serve,
    StoreOffset,
    SubscriptionFlow,
    Wake,
    answer,
    failure,
    response_kind,
)
from mainstem.protocols.bson_events.transactions import Transactions
from mainstem.protocols.receiver import Receiver

READ_SIZE = 256 * 1024
MAX_UNANSWERED_READS = 4  # reads of publishes waiting for durability before reading on
WRITE_HIGH_WATER = 4 * 1024 * 1024
# Deliveries (RECEV, QUERYRESULT) wait while the socket holds this much unsent: a
# subscriber that stops reading holds this, not WRITE_HIGH_WATER, in the broker.
DELIVERY_HIGH_WATER = 64 * 1024
DURABLE_PREFIX = "bson-durable:"

Batch = dict[str, tuple[PartitionService, list[bytes | memoryview], list[Any]]]


@dataclass
class Sender:
    """The task sending a subscription's events or a query's results, and what wakes it
    when its flow-control credit comes back."""

    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class EventsConnection:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.limits = ctx.limits
        self.codec = EventCodec(ctx.limits.max_event_size)
        self.writer = ctx.writer
        self.outbox = Outbox(ctx.writer)
        self.state = EventsState(ctx.limits.max_unacked_events, ctx.limits.max_unacked_results)
        self.user: User | None = None
        self.namespace = "/"
        self.transactions: Transactions[PartitionService] = Transactions()
        self.subscriptions: dict[int, Sender] = {}  # by subscription id
        self.queries: dict[int, Sender] = {}  # by query id
        self.answers: deque[asyncio.Future[None]] = deque()  # appended publishes' answers
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "STARTTX": self.on_start_tx, "COMMITTX": self.on_commit_tx,
            "ABORTTX": self.on_abort_tx, "SUBSCRIBE": self.on_subscribe,
            "UNSUBSCRIBE": self.on_unsubscribe, "SUBCLOSE": self.on_subclose,
            "QUERY": self.on_query,
            "FINDBYID": self.on_find_by_id, "LISTBINDERS": self.on_list_binders,
            "CREATEBINDER": self.on_create_binder, "LISTCHANNELS": self.on_list_channels,
            "LISTCHANNNELS": self.on_list_channels,  # mewbase's spelling
            "CREATECHANNEL": self.on_create_channel, "PING": self.on_ping,
            "CREATEPROJECTION": self.on_create_projection, "BEGINLOAD": self.on_begin_load,
            "LOADDOCS": self.on_load_docs, "HANDOVER": self.on_hand_over,
        }

    # -- output ------------------------------------------------------------------

    def send(self, kind: str, body: dict[str, Any]) -> None:
        if not self.writer.transport.is_closing():
            self.outbox.add(encode_frame(kind, body))

    def respond(self, request_id: Any, **fields: Any) -> None:
        self.send("RESPONSE", answer(request_id, {"ok": True, **fields}))

    def fail(self, request_id: Any, code: str, message: str, kind: str = "RESPONSE",
             **fields: Any) -> None:
        refusal = failure(request_id, code, message, kind, **fields)
        self.send(refusal.kind, refusal.body)

    # -- the connection's life ------------------------------------------------------

    async def run(self) -> None:
        receiver = Receiver.take_over(self.ctx.reader, self.ctx.writer, READ_SIZE)
        closing = asyncio.ensure_future(self.ctx.closing.wait())
        closing.add_done_callback(receiver.stop)  # the server shuts down: stop between reads
        try:
            while True:
                if len(self.answers) >= MAX_UNANSWERED_READS:
                    await asyncio.wait((self.answers[0],))
                data = await receiver.read()
                if not data:
                    return
                self.codec.receive_data(data)
                try:
                    events = self.codec.next_events()
                except FramingError as exc:
                    self.ctx.log.warning("frame.invalid", extra={"reason": str(exc)})
                    return
                if not await self._handle(events):
                    return
                await self.outbox.drain_above(WRITE_HIGH_WATER)
        except ConnectionError:
            return
        finally:
            closing.cancel()
            try:
                await self._answered()  # publishes already appended are answered first
            finally:
                self._release()

    def _release(self) -> None:
        self.transactions.clear()  # an open transaction is aborted
        for sender in (*self.subscriptions.values(), *self.queries.values()):
            if sender.task is not None:
                sender.task.cancel()
        self.outbox.flush()  # a last failed RESPONSE goes out before the close
        self.writer.close()

    async def _handle(self, events: list[Event]) -> bool:
        """Handle a read's frames; False once the connection must close."""
        batch: Batch = {}
        receive, max_frame_size = self.state.receive, self.codec.max_frame_size
        for event in events:
            actions = receive(event, max_frame_size)
            if actions is STAGE:
                self._stage_publish(event, batch)  # type: ignore[arg-type]  # STAGE answers a Frame
                continue
            for action in actions:
                if isinstance(action, Flush):
                    self._append(batch)
                    await self._answered()
                elif not await self.perform(action):
                    return False
        self._append(batch)  # answered once durable, while the next reads go on
        return True

    async def perform(self, action: Action) -> bool:
        """Carry out one of the state's actions; False once the connection must close."""
        if isinstance(action, Send):
            self.send(action.kind, action.body)
        elif isinstance(action, Serve):
            await self._dispatch(action.frame)
        elif isinstance(action, Wake):
            sender = (self.queries.get(action.query) if action.query is not None
                      else self.subscriptions.get(action.subscription or 0))
            if sender is not None:
                sender.wake.set()
        elif isinstance(action, StoreOffset):
            try:
                self.core.store_offset(self.namespace, action.channel, 0,
                                       DURABLE_PREFIX + action.durable_id, action.position)
            except BrokerError as exc:
                self.fail(action.request_id, _error_code(exc), exc.message)
        elif isinstance(action, Login):
            for outcome in await self.connect(action):
                if not await self.perform(outcome):
                    return False
        elif isinstance(action, Close):
            self.ctx.log.info("connection.closing", extra={"reason": action.reason})
            return False
        return True

    async def _dispatch(self, event: Frame) -> None:
        request_id = event.body.get("rID")
        handler = self._handlers.get(event.type)
        try:
            if handler is None:
                raise FrameFailed("UNKNOWN_FRAME", f"unknown frame type {event.type!r}")
            result = handler(event.body)
            if asyncio.iscoroutine(result):
                await result
        except (FrameFailed, BrokerError) as exc:
            code = exc.code if isinstance(exc, FrameFailed) else _error_code(exc)
            self.fail(request_id, code, exc.message, response_kind(event.type),
                      **_query_id(event))

    # -- connecting -------------------------------------------------------------------

    async def connect(self, login: Login) -> tuple[Action, ...]:
        """Check a CONNECT's credentials and namespace with the broker."""
        try:
            user = await self.ctx.login(login.username, login.password)
            self.core.open_namespace(user, login.namespace)
            self.ctx.admit(user.name, login.namespace)
        except BrokerError as exc:
            return self.state.refused(login.request_id, _error_code(exc), exc.message)
        self.user, self.namespace = user, login.namespace
        self.ctx.identify(user.name, login.namespace, version=login.version)
        return self.state.connected(login.request_id, user.name, login.namespace)

    def _check(self, kind: str, name: str, resource_type: str) -> None:
        assert self.user is not None
        self.core.auth.check(self.user, self.namespace, kind, name, resource_type)  # type: ignore[arg-type]

    def _channel(self, name: str) -> PartitionService:
        stream = self.core.streams.find(self.namespace, name)
        if stream is None:
            raise FrameFailed("NO_SUCH_CHANNEL", f"no channel {name!r}")
        return stream.services[0]

    # -- publishing ---------------------------------------------------------------------

    def _stage_publish(self, event: Frame, batch: Batch) -> None:
        """Validate a PUBLISH; stage it in this read's batch or answer it now."""
        body = event.body
        request_id, document = body.get("rID"), body.get("event")
        channel: Any = body.get("channel")
        # A channel staged in this batch was found and its write right checked since the
        # last await: the usual PUBLISH needs only its own fields checked.
        staged = batch.get(channel) if type(channel) is str else None
        if (staged is not None and type(request_id) is int and type(document) is dict
                and body.get("sessID") is None):
            as_read = self.codec.publish_event(event, channel)
            stored = bson.encode(document) if as_read is None else as_read
            if len(stored) <= self.limits.max_event_size:
                staged[1].append(stored)
                staged[2].append(request_id)
                return
        try:
            raw = rq.event_bytes(body, self.limits.max_event_size)
            channel = rq.channel_name(body)
            partition = self._channel(channel)
            self._check("write", channel, "channel")
        except (FrameFailed, BrokerError) as exc:
            code = exc.code if isinstance(exc, FrameFailed) else _error_code(exc)
            self.fail(request_id, code, exc.message)
            return
        session = body.get("sessID")
        if session is not None:
            try:
                self.transactions.add(session, partition, raw)
            except FrameFailed as failed:
                self.fail(request_id, failed.code, failed.message)
            else:
                self.respond(request_id)
            return
        staged = batch.setdefault(channel, (partition, [], []))
        staged[1].append(raw)
        staged[2].append(request_id)

    def _append(self, batch: Batch) -> None:
        """Hand each channel's staged events to its appender; they are answered once
        durable, after every publish appended before them."""
        if not batch:
            return
        try:
            self.core.write_gate.check()
        except WritesHeld as held:
            for _, _, request_ids in batch.values():
                for request_id in request_ids:
                    self.fail(request_id, "RESOURCE_ALARM", str(held))
            batch.clear()
            return
        writes = [(partition.appender.append_records(records).durable, request_ids)
                  for partition, records, request_ids in batch.values()]
        batch.clear()
        earlier = self.answers[-1] if self.answers else None
        answer = asyncio.ensure_future(self._answer(earlier, writes))
        self.answers.append(answer)
        answer.add_done_callback(self._answer_done)

    async def _answer(self, earlier: asyncio.Future[None] | None,
                      writes: list[tuple[asyncio.Future[None], list[Any]]]) -> None:
        if earlier is not None:
            await asyncio.wait((earlier,))  # answers keep the order of the appends
        results = await asyncio.gather(*(w for w, _ in writes), return_exceptions=True)
        for result, (_, request_ids) in zip(results, writes, strict=True):
            if isinstance(result, BaseException):
                self.ctx.log.warning("write.failed", extra={"error": describe_error(result)})
                for request_id in request_ids:
                    self.fail(request_id, "STORAGE_FAILED", storage_failure(result))
            elif not self.writer.transport.is_closing():
                self.outbox.add(encode_ok(request_ids))

    def _answer_done(self, answer: asyncio.Future[None]) -> None:
        self.answers.remove(answer)  # the oldest: answers finish in order

    async def _answered(self) -> None:
        """Return once every publish appended so far is answered."""
        if self.answers:
            await asyncio.wait((self.answers[-1],))

    # -- transactions ----------------------------------------------------------------

    def on_start_tx(self, body: dict[str, Any]) -> None:
        self.transactions.start(rq.session_of(body))
        self.respond(body.get("rID"))

    async def on_commit_tx(self, body: dict[str, Any]) -> None:
        """All the transaction's events of a channel go in one chunk: after a crash either
        all of them are there or none."""
        session = rq.session_of(body)
        self.transactions.check_open(session)
        try:
            self.core.write_gate.check()
        except WritesHeld as held:  # the transaction stays open: COMMITTX again later
            raise FrameFailed("RESOURCE_ALARM", str(held)) from None
        try:
            await asyncio.gather(*(p.appender.append_records(records, together=True).durable
                                   for p, records in self.transactions.commit(session)))
        except OSError as failed:  # disk full, file too big: this commit, not the link
            self.ctx.log.warning("write.failed", extra={"error": describe_error(failed)})
            raise FrameFailed("STORAGE_FAILED", storage_failure(failed)) from None
        self.respond(body.get("rID"))

    def on_abort_tx(self, body: dict[str, Any]) -> None:
        self.transactions.abort(rq.session_of(body))
        self.respond(body.get("rID"))

    # -- subscriptions ----------------------------------------------------------------

    def on_subscribe(self, body: dict[str, Any]) -> None:
        channel = rq.channel_name(body)
        partition = self._channel(channel)
        self._check("read", channel, "channel")
        matcher = rq.matcher(body)
        try:
            predicate = compile_matcher(matcher)
        except InvalidArgument as exc:
            raise FrameFailed("INVALID_MATCHER", exc.message) from None
        durable_id = rq.durable_id(body)
        start = self._start_position(body, partition, channel, durable_id)
        flow = self.state.subscribe(channel, durable_id)
        sender = self.subscriptions[flow.sub_id] = Sender()
        self.send("SUBRESPONSE", {"ok": True, "rID": body.get("rID"), "subID": flow.sub_id})
        sender.task = asyncio.get_running_loop().create_task(
            self._deliver(flow, sender, partition, start, predicate))
        self.ctx.add_consumer(str(flow.sub_id), channel, prefetch_count=flow.window,
                              ack_required=True)

    def _start_position(self, body: dict[str, Any], partition: PartitionService, channel: str,
                        durable_id: str | None) -> int:
        if durable_id is not None:
            stored = self.core.catalog.get_offset(self.namespace, channel, 0,
                                                  DURABLE_PREFIX + durable_id)
            if stored is not None:
                return stored
        start = rq.start(body)
        if start.position is not None:
            return start.position
        if start.timestamp is not None:
            return partition.offset_for_timestamp(start.timestamp)
        return partition.committed_offset  # from now on

    async def _deliver(self, flow: SubscriptionFlow, sender: Sender, partition: PartitionService,
                       start: int, predicate: Callable[[Any], bool]) -> None:
        reader = partition.subscribe(start)
        encoder = RecevEncoder(flow.sub_id)
        in_flight, decode, outbox = flow.in_flight, bson.decode, self.outbox
        # RECEV frames go out in one piece for all the chunks at hand, up to the first
        # wait (for credit, the socket, or new events)
        frames: list[bytes | memoryview] = []
        pending = 0  # their bytes
        try:
            while True:
                chunk = reader.next_chunk_nowait()
                if chunk is None:
                    self._send_frames(frames)
                    pending = 0
                    chunk = await reader.next_chunk()
                head = encoder.heads(chunk.header.timestamp)
                for position, record in chunk.records():
                    if position < start:
                        continue
                    try:
                        matched = predicate(decode(record))
                    except Exception:
                        continue  # a record of another protocol, not a BSON event
                    if not matched:
                        continue
                    if len(in_flight) >= flow.window or outbox.size + pending > DELIVERY_HIGH_WATER:
                        self._send_frames(frames)
                        pending = 0
                        await outbox.drain_above(DELIVERY_HIGH_WATER)
                        while len(in_flight) >= flow.window:  # no credit: wait for ACKEV
                            sender.wake.clear()
                            await sender.wake.wait()
                    frames += (head(position, len(record)), record, EVENT_TAIL)
                    pending += len(record)
                    in_flight.append(position)
        except (PartitionClosed, ConnectionError):
            return
        except TierUnavailable as error:
            self._send_frames(frames)  # the events read before it
            self.ctx.log.warning("tier.unavailable", extra={"subscription": flow.sub_id,
                                                            "error": str(error)})
            self._read_failed(flow, "TIER_UNAVAILABLE",
                              f"the tier holding channel '{flow.channel}' is unavailable; "
                              "subscribe again later")
        except ChunkDamaged as error:  # reported by the stream service: logged and counted
            self._send_frames(frames)
            self._read_failed(flow, "DATA_DAMAGED",
                              f"channel '{flow.channel}': the events at position "
                              f"{error.chunk_id} on are damaged")

    def _read_failed(self, flow: SubscriptionFlow, code: str, message: str) -> None:
        """A subscription that cannot read on (a tiered range while the tier does not
        answer, a damaged chunk) ends with a failed SUBRESPONSE (no rID: the SUBSCRIBE was
        answered long ago) after the events before it; a durable one keeps its position,
        so subscribing again resumes there. The text names no server path: the broker's
        log has those."""
        self._end(flow)  # its own task: it ends as it returns
        self.fail(None, code, message, "SUBRESPONSE", subID=flow.sub_id)

    def _send_frames(self, frames: list[bytes | memoryview]) -> None:
        if frames and not self.writer.transport.is_closing():
            self.outbox.add(b"".join(frames))
        frames.clear()

    def _end(self, flow: SubscriptionFlow) -> None:
        self.state.end_subscription(flow.sub_id)
        sender = self.subscriptions.pop(flow.sub_id, None)
        if sender is not None and sender.task is not None:
            sender.task.cancel()
        self.ctx.remove_consumer(str(flow.sub_id))

    def on_unsubscribe(self, body: dict[str, Any]) -> None:
        """End the subscription and forget its durable position."""
        flow = self.state.subscription(body)
        self._end(flow)
        if flow.durable_id is not None:
            self.core.catalog.delete_offset(self.namespace, flow.channel, 0,
                                            DURABLE_PREFIX + flow.durable_id)
        self.respond(body.get("rID"))

    def on_subclose(self, body: dict[str, Any]) -> None:
        """End the subscription on this connection; a durable one keeps its position."""
        self._end(self.state.subscription(body))
        self.respond(body.get("rID"))

    # -- binders and queries --------------------------------------------------------

    def on_query(self, body: dict[str, Any]) -> None:
        query_id = rq.new_query_id(body, self.state.queries)
        binder = rq.name(body, "binder")
        self._check("read", binder, "binder")
        matcher = rq.matcher(body)
        try:
            results = self.core.binders.query(self.namespace, binder, matcher)
            first = next(results, None)
        except InvalidArgument as exc:
            raise FrameFailed("INVALID_MATCHER", exc.message) from None
        flow = self.state.open_query(query_id)
        sender = self.queries[query_id] = Sender()
        self.send("QUERYRESPONSE", answer(body.get("rID"), {"ok": True, "queryID": query_id}))
        sender.task = asyncio.get_running_loop().create_task(
            self._stream_results(query_id, flow, sender, first, results))

    async def _stream_results(self, query_id: int, flow: QueryFlow, sender: Sender,
                              current: Any, results: Any) -> None:
        try:
            if current is None:  # no document matched: one empty, last result
                self.send("QUERYRESULT", {"queryID": query_id, "last": True})
            while current is not None:
                following = next(results, None)
                if flow.full or self.outbox.size > DELIVERY_HIGH_WATER:
                    await self.outbox.drain_above(DELIVERY_HIGH_WATER)
                while flow.full:  # no credit: wait for QUERYACK
                    sender.wake.clear()
                    await sender.wake.wait()
                self.send("QUERYRESULT", {"queryID": query_id, "result": current,
                                          "last": following is None})
                flow.in_flight += 1
                current = following
        finally:
            self.state.end_query(query_id)
            self.queries.pop(query_id, None)

    def on_find_by_id(self, body: dict[str, Any]) -> None:
        binder = rq.name(body, "binder")
        self._check("read", binder, "binder")
        if "docID" not in body:
            raise FrameFailed("INVALID_FRAME", "'docID' is required")
        self.respond(body.get("rID"),
                     result=self.core.binders.get(self.namespace, binder, body["docID"]))

    def on_list_binders(self, body: dict[str, Any]) -> None:
        self.respond(body.get("rID"), binders=self.core.binders.names(self.namespace))

    def on_create_binder(self, body: dict[str, Any]) -> None:
        name = rq.name(body, "name")
        self._check("configure", name, "binder")
        exists = self.core.binders.create(self.namespace, name)
        if not exists:
            self.ctx.audit("binders.create", vhost=self.namespace, name=name)
        self.respond(body.get("rID"), exists=exists)

    def on_list_channels(self, body: dict[str, Any]) -> None:
        channels = [s.name for s in self.core.streams.list(self.namespace)
                    if len(s.services) == 1]
        self.respond(body.get("rID"), channels=channels)

    def on_create_channel(self, body: dict[str, Any]) -> None:
        name = rq.name(body, "name")
        self._check("configure", name, "channel")
        try:
            self.core.create_stream(self.namespace, name)
            exists = False
            self.ctx.audit("channels.create", vhost=self.namespace, name=name)
        except AlreadyExists:
            exists = True
        self.respond(body.get("rID"), exists=exists)

    def _projection(self, body: dict[str, Any]) -> Projection:
        """A projection's definition from a frame, checked against the user's rights: one
        that exists is replaced only with configure on the binder it feeds now too, as a
        queue is redeclared or deleted only with configure on it."""
        name, binder = rq.name(body, "name"), rq.name(body, "binder")
        current = self.core.binders.projection(self.namespace, name)
        if current is not None:
            self._check("configure", current["binder"], "binder")
        self._check("configure", binder, "binder")
        self._check("read", rq.name(body, "channel"), "channel")
        matcher = rq.matcher(body) or {}
        return Projection(name, body["channel"], binder, rq.name(body, "idField"),
                          body.get("fold", "merge"), matcher)

    def on_create_projection(self, body: dict[str, Any]) -> None:
        """mainstem's own frame: declare a projection (configure on its binder)."""
        projection = self._projection(body)
        self.core.projections.declare(self.namespace, projection)
        self.ctx.audit("projections.create", vhost=self.namespace, name=projection.name)
        self.respond(body.get("rID"))

    # -- bulk loads: a binder rebuilt by Spark, handed over to the live projection --------

    def on_begin_load(self, body: dict[str, Any]) -> None:
        binder = rq.name(body, "binder")
        self._check("configure", binder, "binder")
        load_id = self.core.binders.begin_load(self.namespace, binder)
        self.core.projections.collect_garbage()  # an abandoned earlier load is garbage now
        self.respond(body.get("rID"), loadID=load_id)

    def _load(self, body: dict[str, Any]) -> str:
        load_id = rq.name(body, "loadID")
        self._check("configure", self.core.binders.load_binder(self.namespace, load_id),
                    "binder")
        return load_id

    def on_load_docs(self, body: dict[str, Any]) -> None:
        """Stage documents, ``docs: [{id, doc}]``, in a load."""
        load_id = self._load(body)
        docs = rq.docs(body)
        self.core.binders.stage(self.namespace, load_id, docs)
        self.respond(body.get("rID"), count=len(docs))

    def on_hand_over(self, body: dict[str, Any]) -> None:
        """Swap a load in as its binder and run the projection live from ``position``."""
        load_id = self._load(body)
        projection = self._projection(body)
        position = rq.position(body)
        self._channel(projection.channel)
        documents = self.core.projections.hand_over(self.namespace, projection, load_id,
                                                    position)
        self.respond(body.get("rID"), documents=documents)

    def on_ping(self, body: dict[str, Any]) -> None:
        self.respond(body.get("rID"))


def _error_code(error: BrokerError) -> str:
    if isinstance(error, AuthenticationFailed):
        return "AUTHENTICATION_FAILED"
    if isinstance(error, AccessRefused):
        return "ACCESS_REFUSED"
    if isinstance(error, NotFound):
        return "NOT_FOUND"
    if isinstance(error, InvalidArgument):
        return "INVALID_ARGUMENT"
    if isinstance(error, LimitReached):
        return "LIMIT_REACHED"
    if isinstance(error, StorageFailed):  # as a PUBLISH the log refuses
        return "STORAGE_FAILED"
    return "FAILED"


async def handle(ctx: ConnectionContext) -> None:
    with contextlib.suppress(ConnectionError):
        await EventsConnection(ctx).run()


def _query_id(event: Frame) -> dict[str, Any]:
    """A failed QUERY's QUERYRESPONSE names its queryID: the document gives QUERY no rID."""
    query_id = event.body.get("queryID")
    return {"queryID": query_id} if event.type == "QUERY" and query_id is not None else {}
