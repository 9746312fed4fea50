"""Logs that tools can use: stable event names with the values as fields, failed logins
logged alike on every listener, and a client of the wrong protocol named as such.

Raw sockets send each listener another protocol's first bytes (AMQP's header, a real TLS
ClientHello, an HTTP request, each mainstem protocol's opening frame) and the admin
listener HTTP requests it cannot parse; real clients try wrong passwords. The server's
records are read from pytest's log capture."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import struct

import aiohttp
import bson
import pika
import pytest
from iggy_py import IggyClient as PyIggy
from rstream import Producer
from rstream.exceptions import AuthenticationFailure

from mainstem import Broker
from mainstem.client.events import EventsClient
from mainstem.client.segment import SegmentClient
from mainstem.logging_setup import JsonFormatter
from mainstem.protocols.segment import codec as segment_codec

TIMEOUT_S = 10
AMQP_0_9_1 = b"AMQP\x00\x00\x09\x01"


def tls_client_hello() -> bytes:
    """The first bytes of a real TLS handshake, from Python's ssl module."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def stream_peer_properties() -> bytes:
    """rstream's first frame: PeerProperties (key 0x11, version 1), no properties."""
    body = struct.pack(">HHII", 0x0011, 1, 1, 0)
    return struct.pack(">I", len(body)) + body


def iggy_login() -> bytes:
    """iggy-py's first frame: LOGIN_USER (38) with u8-length username and password."""
    body = b"\x05guest\x05guest"
    return struct.pack("<II", 4 + len(body), 38) + body


OPENINGS = {
    "amqp": AMQP_0_9_1,
    "tls": tls_client_hello(),
    "http": b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "stream": stream_peer_properties(),
    "iggy": iggy_login(),
    "bson": bson.encode({"type": "CONNECT", "frame": {"username": "guest"}}),
    "segment": segment_codec.Authenticate("guest", "guest").encode(),
}
LISTENERS = ("stream", "amqp", "iggy", "bson", "segment")


async def exchange(broker: Broker, listener: str, data: bytes) -> bytes:
    """Send `data`, then read what the listener answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports[listener])
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    writer.close()
    return answer


def records(caplog, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == event]


async def test_every_listener_names_a_wrong_protocol_and_closes(broker, caplog):
    caplog.set_level(logging.INFO)
    for listener in LISTENERS:
        for arrived, data in OPENINGS.items():
            if arrived == listener:
                continue
            caplog.clear()
            answer = await exchange(broker, listener, data)
            # AMQP answers any other bytes with its own header, as RabbitMQ does
            assert answer == (AMQP_0_9_1 if listener == "amqp" else b""), (listener, arrived)
            [mismatch] = records(caplog, "protocol.mismatch")
            assert mismatch.levelno == logging.WARNING
            assert (mismatch.arrived, mismatch.expected, mismatch.listener) == (
                arrived, listener, listener)
            assert mismatch.peer.startswith("127.0.0.1:")
            assert bytes.fromhex(mismatch.first_bytes) == data[:16]
            assert not records(caplog, "frame.too_large")
    await still_healthy(broker)


async def test_amqp_answers_its_own_header_of_another_version_without_a_mismatch(broker,
                                                                                 caplog):
    caplog.set_level(logging.INFO)
    assert await exchange(broker, "amqp", b"AMQP\x01\x01\x00\x0a") == AMQP_0_9_1
    assert not records(caplog, "protocol.mismatch")


async def test_an_oversized_stream_frame_is_named(broker, caplog):
    caplog.set_level(logging.INFO)
    answer = await exchange(broker, "stream", struct.pack(">IHH", 1 << 30, 0x0011, 1))
    assert b"exceeds the limit" in answer  # the stream protocol's Close says why
    [too_large] = records(caplog, "frame.too_large")
    assert too_large.levelno == logging.WARNING and "exceeds" in too_large.reason
    assert not records(caplog, "protocol.mismatch")


SECRET = b"s3cret-password"
BASIC = b"Authorization: Basic " + base64.b64encode(b"alice:" + SECRET)
MALFORMED_HTTP = (  # aiohttp's complaint about each quotes the Authorization line
    b"GET /api/overview HTTP/1.1\r\nHost: x\r\n" + BASIC + b"\r\nBad Header Line\r\n\r\n",
    b"GET /api/overview HTTP/1.1\r\nHost: x\r\n" + BASIC + b"\x00\r\n\r\n",
    b"GET /api/overview HTTP/1.1\r\nHost: x\r\n" + BASIC + b"A" * 9000 + b"\r\n\r\n",
)


async def test_malformed_http_requests_log_a_bounded_number_of_lines_without_credentials(
        broker, caplog):
    caplog.set_level(logging.INFO)
    caplog.clear()
    for request in MALFORMED_HTTP * 10:
        assert (await exchange(broker, "admin", request)).startswith(b"HTTP/1.0 400")
    lines = [JsonFormatter().format(record) for record in caplog.records]
    assert records(caplog, "http.malformed")
    assert 1 <= len(lines) <= 10, lines
    assert all(record.levelno == logging.WARNING for record in caplog.records), lines
    for line in lines:
        assert "traceback" not in line
        assert base64.b64encode(b"alice:" + SECRET).decode() not in line
        assert "Authorization" not in line and "Basic" not in line
    guest = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=guest) as session:  # the listener still serves
        overview = f"http://127.0.0.1:{broker.ports['admin']}/api/overview"
        async with session.get(overview) as response:
            assert response.status == 200


async def still_healthy(broker: Broker) -> None:
    await asyncio.to_thread(amqp_round_trip, broker)
    async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                        password="guest") as producer:
        await producer.create_stream("healthy")
    assert broker.core.streams.find("/", "healthy") is not None


def amqp_round_trip(broker: Broker) -> None:
    parameters = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"])
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.queue_declare("after")
        channel.basic_publish("", "after", b"still here")
        assert channel.basic_get("after", auto_ack=True)[2] == b"still here"


async def test_failed_logins_are_logged_alike_on_every_listener(broker, caplog):
    caplog.set_level(logging.INFO)
    parameters = pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], credentials=pika.PlainCredentials("guest", "nope"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        await asyncio.to_thread(pika.BlockingConnection, parameters)
    with pytest.raises(AuthenticationFailure):
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="nope"):
            pass
    iggy = PyIggy(f"127.0.0.1:{broker.ports['iggy']}")
    await iggy.connect()
    with pytest.raises(RuntimeError):
        await iggy.login_user("guest", "nope")
    with pytest.raises(Exception, match=r"(?i)auth|credential|login"):
        await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "nope")
    with pytest.raises(Exception, match=r"(?i)auth|credential|login"):
        await SegmentClient.connect("127.0.0.1", broker.ports["segment"], "guest", "nope")
    admin = f"http://127.0.0.1:{broker.ports['admin']}/api/overview"
    wrong = {"Authorization": aiohttp.encode_basic_auth("guest", "nope")}
    async with aiohttp.ClientSession() as http, http.get(admin, headers=wrong) as response:
        assert response.status == 401

    failed = {r.protocol: r for r in records(caplog, "auth.failed")}
    assert sorted(failed) == ["amqp", "bson", "http", "iggy", "segment", "stream"]
    for protocol, record in failed.items():
        assert record.levelno == logging.WARNING, protocol
        assert record.user == "guest", protocol
        assert str(record.peer).startswith("127.0.0.1"), protocol
        assert "guest" in record.reason, protocol
