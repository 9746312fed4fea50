"""Every frame of the BSON event protocol document, sent exactly with the fields its field
list names (pymongo's bson over a raw socket against a real server): a frame whose list
has no ``rID`` (CONNECT, ACKEV, QUERY, QUERYACK) works without one, and every answer
carries the fields the document gives it."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import bson
import pytest

from mainstem import Broker
from mainstem.client.events import EventsClient
from mainstem.config import ServerConfig
from tests.support.binder_waits import wait_for_document


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    config = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    async with Broker(config=dataclasses.replace(config, max_unacked_results=1)) as running:
        yield running


class Session:
    """A raw connection writing ``{type, frame}`` documents and reading them back."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def send(self, kind: str, frame: dict[str, Any]) -> None:
        self.sock.sendall(bson.encode({"type": kind, "frame": frame}))

    def read(self) -> tuple[str, dict[str, Any]]:
        head = self.sock.recv(4, socket.MSG_WAITALL)
        (length,) = struct.unpack("<i", head)
        document = bson.decode(head + self.sock.recv(length - 4, socket.MSG_WAITALL))
        return document["type"], document["frame"]

    def answer(self, kind: str, frame: dict[str, Any]) -> dict[str, Any]:
        self.send(kind, frame)
        answer_kind, answer = self.read()
        assert answer.get("ok") is True, (kind, frame, answer_kind, answer)
        return answer


def _documented_frames(port: int) -> None:
    session = Session(port)
    # CONNECT as the document shows it: version, username, password and nothing else
    assert session.answer("CONNECT", {"version": "1.0", "username": "guest",
                                      "password": "guest"}) == {"ok": True}
    before = int(time.time() * 1000)
    assert session.answer("PUBLISH", {"channel": "basket", "event": {"item": "tea"},
                                      "rID": 1}) == {"ok": True, "rID": 1}
    assert session.answer("STARTTX", {"sessID": 7, "rID": 2}) == {"ok": True, "rID": 2}
    session.answer("PUBLISH", {"channel": "basket", "event": {"item": "jam"}, "rID": 3,
                               "sessID": 7})
    assert session.answer("COMMITTX", {"sessID": 7, "rID": 4}) == {"ok": True, "rID": 4}
    session.answer("STARTTX", {"sessID": 8, "rID": 5})
    assert session.answer("ABORTTX", {"sessID": 8, "rID": 6}) == {"ok": True, "rID": 6}

    session.send("SUBSCRIBE", {"channel": "basket", "rID": 10, "startPos": 0,
                               "matcher": {"item": "jam"}})
    kind, subscribed = session.read()
    assert (kind, subscribed["ok"], subscribed["rID"]) == ("SUBRESPONSE", True, 10)
    kind, received = session.read()
    assert kind == "RECEV"
    assert received["subID"] == subscribed["subID"]
    assert (received["pos"], received["event"]) == (1, {"item": "jam"})
    assert received["timestamp"] >= before - 1000
    session.send("ACKEV", {"subID": subscribed["subID"]})  # no answer when it succeeds
    assert session.answer("SUBCLOSE", {"subID": subscribed["subID"], "rID": 11}) == {
        "ok": True, "rID": 11}
    session.send("SUBSCRIBE", {"channel": "basket", "rID": 12, "durableID": "billing",
                               "startTimestamp": before - 1000})
    kind, durable = session.read()
    assert (kind, durable["ok"]) == ("SUBRESPONSE", True)
    assert [session.read()[1]["event"]["item"] for _ in range(2)] == ["tea", "jam"]
    assert session.answer("UNSUBSCRIBE", {"subID": durable["subID"], "rID": 13}) == {
        "ok": True, "rID": 13}
    session.sock.close()


def _documented_query(port: int) -> None:
    """QUERY has no rID in the document; max_unacked_results = 1 makes QUERYACK needed."""
    session = Session(port)
    session.answer("CONNECT", {"version": "1.0", "username": "guest", "password": "guest"})
    session.send("QUERY", {"queryID": 1, "binder": "items", "matcher": {}})
    kind, response = session.read()
    assert (kind, response) == ("QUERYRESPONSE", {"ok": True, "queryID": 1})
    results = []
    while not results or not results[-1]["last"]:
        kind, result = session.read()
        assert kind == "QUERYRESULT" and result["queryID"] == 1
        results.append(result)
        session.send("QUERYACK", {"queryID": 1})
    assert sorted(r["result"]["item"] for r in results) == ["jam", "tea"]
    session.send("QUERY", {"queryID": 2, "binder": "", "matcher": {}})  # refused
    kind, refused = session.read()
    assert (kind, refused["ok"], refused["queryID"], "rID" in refused) == (
        "QUERYRESPONSE", False, 2, False)
    session.sock.close()


async def test_every_documented_frame_works_exactly_as_written(broker) -> None:
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    await client.create_channel("basket")
    await client.create_projection("by_item", "basket", "items", "item", fold="replace")
    await asyncio.to_thread(_documented_frames, broker.ports["bson"])
    for item in ("tea", "jam"):
        await wait_for_document(client, "items", item, lambda d: "item" in d)
    await asyncio.to_thread(_documented_query, broker.ports["bson"])
    await client.close()


def _rid_still_required(port: int) -> None:
    session = Session(port)
    session.answer("CONNECT", {"version": "1.0", "username": "guest", "password": "guest"})
    for kind, frame in (("PUBLISH", {"channel": "basket", "event": {}}),
                        ("STARTTX", {"sessID": 1}), ("COMMITTX", {"sessID": 1}),
                        ("ABORTTX", {"sessID": 1}), ("SUBSCRIBE", {"channel": "basket"}),
                        ("UNSUBSCRIBE", {"subID": 1}), ("SUBCLOSE", {"subID": 1})):
        session.send(kind, frame)
        _, refused = session.read()
        assert (refused["ok"], refused["errCode"], refused["errMsg"]) == (
            False, "INVALID_FRAME", f"{kind} has no 'rID'")
    session.sock.close()


async def test_frames_whose_field_list_names_rid_still_need_it(broker) -> None:
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    await client.create_channel("basket")
    await asyncio.to_thread(_rid_still_required, broker.ports["bson"])
    await client.close()
