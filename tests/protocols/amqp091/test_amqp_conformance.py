"""AMQP 0-9-1 wire behaviour that clients depend on, as RabbitMQ 4.x answers it: idempotent
unbind, client flow refusal, exclusive consumers, the closing handshakes (connection and
crossing channel.close), ordering of delete-ok and cancels, exclusive redeclaration, channel
numbers, an unknown exchange type (406, the channel only), and a fuzz showing that no
connection is dropped without connection.close.

pika drives what a client exposes; raw frames (built with the project's codec) show the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from mainstem.config import ServerConfig
from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.encode import encode_method
from mainstem.protocols.amqp091.errors import AmqpCodecError
from mainstem.testing import ThreadedBroker
from tests.support.amqp_raw import Frame, RawClient


def names(frames: list[Frame], channel: int | None = None) -> list[str]:
    return [method.NAME for number, method in frames if channel in (None, number)]


@pytest.fixture
def port(mainstem_server: ThreadedBroker) -> int:
    return mainstem_server.ports["amqp"]


@pytest.fixture
def pika_channel(mainstem_server: ThreadedBroker) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    yield connection.channel()
    with contextlib.suppress(Exception):
        connection.close()


# -- issue 43: an unknown exchange type closes the channel, as RabbitMQ 3.12+ and 4.x --------

def test_an_unknown_exchange_type_closes_the_channel_with_406(
        pika_channel: BlockingChannel) -> None:
    """RabbitMQ 3.10 closed the connection with 503; 3.12+ close only the channel with
    PRECONDITION_FAILED (pika's acceptance tests expect that), so the connection goes on."""
    with pytest.raises(ChannelClosedByBroker) as closed:
        pika_channel.exchange_declare("delayed", "x-no-such-type")
    assert closed.value.reply_code == 406
    assert "unknown exchange type 'x-no-such-type'" in closed.value.reply_text
    connection = pika_channel.connection
    assert connection.is_open
    connection.channel().exchange_declare("delayed", "direct")


# -- issue 15 item 1: unbind is idempotent ------------------------------------------------

def test_unbinding_what_no_longer_exists_succeeds(pika_channel: BlockingChannel) -> None:
    channel = pika_channel
    channel.queue_unbind("no-such-queue", "amq.direct", "k")  # the queue is missing
    channel.queue_declare("u")
    channel.queue_unbind("u", "no-such-exchange", "k")  # the exchange is missing
    channel.queue_unbind("u", "amq.direct", "never-bound")  # the binding is missing
    channel.exchange_unbind("no-such-destination", "no-such-source", "k")
    channel.exchange_declare("src", "direct")
    channel.exchange_declare("dst", "fanout")
    channel.exchange_bind("dst", "src", "k")
    channel.exchange_unbind("dst", "src", "k")
    channel.exchange_unbind("dst", "src", "k")  # twice
    channel.queue_bind("u", "src", "k")
    channel.queue_unbind("u", "src", "k")
    channel.basic_publish("src", "k", b"unbound")
    assert channel.basic_get("u", auto_ack=True) == (None, None, None)
    assert channel.is_open


# -- item 2: a client cannot stop the broker's flow ---------------------------------------

def test_client_flow_stop_is_refused_as_not_implemented(pika_channel: BlockingChannel) -> None:
    assert pika_channel.flow(True) is True
    with pytest.raises(ConnectionClosedByBroker) as refused:
        pika_channel.flow(False)
    assert refused.value.reply_code == 540
    assert refused.value.reply_text == "NOT_IMPLEMENTED - active=false"


# -- item 3: exclusive consumers are refused before consume-ok ---------------------------

@pytest.mark.parametrize("first_exclusive", [True, False])
def test_exclusive_consumer_conflict_is_refused_before_consume_ok(
        mainstem_server: ThreadedBroker, first_exclusive: bool) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    first = connection.channel()
    first.queue_declare("q")
    first.basic_consume("q", lambda *_: None, exclusive=first_exclusive)
    second = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as refused:  # at the call: no consume-ok came
        second.basic_consume("q", lambda *_: None, exclusive=not first_exclusive)
    assert refused.value.reply_code == 403
    assert refused.value.reply_text == \
        "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"
    first.basic_publish("", "q", b"still consumed")
    assert first.is_open
    connection.close()


def test_refused_exclusive_consume_sends_nothing_else(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q", arguments={}),
                m.BasicConsume(queue="q", consumer_tag="a", exclusive=True, arguments={}))
    client.expect(m.BasicConsumeOk, 1)
    client.open_channel(2)
    client.send(2, m.BasicConsume(queue="q", consumer_tag="b", arguments={}))
    assert names(client.read(), 2) == ["channel.close"]
    client.close()


# -- item 4: the closing handshakes ---------------------------------------------------------

def test_after_close_ok_the_broker_reads_until_the_client_hangs_up(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.send(0, m.ConnectionClose(200, "bye"))
    client.expect(m.ConnectionCloseOk)
    # A client still flushing frames written before its close must not get EPIPE / RST.
    client.sock.sendall(client.publish(1, "", "q") * 200)
    assert client.read(0.5) == [] and not client.eof
    client.close()


def test_after_sending_close_the_broker_waits_for_close_ok(port: int) -> None:
    client = RawClient(port)
    client.send(7, m.QueueDeclare(queue="q", arguments={}))  # channel 7 was never opened
    close = client.expect(m.ConnectionClose)
    assert close.reply_code == 504
    client.send(7, m.QueueDeclare(queue="q", arguments={}))  # discarded, not answered
    time.sleep(2.5)
    assert client.read(0.2) == [] and not client.eof  # still waiting after 2.5 s
    client.send(0, m.ConnectionCloseOk())
    client.read(2)
    assert client.eof  # close-ok ends it
    client.close()


# -- item 5: crossing channel.close ---------------------------------------------------------

def test_crossing_channel_close(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    # The publish fails (404); the client closes the channel before reading that close.
    client.sock.sendall(client.publish(1, "no-such-exchange", "k")
                        + encode_method(1, m.ChannelClose(200, "done")))
    frames = client.read()
    assert names(frames, 1) == ["channel.close", "channel.close-ok"]
    assert frames[0][1].reply_code == 404
    client.send(1, m.QueueDeclare(queue="ignored", arguments={}))  # ignored while closing
    client.send(1, m.ChannelCloseOk())  # our answer to the broker's close
    assert client.read() == []
    client.open_channel(1)  # the channel is forgotten, and the connection is fine
    client.send(0, m.ConnectionClose(200, "bye"))
    client.expect(m.ConnectionCloseOk)
    client.close()


def test_channel_close_on_a_closing_channel_waits_for_close_ok(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.sock.sendall(client.publish(1, "no-such-exchange", "k"))
    client.expect(m.ChannelClose, 1)
    client.send(1, m.ChannelClose(200, "done"))
    client.expect(m.ChannelCloseOk, 1)
    client.send(1, m.ChannelOpen())  # still closing: the broker wants its close-ok first
    assert client.read() == []
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    client.close()


# -- item 6: nothing on a channel after close-ok --------------------------------------------

@pytest.mark.parametrize("durable", [False, True])
def test_no_confirm_after_channel_close_ok(port: int, durable: bool) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="c", durable=durable, arguments={}),
                m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk, 1)
    client.sock.sendall(client.publish(1, "", "c", persistent=durable) * 3
                        + encode_method(1, m.ChannelClose(200, "done")))
    frames = client.read(0.5)
    on_one = names(frames, 1)
    assert on_one[-1] == "channel.close-ok"  # the acks came before it, none after
    assert on_one[:-1] and set(on_one[:-1]) == {"basic.ack"}
    assert max(method.delivery_tag for _, method in frames[:-1]) == 3
    client.close()


def test_no_confirm_after_the_broker_closed_the_channel(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="d", durable=True, arguments={}), m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk, 1)
    client.sock.sendall(client.publish(1, "", "d", persistent=True)
                        + client.publish(1, "no-such-exchange", "k"))
    frames = client.read(0.5)
    channel_frames = names(frames, 1)
    assert "channel.close" in channel_frames
    assert channel_frames[channel_frames.index("channel.close") + 1:] == []
    client.send(1, m.ChannelCloseOk())
    assert client.read(0.5) == []
    client.close()


# -- item 7: queue.delete-ok before the cancels of the deleting channel --------------------

def test_queue_delete_ok_precedes_the_cancel_of_own_consumers(port: int) -> None:
    client = RawClient(port)
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="gone", arguments={}),
                m.BasicConsume(queue="gone", consumer_tag="mine", arguments={}))
    client.expect(m.BasicConsumeOk, 1)
    client.send(1, m.QueueDelete(queue="gone"))
    frames = client.read()
    assert names(frames, 1) == ["queue.delete-ok", "basic.cancel"]
    assert frames[1][1].consumer_tag == "mine"
    client.close()


# -- item 8: exclusive redeclaration and channel numbers ------------------------------------

def test_redeclaring_exclusive_queue_with_other_exclusivity_is_resource_locked(
        mainstem_server: ThreadedBroker) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    channel = connection.channel()
    channel.queue_declare("x", exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as locked:
        channel.queue_declare("x", exclusive=False)
    assert locked.value.reply_code == 405
    assert "cannot obtain exclusive access to locked queue 'x' in vhost '/'" in \
        locked.value.reply_text
    channel = connection.channel()
    channel.queue_declare("shared")
    with pytest.raises(ChannelClosedByBroker) as locked:
        channel.queue_declare("shared", exclusive=True)
    assert locked.value.reply_code == 405
    connection.close()


def test_any_channel_number_within_the_channel_count(tmp_path: Path) -> None:
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        channel_max=3)
    with ThreadedBroker(tmp_path / "data", config=config) as broker:
        client = RawClient(broker.ports["amqp"], channel_max=3)
        for number in (65535, 300, 4):
            client.open_channel(number)
        client.send(5, m.ChannelOpen())
        close = client.expect(m.ConnectionClose)
        assert close.reply_code == 530
        assert close.reply_text == ("NOT_ALLOWED - number of channels opened (3) has reached "
                                    "the negotiated channel_max (3)")
        client.close()


# -- issue 16 item 6: never dropped without connection.close --------------------------------

def _closed_politely(client: RawClient, data: bytes) -> bool:
    """Send `data`; True unless the server hung up without connection.close(-ok) first."""
    with contextlib.suppress(ConnectionError):
        client.sock.sendall(data)
    seen: list[str] = []
    while not client.eof:
        try:
            frames = client.read(0.15)
        except AmqpCodecError:  # our parser choked: the server sent something odd
            return False
        seen += names(frames, 0)
        if not frames and not client.eof:
            return True  # quiet and still open: the input was harmless or incomplete
        if "connection.close" in seen or "connection.close-ok" in seen:
            return True
    return "connection.close" in seen or "connection.close-ok" in seen


def _hostile_inputs(client: RawClient) -> list[bytes]:
    frame = encode_method
    return [
        # a connection error (504, frame on an unopened channel) then a malformed frame
        frame(9, m.QueueDeclare(queue="q", arguments={})) + b"\x01\x00\x01\x00\x00\x00\x02xx\x00",
        # an invalid UTF-8 name for a durable queue
        frame(1, m.ChannelOpen()) + frame(1, m.QueueDeclare(
            queue=b"\xff\xfe-q".decode("utf-8", "surrogateescape"), durable=True,
            arguments={})),
        frame(1, m.ChannelOpen()) + frame(1, m.ExchangeDeclare(
            exchange=b"ex-\xc3".decode("utf-8", "surrogateescape"), type="direct",
            durable=True, arguments={})),
        # a publish whose properties do not parse, then a client close in the same read
        frame(1, m.ChannelOpen()) + client.publish(1, "", "q")[:-30] + b"\x00" * 29 + b"\xce",
        frame(1, m.ChannelOpen()) + frame(1, m.ChannelOpen()) + b"\x08\x00\x00",
    ]


def test_fuzzed_connections_always_get_connection_close(mainstem_server: ThreadedBroker,
                                                        port: int) -> None:
    rng = random.Random(1516)
    seeds: list[Callable[[RawClient], bytes]] = [
        lambda c: encode_method(1, m.ChannelOpen()),
        lambda c: encode_method(1, m.QueueDeclare(queue="fz", durable=True, arguments={})),
        lambda c: encode_method(1, m.BasicConsume(queue="fz", arguments={})),
        lambda c: c.publish(1, "", "fz", persistent=True),
        lambda c: c.publish(1, "amq.direct", "k"),
        lambda c: encode_method(1, m.ChannelClose(200, "x")),
        lambda c: encode_method(1, m.ChannelCloseOk()),
        lambda c: encode_method(0, m.ConnectionClose(200, "x")),
        lambda c: b"\x08\x00\x00\x00\x00\x00\x00\xce",
    ]
    dropped = []
    cases = 0
    client = RawClient(port)
    for data in _hostile_inputs(client):
        cases += 1
        if not _closed_politely(client, data):
            dropped.append(data)
        client.close()
        client = RawClient(port)
    for _ in range(30):
        data = bytearray(b"".join(rng.choice(seeds)(client) for _ in range(rng.randint(2, 6))))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cases += 1
        if not _closed_politely(client, bytes(data)):
            dropped.append(bytes(data))
        client.close()
        client = RawClient(port)
    client.close()
    assert dropped == [], f"{len(dropped)} of {cases} connections dropped without close"
    canary = pika.BlockingConnection(pika.URLParameters(mainstem_server.urls["amqp"]))
    channel = canary.channel()
    channel.queue_declare("canary")
    channel.basic_publish("", "canary", b"alive")
    assert channel.basic_get("canary", auto_ack=True)[2] == b"alive"
    canary.close()
