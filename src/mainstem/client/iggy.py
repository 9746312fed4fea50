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
import struct
from dataclasses import dataclass, field
from types import TracebackType

from mainstem.protocols.iggy import codec as c

Ident = int | str


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


@dataclass(slots=True)
class Message:
    payload: bytes
    id: int = 0
    headers: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (kind, value)


@dataclass(slots=True)
class PolledMessage:
    offset: int
    timestamp: int  # microseconds
    id: int
    checksum: int
    headers: dict[str, tuple[int, bytes]]
    payload: bytes


@dataclass(slots=True)
class Polled:
    partition_id: int
    current_offset: int
    messages: list[PolledMessage]


@dataclass(slots=True)
class ConsumerGroup:
    id: int
    name: str
    partitions_count: int
    members: dict[int, list[int]]  # member (client) id -> partition ids


_STATS = struct.Struct("<IffQQQQQQQQIIIIQII")
STATS_FIELDS = ("process_id", "cpu_usage", "total_cpu_usage", "memory_usage", "total_memory",
                "available_memory", "run_time", "start_time", "read_bytes", "written_bytes",
                "messages_size_bytes", "streams_count", "topics_count", "partitions_count",
                "segments_count", "messages_count", "clients_count", "consumer_groups_count")
CONSUMER, CONSUMER_GROUP = c.CONSUMER, c.CONSUMER_GROUP


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
            status, length = c.RESPONSE_HEADER.unpack(await self._reader.readexactly(8))
            body = await self._reader.readexactly(length)
        if status:
            raise IggyClientError(status, code)
        return body

    # -- system ----------------------------------------------------------------------

    async def login(self, username: str, password: str) -> int:
        body = await self.request(c.Code.LOGIN_USER, c.encode_name(username)
                                  + c.encode_name(password) + c.encode_long_string("mainstem")
                                  + c.encode_long_string(""))
        return c.U32.unpack(body[:4])[0]

    async def logout(self) -> None:
        await self.request(c.Code.LOGOUT_USER)

    async def ping(self) -> None:
        await self.request(c.Code.PING)

    async def stats(self) -> dict[str, object]:
        body = await self.request(c.Code.GET_STATS)
        stats: dict[str, object] = dict(zip(STATS_FIELDS, _STATS.unpack_from(body), strict=True))
        r = c.Reader(memoryview(body)[_STATS.size:])
        for name in ("hostname", "os_name", "os_version", "kernel_version"):
            stats[name] = r.long_string()
        return stats

    async def me(self) -> dict[str, object]:
        return _client_info(c.Reader(memoryview(await self.request(c.Code.GET_ME))), True)

    async def client(self, client_id: int) -> dict[str, object]:
        body = await self.request(c.Code.GET_CLIENT, c.U32.pack(client_id))
        return _client_info(c.Reader(memoryview(body)), True)

    async def clients(self) -> list[dict[str, object]]:
        r = c.Reader(memoryview(await self.request(c.Code.GET_CLIENTS)))
        out = []
        while r.remaining:
            out.append(_client_info(r, False))
        return out

    # -- streams and topics --------------------------------------------------------------

    async def create_stream(self, name: str, stream_id: int = 0) -> None:
        await self.request(c.Code.CREATE_STREAM, c.U32.pack(stream_id) + c.encode_name(name))

    async def delete_stream(self, stream: Ident) -> None:
        await self.request(c.Code.DELETE_STREAM, c.encode_identifier(stream))

    async def streams(self) -> list[tuple[int, str]]:
        r = c.Reader(memoryview(await self.request(c.Code.GET_STREAMS)))
        out = []
        while r.remaining:
            stream_id = r.u32()
            r.take(28)
            out.append((stream_id, r.name("name")))
        return out

    async def create_topic(self, stream: Ident, name: str, partitions: int = 1, topic_id: int = 0,
                           expiry_s: int = 0, max_size: int = 0) -> None:
        await self.request(c.Code.CREATE_TOPIC, c.encode_identifier(stream) + struct.pack(
            "<IIBQQB", topic_id, partitions, 1, expiry_s * 1_000_000, max_size, 1)
            + c.encode_name(name))

    async def delete_topic(self, stream: Ident, topic: Ident) -> None:
        await self.request(c.Code.DELETE_TOPIC, _pair(stream, topic))

    async def topic_partitions(self, stream: Ident, topic: Ident) -> int:
        body = await self.request(c.Code.GET_TOPIC, _pair(stream, topic))
        return c.U32.unpack_from(body, 12)[0]

    async def create_partitions(self, stream: Ident, topic: Ident, count: int) -> None:
        await self.request(c.Code.CREATE_PARTITIONS, _pair(stream, topic) + c.U32.pack(count))

    async def delete_partitions(self, stream: Ident, topic: Ident, count: int) -> None:
        await self.request(c.Code.DELETE_PARTITIONS, _pair(stream, topic) + c.U32.pack(count))

    # -- messages --------------------------------------------------------------------------

    async def send(self, stream: Ident, topic: Ident, messages: list[Message], *,
                   partition: int | None = None, key: bytes | None = None) -> None:
        """Balanced unless a partition id or a messages key is given."""
        if partition is not None:
            partitioning = b"\x02\x04" + c.U32.pack(partition)
        elif key is not None:
            partitioning = bytes((3, len(key))) + key
        else:
            partitioning = b"\x01\x00"
        await self.request(c.Code.SEND_MESSAGES, _pair(stream, topic) + partitioning
                           + encode_messages(messages))

    async def poll(self, stream: Ident, topic: Ident, partition: int, polling: Polling,
                   value: int = 0, count: int = 100, auto_commit: bool = False,
                   consumer: Ident = 1, kind: int = CONSUMER) -> Polled:
        body = await self.request(c.Code.POLL_MESSAGES, _consumer(kind, consumer)
                                  + _pair(stream, topic) + struct.pack(
                                      "<IBQIB", partition, polling, value, count, auto_commit))
        return decode_polled(body)

    # -- consumer offsets -----------------------------------------------------------------

    async def store_offset(self, stream: Ident, topic: Ident, partition: int, offset: int,
                           consumer: Ident = 1, kind: int = CONSUMER) -> None:
        await self.request(c.Code.STORE_CONSUMER_OFFSET, _consumer(kind, consumer)
                           + _pair(stream, topic) + struct.pack("<IQ", partition, offset))

    async def get_offset(self, stream: Ident, topic: Ident, partition: int,
                         consumer: Ident = 1, kind: int = CONSUMER) -> int | None:
        body = await self.request(c.Code.GET_CONSUMER_OFFSET, _consumer(kind, consumer)
                                  + _pair(stream, topic) + c.U32.pack(partition))
        return struct.unpack_from("<IQQ", body)[2] if body else None

    # -- consumer groups ---------------------------------------------------------------------

    async def create_group(self, stream: Ident, topic: Ident, group_id: int, name: str) -> None:
        await self.request(c.Code.CREATE_CONSUMER_GROUP, _pair(stream, topic)
                           + c.U32.pack(group_id) + c.encode_name(name))

    async def delete_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self.request(c.Code.DELETE_CONSUMER_GROUP, _group(stream, topic, group))

    async def join_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self.request(c.Code.JOIN_CONSUMER_GROUP, _group(stream, topic, group))

    async def leave_group(self, stream: Ident, topic: Ident, group: Ident) -> None:
        await self.request(c.Code.LEAVE_CONSUMER_GROUP, _group(stream, topic, group))

    async def group(self, stream: Ident, topic: Ident, group: Ident) -> ConsumerGroup:
        body = await self.request(c.Code.GET_CONSUMER_GROUP, _group(stream, topic, group))
        r = c.Reader(memoryview(body))
        gid, partitions, members_count = r.u32(), r.u32(), r.u32()
        name = r.name("name")
        members = {}
        for _ in range(members_count):
            member, n = r.u32(), r.u32()
            members[member] = [r.u32() for _ in range(n)]
        return ConsumerGroup(gid, name, partitions, members)

    async def groups(self, stream: Ident, topic: Ident) -> list[tuple[int, str]]:
        r = c.Reader(memoryview(await self.request(c.Code.GET_CONSUMER_GROUPS,
                                                   _pair(stream, topic))))
        out = []
        while r.remaining:
            gid = r.u32()
            r.take(8)
            out.append((gid, r.name("name")))
        return out


def _pair(stream: Ident, topic: Ident) -> bytes:
    return c.encode_identifier(stream) + c.encode_identifier(topic)


def _group(stream: Ident, topic: Ident, group: Ident) -> bytes:
    return _pair(stream, topic) + c.encode_identifier(group)


def _consumer(kind: int, consumer: Ident) -> bytes:
    return bytes((kind,)) + c.encode_identifier(consumer)


def encode_messages(messages: list[Message]) -> bytes:
    out = bytearray()
    for m in messages:
        headers = c.encode_headers(m.headers)
        out += m.id.to_bytes(16, "little") + c.U32.pack(len(headers)) + headers
        out += c.U32.pack(len(m.payload)) + m.payload
    return bytes(out)


def decode_polled(body: bytes) -> Polled:
    partition_id, current, count = c.POLL_REPLY_HEADER.unpack_from(body)
    pos = c.POLL_REPLY_HEADER.size
    unpack_head, unpack_u32 = c.POLLED_HEADER.unpack_from, c.U32.unpack_from
    messages = []
    for _ in range(count):
        offset, _state, timestamp, raw_id, checksum = unpack_head(body, pos)
        pos += c.POLLED_HEADER.size
        (length,) = unpack_u32(body, pos)
        headers = {}
        if length:
            raw = body[pos + 4:pos + 4 + length]
            headers = {key: (kind, value) for key, kind, value in c.iter_headers(raw)}
        pos += 4 + length
        (length,) = unpack_u32(body, pos)
        payload = body[pos + 4:pos + 4 + length]
        pos += 4 + length
        messages.append(PolledMessage(offset, timestamp, int.from_bytes(raw_id, "little"),
                                      checksum, headers, payload))
    return Polled(partition_id, current, messages)


def _client_info(r: c.Reader, details: bool) -> dict[str, object]:
    client_id, uid, transport = r.u32(), r.u32(), r.u8()
    info: dict[str, object] = {"client_id": client_id, "user_id": uid, "transport": transport,
                               "address": r.long_string(), "consumer_groups_count": r.u32()}
    if details:
        info["consumer_groups"] = [struct.unpack("<III", r.take(12))
                                   for _ in range(int(info["consumer_groups_count"]))]
    return info
