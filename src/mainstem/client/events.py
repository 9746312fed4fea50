"""An asyncio client for mainstem's BSON event protocol (port 7451).

    client = await EventsClient.connect("127.0.0.1", 7451, "guest", "guest")
    await client.create_channel("orders")
    await client.publish("orders", {"id": 1, "total": 9.5})        # returns once durable
    subscription = await client.subscribe("orders", start_pos=0, matcher={"total": {"$gt": 5}})
    async for event in subscription:                              # Received(pos, timestamp, event)
        ...
        await subscription.ack()                                  # ACKEV: flow control, durability
    async for document in client.query("totals", {"count": {"$gte": 2}}):
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mainstem.protocols.bson_events.codec import EventCodec, Frame, FramingError, encode_frame
from mainstem.protocols.bson_events.outbox import Outbox

PROTOCOL_VERSION = "1.0"
READ_SIZE = 256 * 1024


class EventsError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Received:
    pos: int
    timestamp: int
    event: dict[str, Any]


class Subscription:
    """Events as they arrive; one the server ended (a failed SUBRESPONSE naming it, e.g.
    TIER_UNAVAILABLE or DATA_DAMAGED) raises its EventsError once the events before it are
    taken."""

    def __init__(self, client: EventsClient, sub_id: int) -> None:
        self.client = client
        self.sub_id = sub_id
        self.events: asyncio.Queue[Received | EventsError] = asyncio.Queue()
        self.last_taken: Received | None = None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Received:
        return self._taken(await self.events.get())

    async def next(self, timeout: float = 10.0) -> Received:
        async with asyncio.timeout(timeout):
            return self._taken(await self.events.get())

    def _taken(self, item: Received | EventsError) -> Received:
        if isinstance(item, EventsError):
            # forgotten only now: the end may be read before `subscribe` returned it
            self.client._subscriptions.pop(self.sub_id, None)
            self.events.put_nowait(item)  # ended for good: every later take raises too
            raise item
        self.last_taken = item
        return item

    async def ack(self) -> None:
        """ACKEV for every event taken from this subscription so far (events received
        but still queued here stay unacknowledged)."""
        if self.last_taken is not None:
            await self.client._send("ACKEV", {"subID": self.sub_id, "pos": self.last_taken.pos})

    async def ack_oldest(self) -> None:
        """ACKEV without a position, as mewbase clients send it after each event: the
        server acknowledges the oldest event it has in flight for this subscription."""
        await self.client._send("ACKEV", {"subID": self.sub_id})

    async def unsubscribe(self) -> None:
        """End it and delete its durable position."""
        await self.client._request("UNSUBSCRIBE", {"subID": self.sub_id})
        self.client._subscriptions.pop(self.sub_id, None)

    async def close(self) -> None:
        """SUBCLOSE: end it here; a durable subscription keeps its position."""
        await self.client._request("SUBCLOSE", {"subID": self.sub_id})
        self.client._subscriptions.pop(self.sub_id, None)


class EventsClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._outbox = Outbox(writer)
        self._request_ids = itertools.count(1)
        self._query_ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._subscriptions: dict[int, Subscription] = {}
        self._queries: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self._reading: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    @classmethod
    async def connect(cls, host: str, port: int, username: str, password: str, *,
                      namespace: str = "/", version: str = PROTOCOL_VERSION) -> EventsClient:
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer)
        client._reading = asyncio.get_running_loop().create_task(client._read_loop())
        try:
            await client._request("CONNECT", {"version": version, "username": username,
                                              "password": password, "namespace": namespace})
        except BaseException:
            await client.close()
            raise
        return client

    async def __aenter__(self) -> EventsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        if self._reading is not None:
            self._reading.cancel()

    # -- frames ------------------------------------------------------------------

    async def _send(self, kind: str, body: dict[str, Any]) -> None:
        self._outbox.flush()  # frames keep their order
        self._writer.write(encode_frame(kind, body))
        await self._writer.drain()

    async def _request(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._request_ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._send(kind, {**body, "rID": request_id})
        response = await future
        if not response.get("ok"):
            raise EventsError(response.get("errCode", "FAILED"), response.get("errMsg", ""))
        return response

    async def _read_loop(self) -> None:
        codec = EventCodec(None)
        try:
            while data := await self._reader.read(READ_SIZE):
                codec.receive_data(data)
                for frame in codec.next_events():
                    if not isinstance(frame, Frame):
                        raise FramingError(f"unusable frame from the server: {frame}")
                    self._dispatch(frame.type, frame.body)
        except ConnectionError:
            pass
        except FramingError:
            self._writer.close()  # the stream cannot be framed any more
        finally:
            self.closed.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the connection closed"))

    def _dispatch(self, kind: str, frame: dict[str, Any]) -> None:
        if kind == "SUBRESPONSE" and frame.get("ok"):  # before any RECEV of it is read
            self._subscriptions[frame["subID"]] = Subscription(self, frame["subID"])
        if kind == "SUBRESPONSE" and not frame.get("ok") and "rID" not in frame \
                and "subID" in frame:  # the server ended that subscription
            ended = self._subscriptions.get(frame["subID"])
            if ended is not None:
                ended.events.put_nowait(EventsError(frame.get("errCode", "FAILED"),
                                                    frame.get("errMsg", "")))
        elif kind in ("RESPONSE", "SUBRESPONSE", "QUERYRESPONSE"):
            future = self._pending.pop(frame.get("rID"), None)  # type: ignore[arg-type]
            if future is not None and not future.done():
                future.set_result(frame)
            elif not frame.get("ok") and self._pending:  # an error without its rID
                oldest = min(self._pending)
                self._pending.pop(oldest).set_result(frame)
        elif kind == "RECEV":
            subscription = self._subscriptions.get(frame["subID"])
            if subscription is not None:
                subscription.events.put_nowait(
                    Received(frame["pos"], frame["timestamp"], frame["event"]))
        elif kind == "QUERYRESULT":
            results = self._queries.get(frame["queryID"])
            if results is not None:
                results.put_nowait(frame)

    # -- publishing and transactions ---------------------------------------------------

    async def publish(self, channel: str, event: dict[str, Any], *,
                      session: int | None = None) -> None:
        body: dict[str, Any] = {"channel": channel, "event": event}
        if session is not None:
            body["sessID"] = session
        await self._request("PUBLISH", body)

    async def publish_many(self, channel: str, events: list[dict[str, Any]]) -> None:
        """Pipelined PUBLISH frames (one write): they share the server's durable write."""
        futures = []
        frames = []
        loop = asyncio.get_running_loop()
        for event in events:
            request_id = next(self._request_ids)
            future = loop.create_future()
            self._pending[request_id] = future
            futures.append(future)
            frames.append(encode_frame("PUBLISH", {"channel": channel, "event": event,
                                                   "rID": request_id}))
        self._outbox.flush()
        self._writer.write(b"".join(frames))
        await self._writer.drain()
        for response in await asyncio.gather(*futures):
            if not response.get("ok"):
                raise EventsError(response.get("errCode", "FAILED"), response.get("errMsg", ""))

    async def start_tx(self, session: int) -> None:
        await self._request("STARTTX", {"sessID": session})

    async def commit_tx(self, session: int) -> None:
        await self._request("COMMITTX", {"sessID": session})

    async def abort_tx(self, session: int) -> None:
        await self._request("ABORTTX", {"sessID": session})

    # -- subscribing -------------------------------------------------------------------

    async def subscribe(self, channel: str, *, start_pos: int | None = None,
                        start_timestamp: int | None = None, durable_id: str | None = None,
                        matcher: dict[str, Any] | None = None) -> Subscription:
        body: dict[str, Any] = {"channel": channel}
        for key, value in (("startPos", start_pos), ("startTimestamp", start_timestamp),
                           ("durableID", durable_id), ("matcher", matcher)):
            if value is not None:
                body[key] = value
        request_id = next(self._request_ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._send("SUBSCRIBE", {**body, "rID": request_id})
        response = await future
        if not response.get("ok"):
            raise EventsError(response.get("errCode", "FAILED"), response.get("errMsg", ""))
        return self._subscriptions[response["subID"]]  # made when SUBRESPONSE was read

    # -- binders and queries -------------------------------------------------------------

    async def query(self, binder: str, matcher: dict[str, Any] | None = None, *,
                    ack: bool = True) -> AsyncIterator[dict[str, Any]]:
        """The matching documents; each is acknowledged (QUERYACK) once taken."""
        query_id = next(self._query_ids)
        results: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queries[query_id] = results
        try:
            await self._request("QUERY", {"queryID": query_id, "binder": binder,
                                          "matcher": matcher or {}})
            while True:
                frame = await results.get()
                if "result" in frame:
                    yield frame["result"]
                    if ack:  # acknowledgements of one loop turn share a write
                        self._outbox.add(encode_frame("QUERYACK", {"queryID": query_id}))
                if frame.get("last"):
                    return
        finally:
            self._queries.pop(query_id, None)

    async def find_by_id(self, binder: str, doc_id: Any) -> dict[str, Any] | None:
        response = await self._request("FINDBYID", {"binder": binder, "docID": doc_id})
        document: dict[str, Any] | None = response["result"]
        return document

    async def list_binders(self) -> list[str]:
        binders: list[str] = (await self._request("LISTBINDERS", {}))["binders"]
        return binders

    async def create_binder(self, name: str) -> bool:
        existed: bool = (await self._request("CREATEBINDER", {"name": name}))["exists"]
        return existed

    async def list_channels(self) -> list[str]:
        channels: list[str] = (await self._request("LISTCHANNELS", {}))["channels"]
        return channels

    async def create_channel(self, name: str) -> bool:
        existed: bool = (await self._request("CREATECHANNEL", {"name": name}))["exists"]
        return existed

    async def create_projection(self, name: str, channel: str, binder: str, id_field: str,
                                fold: str = "merge", matcher: dict[str, Any] | None = None
                                ) -> None:
        await self._request("CREATEPROJECTION",
                            _projection(name, channel, binder, id_field, fold, matcher))

    async def begin_load(self, binder: str) -> str:
        """Start a bulk load into `binder` (discarding an unfinished earlier one)."""
        load_id: str = (await self._request("BEGINLOAD", {"binder": binder}))["loadID"]
        return load_id

    async def load_documents(self, load_id: str, documents: list[tuple[Any, dict[str, Any]]]
                             ) -> None:
        """Stage (id, document) pairs in a load: one frame, so keep it under the
        server's maximum event size."""
        await self._request("LOADDOCS", {"loadID": load_id, "docs": [
            {"id": doc_id, "doc": document} for doc_id, document in documents]})

    async def hand_over(self, load_id: str, name: str, channel: str, binder: str,
                        id_field: str, fold: str, matcher: dict[str, Any] | None,
                        position: int) -> int:
        """Make the load the binder's content and run projection `name` live from
        `position`, atomically. Returns the number of documents."""
        body = _projection(name, channel, binder, id_field, fold, matcher)
        response = await self._request("HANDOVER", {**body, "loadID": load_id,
                                                    "position": position})
        documents: int = response["documents"]
        return documents

    async def ping(self) -> None:
        await self._request("PING", {})


def _projection(name: str, channel: str, binder: str, id_field: str, fold: str,
                matcher: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": name, "channel": channel, "binder": binder, "idField": id_field,
            "fold": fold, "matcher": matcher or {}}
