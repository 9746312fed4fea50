"""A small asyncio client for the Iggy binary protocol (TCP).

    async with await IggyClient.connect("127.0.0.1", 8090) as client:
        await client.login("guest", "guest")
        await client.create_stream("orders", 1)
        await client.create_topic("orders", "created", partitions=3)
        await client.send("orders", "created", [Message(b"hi")], key=b"customer-7")
        polled = await client.poll("orders", "created", 1, Polling.FIRST, count=100)

Identifiers are ints (numeric ids) or strs (names); partitions count from 1.
A failed command raises `IggyClientError` with Iggy's numeric error code.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import asdict
from types import TracebackType
from typing import Protocol

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import commands as cmd
from mainstem.protocols.iggy.commands import ConsumerGroup, Message, Polled, PolledMessage

__all__ = ["CONSUMER", "CONSUMER_GROUP", "ConsumerGroup", "IggyClient", "IggyClientError",
           "Message", "Polled", "PolledMessage", "Polling"]

Ident = int | str
CONSUMER, CONSUMER_GROUP = c.CONSUMER, c.CONSUMER_GROUP


class IggyClientError(Exception):
    def __init__(self, code: int, command: int) -> None:
        super().__init__(f"Iggy command {command} failed with error code {code}")
        self.code = code


class Polling(enum.IntEnum):
    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


class Command(Protocol):
    @property
    def code(self) -> int: ...

    def encode(self) -> bytes: ...


class IggyClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, host: str = "127.0.0.1", port: int = 8090) -> IggyClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def __aenter__(self) -> IggyClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()

    async def request(self, code: int, payload: bytes = b"") -> bytes:
        """Send one command and return its reply payload."""
        async with self._lock:
            self._writer.write(c.encode_request(code, payload))
            status, length = c.RESPONSE_HEADER.unpack(
                await self._reader.readexactly(c.RESPONSE_HEADER.size))
            body = await self._reader.readexactly(length)
        if status:
            raise IggyClientError(status, code)
        return body

    async def _call(self, command: Command) -> c.Reader:
        """Send a command from `commands` and return a reader over its reply."""
        return c.Reader(memoryview(await self.request(command.code, command.encode())))

    # -- system ----------------------------------------------------------------------

    async def login(self, username: str, password: str) -> int:
        reply = await self._call(cmd.LoginUser(username, password, "mainstem"))
        return cmd.LoggedIn.decode(reply).user_id

    async def logout(self) -> None:
        await self.request(c.Code.LOGOUT_USER)

    async def ping(self) -> None:
        await self.request(c.Code.PING)

    async def stats(self) -> dict[str, object]:
        return cmd.decode_stats(c.Reader(memoryview(await self.request(c.Code.GET_STATS))))

    async def me(self) -> dict[str, object]:
        body = await self.request(c.Code.GET_ME)
        return _as_dict(cmd.ClientInfo.decode(c.Reader(memoryview(body)), details=True))

    async def client(self, client_id: int) -> dict[str, object]:
        reply = await self._call(cmd.GetClient(client_id))
        return _as_dict(cmd.ClientInfo.decode(reply, details=True))

    async def clients(self) -> list[dict[str, object]]:
        reply = c.Reader(memoryview(await self.request(c.Code.GET_CLIENTS)))
        return [_as_dict(info) for info in
                cmd.decode_all(reply, lambda r: cmd.ClientInfo.decode(r, details=False))]

    # -- streams and topics --------------------------------------------------------------

    async def create_stream(self, name: str, stream_id: int = 0) -> None:
        await self._call(cmd.CreateStream(stream_id, name))

    async def delete_stream(self, stream: Ident) -> None:
        await self._call(cmd.StreamCommand(c.Code.DELETE_STREAM, stream))

    async def streams(self) -> list[tuple[int, str]]:
        reply = c.Reader(memoryview(await self.request(c.Code.GET_STREAMS)))
        return [(s.id, s.name) for s in cmd.decode_all(reply, cmd.StreamInfo.decode)]

    async def create_topic(self, stream: Ident, name: str, partitions: int = 1, topic_id: int = 0,
                           expiry_s: int = 0, max_size: int = 0) -> None:
        await self._call(cmd.CreateTopic(stream, topic_id, partitions, expiry_s * 1_000_000,
                                         max_size, name))

    async def delete_topic(self, stream: Ident, topic: Ident) -> None:
        await self._call(cmd.TopicCommand(c.Code.DELETE_TOPIC, stream, topic))

    async def topic_partitions(self, stream: Ident, topic: Ident) -> int:
        reply = await self._call(cmd.TopicCommand(c.Code.GET_TOPIC, stream, topic))
        return cmd.TopicInfo.decode(reply).partitions

    async def create_partitions(self, stream: Ident, topic: Ident, count: int) -> None:
        await self._call(cmd.PartitionsCommand(c.Code.CREATE_PARTITIONS, stream, topic, count))

    async def delete_partitions(self, stream: Ident, topic: Ident, count: int) -> None:
        await self._call(cmd.PartitionsCommand(c.Code.DELETE_PARTITIONS, stream, topic, count))

    # -- messages --------------------------------------------------------------------------

    async def send(self, stream: Ident, topic: Ident, messages: list[Message], *,
                   partition: int | None = None, key: bytes | None = None) -> None:
        """Balanced unless a partition id or a messages key is given."""
        if partition is not None:
            partitioning = cmd.Partitioning.partition(partition)
        elif key is not None:
            partitioning = cmd.Partitioning(cmd.MESSAGES_KEY, key)
        else:
            partitioning = cmd.Partitioning(cmd.BALANCED)
        await self._call(cmd.SendMessages(stream, topic, partitioning, messages))

    async def poll(self, stream: Ident, topic: Ident, partition: int, polling: Polling,
                   value: int = 0, count: int = 100, auto_commit: bool = False,
                   consumer: Ident = 1, kind: int = CONSUMER) -> Polled:
        reply = await self._call(cmd.PollMessages(c.Consumer(kind, consumer), stream, topic,
                                                  partition, polling, value, count, auto_commit))
        return Polled.decode(reply)

    # -- consumer offsets -----------------------------------------------------------------

    async def store_offset(self, stream: Ident, topic: Ident, partition: int, offset: int,
                           consumer: Ident = 1, kind: int = CONSUMER) -> None:
        await self._call(cmd.StoreConsumerOffset(c.Consumer(kind, consumer), stream, topic,
                                                 partition, offset))

    async def get_offset(self, stream: Ident, topic: Ident, partition: int,
                         consumer: Ident = 1, kind: int = CONSUMER) -> int | None:
        reply = await self._call(cmd.GetConsumerOffset(c.Consumer(kind, consumer), stream, topic,
                                                       partition))
        return cmd.OffsetInfo.decode(reply).stored_offset if reply.remaining else None

    # -- consumer groups ---------------------------------------------------------------------

    async def create_group(self, stream: Ident, topic: Ident, group_id: int, name: str) -> None:
        await self._call(cmd.CreateConsumerGroup(stream, topic, group_id, name))

    async def delete_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self._call(cmd.GroupCommand(c.Code.DELETE_CONSUMER_GROUP, stream, topic, group))

    async def join_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self._call(cmd.GroupCommand(c.Code.JOIN_CONSUMER_GROUP, stream, topic, group))

    async def leave_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self._call(cmd.GroupCommand(c.Code.LEAVE_CONSUMER_GROUP, stream, topic, group))

    async def group(self, stream: Ident, topic: Ident, group: Ident) -> ConsumerGroup:
        reply = await self._call(cmd.GroupCommand(c.Code.GET_CONSUMER_GROUP, stream, topic,
                                                  group))
        return ConsumerGroup.decode(reply)

    async def groups(self, stream: Ident, topic: Ident) -> list[tuple[int, str]]:
        reply = await self._call(cmd.TopicCommand(c.Code.GET_CONSUMER_GROUPS, stream, topic))
        groups = cmd.decode_all(reply, lambda r: ConsumerGroup.decode(r, details=False))
        return [(g.id, g.name) for g in groups]


def _as_dict(info: cmd.ClientInfo) -> dict[str, object]:
    """A client's details as a dict; a list of clients carries no consumer groups."""
    return {key: value for key, value in asdict(info).items() if value is not None}
