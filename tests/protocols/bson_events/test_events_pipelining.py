"""Pipelined PUBLISH frames over a raw socket: publishes spanning many server reads are
answered once durable, in the order sent within a channel, before the answer to any later
request; a client that stops writing still gets every answer; a subscriber reading many
small chunks gets every event once, in order."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator

import bson

from mainstem.client.events import EventsClient
from mainstem.protocols.bson_events.codec import encode_frame

EVENT = {"payload": "x" * 1000}  # 300 of them fill more than one server read (256 KiB)


def _session(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(encode_frame("CONNECT", {"version": "1.0", "username": "guest",
                                          "password": "guest", "rID": 0}))
    assert next(_frames(sock))["ok"] is True
    return sock


def _frames(sock: socket.socket) -> Iterator[dict]:
    """The bodies of the frames the server sends, until it closes."""
    while head := sock.recv(4, socket.MSG_WAITALL):
        (length,) = struct.unpack("<i", head)
        yield bson.decode(head + sock.recv(length - 4, socket.MSG_WAITALL))["frame"]


def _publishes(channels: list[str], first_id: int) -> bytes:
    return b"".join(encode_frame("PUBLISH", {"channel": channel, "event": EVENT,
                                             "rID": first_id + i})
                    for i, channel in enumerate(channels))


async def test_publishes_over_many_reads_are_answered_in_order_before_a_later_request(
        broker) -> None:
    port = broker.ports["bson"]
    client = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
    for name in ("a", "b"):
        await client.create_channel(name)

    def pipeline() -> list[dict]:
        sock = _session(port)
        channels = ["a", "b", "b"] * 300
        for start in range(0, len(channels), 100):  # several writes, several reads
            sock.sendall(_publishes(channels[start:start + 100], 1 + start))
        sock.sendall(encode_frame("PING", {"rID": 10_000}))
        answers = _frames(sock)
        got = [next(answers) for _ in range(len(channels) + 1)]
        sock.close()
        return got

    answers = await asyncio.to_thread(pipeline)
    assert all(answer["ok"] for answer in answers)
    assert answers[-1]["rID"] == 10_000  # after every publish's answer
    ids = [answer["rID"] for answer in answers[:-1]]
    assert sorted(ids) == list(range(1, 901))
    for channel in (0, 1):  # within a channel, in the order published
        in_channel = [rid for rid in ids if (rid % 3 == 1) == (channel == 0)]
        assert in_channel == sorted(in_channel)
    subscription = await client.subscribe("a", start_pos=0)
    assert [(await subscription.next()).event for _ in range(300)] == [EVENT] * 300
    await client.close()


async def test_publishes_are_answered_when_the_client_stops_writing(broker) -> None:
    port = broker.ports["bson"]
    client = await EventsClient.connect("127.0.0.1", port, "guest", "guest")
    await client.create_channel("c")

    def publish_then_shut_down() -> list[dict]:
        sock = _session(port)
        sock.sendall(_publishes(["c"] * 600, 1))
        sock.shutdown(socket.SHUT_WR)
        answers = list(_frames(sock))  # until the server closes
        sock.close()
        return answers

    answers = await asyncio.to_thread(publish_then_shut_down)
    assert [(a["ok"], a["rID"]) for a in answers] == [(True, i) for i in range(1, 601)]
    await client.close()


async def test_a_subscriber_gets_every_event_of_many_small_chunks_in_order(broker) -> None:
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    await client.create_channel("small")
    for n in range(40):  # one chunk each
        await client.publish("small", {"n": n})
    await client.publish_many("small", [{"n": n} for n in range(40, 1040)])
    subscription = await client.subscribe("small", start_pos=0, matcher={"n": {"$gte": 10}})
    got = []
    for _ in range(1030):
        got.append(await subscription.next())
        await subscription.ack()
    assert [(r.pos, r.event["n"]) for r in got] == [(n, n) for n in range(10, 1040)]
    await client.close()
