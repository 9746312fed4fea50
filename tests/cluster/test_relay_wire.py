"""The AMQP relay's frames: what one side encodes, the other decodes unchanged."""

from __future__ import annotations

import time

import pytest

from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.amqp.queues.remote import Settlement
from mainstem.cluster.amqp_relay import relay_wire as rw
from mainstem.cluster.replication.wire import FRAME, FrameType, WireError


def body_of(data: bytes, kind: FrameType) -> bytes:
    length, found = FRAME.unpack_from(data)
    assert found == kind and length == len(data) - FRAME.size + 1
    return data[FRAME.size:]


def message(**facts: object) -> QueueMessage:
    return QueueMessage("orders-x", "eu.new", b"\x80\x00\x01\x02", b"body \xff" * 100,
                        **facts)  # type: ignore[arg-type]


def test_a_publish_arrives_as_it_was_made() -> None:
    sent = message(persistent=True, priority=7, expires_at=time.monotonic() + 60)
    data = rw.encode_publish(42, "vhost é", "queue-1", sent, confirm=True)
    publish = rw.decode_publish(body_of(data, FrameType.RELAY_PUBLISH))
    assert (publish.request, publish.confirm, publish.vhost, publish.queue) == (
        42, True, "vhost é", "queue-1")
    got = publish.message
    assert (got.exchange, got.routing_key, got.properties, got.body) == (
        sent.exchange, sent.routing_key, sent.properties, sent.body)
    assert (got.persistent, got.priority) == (True, 7)
    assert got.expires_at is not None and 59 < got.expires_at - time.monotonic() <= 60


def test_a_publish_without_expiry_or_confirm() -> None:
    data = rw.encode_publish(0, "/", "q", message(), confirm=False)
    publish = rw.decode_publish(body_of(data, FrameType.RELAY_PUBLISH))
    assert not publish.confirm and publish.message.expires_at is None
    assert not publish.message.persistent


def test_a_delivery_carries_its_id_count_and_route() -> None:
    sent = message(persistent=True, priority=3)
    sent.delivery_count = 2
    data = rw.encode_delivery(FrameType.RELAY_GOT, 9, 1234, 17, sent)
    route = object()
    to, ready, got = rw.decode_delivery(body_of(data, FrameType.RELAY_GOT), route)
    assert (to, ready, got.delivery, got.route, got.delivery_count) == (9, 17, 1234, route, 2)
    assert got.redelivered and (got.persistent, got.priority) == (True, 3)
    assert (got.exchange, got.routing_key, got.properties, got.body) == (
        sent.exchange, sent.routing_key, sent.properties, sent.body)


def test_settles_confirms_and_cancels() -> None:
    settle = rw.encode_settle(Settlement.REQUEUE, [1, 2**40, 7])
    assert rw.decode_settle(body_of(settle, FrameType.RELAY_SETTLE)) == (
        Settlement.REQUEUE, (1, 2**40, 7))
    confirm = rw.encode_confirm(5, False)
    assert rw.decode_confirm(body_of(confirm, FrameType.RELAY_CONFIRM)) == (5, False)
    assert rw.decode_cancelled(body_of(rw.encode_cancelled(8), FrameType.RELAY_CANCELLED)) == 8


@pytest.mark.parametrize("cut", [1, 10, 25])
def test_a_truncated_frame_is_a_wire_error(cut: int) -> None:
    body = body_of(rw.encode_publish(1, "/", "q", message(), confirm=True),
                   FrameType.RELAY_PUBLISH)
    with pytest.raises(WireError):
        rw.decode_publish(body[:cut])
    with pytest.raises(WireError):
        rw.decode_settle(b"\x09")  # no such settlement
    with pytest.raises(WireError):
        rw.decode_json(b"[1]")
